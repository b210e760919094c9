"""The direct step lane's wire against the one it replaced, in the same run: typed codec + GMAC vs pickle.

    .venv/bin/python tools/bench_lane.py [--steps 2000] [--other-lane CHECKOUT]
    # tools/bench_pipeline.py --parts phases runs it too, without --other-lane

- Round trip alone (an echo process answers every observation at once), the two lanes interleaved step by
  step, alternating which goes first: ``sealed`` is the lane as it is (`DirectEnvEnd` to `DirectRolloutEnd`:
  typed codec, an AES-GCM tag per frame); ``pickle`` is the framing it replaced, as the baseline (an 8-byte
  length and a pickle protocol 5, no tag, on the same kind of TCP stream: TCP_NODELAY, a selector loop on the
  echo side, the same Actions back).
- In process, per step (one `EnvStep` out, one `Actions` back): pickle dumps + loads of both, the codec's pack
  + unpack of both, and the tags' seal + check of both frames; also for the message a pipeline step sends,
  observations and transitions of 8 instances (about 20 arrays).
"""

from __future__ import annotations

import argparse
import pickle
import selectors
import socket
import struct
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


def checkout_env_end(root: str, port: int, token: bytes):
    """The `DirectEnvEnd` of the checkout at ``root``, loaded from its lane.py beside this one's messages (the
    message classes are unchanged, so its pickles decode on either side)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rlhw_checkout_lane", Path(root) / "rlhw/rl/pipeline/lane.py")
    lane = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lane)
    return lane.DirectEnvEnd(lane.LaneAddress("127.0.0.1", port), token, 0, 0, 30.0)


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
        sealed_q, pickle_q, other_q, token = ctx.Queue(), ctx.Queue(), ctx.Queue(), b"b" * 32
        self.echoes = [
            ctx.Process(target=echo_sealed, args=(sealed_q, token), daemon=True),
            ctx.Process(target=echo_pickle, args=(pickle_q,), daemon=True),
        ]
        if self.other:
            self.echoes.append(ctx.Process(target=echo_checkout, args=(other_q, token, self.other), daemon=True))
        for p in self.echoes:
            p.start()
        self.ends = {
            "sealed": DirectEnvEnd(LaneAddress("127.0.0.1", sealed_q.get(timeout=60)), token, 0, 0, 30.0),
            "pickle": PickleEnvEnd(pickle_q.get(timeout=60)),
        }
        if self.other:
            self.ends["checkout"] = checkout_env_end(self.other, other_q.get(timeout=60), token)
        return self.ends

    def __exit__(self, *exc) -> None:
        for end in self.ends.values():
            end.close()
        for p in self.echoes:
            p.kill()


def round_trips(ends: dict, msg, i: int) -> dict[str, float]:
    """One round trip of ``msg`` on each lane, in an order that alternates with ``i``: seconds by lane."""
    out = {}
    for name in sorted(ends) if i % 2 else sorted(ends, reverse=True):  # each lane first, and last, as often
        t0 = time.perf_counter()
        ends[name].send(msg)
        ends[name].actions()
        out[name] = time.perf_counter() - t0
    return out


LANE_NAMES = {
    "sealed": "direct lane round trip alone (codec + GMAC)",
    "pickle": "old framing round trip alone (pickle, baseline)",
    "checkout": "--other-lane checkout's lane round trip alone",
}


def wire_cost_rows(msg, what: str, steps: int) -> list[tuple]:
    """Per step, in process (no socket): pickle dumps + loads, codec pack + unpack, and seal + check, each for
    ``msg`` and the `Actions` that answer it."""
    import os

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from rlhw.rl.pipeline.lane_wire import PREFIX, frame, intact, seal
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
    args = ap.parse_args()
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
