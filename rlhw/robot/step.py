"""`Step` and `Reset`: what one env call says about its n instances, one frozen type from the arm to the learner;
`EnvContract`: the env that says them.

The env contract's layer (next to rlhw.robot.spec): the robot layer builds these, the env server (rlhw.env.host,
rlhw.env.service) writes them to the wire, the client (rlhw.env.remote_env) reads them back, and the RL loop
(rlhw.rl.episode_loop) consumes them, none importing another's module. Why a type and not Gymnasium's
``(obs, reward, terminated, truncated, info)``: the info bag came in three shapes (a dict for one env, lists
holding None for a batch, masks from the wire), and every reader re-normalised them; a new fact of a step
(a judge's verdict, the action really executed) had to be taught to each. Here every field has one shape:

- per instance, with a leading axis n (``num_envs``; 1 for a single env): ``obs``, ``reward``,
  ``terminated``, ``truncated``, ``success``, ``executed``, ``intervened``, ``stamps`` (capture times,
  float64), ``fault`` and ``fault_message`` (tuples), ``final_obs`` with ``final_mask``, ``judge_success``, and
  ``notes`` (a `StepNotes` each: what else the env says of the step; a step read off the wire has only the
  operator's verdict, where one was asked, else none);
- for the whole call: ``timing`` (phase -> seconds; a batch reports each phase's slowest instance).

A `Reset` has the same shapes (``obs``, ``stamps``, ``success``, ``timing``, and ``notes``: a `ResetNotes`
each). Gymnasium's tuples are built from them only at the public Gymnasium edge (`Step.gym`, `Reset.gym`:
rlhw.robot.gym's `GymRobotEnv`, `RemoteEnv.step` and ``reset``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from rlhw.errors import FaultKind

if TYPE_CHECKING:  # an annotation only: importing the operator's module would add to every step reader's start
    from rlhw.robot.spec import EnvSpec
    from rlhw.robot.teleop import TeleopEvent


@dataclass(frozen=True, slots=True)
class ClassifierScore:
    """What the success classifier made of one step's frames: its probability of success and the threshold that
    turned it into the step's ``success`` (rlhw/vision/classifier.py). A step carries it only where a classifier
    judged, so a reader tells a classifier's success from the task's by its presence."""

    probability: float
    threshold: float


class NotesSource(Enum):
    """Who wrote a step's `StepNotes`, and so which of its fields are facts.

    ``ENV``: the env itself (`RobotEnv`): every field is its word. ``WIRE``: a client that read the step off the
    wire (rlhw/env/step_messages.py), which carries only ``operator_verdict``; the other fields hold their defaults
    and are not facts, so Gymnasium's ``info`` leaves them out rather than report a clip or a step count the server
    never sent."""

    ENV = "env"
    WIRE = "wire"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepNotes:
    """What else an env says of one instance's step, apart from what the learner reads (`RobotEnv` writes it; the
    wire carries only ``operator_verdict``, so a step read off the wire has notes holding that alone where an
    operator was asked, else none: ``Step.notes == ()``).

    Typed fields where a bag read by key used to be: a reader that asks for a fact the env does not report fails
    at once, and a new fact is a field here, with its meaning written once. The defaults are a step of nothing
    remarkable (not clipped, no operator, no classifier, no lock). Frozen, like the `Step` that holds it.

    - ``clipped``: the safety layer bounded the commanded target or gripper width (rlhw/robot/safety.py);
    - ``episode_step``: steps taken in the episode, this one included;
    - ``frame_index``: camera name -> index of the camera frame that the step's image of it is;
    - ``teleop_events``: the operator's button presses read this step (rlhw/robot/takeover.py);
    - ``operator_label``: ``"success"`` / ``"failure"`` where the operator marked the episode, else None;
    - ``reward_classifier``: the classifier's `ClassifierScore` where one judged the step, else None;
    - ``operator_verdict``: the operator's word on a success the classifier called (`TeleopDevice.verdict`):
      False is a rejection, the classifier's retraining data (rlhw/rl/classifier_refresh.py); None where nobody
      was asked or no answer came;
    - ``fault_cause``: where the env locked (``fault`` is ``FaultKind.LOCKED``), the fault kind that led to it;
    - ``source``: who wrote the notes (`NotesSource`): the env, or a wire client holding the verdict alone.
    """

    clipped: bool = False
    episode_step: int = 0
    frame_index: Mapping[str, int] = field(default_factory=dict)
    teleop_events: tuple[TeleopEvent, ...] = ()
    operator_label: str | None = None
    reward_classifier: ClassifierScore | None = None
    operator_verdict: bool | None = None
    fault_cause: FaultKind | None = None
    source: NotesSource = NotesSource.ENV

    def info(self) -> dict[str, Any]:
        """The notes as Gymnasium's ``info`` entries (`Step.gym`, the Gymnasium edge only): the optional ones only
        where set, the classifier's score as ``{"p", "threshold"}`` and the events as their names. Notes read off
        the wire give their verdict alone: the rest are defaults, not the server's word."""
        if self.source is NotesSource.WIRE:
            return {} if self.operator_verdict is None else {"operator_verdict": self.operator_verdict}
        info: dict[str, Any] = {
            "clipped": self.clipped,
            "episode_step": self.episode_step,
            "frame_index": dict(self.frame_index),
            "teleop_events": [e.value for e in self.teleop_events],
            "operator_label": self.operator_label,
        }
        if self.reward_classifier is not None:
            score = self.reward_classifier
            info["reward_classifier"] = {"p": score.probability, "threshold": score.threshold}
        if self.operator_verdict is not None:
            info["operator_verdict"] = self.operator_verdict
        if self.fault_cause is not None:
            info["fault_cause"] = self.fault_cause
        return info


