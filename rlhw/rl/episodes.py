"""Episodes on disk: every transition is written as it arrives, so a crash loses nothing already collected.

`Episode` is the one schema of an episode file: the recorder writes it, and demos, resume, `rlhw view`,
`rlhw train-reward` and the LeRobot export and import read it, by field, never by key.

Layout under a run directory: ``episodes/env<rank>/<kind>-<index>.steps`` while an episode runs, replaced by
``<kind>-<index>.npz`` when it ends (``kind``: an `EpisodeKind`; ``demo`` episodes are the demonstrations that
``rlhw record-demos`` writes, and that ``train.demos`` loads).

A ``.steps`` file is a sequence of records, each record being ``np.save``-format arrays written back to back
(no pickle): first a uint8 array holding a UTF-8 JSON header ``{"keys": [...], ...scalars}``, then one array per
key. Record 0 holds the reset observation; record t >= 1 holds action t, reward, flags and the observation that
followed. The file is flushed after every record. A reader stops at the first incomplete record, which is
where a crash cut the file, and keeps everything before it.

A finished ``.npz`` holds `Episode.to_arrays`: ``obs/<name>`` with T+1 entries, ``action``, ``reward``,
``terminated``, ``truncated``, ``success``, ``time``, ``intervened``, ``policy_version``, ``fault`` with T
entries, ``meta`` (JSON bytes), and ``judge_success`` (T) where a simulator's judge gave its verdict on every
step (the ground truth of a rehearsal, apart from ``success``, which is what the cell measured: the
classifier's or the operator's verdict). ``action`` is what the arm executed (the operator's command during an
intervention); ``fault`` is the `FaultKind` value of a safety fault that ended the episode at that step, else
""; ``intervened`` says a person (or a scripted expert) was in control; ``policy_version`` is the version of the
policy weights that chose the action, -1 when no policy did (an operator, an expert, uniform random warm-up
actions). They are the audit trail of a run. Episodes written before these fields load with all False / -1 / ""
(`Episode.from_arrays`).
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from rlhw.errors import FaultKind
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal


class EpisodeKind(str, Enum):
    """What an episode was run for. Its value names the file (``<kind>-NNNNNN.npz``) and is its meta ``kind``."""

    TRAIN = "train"  # collected while training (the policy's steps and an operator's interventions)
    EVAL = "eval"  # run to measure the policy: never trained on
    DEMO = "demo"  # a demonstration (`rlhw record-demos`), for `train.demos`

    def __str__(self) -> str:
        return self.value


#: The episode meta key holding the whole env config section the episode was recorded with
#: (rlhw.rl.demos.recorded_env): `train.demos` checks it, `rlhw export-dataset` carries it on.
PROVENANCE_KEY = "env_config"

_NAME = re.compile(rf"^({'|'.join(k.value for k in EpisodeKind)})-(\d{{6}})\.(steps|npz)$")
FAULT_CHARS = max(len(k.value) for k in FaultKind)  # the ``fault`` field: a fixed-width string, no pickle
OBS_PREFIX = "obs/"

#: Each per-step field of an episode with the dtype it is stored in.
_STEP_FIELDS = {
    "action": np.float32,
    "reward": np.float32,
    "terminated": bool,
    "truncated": bool,
    "success": bool,
    "time": np.float64,
    "intervened": bool,
    "policy_version": np.int64,
    "fault": f"<U{FAULT_CHARS}",
}
#: What an episode written before the audit fields holds instead (nobody intervened, no version, no fault).
_AUDIT_DEFAULTS = {"intervened": False, "policy_version": -1, "fault": ""}


@dataclass(frozen=True, eq=False)
class Episode:
    """One recorded episode of T steps (see the module docstring for each field). ``obs`` maps each observation
    name to its T + 1 values (the reset observation first); every other array has T entries. ``meta`` is what
    the recorder was told (seed, task, ``env_config``...) plus ``kind`` and ``complete`` (False: read from the
    ``.steps`` file of an episode that never ended). Arrays are converted to their stored dtypes on creation,
    and a field of another length is refused naming it."""

    obs: Mapping[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    time: np.ndarray
    intervened: np.ndarray
    policy_version: np.ndarray
    fault: np.ndarray
    judge_success: np.ndarray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        T = len(self.action)
        for name, dtype in _STEP_FIELDS.items():
            value = np.asarray(getattr(self, name), dtype=dtype)
            if value.ndim == 0 or len(value) != T:
                raise ValueError(f"Episode.{name} has shape {value.shape}, action has {T} steps: one entry per step")
            object.__setattr__(self, name, value)
        if self.judge_success is not None:
            judged = np.asarray(self.judge_success, bool)
            if judged.shape != (T,):
                raise ValueError(f"Episode.judge_success has shape {judged.shape}, action has {T} steps")
            object.__setattr__(self, "judge_success", judged)
        obs = {k: np.asarray(v) for k, v in self.obs.items()}
        for name, values in obs.items():
            if values.ndim == 0 or len(values) != T + 1:
                raise ValueError(
                    f"Episode.obs[{name!r}] has shape {values.shape}: an episode of {T} steps has {T + 1} "
                    "observations (the reset observation, then one after each step)"
                )
        object.__setattr__(self, "obs", MappingProxyType(obs))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def length(self) -> int:
        """T, the number of steps."""
        return len(self.action)

    @property
    def kind(self) -> EpisodeKind | None:
        """What the episode was run for (None: its meta does not say, e.g. a dataset recorded elsewhere)."""
        try:
            return EpisodeKind(self.meta.get("kind"))
        except ValueError:
            return None

    @property
    def complete(self) -> bool:
        """The episode ended (a ``.npz``), rather than being read from a crashed writer's ``.steps``."""
        return bool(self.meta.get("complete", True))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The ``.npz`` layout (the module docstring): flat named arrays, no pickle."""
        out = {OBS_PREFIX + k: v for k, v in self.obs.items()}
        out.update({name: getattr(self, name) for name in _STEP_FIELDS})
        if self.judge_success is not None:
            out["judge_success"] = self.judge_success
        out["meta"] = np.frombuffer(json.dumps(dict(self.meta)).encode(), dtype=np.uint8)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], source: str = "episode") -> Episode:
        """An episode from its ``.npz`` arrays, in any layout rlhw has written: those written before the audit
        fields get `_AUDIT_DEFAULTS`, those without ``meta`` an empty one. ValueError naming ``source`` and the
        field when a field every layout has is missing."""
        missing = [k for k in _STEP_FIELDS if k not in arrays and k not in _AUDIT_DEFAULTS]
        if missing:
            raise ValueError(f"{source} is not an rlhw episode: it has no {missing[0]!r} array")
        T = len(arrays["action"])
        fields = {
            name: arrays[name] if name in arrays else np.full(T, _AUDIT_DEFAULTS[name], dtype)
            for name, dtype in _STEP_FIELDS.items()
        }
        meta = _meta_of(arrays)
        return cls(
            obs={k[len(OBS_PREFIX) :]: v for k, v in arrays.items() if k.startswith(OBS_PREFIX)},
            judge_success=arrays.get("judge_success"),
            meta=meta,
            **fields,
        )


def _meta_of(arrays: Mapping[str, np.ndarray]) -> dict:
    """An episode file's ``meta`` (JSON bytes), empty in files written before it existed."""
    return json.loads(bytes(arrays["meta"]).decode()) if "meta" in arrays else {}


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
        self._kind = EpisodeKind.TRAIN
        self._meta: dict = {}
        self._obs: list[dict[str, np.ndarray]] = []
        self._steps: list[dict[str, Any]] = []

    @property
    def in_episode(self) -> bool:
        return self._f is not None

    def begin(
        self, obs: Mapping[str, np.ndarray], kind: EpisodeKind | str = EpisodeKind.TRAIN, meta: dict | None = None
    ) -> None:
        if self._f is not None:
            self.end()
        self._kind, self._meta = EpisodeKind(kind), {**self.base_meta, **(meta or {})}
        self._path = self.dir / f"{self._kind.value}-{self.next_index:06d}.steps"
        self.next_index += 1
        self._f = open(self._path, "wb")
        self._obs = [{k: np.array(v) for k, v in obs.items()}]
        self._steps = []
        _write_record(
            self._f,
            {"reset": True, "time": time.time(), "meta": self._meta},
            {OBS_PREFIX + k: v for k, v in self._obs[0].items()},
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
        operator_verdict: bool | None = None,
    ) -> None:
        """Record one step; ``action`` is what the arm executed (see the module docstring for the flags).
        ``operator_verdict``: the operator's word on a success the classifier called at this step; it becomes
        the episode's ``operator_success`` (meta), which its frames' labels follow (rlhw/vision/labels.py)."""
        if self._f is None:
            raise RuntimeError("EpisodeRecorder.step before begin()")
        if operator_verdict is not None:
            self._meta["operator_success"] = bool(operator_verdict)
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
        _write_record(self._f, rec, {"action": action, **{OBS_PREFIX + k: v for k, v in self._obs[-1].items()}})

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
        episode = _episode_of(self._obs, self._steps, {**self._meta, "kind": self._kind.value, "complete": True})
        with open(tmp, "wb") as g:
            np.savez(g, **episode.to_arrays())
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


