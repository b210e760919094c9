"""The direct step lane's wire against the one it replaced, in the same run: typed codec + GMAC vs pickle; and
the lane of another checkout beside it, and what a peer that announces an oversized frame costs a rollout end.

    .venv/bin/python tools/bench_lane.py [--steps 2000] [--other-lane CHECKOUT] [--rss]
    # tools/bench_pipeline.py --parts phases runs it too, without --other-lane

- Round trip alone (an echo process answers every observation at once), the lanes interleaved step by step,
  alternating which goes first: ``sealed`` is the lane as it is (`DirectEnvEnd` to `DirectRolloutEnd`: typed
  codec, an AES-GCM tag per frame); ``pickle`` is the framing it replaced, as the baseline (an 8-byte length and
  a pickle protocol 5, no tag, on the same kind of TCP stream: TCP_NODELAY, a selector loop on the echo side,
  the same Actions back); with ``--other-lane``, ``checkout`` is the direct lane of that checkout, both of its
  ends in processes that import that checkout's rlhw (its env end times its own round trips, told when by a
  pipe), e.g. a ``git worktree add /tmp/lane_base HEAD`` of the code before a change, and ``this`` is this
  tree's lane in the same harness (compare ``this`` with ``checkout``: same processes, same pipes).
- In process, per step (one `EnvStep` out, one `Actions` back): pickle dumps + loads of both, the codec's pack
  + unpack of both, and the tags' seal + check of both frames; also for the message a pipeline step sends,
  observations and transitions of 8 instances (about 20 arrays).
- ``--rss``: a rollout end in a process of its own (this tree's, and the checkout's with ``--other-lane``) serves
  two env workers; one of them writes a frame's 16-byte prefix announcing 1 GiB, or the largest frame the
  rollout end's bound allows, and sends 1 KiB of it. Its peak RSS (VmHWM) against its baseline, how long the
  other env worker's next step took, and what became of the rollout end (also under a memory limit of 512 MiB
  over its address space, where the issue's `MemoryError` escaped ``receive``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import selectors
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_LENGTH = struct.Struct("!Q")  # the old lane's frame: this length, then the pickle


def _answer(m):
    from rlhw.rl.pipeline.messages import Actions

    return Actions(np.zeros((m.wanted, 7), np.float32), np.zeros(m.wanted, np.int64))


def echo_sealed(port_q, token: bytes) -> None:
    """A rollout end that answers every observation at once with zero actions (no policy): the lane alone."""
    from rlhw.rl.pipeline.lane import DirectRolloutEnd

    end = DirectRolloutEnd("127.0.0.1", token, timeout_s=30.0)
    port_q.put(end.address.port)
    while True:
        for m in end.receive(timeout=1.0):
            end.answer(m.env, _answer(m))


def echo_checkout(port_q, token: bytes, root: str) -> None:
    """`echo_sealed` with the rlhw of another checkout (``root``: e.g. the commit before the typed codec)."""
    sys.path.insert(0, root)
    echo_sealed(port_q, token)


def drive_checkout(conn, port_q, token: bytes, root: str) -> None:
    """The env end of the checkout at ``root`` (its rlhw imported first), in a process of its own: for each
    message it is sent through ``conn`` (None: the last one again) one round trip, whose seconds go back."""
    sys.path.insert(0, root)
    from rlhw.rl.pipeline.lane import DirectEnvEnd, LaneAddress
    from rlhw.rl.pipeline.messages import EnvStep

    end = DirectEnvEnd(LaneAddress("127.0.0.1", port_q.get(timeout=60)), token, 0, 0, 30.0)
    msg = None
    while (fields := conn.recv()) != "stop":
        if fields is not None:
            msg = EnvStep(**fields)
        t0 = time.perf_counter()
        end.send(msg)
        end.actions()
        conn.send(time.perf_counter() - t0)
    end.close()


class LocalLane:
    """An env end in this process, timed here."""

    def __init__(self, end):
        self.end = end

    def round_trip(self, msg) -> float:
        t0 = time.perf_counter()
        self.end.send(msg)
        self.end.actions()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.end.close()


class CheckoutLane:
    """The env end of another checkout, in the `drive_checkout` process behind ``conn``; it times itself, so the
    pipe is not in its figures."""

    def __init__(self, conn):
        self.conn, self.last = conn, None

    def round_trip(self, msg) -> float:
        fields = None if msg is self.last else {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
        self.last = msg
        self.conn.send(fields)
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send("stop")


class PickleStream:
    """The old lane's framing, for the baseline only: what `DirectEnvEnd` sent before the typed codec."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, msg) -> None:
        data = pickle.dumps(msg, protocol=5)
        self.sock.settimeout(30.0)
        if len(data) < 65536:
            self.sock.sendall(_LENGTH.pack(len(data)) + data)
        else:
            self.sock.sendall(_LENGTH.pack(len(data)))
            self.sock.sendall(data)

    def read(self):
        (size,) = _LENGTH.unpack(self._exact(_LENGTH.size))
        return pickle.loads(self._exact(size))

    def _exact(self, n: int) -> memoryview:
        self.sock.settimeout(30.0)
        buf, got = memoryview(bytearray(n)), 0
        while got < n:
            k = self.sock.recv_into(buf[got:])
            if not k:
                raise EOFError("the pickle echo closed")
            got += k
        return buf


