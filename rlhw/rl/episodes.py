"""Episodes on disk: every transition is written as it arrives, so a crash loses nothing already collected.

Layout under a run directory: ``episodes/env<rank>/<kind>-<index>.steps`` while an episode runs, replaced by
``<kind>-<index>.npz`` when it ends (``kind`` is ``train``, ``eval`` or ``demo``: demonstrations that
``rlhw record-demos`` writes, and that ``train.demos`` loads).

A ``.steps`` file is a sequence of records, each record being ``np.save``-format arrays written back to back
(no pickle): first a uint8 array holding a UTF-8 JSON header ``{"keys": [...], ...scalars}``, then one array per
key. Record 0 holds the reset observation; record t >= 1 holds action t, reward, flags and the observation that
followed. The file is flushed after every record. A reader stops at the first incomplete record, which is
where a crash cut the file, and keeps everything before it.

A finished ``.npz`` holds ``obs/<name>`` with T+1 entries, ``action``, ``reward``, ``terminated``,
``truncated``, ``success``, ``time``, ``intervened``, ``policy_version``, ``fault`` with T entries, and ``meta``
(JSON bytes), and ``judge_success`` (T) where a simulator's judge gave its verdict on every step (the ground truth
of a rehearsal, apart from ``success``, which is what the cell measured: the classifier's or the operator's
verdict). ``action`` is what the arm executed (the operator's command during an intervention); ``fault`` is
the `FaultKind` value of a safety fault that ended the episode at that step, else ""; ``intervened`` says a
person (or a scripted expert) was in control; ``policy_version`` is the version of the policy weights that
chose the action, -1 when no policy did (an operator, an expert, uniform random warm-up actions). They are the
audit trail of a run. Episodes written before these fields load with all False / -1 / "".
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlhw.errors import FaultKind
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal

#: The episode meta key holding the whole env config section the episode was recorded with
#: (rlhw.rl.demos.recorded_env): `train.demos` checks it, `rlhw export-dataset` carries it on.
PROVENANCE_KEY = "env_config"

_NAME = re.compile(r"^(train|eval|demo)-(\d{6})\.(steps|npz)$")
FAULT_CHARS = max(len(k.value) for k in FaultKind)  # the ``fault`` field: a fixed-width string, no pickle


def _write_record(f, header: dict, arrays: Mapping[str, np.ndarray]) -> None:
    keys = list(arrays)
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps({**header, "keys": keys}).encode(), dtype=np.uint8), allow_pickle=False)
    for k in keys:
        np.save(buf, np.ascontiguousarray(arrays[k]), allow_pickle=False)
    f.write(buf.getbuffer())  # one write per record keeps a torn record at the very end of the file
    f.flush()


def _read_records(path: Path) -> list[tuple[dict, dict[str, np.ndarray]]]:
    records = []
    with open(path, "rb") as f:
        while True:
            try:
                header = json.loads(np.load(f, allow_pickle=False).tobytes().decode())
                arrays = {k: np.load(f, allow_pickle=False) for k in header.pop("keys")}
            except (EOFError, ValueError, OSError, json.JSONDecodeError, UnicodeDecodeError):
                break  # end of file, or the torn last record of a crashed writer
            records.append((header, arrays))
    return records


class EpisodeRecorder:
    """Writes one env's episodes. Not thread-safe: one recorder per env loop."""

    def __init__(self, directory: str | os.PathLike, fsync: bool = False, meta: Mapping[str, Any] | None = None):
        """``meta``: what every episode of this recorder records (e.g. ``env_config``, the env's provenance:
        rlhw.rl.demos.env_provenance), under each episode's own ``begin(meta=...)``."""
        self.dir = Path(directory)
        self.base_meta = dict(meta or {})
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        existing = [int(m.group(2)) for p in self.dir.iterdir() if (m := _NAME.match(p.name))]
        self.next_index = max(existing, default=-1) + 1
        self._f = None
        self._path: Path | None = None
        self._kind = "train"
        self._meta: dict = {}
        self._obs: list[dict[str, np.ndarray]] = []
        self._steps: list[dict[str, Any]] = []

    @property
    def in_episode(self) -> bool:
        return self._f is not None

    def begin(self, obs: Mapping[str, np.ndarray], kind: str = "train", meta: dict | None = None) -> None:
        if self._f is not None:
            self.end()
        self._kind, self._meta = kind, {**self.base_meta, **(meta or {})}
        self._path = self.dir / f"{kind}-{self.next_index:06d}.steps"
        self.next_index += 1
        self._f = open(self._path, "wb")
        self._obs = [{k: np.array(v) for k, v in obs.items()}]
        self._steps = []
        _write_record(
            self._f,
            {"reset": True, "time": time.time(), "meta": self._meta},
            {f"obs/{k}": v for k, v in self._obs[0].items()},
        )

    def step(
        self,
        action,
        reward: float,
        terminated: bool,
        truncated: bool,
        next_obs: Mapping[str, np.ndarray],
        success: bool = False,
        *,
        intervened: bool = False,
        policy_version: int = -1,
        fault: FaultKind | None = None,
        judge_success: bool | None = None,
    ) -> None:
        """Record one step; ``action`` is what the arm executed (see the module docstring for the flags)."""
        if self._f is None:
            raise RuntimeError("EpisodeRecorder.step before begin()")
        rec = {
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "success": bool(success),
            "time": time.time(),
            "intervened": bool(intervened),
            "policy_version": int(policy_version),
            "fault": FaultKind(fault).value if fault else "",
        }
        if judge_success is not None:
            rec["judge_success"] = bool(judge_success)
        action = np.asarray(action, dtype=np.float32)
        self._obs.append({k: np.array(v) for k, v in next_obs.items()})
        self._steps.append({**rec, "action": action})
        _write_record(self._f, rec, {"action": action, **{f"obs/{k}": v for k, v in self._obs[-1].items()}})

    def end(self) -> Path | None:
        """Finish the current episode: write the .npz atomically, then drop the .steps file."""
        if self._f is None:
            return None
        f, path = self._f, self._path
        self._f = None
        if self.fsync:
            os.fsync(f.fileno())
        f.close()
        if not self._steps:  # an episode with no step is just a reset: nothing to keep
            path.unlink(missing_ok=True)
            return None
        out = path.with_suffix(".npz")
        tmp = path.with_suffix(".npz.tmp")
        arrays = _episode_arrays(self._obs, self._steps, {**self._meta, "kind": self._kind, "complete": True})
        with open(tmp, "wb") as g:
            np.savez(g, **arrays)
            g.flush()
            if self.fsync:
                os.fsync(g.fileno())
        os.replace(tmp, out)
        path.unlink(missing_ok=True)
        return out

    def close(self) -> None:
        """Leave a running episode's .steps file in place (it is complete up to its last step)."""
        if self._f is not None:
            self._f.close()
            self._f = None