@dataclass(frozen=True, eq=False, init=False)
class Step:
    """One env step of n instances (see the module docstring for the shapes).

    ``obs`` is what the next action is chosen from: with same-step autoreset (a batch) an ended instance's
    row is its next episode's first observation, and its episode's last one is ``final_obs``'s row where
    ``final_mask`` is set (both None when no instance was reset). ``executed`` is what the arm really did:
    an operator's command where ``intervened``, else the action (zeros where a fault came before anything
    was sent). ``fault[i]`` is the `FaultKind` that ended instance i's episode (None: none), with its
    ``fault_message[i]``. ``judge_success`` is a simulator judge's ground truth (rlhw/robot/rehearsal.py),
    None where there is none. ``notes`` holds one `StepNotes` per instance, what else the env said of the step
    (``clipped``, ``episode_step``, the classifier's score, the operator's verdict, ...), or none at all
    (``()``: a step read off the wire where no operator was asked; the wire carries the verdict alone).
    """

    obs: Mapping[str, np.ndarray]
    reward: np.ndarray  # float64 (n,)
    terminated: np.ndarray  # bool (n,)
    truncated: np.ndarray  # bool (n,)
    success: np.ndarray  # bool (n,)
    executed: np.ndarray  # float32 (n, *action shape)
    intervened: np.ndarray  # bool (n,)
    fault: tuple[FaultKind | None, ...]
    fault_message: tuple[str, ...]
    stamps: Mapping[str, np.ndarray]  # name -> float64 (n,)
    timing: dict[str, float]
    final_obs: Mapping[str, np.ndarray] | None = None
    final_mask: np.ndarray | None = None  # bool (n,), set with final_obs
    judge_success: np.ndarray | None = None  # bool (n,)
    notes: tuple[StepNotes, ...] = ()

    def __init__(
        self,
        obs,
        reward,
        terminated,
        truncated,
        success,
        executed,
        intervened,
        fault,
        fault_message,
        stamps,
        timing,
        final_obs=None,
        final_mask=None,
        judge_success=None,
        notes=(),
    ):
        # Frozen, written once: one dict update instead of the generated __init__'s object.__setattr__ per
        # field, which made building a step cost about as much as the env server's whole per-step overhead.
        self.__dict__.update(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            success=success,
            executed=executed,
            intervened=intervened,
            fault=fault,
            fault_message=fault_message,
            stamps=stamps,
            timing=timing,
            final_obs=final_obs,
            final_mask=final_mask,
            judge_success=judge_success,
            notes=notes,
        )

    @classmethod
    def one(
        cls,
        obs: Mapping[str, np.ndarray],
        reward: float,
        terminated: bool,
        truncated: bool,
        *,
        success: bool,
        executed: np.ndarray,
        intervened: bool,
        stamps: Mapping[str, float],
        timing: dict[str, float],
        fault: FaultKind | None = None,
        fault_message: str = "",
        judge_success: bool | None = None,
        notes: StepNotes | None = None,
    ) -> Step:
        """One instance's step, from its unbatched values (the leading instance axis is added here)."""
        return cls(
            {k: v[None] for k, v in obs.items()},
            np.array([reward], np.float64),
            np.array([terminated]),
            np.array([truncated]),
            np.array([success]),
            np.asarray(executed, np.float32)[None],
            np.array([intervened]),
            (fault,),
            (fault_message if fault else "",),
            {k: np.array([t], np.float64) for k, t in stamps.items()},
            timing,
            None,
            None,
            None if judge_success is None else np.array([judge_success]),
            () if notes is None else (notes,),
        )

    @property
    def num_envs(self) -> int:
        return len(self.reward)

    @property
    def ended(self) -> np.ndarray:
        return np.logical_or(self.terminated, self.truncated)

    @property
    def outcome(self) -> np.ndarray:
        """Success as an episode's result counts it: the judge's verdict where a simulator has one (a rehearsal's
        measured success may be a classifier's opinion), else the env's success."""
        return self.success if self.judge_success is None else self.judge_success

    @property
    def last(self) -> Mapping[str, np.ndarray]:
        """Each instance's observation after its action: ``obs``, except where the env autoreset an instance whose
        episode ended (its last observation is then ``final_obs``'s row)."""
        if self.final_obs is None:
            return self.obs
        mask = self.final_mask & self.ended
        if not mask.any():
            return self.obs
        last = {k: np.array(v) for k, v in self.obs.items()}
        for k in last:
            last[k][mask] = np.asarray(self.final_obs[k])[mask]
        return last

    def fault_text(self, i: int) -> str | None:
        """``"kind: message"`` of the fault that ended instance i's episode, else None."""
        kind = self.fault[i]
        return f"{kind}: {self.fault_message[i]}" if kind else None

    def gym(self) -> tuple:
        """Gymnasium's ``(obs, reward, terminated, truncated, info)``: scalars and unbatched observations for one
        instance, arrays for a batch (final observations as ``info["final_observation"]`` with the mask
        ``info["_final_observation"]``, as gymnasium's vector envs give them). Only the Gymnasium edge calls this."""
        if self.num_envs == 1:
            info = {
                "timestamps": {k: float(v[0]) for k, v in self.stamps.items()},
                "timing": self.timing,
                "success": bool(self.success[0]),
                "fault": self.fault[0],
                "fault_message": self.fault_message[0] if self.fault[0] else None,
                "executed_action": self.executed[0],
                "intervened": bool(self.intervened[0]),
            }
            if self.judge_success is not None:
                info["judge_success"] = bool(self.judge_success[0])
            if self.notes:
                info.update(self.notes[0].info())
            return (
                {k: v[0] for k, v in self.obs.items()},
                float(self.reward[0]),
                bool(self.terminated[0]),
                bool(self.truncated[0]),
                info,
            )
        info = {
            "timestamps": dict(self.stamps),
            "timing": self.timing,
            "success": self.success,
            "fault": list(self.fault),
            "fault_message": list(self.fault_message),
            "executed_action": self.executed,
            "intervened": self.intervened,
        }
        if self.judge_success is not None:
            info["judge_success"] = self.judge_success
        if self.final_obs is not None:
            info["final_observation"], info["_final_observation"] = self.final_obs, self.final_mask
        return (self.obs, self.reward.astype(np.float32), self.terminated, self.truncated, info)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetNotes:
    """What else an env says of one instance's reset, as `StepNotes` of a step (`RobotEnv` writes it; the wire
    carries none of it, so a reset read off the wire has none: ``Reset.notes == ()``).

    - ``frame_index``: camera name -> index of the camera frame that the first observation's image of it is;
    - ``faults``: the robot faults met on the way to the episode's start, each handled before the reset went on
      (``"kind: message"``, as `Step.fault_text`); empty for a clean reset.
    """

    frame_index: Mapping[str, int] = field(default_factory=dict)
    faults: tuple[str, ...] = ()

    def info(self) -> dict[str, Any]:
        """The notes as Gymnasium's reset ``info`` entries (`Reset.gym`, the Gymnasium edge only)."""
        return {"frame_index": dict(self.frame_index), "reset_faults": list(self.faults)}


