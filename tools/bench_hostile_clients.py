"""Stop latency and the controller's step latency while hostile clients hammer the env server.

    nice -n 5 .venv/bin/python tools/bench_hostile_clients.py            # 32 hostile clients, 10 s per phase
    nice -n 5 .venv/bin/python tools/bench_hostile_clients.py --quick    # 4 s per phase

Processes: one env server (`FakeEnv`, default `server:` limits), the controller (this process:
Session steps in a loop), one Stop prober (its own process and channel: `Stop` every 20 ms with a
3 s deadline, plus a `GetStatus` every 10th probe), and, in the hostile phase, hostile processes
running ``--clients`` clients in all. Each hostile client has its own channel and two threads: one
keeps trying to hold a Session stream open (a reset request, reopened as soon as the server ends
it), one calls unary Step in a loop. The controller holds control, so every hostile call is
refused: what is measured is what their load costs the ones that matter.

``--hostile-nice N`` runs the hostile processes N nice levels below the server: on one small
machine the hostile clients' own CPU use otherwise competes with the server's (Linux schedules
threads, and they have dozens), which a deployment with clients on other machines does not have.

Two phases in one run: quiet (controller and prober only: the baseline) and hostile. Reported:
Stop p50 / p99 / max and timeouts, GetStatus p50 / p99, controller step p50 / p99, in both phases,
the ratios hostile/quiet, and how many hostile calls the server refused.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _serve(addresses: mp.Queue, stop: mp.Event, server_options: dict) -> None:
    from rlhw.config.server import ServerConfig
    from rlhw.env.fake_env import FakeEnv
    from rlhw.env.server import EnvServer

    server = EnvServer(FakeEnv(episode_length=10**9), ServerConfig(port=0, **server_options)).start()
    addresses.put(server.address)
    stop.wait()
    server.stop(grace_s=0.5)


def _hostile(address: str, clients: int, stop: mp.Event, counts: mp.Queue, niceness: int) -> None:
    """``clients`` hostile clients, each with its own channel: a stream holder and a Step hammer."""
    import grpc

    if niceness:
        os.nice(niceness)

    from rlhw.env.v1 import env_pb2 as pb

    step = pb.StepRequest(action=pb.Tensor(dtype=pb.FLOAT32, shape=[7], data=bytes(28))).SerializeToString()
    reset = pb.SessionRequest(reset=pb.ResetRequest()).SerializeToString()
    tally: dict[str, int] = {}
    lock = threading.Lock()

    def note(key):
        with lock:
            tally[key] = tally.get(key, 0) + 1

    def holder(channel, metadata):
        session = channel.stream_stream("/rlhw.env.v1.Env/Session")
        while not stop.is_set():
            requests: queue.SimpleQueue = queue.SimpleQueue()
            requests.put(reset)
            call = session(iter(requests.get, None), metadata=metadata)
            try:
                for _ in call:  # held open until the server ends it
                    pass
                note("Session:ended")
            except grpc.RpcError as e:
                note(f"Session:{e.code().name}")
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    tally.setdefault("unavailable_example", e.details())
            finally:
                requests.put(None)

    def hammer(channel, metadata):
        method = channel.unary_unary("/rlhw.env.v1.Env/Step")
        while not stop.is_set():
            try:
                method(step, timeout=5.0, metadata=metadata)
                note("Step:OK")
            except grpc.RpcError as e:
                note(f"Step:{e.code().name}")

    threads = []
    for i in range(clients):
        channel = grpc.insecure_channel(address)
        metadata = [("rlhw-session", f"hostile-{os.getpid()}-{i}-".ljust(40, "x"))]
        for fn in (holder, hammer):
            t = threading.Thread(target=fn, args=(channel, metadata), daemon=True)
            t.start()
            threads.append(t)
    stop.wait()
    counts.put(tally)


def _prober(address: str, duration_s: float, out: mp.Queue) -> None:
    """Stop every 20 ms from a client of its own (3 s deadline), GetStatus every 10th probe."""
    import grpc

    from rlhw.env.v1 import env_pb2 as pb
    from rlhw.env.v1 import env_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = env_pb2_grpc.EnvStub(channel)
    stub.GetSpec(pb.GetSpecRequest(), timeout=10.0)  # connected before timing
    stops, statuses, timeouts = [], [], 0
    end = time.monotonic() + duration_s
    n = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            stub.Stop(pb.StopRequest(), timeout=3.0)
            stops.append(time.perf_counter() - t0)
        except grpc.RpcError:
            timeouts += 1
        n += 1
        if n % 10 == 0:
            t0 = time.perf_counter()
            try:
                stub.GetStatus(pb.GetStatusRequest(), timeout=3.0)
                statuses.append(time.perf_counter() - t0)
            except grpc.RpcError:
                timeouts += 1
        time.sleep(0.02)
    channel.close()
    out.put({"stop": stops, "status": statuses, "timeouts": timeouts})


class _Controller(threading.Thread):
    """Steps the controller's env in a loop from start to `finish`, so that it keeps its lease
    while hostile clients start and stop; latencies are kept only while ``measuring`` is set."""

    def __init__(self, env):
        super().__init__(daemon=True)
        self.env = env
        self.measuring = threading.Event()
        self.done = threading.Event()
        self.latencies: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        action = np.zeros(7, np.float32)
        try:
            while not self.done.is_set():
                t0 = time.perf_counter()
                self.env.step(action)
                if self.measuring.is_set():
                    self.latencies.append(time.perf_counter() - t0)
        except BaseException as e:  # reported by `finish`
            self.error = e

    def finish(self) -> list[float]:
        self.done.set()
        self.join(30)
        if self.error is not None:
            raise self.error
        return self.latencies


def _ms(values: list[float]) -> dict[str, float]:
    a = np.asarray(values) * 1e3
    if not a.size:
        return {"n": 0}
    return {
        "n": int(a.size),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def _phase(ctx, address: str, env, duration_s: float, hostile: int, procs: int, niceness: int) -> dict:
    stop = ctx.Event()
    counts: mp.Queue = ctx.Queue()
    controller = _Controller(env)
    controller.start()
    workers = []
    if hostile:
        per = [hostile // procs + (1 if i < hostile % procs else 0) for i in range(procs)]
        workers = [
            ctx.Process(target=_hostile, args=(address, k, stop, counts, niceness), daemon=True) for k in per if k
        ]
        for w in workers:
            w.start()
        time.sleep(3.0)  # every hostile client started and hammering (the controller keeps stepping)
    probes: mp.Queue = ctx.Queue()
    prober = ctx.Process(target=_prober, args=(address, duration_s, probes), daemon=True)
    prober.start()
    controller.measuring.set()
    probe = probes.get(timeout=duration_s + 120)
    controller.measuring.clear()
    prober.join(10)
    stop.set()
    tallies = []
    for _ in workers:  # a hostile process starved past this is reported, not waited for
        try:
            tallies.append(counts.get(timeout=120))
        except queue.Empty:
            tallies.append({"hostile_process_not_reporting": 1})
    for w in workers:
        w.join(10)
    steps = controller.finish()
    calls: dict[str, object] = {}
    for t in tallies:
        for k, v in t.items():
            calls[k] = v if isinstance(v, str) else calls.get(k, 0) + v
    return {
        "hostile_clients": hostile,
        "hostile_nice": niceness if hostile else None,
        "stop": _ms(probe["stop"]),
        "get_status": _ms(probe["status"]),
        "probe_timeouts": probe["timeouts"],
        "controller_step": _ms(steps),
        "hostile_calls": calls,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="hostile clients (default 32)")
    parser.add_argument("--processes", type=int, default=4, help="processes the hostile clients run in")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--quick", action="store_true", help="4 s per phase")
    parser.add_argument("--max-workers", type=int, default=0, help="server.max_workers (default: the config's)")
    parser.add_argument("--max-streams", type=int, default=0, help="server.max_streams (default: the config's)")
    parser.add_argument(
        "--hostile-nice",
        type=int,
        default=0,
        help="niceness added to the hostile processes (0: same priority as the server)",
    )
    args = parser.parse_args()
    duration = 4.0 if args.quick else args.seconds
    from rlhw.env.client import RemoteEnv

    ctx = mp.get_context("spawn")
    addresses: mp.Queue = ctx.Queue()
    stop_server = ctx.Event()
    options = {k: v for k, v in (("max_workers", args.max_workers), ("max_streams", args.max_streams)) if v}
    server = ctx.Process(target=_serve, args=(addresses, stop_server, options), daemon=True)
    server.start()
    address = addresses.get(timeout=300)
    env = RemoteEnv(address, timeout_s=10.0)
    try:
        env.reset()
        quiet = _phase(ctx, address, env, duration, 0, args.processes, 0)
        hostile = _phase(ctx, address, env, duration, args.clients, args.processes, args.hostile_nice)
    finally:
        env.close()
        stop_server.set()
        server.join(10)

    def ratio_of(q: str) -> dict:  # None where a phase has no successful sample (every call refused)
        return {
            k: round(hostile[k][q] / quiet[k][q], 2) if q in hostile[k] and q in quiet[k] else None
            for k in ("stop", "controller_step")
        }

    ratio, ratio99 = ratio_of("p50_ms"), ratio_of("p99_ms")
    report = {
        "server": options or "defaults",
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "seconds_per_phase": duration,
        "quiet": quiet,
        "hostile": hostile,
        "p50_ratio_hostile_to_quiet": ratio,
        "p99_ratio_hostile_to_quiet": ratio99,
        "goal_stop_p99_under_50ms_no_timeout": hostile["stop"].get("p99_ms", 1e9) < 50
        and hostile["probe_timeouts"] == 0,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
