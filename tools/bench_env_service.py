"""Env service round-trip latency against a bare gRPC echo of the same bytes, in one run.

    .venv/bin/python tools/bench_env_service.py            # all scenarios
    .venv/bin/python tools/bench_env_service.py --quick    # fewer steps

For each observation payload (proprio only; two 128x128x3 images; two 640x480x3 images) it starts,
in one child process, an env server hosting `FakeEnv` (returns preallocated arrays, so the env
costs ~0) and, on the same gRPC stack and options, a bare echo server whose handlers do nothing but
return a preallocated payload of exactly the size of the real Step response for a request of the
size of the real Step request (raw bytes in and out: no protobuf, no validation, no env). The client
runs in this process and alternates blocks of calls between the two, so machine load hits both.

Reported per scenario (p50 / p99 microseconds, the ratio to the matching echo, and CPU time per
call of the client and of the server process, which machine load does not inflate as much):
- unary Step vs unary echo;
- Session stream step vs streaming echo;
- dm_env_rpc Process-stream step (all observations requested and unpacked with its tensor_utils)
  on the same env and port, against a minimal dm_env_rpc server (`MinimalDmEnv`) in the same child
  process: it parses each EnvironmentRequest and answers with a prebuilt EnvironmentResponse holding
  exactly the bytes rlhw's server sent for the same request, so the same client sees the same bytes
  and the ratio is rlhw's bridge, host and env against dm_env_rpc's own floor;
- the server's own p50 per phase (validate, env, server, encode) from GetStatus, to split the
  service's fixed cost from the env's.
The goals: dm_env_rpc step <= 1.5x the minimal dm_env_rpc server (issue 39); Session faster than
dm_env_rpc (issue 5). Issue 5's Step <= 1.3x echo on this bare FakeEnv is no longer a goal (issue 39).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCENARIOS = {
    "proprio": dict(cameras=0, h=0, w=0, steps=3000),
    "2x128x128x3": dict(cameras=2, h=128, w=128, steps=2000),
    "2x640x480x3": dict(cameras=2, h=480, w=640, steps=400),
}
ECHO_SERVICE = "rlhw.bench.Echo"
DM_SERVICE = "dm_env_rpc.v1.Environment"
MAX_BYTES = 64 * 1024 * 1024
OPTIONS = [
    ("grpc.max_receive_message_length", MAX_BYTES),
    ("grpc.max_send_message_length", MAX_BYTES),
    ("grpc.so_reuseport", 0),
]


# ---------------------------------------------------------------------------------------------
# child: env server + echo server


def serve(cameras: int, h: int, w: int) -> None:
    import grpc

    from rlhw.config.server import ServerConfig
    from rlhw.env.fake_env import FakeEnv
    from rlhw.env.server import EnvServer
    from rlhw.env.step_messages import StepWriter

    config = ServerConfig(port=0, watchdog_s=60.0, max_workers=8, max_streams=4)
    env = FakeEnv(cameras=cameras, image_hw=(h or 1, w or 1), episode_length=10**9)
    env_server = EnvServer(env, config).start()
    # The same env and server, its writer declaring no observation: protobuf's fill for every field.
    plain_env = FakeEnv(cameras=cameras, image_hw=(h or 1, w or 1), episode_length=10**9)
    plain_server = EnvServer(plain_env, config).start()
    plain_server.native.writer = StepWriter(dataclasses.replace(plain_env.spec, observations={}))

    payloads: dict[int, bytes] = {}

    def payload(request: bytes) -> bytes:
        size = int.from_bytes(request[:4], "little")
        out = payloads.get(size)
        if out is None:
            out = payloads[size] = os.urandom(size)
        return out

    def unary(request, context):
        return payload(request)

    def stream(requests, context):
        for request in requests:
            yield payload(request)

    echo = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=OPTIONS)
    echo.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                ECHO_SERVICE,
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(unary),
                    "Stream": grpc.stream_stream_rpc_method_handler(stream),
                },
            ),
        )
    )
    echo_port = echo.add_insecure_port("127.0.0.1:0")
    echo.start()
    minimal = MinimalDmEnv()
    dm_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=OPTIONS)
    dm_server.add_generic_rpc_handlers((minimal.handler(),))
    dm_port = dm_server.add_insecure_port("127.0.0.1:0")
    dm_server.start()
    addresses = {
        "env": env_server.address,
        "plain": plain_server.address,
        "echo": f"127.0.0.1:{echo_port}",
        "dm_minimal": f"127.0.0.1:{dm_port}",
    }
    print(json.dumps(addresses), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    dm_server.stop(0)
    echo.stop(0)
    env_server.stop(0.5)
    plain_server.stop(0.5)


class MinimalDmEnv:
    """A minimal dm_env_rpc server: each request parsed by dm_env_rpc's protobuf, each answer a prebuilt
    EnvironmentResponse serialised by it. Its Step answer is what rlhw's server answered to the same Step
    request (the client hands it over once, `Teach`), so a client gets the same bytes from both servers; the
    other requests get their empty responses."""

    def __init__(self):
        self.step = None

    def teach(self, data: bytes, context) -> bytes:
        from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm

        self.step = dm.EnvironmentResponse(step=dm.StepResponse.FromString(data))
        return b""

    def process(self, requests, context):
        from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm

        for request in requests:
            kind = request.WhichOneof("payload")
            if kind == "step":
                yield self.step
            else:
                response = dm.EnvironmentResponse()
                getattr(response, kind).SetInParent()
                if kind == "create_world":
                    response.create_world.world_name = "minimal"
                yield response

    def handler(self):
        import grpc
        from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm

        return grpc.method_handlers_generic_handler(
            DM_SERVICE,
            {
                "Process": grpc.stream_stream_rpc_method_handler(
                    self.process,
                    request_deserializer=dm.EnvironmentRequest.FromString,
                    response_serializer=dm.EnvironmentResponse.SerializeToString,
                ),
                "Teach": grpc.unary_unary_rpc_method_handler(self.teach),
            },
        )


# ---------------------------------------------------------------------------------------------
# parent: clients


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(samples: list[float]) -> tuple[float, float]:
    a = np.asarray(samples) * 1e6
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


class EchoClient:
    def __init__(self, address: str, request_size: int, response_size: int):
        import grpc

        self.channel = grpc.insecure_channel(address, OPTIONS[:2])
        self.unary = self.channel.unary_unary(f"/{ECHO_SERVICE}/Unary")
        self.request = response_size.to_bytes(4, "little") + b"\0" * max(0, request_size - 4)
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.responses = self.channel.stream_stream(f"/{ECHO_SERVICE}/Stream")(iter(self.requests.get, None))

    def call(self) -> int:
        return len(self.unary(self.request, timeout=10))

    def stream_call(self) -> int:
        self.requests.put(self.request)
        return len(next(self.responses))

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()


def _dm_clients(addresses: dict, secret: str, action: np.ndarray):
    """dm_env_rpc clients of rlhw's server and of the minimal one, which is taught rlhw's answer to the step request
    both are sent: (step(connection), rlhw's connection, the minimal server's, close)."""
    import grpc
    from dm_env_rpc.v1 import connection as dm_connection
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
    from dm_env_rpc.v1 import tensor_utils

    from rlhw.env.auth import SESSION_METADATA_KEY

    dm_channel = grpc.insecure_channel(addresses["env"], OPTIONS[:2])
    conn = dm_connection.Connection(dm_channel, metadata=[(SESSION_METADATA_KEY, secret)])
    world = conn.send(dm.CreateWorldRequest()).world_name
    specs = conn.send(dm.JoinWorldRequest(world_name=world)).specs
    uids, dm_action = list(specs.observations), {1: tensor_utils.pack_tensor(action)}
    step_request = dm.StepRequest(requested_observations=uids, actions=dm_action)
    minimal_channel = grpc.insecure_channel(addresses["dm_minimal"], OPTIONS[:2])
    minimal = dm_connection.Connection(minimal_channel)
    minimal.send(dm.JoinWorldRequest(world_name=minimal.send(dm.CreateWorldRequest()).world_name))
    conn.send(step_request)  # (the first step of an episode starts it)
    teach = minimal_channel.unary_unary(f"/{DM_SERVICE}/Teach")
    teach(conn.send(step_request).SerializeToString(), timeout=10)

    def dm_step(connection=conn):
        # What a dm_env_rpc client does per step: send, then unpack every observation.
        response = connection.send(dm.StepRequest(requested_observations=uids, actions=dm_action))
        return {uid: tensor_utils.unpack_tensor(t) for uid, t in response.observations.items()}

    def close():
        conn.send(dm.LeaveWorldRequest())
        conn.send(dm.DestroyWorldRequest(world_name=world))
        dm_channel.close()
        minimal_channel.close()

    assert dm_step(minimal).keys() == dm_step().keys(), (
        "the minimal dm_env_rpc server's answer holds other observations"
    )
    return dm_step, conn, minimal, close


def run_scenario(name: str, cameras: int, h: int, w: int, steps: int, block: int = 50) -> dict:
    import grpc

    from rlhw.env import codec
    from rlhw.env.auth import new_session_secret
    from rlhw.env.client import RemoteEnv
    from rlhw.env.v1 import env_pb2 as pb
    from rlhw.env.v1 import env_pb2_grpc

    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(cameras), str(h), str(w)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        addresses = json.loads(child.stdout.readline())
        action = np.zeros(7, np.float32)
        step_request = pb.StepRequest(action=codec.to_tensor(action))

        # Sizes of the real messages, for the echo.
        channel = grpc.insecure_channel(addresses["env"], OPTIONS[:2])
        stub = env_pb2_grpc.EnvStub(channel)
        stub.Reset(pb.ResetRequest(), timeout=10)
        raw_step = channel.unary_unary("/rlhw.env.v1.Env/Step")  # bytes in, bytes out: sizes only
        response_size = len(raw_step(step_request.SerializeToString(), timeout=10))
        request_size = step_request.ByteSize()
        stub.Stop(pb.StopRequest(release=True), timeout=10)
        channel.close()

        echo = EchoClient(addresses["echo"], request_size, response_size)
        unary_env = RemoteEnv(addresses["env"], use_session=False)
        unary_env.reset()
        keys = ("echo_unary", "step_unary", "echo_stream", "step_session", "session_plain", "dm_env_rpc", "dm_minimal")
        results: dict[str, list[float]] = {k: [] for k in keys}
        cpu: dict[str, list[float]] = {k: [0.0, 0.0, 0] for k in keys}  # client s, server s, calls

        def timed(key, fn, n):
            out = results[key]
            c0, s0 = time.process_time(), _cpu_seconds(child.pid)
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            acc = cpu[key]
            acc[0] += time.process_time() - c0
            acc[1] += _cpu_seconds(child.pid) - s0
            acc[2] += n

        # Warm-up, then alternate blocks so that load changes hit both sides alike.
        for fn in (echo.call, lambda: unary_env.step(action)):
            for _ in range(min(200, steps // 5)):
                fn()
        for _ in range(steps // block):
            timed("echo_unary", echo.call, block)
            timed("step_unary", lambda: unary_env.step(action), block)
        unary_env.close()

        # Streams: the native Session and dm_env_rpc's Process stream share one session id, so both
        # may control the env at once and their blocks can alternate with the echo's.
        secret = new_session_secret()
        session_env = RemoteEnv(addresses["env"], use_session=True, session_secret=secret)
        session_env.reset()
        plain_env = RemoteEnv(addresses["plain"], use_session=True)
        plain_env.reset()
        dm_step, conn, minimal, dm_close = _dm_clients(addresses, secret, action)
        paths = (echo.stream_call, lambda: session_env.step(action), lambda: plain_env.step(action), dm_step)
        for fn in (*paths, lambda: dm_step(minimal)):
            for _ in range(min(200, steps // 5)):
                fn()
        for _ in range(steps // block):
            timed("echo_stream", echo.stream_call, block)
            timed("step_session", lambda: session_env.step(action), block)
            timed("session_plain", lambda: plain_env.step(action), block)
            timed("dm_env_rpc", dm_step, block)
            timed("dm_minimal", lambda: dm_step(minimal), block)
        dm_close()
        # Server-side breakdown of the recent steps (native and dm_env_rpc alike), from GetStatus.
        phases = {k: v.p50_s * 1e6 for k, v in session_env.status().timing.items()}
        plain_encode = plain_env.status().timing["encode"].p50_s * 1e6
        session_env.close()
        plain_env.close()
        echo.close()
    finally:
        child.stdin.close()
        child.wait(timeout=30)

    stats = {k: _pct(v) for k, v in results.items()}
    cpu_us = {k: (1e6 * c / n, 1e6 * sv / n) for k, (c, sv, n) in cpu.items() if n}
    return {
        "scenario": name,
        "request_bytes": request_size,
        "response_bytes": response_size,
        "n": steps,
        "cpu_us": cpu_us,
        "server_phases_p50_us": phases,
        "plain_encode_p50_us": plain_encode,
        **stats,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=3, type=int, metavar=("CAMERAS", "H", "W"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a fifth of the steps")
    parser.add_argument("--only", choices=list(SCENARIOS), help="one scenario")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    rows = []
    for name, sc in SCENARIOS.items():
        if args.only and name != args.only:
            continue
        steps = sc["steps"] // 5 if args.quick else sc["steps"]
        rows.append(run_scenario(name, sc["cameras"], sc["h"], sc["w"], steps))
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    header = (
        f"{'payload':<13}{'resp bytes':>11}  {'path':<15}{'p50 us':>9}{'p99 us':>9}{'p50 x':>8}{'p99 x':>8}"
        f"{'cpu cli':>9}{'cpu srv':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        lines = [
            ("echo unary", "echo_unary", "echo_unary"),
            ("Step unary", "step_unary", "echo_unary"),
            ("echo stream", "echo_stream", "echo_stream"),
            ("Session step", "step_session", "echo_stream"),
            ("Session plain", "session_plain", "echo_stream"),
            ("Session/plain", "step_session", "session_plain"),
            ("dm_env_rpc step", "dm_env_rpc", "echo_stream"),
            ("dm minimal", "dm_minimal", "echo_stream"),
            ("dm_env_rpc/min", "dm_env_rpc", "dm_minimal"),
        ]
        for i, (label, key, base) in enumerate(lines):
            (p50, p99), (b50, b99) = r[key], r[base]
            cli, srv = r["cpu_us"][key]
            first = f"{r['scenario']:<13}{r['response_bytes']:>11}" if i == 0 else " " * 24
            print(f"{first}  {label:<15}{p50:>9.0f}{p99:>9.0f}{p50 / b50:>8.2f}{p99 / b99:>8.2f}{cli:>9.0f}{srv:>9.0f}")
    print("p50/p99: round trip in microseconds; x: ratio to the echo on the same kind of call;")
    print("cpu cli/srv: CPU microseconds per call in the client and the server process (all threads).")
    print("server phases, p50 us (GetStatus; 'server' = validate + env + bookkeeping, before 'encode'):")
    for r in rows:
        ph = r["server_phases_p50_us"]
        print(
            f"  {r['scenario']:<13}"
            + "  ".join(f"{k} {ph[k]:.1f}" for k in ("validate", "env", "server", "encode") if k in ph)
            + f"  (plain server: encode {r['plain_encode_p50_us']:.1f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
