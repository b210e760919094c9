"""Server memory stays flat over 100,000 steps (a camera included): nothing accumulates per step."""

from __future__ import annotations

import signal
import time

import grpc
import numpy as np
import pytest

from rlhw.env import codec
from rlhw.env.v1 import env_pb2 as pb
from tests.env.test_cli import _address, _finish, _start

STEPS = 100_000
WARM_UP = 10_000


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(300)
def test_server_rss_is_flat_over_100k_session_steps_with_a_camera():
    proc = _start(
        "configs/sim_reach.yaml",
        "--port",
        "0",
        "--env",
        "rlhw.env.fake_env:make_fake_env",
        env_vars={"RLHW_FAKE_ENV": "cameras=1,h=64,w=64,episode_length=1000000"},
    )
    try:
        address = _address(proc)
        step = codec.step_request(np.zeros(7, np.float32), session=True)
        reset = pb.SessionRequest(reset=pb.ResetRequest()).SerializeToString()

        def requests():  # the server's real Session path; requests are pipelined by gRPC flow control
            yield reset
            for _ in range(STEPS):
                yield step

        with grpc.insecure_channel(address) as channel:
            stream = channel.stream_stream("/rlhw.env.v1.Env/Session")(requests(), timeout=240)
            t0 = time.monotonic()
            kinds = {}
            warm = end = None
            data = b""
            for i, data in enumerate(stream):
                # The first byte is the SessionResponse oneof's tag: 0x0a reset, 0x12 step, 0x1a error.
                kind = {0x0A: "reset", 0x12: "step", 0x1A: "error"}[data[0]]
                kinds[kind] = kinds.get(kind, 0) + 1
                if i == WARM_UP:  # allocator pools, gRPC buffers and timing windows are full by now
                    warm = _rss_mb(proc.pid)
            end = _rss_mb(proc.pid)
            observations = codec.observations_of(pb.SessionResponse.FromString(data).step)
            elapsed = time.monotonic() - t0
        assert observations["observation"][0]["cam0"].shape == (64, 64, 3)
    finally:
        _finish(proc, signal.SIGTERM)
    assert kinds == {"reset": 1, "step": STEPS}
    # One 64x64x3 frame is 12 kB: keeping one frame (or one response) per step would add > 1 GB.
    assert end - warm < 8.0, (
        f"server RSS grew {end - warm:.1f} MB over {STEPS - WARM_UP} steps ({warm:.0f} -> {end:.0f} MB)"
    )
    print(f"{STEPS} steps in {elapsed:.1f} s; server RSS {warm:.1f} -> {end:.1f} MB")