@dataclass(frozen=True, slots=True, eq=False)
class Reset:
    """A reset of n instances: the first observations (leading axis n, as a `Step`'s), their capture times
    (name -> float64 (n,)), the success flags and the call's phase timings; ``notes``: one `ResetNotes` per
    instance, what else the env said of the reset, or none at all (``()``: a reset read off the wire)."""

    obs: Mapping[str, np.ndarray]
    stamps: Mapping[str, np.ndarray]
    success: np.ndarray  # bool (n,)
    timing: dict[str, float]
    notes: tuple[ResetNotes, ...] = ()

    @classmethod
    def one(
        cls,
        obs: Mapping[str, np.ndarray],
        stamps: Mapping[str, float],
        success: bool,
        timing: dict[str, float],
        notes: ResetNotes | None = None,
    ) -> Reset:
        """One instance's reset, from its unbatched values (the leading instance axis is added here)."""
        return cls(
            {k: np.asarray(v)[None] for k, v in obs.items()},
            {k: np.array([t], np.float64) for k, t in stamps.items()},
            np.array([bool(success)]),
            timing,
            () if notes is None else (notes,),
        )

    @property
    def num_envs(self) -> int:
        return len(self.success)

    def gym(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Gymnasium's ``(obs, info)``: an unbatched observation and scalars for one instance (with its notes' info
        entries), arrays for a batch. Only the Gymnasium edge calls this (as `Step.gym`)."""
        if self.num_envs == 1:
            info = {
                "timestamps": {k: float(v[0]) for k, v in self.stamps.items()},
                "timing": self.timing,
                "success": bool(self.success[0]),
            }
            if self.notes:
                info.update(self.notes[0].info())
            return {k: v[0] for k, v in self.obs.items()}, info
        return dict(self.obs), {"timestamps": dict(self.stamps), "timing": self.timing, "success": self.success}


@runtime_checkable
class EnvContract(Protocol):
    """The env contract: what the env server hosts (rlhw.env.host) and the episode loop steps (rlhw.rl.episode_loop).

    `RobotEnv` (one instance), `BatchedEnv` (n, same-step autoreset), `FakeEnv` and `RemoteEnv.typed` (a
    RemoteEnv is a gymnasium.Env, whose own ``spec`` and ``reset`` are Gymnasium's) satisfy it. ``spec.num_envs``
    instances; ``reset`` and ``step`` say every fact with a leading instance axis n; ``step`` takes an action of
    the spec's shape for one instance, with a leading axis n for a batch. ``stop`` halts the arm now and ends the
    episode; ``status`` is a JSON-able dict that never moves anything; ``close`` stops and releases the hardware.
    """

    spec: EnvSpec

    def reset(self, seed: int | None = None) -> Reset: ...

    def step(self, action: np.ndarray) -> Step: ...

    def stop(self) -> None: ...

    def status(self) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


def _constant(value: bool) -> np.ndarray:
    flag = np.array([value])
    flag.flags.writeable = False
    return flag


#: One instance's flag as a read-only array: shared by the steps that hot paths build (a Step is never written).
FLAG = {False: _constant(False), True: _constant(True)}


def stack(
    steps: list[Step], obs: list[Mapping[str, np.ndarray]], finals: Mapping[int, Mapping[str, np.ndarray]]
) -> Step:
    """The `Step` of a batch from its instances' steps (rlhw.robot.batch.BatchedEnv). ``obs[i]`` is instance i's
    observation now (its next episode's first where the batch reset it, leading axis 1), and ``finals[i]`` the
    last observation of instance i's ended episode; timing is each phase's slowest instance. A batch reports no
    judge's verdict (``judge_success`` None), as before `Step`: a batch's episodes count the env's success."""

    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(s, field) for s in steps])

    batch = {k: np.concatenate([o[k] for o in obs]) for k in obs[0]}
    final_obs = final_mask = None
    if finals:
        final_mask = np.array([i in finals for i in range(len(steps))])
        final_obs = {k: np.zeros_like(v) for k, v in batch.items()}
        for i, last in finals.items():
            for k in final_obs:
                final_obs[k][i] = last[k][0]
    return Step(
        batch,
        cat("reward"),
        cat("terminated"),
        cat("truncated"),
        cat("success"),
        cat("executed"),
        cat("intervened"),
        sum((s.fault for s in steps), ()),
        sum((s.fault_message for s in steps), ()),
        _stamps(steps),
        _slowest(steps),
        final_obs,
        final_mask,
        None,
        sum((s.notes for s in steps), ()) if all(s.notes for s in steps) else (),
    )


def stack_resets(resets: list[Reset]) -> Reset:
    """The `Reset` of a batch from its instances' resets (rlhw.robot.batch.BatchedEnv), as `stack` a step."""
    return Reset(
        {k: np.concatenate([r.obs[k] for r in resets]) for k in resets[0].obs},
        _stamps(resets),
        np.concatenate([r.success for r in resets]),
        _slowest(resets),
        sum((r.notes for r in resets), ()) if all(r.notes for r in resets) else (),
    )


def _stamps(calls: list[Step] | list[Reset]) -> dict[str, np.ndarray]:
    """The instances' capture times, name -> float64 (n,) (NaN where an instance lacks the first one's name)."""
    return {k: np.concatenate([c.stamps.get(k, [np.nan]) for c in calls]) for k in calls[0].stamps}


def _slowest(calls: list[Step] | list[Reset]) -> dict[str, float]:
    """A batch's phase timings: each phase's slowest instance."""
    timing: dict[str, float] = {}
    for c in calls:
        for k, v in c.timing.items():
            timing[k] = max(timing.get(k, 0.0), v)
    return timing