def _episode_of(obs: list[dict], steps: list[dict], meta: dict) -> Episode:
    """The `Episode` of a recorder's (or a ``.steps`` file's) observations and step records."""
    judged = all("judge_success" in s for s in steps)  # a simulator judged every step (rlhw/robot/rehearsal.py)
    return Episode(
        obs={k: np.stack([o[k] for o in obs]) for k in obs[0]},
        action=np.stack([s["action"] for s in steps]),
        **{k: [s.get(k, _AUDIT_DEFAULTS.get(k)) for s in steps] for k in _STEP_FIELDS if k != "action"},
        judge_success=[s["judge_success"] for s in steps] if judged else None,
        meta=meta,
    )


def load_episode(path: str | os.PathLike) -> Episode | None:
    """A finished (.npz) or interrupted (.steps) episode; ``complete`` tells which. None for a ``.steps`` file
    cut before its first step. ValueError naming the file when it is not an rlhw episode."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return Episode.from_arrays({k: z[k] for k in z.files}, str(path))
    records = _read_records(path)
    if len(records) < 2 or not records[0][0].get("reset"):
        return None
    obs = [{k[len(OBS_PREFIX) :]: v for k, v in records[0][1].items()}]
    steps = []
    for header, arrays in records[1:]:
        obs.append({k[len(OBS_PREFIX) :]: v for k, v in arrays.items() if k.startswith(OBS_PREFIX)})
        steps.append({**header, "action": arrays["action"]})
    m = _NAME.match(path.name)
    kind = m.group(1) if m else EpisodeKind.TRAIN.value
    return _episode_of(obs, steps, {**records[0][0].get("meta", {}), "kind": kind, "complete": False})


def finished_episode_meta(path: str | os.PathLike) -> dict:
    """The ``meta`` of a finished (.npz) episode, read without its observations (an npz member is read alone):
    what a run's retraining asks of every train episode (`rlhw.rl.classifier_refresh.rejected_files`)."""
    with np.load(Path(path), allow_pickle=False) as z:
        return _meta_of({"meta": z["meta"]} if "meta" in z.files else {})