def echo_pickle(port_q) -> None:
    """The baseline's echo: the old framing, read when a selector says so, as the old rollout end did."""
    server = socket.create_server(("127.0.0.1", 0))
    port_q.put(server.getsockname()[1])
    stream = PickleStream(server.accept()[0])
    selector = selectors.DefaultSelector()
    selector.register(stream.sock, selectors.EVENT_READ)
    while True:
        for _ in selector.select(1.0):
            try:
                stream.write(_answer(stream.read()))
            except EOFError:  # the bench is done
                return


class PickleEnvEnd:
    def __init__(self, port: int):
        self.stream = PickleStream(socket.create_connection(("127.0.0.1", port), timeout=30.0))

    def send(self, msg) -> None:
        self.stream.write(msg)

    def actions(self):
        return self.stream.read()

    def close(self) -> None:
        self.stream.sock.close()


class Lanes:
    """Both lanes (and the lane of the checkout at ``other``, if given) to their echo processes, open for as
    long as the ``with`` block runs."""

    def __init__(self, other: str | None = None):
        self.other = other

    def __enter__(self) -> dict:
        import multiprocessing as mp

        from rlhw.rl.pipeline.lane import DirectEnvEnd, LaneAddress

        ctx = mp.get_context("spawn")
        sealed_q, pickle_q, token = ctx.Queue(), ctx.Queue(), b"b" * 32
        self.echoes = [
            ctx.Process(target=echo_sealed, args=(sealed_q, token), daemon=True),
            ctx.Process(target=echo_pickle, args=(pickle_q,), daemon=True),
        ]
        pipes, self.queues = {}, []
        if self.other:  # this tree's lane through the same harness as the other checkout's, for a fair pair
            for name, root in (("this", str(ROOT)), ("checkout", self.other)):
                port_q, (pipes[name], there) = ctx.Queue(), ctx.Pipe()
                self.queues.append(port_q)  # held until the processes have started
                self.echoes.append(ctx.Process(target=echo_checkout, args=(port_q, token, root), daemon=True))
                self.echoes.append(ctx.Process(target=drive_checkout, args=(there, port_q, token, root), daemon=True))
        for p in self.echoes:
            p.start()
        self.ends = {
            "sealed": LocalLane(DirectEnvEnd(LaneAddress("127.0.0.1", sealed_q.get(timeout=60)), token, 0, 0, 30.0)),
            "pickle": LocalLane(PickleEnvEnd(pickle_q.get(timeout=60))),
        }
        self.ends.update({name: CheckoutLane(conn) for name, conn in pipes.items()})
        return self.ends

    def __exit__(self, *exc) -> None:
        for end in self.ends.values():
            end.close()
        for p in self.echoes:
            p.kill()


