"""Does the hand-written step wire path pay for itself? Encode and decode one StepResponse three ways.

    .venv/bin/python tools/bench_wire.py            # about 20 s
    .venv/bin/python tools/bench_wire.py --quick

For each observation payload (proprio only; two 128x128x3 images; two 640x480x3 images), in this
process, no gRPC:
- server side, writing the StepResponse bytes: the cached layout (`step_layout.StepWriter`), the
  general hand-written path (`wire.encode_step_head` + `encode_with_observations`), and protobuf's
  object model (`codec.to_tensor` per observation, then `SerializeToString`);
- client side, reading them back into numpy arrays: the cached layout (`step_layout.StepReader`),
  the general reader (`wire.read_observation_response`), and protobuf (`FromString` +
  `codec.from_tensor`).
Each figure is the lowest of several block medians (microseconds per call), which machine load
inflates least; the ratio is to protobuf's own path on the same payload, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlhw.env import codec, step_layout, wire  # noqa: E402
from rlhw.env.v1 import env_pb2 as pb  # noqa: E402

SCENARIOS = {"proprio": (0, 0, 0), "2x128x128x3": (2, 128, 128), "2x640x480x3": (2, 480, 640)}
TIMING = {"validate": 2e-5, "env": 1e-4, "server": 2e-4}


def observations(cameras: int, h: int, w: int):
    rng = np.random.default_rng(0)
    obs = {"joint_pos": rng.standard_normal(7).astype(np.float32), "ee_pose": rng.standard_normal(7).astype(np.float32),
           "gripper": np.zeros(1, np.float32)}
    for i in range(cameras):
        obs[f"cam{i}"] = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    return obs, {name: 1.7e9 + i for i, name in enumerate(obs)}


def protobuf_write(obs, stamps) -> bytes:
    msg = pb.StepResponse(reward=[0.5], terminated=[False], truncated=[False], success=[False],
                          fault=[pb.FAULT_KIND_UNSPECIFIED], fault_message=[""], timing=TIMING)
    for name, arr in obs.items():
        msg.observation.tensors[name].CopyFrom(codec.to_tensor(arr))
    for name, t in stamps.items():
        msg.observation.capture_time[name].CopyFrom(codec.to_tensor(np.float64(t)))
    return msg.SerializeToString()


def protobuf_read(data: bytes):
    msg = pb.StepResponse.FromString(data)
    return {k: codec.from_tensor(v) for k, v in msg.observation.tensors.items()}, msg.reward[0]


def timed(fn, calls: int, blocks: int) -> float:
    medians = []
    for _ in range(blocks):
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        medians.append(statistics.median(samples))
    return min(medians) * 1e6


def run(name: str, calls: int, blocks: int) -> list[tuple]:
    obs, stamps = observations(*SCENARIOS[name])
    writer, reader = step_layout.StepWriter(), step_layout.StepReader()
    data = writer.write(0.5, False, False, False, TIMING, obs, stamps, None)
    data = writer.write(0.5, False, False, False, TIMING, obs, stamps, None)  # the second uses the layout
    reader.learn(data, pb.StepResponse.FromString(data), False)
    assert reader.read(data) is not None and pb.StepResponse.FromString(protobuf_write(obs, stamps)) == \
        pb.StepResponse.FromString(data), "the three paths must write the same message"

    def general_write():
        head = wire.encode_step_head([0.5], [False], [False], [False], [None], [""], TIMING)
        return wire.encode_with_observations(head, [(wire.T.n_observation, obs, stamps)], None)

    paths = {
        "write": {"layout": lambda: writer.write(0.5, False, False, False, TIMING, obs, stamps, None),
                  "general": general_write, "protobuf": lambda: protobuf_write(obs, stamps)},
        "read": {"layout": lambda: reader.read(data), "general": lambda: wire.read_observation_response(data, pb.StepResponse),
                 "protobuf": lambda: protobuf_read(data)},
    }
    rows = []
    for side, fns in paths.items():
        us = {k: timed(fn, calls, blocks) for k, fn in fns.items()}
        rows += [(name, len(data), side, k, v, v / us["protobuf"]) for k, v in us.items()]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    args = parser.parse_args()
    calls, blocks = (100, 5) if args.quick else (400, 7)
    print(f"{'payload':<13}{'bytes':>9}  {'side':<6}{'path':<10}{'us/call':>10}{'x protobuf':>12}")
    for name in SCENARIOS:
        n = calls if name != "2x640x480x3" else max(20, calls // 10)
        for row in run(name, n, blocks):
            print(f"{row[0]:<13}{row[1]:>9}  {row[2]:<6}{row[3]:<10}{row[4]:>10.1f}{row[5]:>12.2f}")
    print("us/call: lowest block median; x protobuf: ratio to protobuf's object model on the same payload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