def episode_files(root: str | os.PathLike, kind: EpisodeKind | str | tuple = EpisodeKind.TRAIN) -> list[Path]:
    """All episode files of ``kind`` (one or several) under ``root`` (recursively), finished and interrupted,
    in path order."""
    root = Path(root)
    if not root.exists():
        return []
    kinds = {EpisodeKind(k).value for k in ((kind,) if isinstance(kind, str) else kind)}
    files = sorted(p for p in root.rglob("*-*") if (m := _NAME.match(p.name)) and m.group(1) in kinds)
    # A crash between writing the .npz and removing the .steps leaves both: the .npz wins.
    return [p for p in files if not (p.suffix == ".steps" and p.with_suffix(".npz").exists())]


def episode_transitions(ep: Episode, fault_signal: FaultSignal = AS_REPORTED) -> dict[str, np.ndarray]:
    """An episode -> a batch of transitions for the replay buffer; a step a fault ended is stored as
    ``fault_signal`` says (``train.fault_signal``), the same as the episode loop stores it live."""
    out = {}
    for k, v in ep.obs.items():
        out[OBS_PREFIX + k] = v[:-1]
        out["next_" + OBS_PREFIX + k] = v[1:]
    out["action"] = ep.action
    reward, terminated = fault_signal.stored(ep.reward, ep.terminated, ep.fault)
    out["reward"] = reward
    out["terminated"] = terminated.astype(np.float32)
    out["intervened"] = ep.intervened.astype(np.float32)
    return out


def recorded_episodes(
    root: str | os.PathLike, kind: EpisodeKind | str = EpisodeKind.TRAIN
) -> Iterator[tuple[int, Episode]]:
    """(index among `episode_files`, episode) of every recorded ``kind`` episode under ``root`` with at least one
    step; the index is the file's, so that ranks that share the files out by it agree (`rlhw.rl.resume`)."""
    for i, path in enumerate(episode_files(root, kind)):
        ep = load_episode(path)
        if ep is not None and ep.length:
            yield i, ep


def iter_recorded_transitions(
    root: str | os.PathLike, kind: EpisodeKind | str = EpisodeKind.TRAIN, fault_signal: FaultSignal = AS_REPORTED
) -> Iterator[dict[str, np.ndarray]]:
    for _, ep in recorded_episodes(root, kind):
        yield episode_transitions(ep, fault_signal)