def round_trips(ends: dict, msg, i: int) -> dict[str, float]:
    """One round trip of ``msg`` on each lane, in an order that alternates with ``i``: seconds by lane."""
    order = sorted(ends) if i % 2 else sorted(ends, reverse=True)  # each lane first, and last, as often
    return {name: ends[name].round_trip(msg) for name in order}


LANE_NAMES = {
    "sealed": "direct lane round trip alone (codec + GMAC)",
    "pickle": "old framing round trip alone (pickle, baseline)",
    "this": "this tree's lane in --other-lane's harness, round trip alone",
    "checkout": "--other-lane checkout's lane round trip alone",
}


def wire_cost_rows(msg, what: str, steps: int) -> list[tuple]:
    """Per step, in process (no socket): pickle dumps + loads, codec pack + unpack, and seal + check, each for
    ``msg`` and the `Actions` that answer it."""
    import os

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from rlhw.rl.pipeline.lane_frames import PREFIX, frame, intact, seal
    from rlhw.rl.pipeline.messages import Actions, EnvStep, unpack

    answer, aead = _answer(msg), AESGCM(os.urandom(32))
    frames = [frame(msg), frame(answer)]

    def pickled() -> None:
        for m in (msg, answer):
            pickle.loads(pickle.dumps(m, protocol=5))

    def codec() -> None:
        for m, kind in ((msg, EnvStep), (answer, Actions)):
            buf = frame(m)
            unpack(buf, PREFIX.size, *PREFIX.unpack_from(buf), kind)

    def tags() -> None:
        for buf in frames:
            seal(aead, 7, buf)
            assert intact(aead, 7, buf)

    rows = []
    for name, fn in (
        ("pickle dumps + loads (baseline)", pickled),
        ("codec pack + unpack", codec),
        ("GMAC seal + check, both frames", tags),
    ):
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        rows.append((f"per step in process: {name}, {what}", len(times), *p50_p99_ms(times[50:])))
    return rows


def with_transitions(obs: dict, k: int = 8):
    """What an env worker of ``k`` instances sends at each step of the pipeline: their observations and the
    previous step's transitions (``transition_batch``: obs, next_obs, action, reward, terminated, intervened)."""
    from rlhw.rl.pipeline.messages import EnvStep
    from rlhw.rl.replay import transition_batch

    obs = {name: np.repeat(v, k, 0) for name, v in obs.items()}
    tr = transition_batch(obs, obs, np.zeros((k, 7)), np.zeros(k), np.zeros(k), np.zeros(k))
    return EnvStep(env=0, obs=obs, rows=tuple(range(k)), evaluating=np.zeros(k, bool), transitions=tr)


_ATTACKED_ROLLOUT = """
import json, resource, struct, sys, time
import numpy as np
from rlhw.rl.pipeline.lane import DirectEnvEnd, DirectRolloutEnd
from rlhw.rl.pipeline.messages import Actions, EnvStep
announced, limit_mib = int(sys.argv[1]), int(sys.argv[2])
def mib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024
end = DirectRolloutEnd("127.0.0.1", b"r" * 32, timeout_s=2.0)
bound = end.bound.payload if hasattr(end, "bound") else None  # the checkout before bounds has none
if announced < 0:  # the largest frame the bound allows (this tree's default bound; the old one's 2 GiB)
    announced = (bound or 1 << 31) - 16
attacker, other = (DirectEnvEnd(end.address, b"r" * 32, r, 0, 30.0) for r in (0, 1))
def step(env, rank):  # one step of env worker ``rank``: its observation in, its actions back
    env.send(EnvStep(env=rank, obs={"x": np.zeros((1, 3), np.float32)}, rows=(0,), evaluating=np.zeros(1, bool)))
    while not (msgs := end.receive(timeout=1.0)):
        pass
    for m in msgs:
        end.answer(m.env, Actions(np.zeros((1, 7), np.float32), np.zeros(1, np.int64)))
    env.actions()
for _ in range(50):
    step(attacker, 0)
    step(other, 1)
baseline = mib("VmHWM:")
if limit_mib:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (int((mib("VmSize:") + limit_mib) * 2**20), hard))
attacker.stream.sock.sendall(struct.pack("!QQ", 16, announced) + bytes(1024))
t0 = time.perf_counter()
try:
    step(other, 1)
    outcome = "the other env worker served"
except BaseException as e:
    outcome = f"{type(e).__name__} out of receive"
other_step_ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"announced": announced, "baseline_mib": baseline, "peak_mib": mib("VmHWM:"),
                  "other_step_ms": other_step_ms, "outcome": outcome}))
"""