def _episode_arrays(obs: list[dict], steps: list[dict], meta: dict) -> dict[str, np.ndarray]:
    out = {f"obs/{k}": np.stack([o[k] for o in obs]) for k in obs[0]}
    out["action"] = np.stack([s["action"] for s in steps]).astype(np.float32)
    for k, dt in (
        ("reward", np.float32),
        ("terminated", bool),
        ("truncated", bool),
        ("success", bool),
        ("time", np.float64),
    ):
        out[k] = np.array([s[k] for s in steps], dtype=dt)
    out["intervened"] = np.array([s.get("intervened", False) for s in steps], dtype=bool)
    out["policy_version"] = np.array([s.get("policy_version", -1) for s in steps], dtype=np.int64)
    out["fault"] = np.array([s.get("fault", "") for s in steps], dtype=f"<U{FAULT_CHARS}")
    if all("judge_success" in s for s in steps):  # a simulator judged every step (rlhw/robot/rehearsal.py)
        out["judge_success"] = np.array([s["judge_success"] for s in steps], dtype=bool)
    out["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return out


def episode_meta(ep: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The JSON ``meta`` of a loaded episode ({} when it has none)."""
    return json.loads(bytes(ep["meta"]).decode()) if "meta" in ep else {}


def load_episode(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A finished (.npz) or interrupted (.steps) episode as arrays; ``meta["complete"]`` tells which."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            ep = {k: z[k] for k in z.files}
        n = len(ep["action"])  # episodes from before the audit fields: nobody intervened, no version known
        ep.setdefault("intervened", np.zeros(n, bool))
        ep.setdefault("policy_version", np.full(n, -1, np.int64))
        ep.setdefault("fault", np.full(n, "", f"<U{FAULT_CHARS}"))
        return ep
    records = _read_records(path)
    if not records or not records[0][0].get("reset"):
        return {}
    obs = [{k[4:]: v for k, v in records[0][1].items()}]
    steps = []
    for header, arrays in records[1:]:
        obs.append({k[4:]: v for k, v in arrays.items() if k.startswith("obs/")})
        steps.append({**header, "action": arrays["action"]})
    if not steps:
        return {}
    kind = _NAME.match(path.name).group(1) if _NAME.match(path.name) else "train"
    return _episode_arrays(obs, steps, {**records[0][0].get("meta", {}), "kind": kind, "complete": False})


def episode_files(root: str | os.PathLike, kind: str | tuple[str, ...] = "train") -> list[Path]:
    """All episode files of ``kind`` (one or several) under ``root`` (recursively), finished and interrupted,
    in path order."""
    root = Path(root)
    if not root.exists():
        return []
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    files = sorted(p for p in root.rglob("*-*") if (m := _NAME.match(p.name)) and m.group(1) in kinds)
    # A crash between writing the .npz and removing the .steps leaves both: the .npz wins.
    return [p for p in files if not (p.suffix == ".steps" and p.with_suffix(".npz").exists())]


def episode_transitions(ep: Mapping[str, np.ndarray], fault_signal: FaultSignal = AS_REPORTED) -> dict[str, np.ndarray]:
    """An episode's arrays -> a batch of transitions for the replay buffer; a step a fault ended is stored as
    ``fault_signal`` says (``train.fault_signal``), the same as the episode loop stores it live."""
    out = {}
    for k, v in ep.items():
        if k.startswith("obs/"):
            out[k] = v[:-1]
            out["next_" + k] = v[1:]
    out["action"] = ep["action"]
    n = len(ep["action"])
    reward, terminated = fault_signal.stored(ep["reward"], ep["terminated"], ep.get("fault", [None] * n))
    out["reward"] = reward
    out["terminated"] = terminated.astype(np.float32)
    out["intervened"] = np.asarray(ep.get("intervened", np.zeros(n, bool)), np.float32)
    return out


def recorded_episodes(root: str | os.PathLike, kind: str = "train") -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(index among `episode_files`, arrays) of every recorded ``kind`` episode under ``root`` with at least one
    step; the index is the file's, so that ranks that share the files out by it agree (`rlhw.rl.resume`)."""
    for i, path in enumerate(episode_files(root, kind)):
        ep = load_episode(path)
        if ep and len(ep["action"]):
            yield i, ep


def iter_recorded_transitions(
    root: str | os.PathLike, kind: str = "train", fault_signal: FaultSignal = AS_REPORTED
) -> Iterator[dict[str, np.ndarray]]:
    for _, ep in recorded_episodes(root, kind):
        yield episode_transitions(ep, fault_signal)