def attacked_rollout(root: Path, announced: int, limit_mib: int) -> dict:
    """`_ATTACKED_ROLLOUT` in a process that imports the rlhw of ``root``: what announcing ``announced`` bytes
    (-1: the largest frame the rollout end allows) costs it, under a memory limit of ``limit_mib`` (0: none)."""
    r = subprocess.run(
        [sys.executable, "-c", _ATTACKED_ROLLOUT, str(announced), str(limit_mib)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode:
        return {"announced": announced, "outcome": f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def rss_rows(trees: dict[str, Path], repeats: int = 2) -> list[str]:
    """A header and one line per tree, attack and limit (``repeats`` times, the trees alternating)."""
    lines = [
        f"{'tree':<10}{'announces':<24}{'AS limit':<10}{'peak RSS over base':>26}{'other step':>13}  what became of it"
    ]
    for _ in range(repeats):
        for announced, limit in ((1 << 30, 0), (-1, 0), (1 << 30, 512)):
            for name, root in trees.items():
                r = attacked_rollout(root, announced, limit)
                peak = (
                    f"{r['peak_mib'] - r['baseline_mib']:+.1f} of {r['baseline_mib']:.0f} MiB"
                    if "peak_mib" in r
                    else "-"
                )
                step = f"{r['other_step_ms']:.1f} ms" if "other_step_ms" in r else "-"
                what = "1 GiB" if announced > 0 else f"{r['announced']} B (bound)"
                lines.append(
                    f"{name:<10}{what:<24}{f'+{limit} MiB' if limit else 'none':<10}{peak:>26}{step:>13}  {r['outcome']}"
                )
    return lines


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    return float(np.percentile(seconds, 50) * 1e3), float(np.percentile(seconds, 99) * 1e3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument(
        "--other-lane",
        metavar="CHECKOUT",
        help="also the direct lane of the rlhw checkout at this path (e.g. a worktree of the commit "
        "before the typed codec), interleaved with the others",
    )
    ap.add_argument("--rss", action="store_true", help="only the rollout end's peak RSS under an oversized frame")
    args = ap.parse_args()
    if args.rss:
        trees = {"this": ROOT, **({"checkout": Path(args.other_lane)} if args.other_lane else {})}
        print("a rollout end while one env worker announces a frame and sends 1 KiB of it (peak RSS = VmHWM)")
        print("\n".join(rss_rows(trees)))
        return 0
    from rlhw.rl.pipeline.messages import EnvStep
    from tools.bench_pipeline import mock_observation, print_latency

    rows = []
    with Lanes(args.other_lane) as ends:
        for images in (False, True):
            msg = EnvStep(env=0, obs=mock_observation(images)[2], rows=(0,), evaluating=np.zeros(1, bool))
            trips: dict[str, list[float]] = {name: [] for name in ends}
            for i in range(args.steps):
                for name, t in round_trips(ends, msg, i).items():
                    if i >= 50:
                        trips[name].append(t)
            what = "2x128x128x3 images + proprio" if images else "proprio only"
            rows += [
                (f"{LANE_NAMES[n]}, {what}", len(t), *p50_p99_ms(t)) for n, t in sorted(trips.items(), reverse=True)
            ]
            rows += wire_cost_rows(msg, what, args.steps)
            if not images:
                rows += wire_cost_rows(with_transitions(msg.obs), "proprio + transitions, 8 instances", args.steps)
    print_latency("the step lane's wire: codec + GMAC against pickle (one node)", rows, width=90, digits=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
