"""Run a trained policy: `evaluate` steps a checkpoint's deterministic action on the env a config names.

It is training's robot path with the learner taken out, so what holds in training holds here:

- the env is opened the way an env worker opens it (`rlhw.rl.env_transport`): a simulator the placement gives
  no arm in this process, an arm the placement gives (real, or simulated with ``--sim``) behind its
  `rlhw serve-env` child and a `RemoteEnv` session (the server's one-controller lease, its watchdog, and the
  safety layer inside `RobotEnv`), so nothing moves an arm that training would not move;
- the episodes run through the one episode loop (`rlhw.rl.episode_loop`) and are recorded by the same
  `EpisodeRecorder`, as ``eval-*`` episodes under ``<run_dir>/episodes/env<rank>``;
- an operator device (``env.teleop``) may take over as in training; such an episode counts as a failure:
  the success rate is the policy's alone;
- the loop is timed by training's `LoopTimer` (obs->action latency, lateness), under node 0's loop isolation,
  and a served arm's client (its grpc threads) is made under it too, as an env worker makes it.

Seeds: episode k resets with seed ``EVAL_SEED_BASE + k`` (2**32 + k). Training episodes draw their seeds from
[0, 2**31) (`rlhw.rl.seeds.episode_seed`) and the HIL benchmark's eval uses 2**31 + k, so no eval episode here repeats a training target.
The same k gives the same target on every driver, so two drivers are compared episode by episode.

Ctrl-C (and SIGTERM, which `rlhw eval` turns into the same interrupt: rlhw.runtime.stop_signals) ends the
running episode where it is: the arm is stopped (the env is closed, the server child stopped), the episode's
steps stay on disk, and the report says how many episodes finished.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rlhw.config.root import Config
from rlhw.rl.checkpoint import PolicyCheckpoint
from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
from rlhw.rl.episode_loop import BatchView, EpisodeLoop, LoopHooks, RefusedSteps
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.instances import EVAL
from rlhw.rl.loop_health import LoopTimer
from rlhw.rl.rundir import RunStatus
from rlhw.robot.spec import EnvSpec
from rlhw.runtime.stop_signals import cause_text, interrupt_cause

log = logging.getLogger(__name__)

EVAL_SEED_BASE = 2**32
CLOSE_TIMEOUT_S = 10.0  # bound on closing the env client after an evaluation or an interrupt
MAX_REFUSALS_IN_A_ROW = 3  # as the env worker: a fourth refused step in a row ends the evaluation


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95 % by default): honest at 0 and n successes and for
    the small n of robot evaluations, where the normal approximation gives bounds outside [0, 1]. At 0 and n
    the bound on that side is exactly 0 or 1 (the formula's, without float rounding: 10 of 10 gave
    0.9999999999999999), and either bound is clamped to the estimate, so the interval always contains it."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes <= 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes >= n else max(p, min(1.0, centre + half))
    return (low, high)


@dataclass(frozen=True)
class EvalEpisode:
    """One evaluated episode. ``success`` is the policy's: False where an operator took over (``intervened``),
    whatever the env said (``env_success``). ``fault``: the first fault or refused step, else None."""

    index: int
    seed: int
    success: bool
    steps: int
    ret: float
    fault: str | None
    intervened: bool
    env_success: bool

    def to_json(self) -> dict:
        out = asdict(self)
        out["return"] = out.pop("ret")
        return out


@dataclass
class EvalReport:
    """What an evaluation found. ``status``: finished, interrupted (Ctrl-C / SIGTERM) or failed."""

    episodes: list[EvalEpisode] = field(default_factory=list)
    loop_health: dict = field(default_factory=dict)
    status: RunStatus = RunStatus.FINISHED
    reason: str = ""
    signal: int | None = None  # what interrupted it: SIGINT (Ctrl-C) or SIGTERM

    @property
    def successes(self) -> int:
        return sum(e.success for e in self.episodes)

    @property
    def success_rate(self) -> float:
        return self.successes / len(self.episodes) if self.episodes else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.successes, len(self.episodes))

    def to_json(self, **extra) -> dict:
        rate = self.success_rate
        return {
            "status": self.status.value,
            "reason": self.reason,
            "signal": self.signal,
            "success_rate": None if math.isnan(rate) else rate,
            "ci95": list(self.ci95),
            "successes": self.successes,
            "num_episodes": len(self.episodes),
            "seed_base": EVAL_SEED_BASE,
            **extra,
            "episodes": [e.to_json() for e in self.episodes],
            "loop_health": self.loop_health,
        }


class OpenEnv:
    """The env of arm ``robot_rank`` opened as an env worker opens it (`rlhw.rl.env_transport`), for one
    instance; ``close`` stops the arm (a `RobotEnv` stops it, a server child stops it on SIGTERM)."""

    def __init__(self, config: Config, robot_rank: int, log_dir: Path):
        from rlhw.rl.env_transport import EnvTransport

        log = log_dir / f"env{robot_rank}-server.log"
        # a served arm's client is made under the loop's isolation, as an env worker makes it: grpc's threads carry
        # every step, and made here at the CLI's priority they would wait behind what the loop outranks
        isolation = config.cluster.node_env(0).isolation
        self.transport = EnvTransport(config, robot_rank, log, f"rlhw-eval-env{robot_rank}", isolation, single=True)
        self.view: BatchView = self.transport.open()
        self.env, self.server, self.spec = self.transport.env, self.transport.server, self.view.spec

    def close(self) -> None:
        """Close the env (a `RobotEnv` stops the arm; a `RemoteEnv` ends its session, and the server stops the
        arm), bounded: an interrupt that landed inside the client may leave it unable to finish, so the server
        child is stopped after ``CLOSE_TIMEOUT_S`` whatever the client does (SIGTERM: it stops the arm first)."""
        closer = threading.Thread(target=self.env.close, daemon=True, name="eval-env-close")
        closer.start()
        closer.join(CLOSE_TIMEOUT_S)
        if closer.is_alive():
            log.warning("the env did not close within %.0f s; stopping its server", CLOSE_TIMEOUT_S)
        if self.server is not None:
            self.server.stop()


def deterministic_policy(checkpoint: PolicyCheckpoint, spec: EnvSpec, sac_fallback, device):
    """An `ActingPolicy` (the rollout workers' and env workers' acting network) holding the checkpoint's weights,
    acting on its mean: the same forward pass as training's eval episodes."""
    from rlhw.rl.acting import ActingPolicy
    from rlhw.rl.policy import PolicyWeights

    policy = ActingPolicy(spec, checkpoint.sac(sac_fallback), device, seed=0)
    policy.random_actions = False
    policy.load(PolicyWeights(version=checkpoint.updates, state=checkpoint.policy_state()))
    return policy


class Evaluation:
    """Episodes of one policy on one open env, through the episode loop; `run` fills an `EvalReport`."""

    def __init__(
        self,
        env: OpenEnv,
        policy,
        recorder: EpisodeRecorder | None,
        max_episode_steps: int,
        meta: dict,
        on_episode: Callable[[EvalEpisode], None] | None = None,
        gc_guard=None,
    ):
        self.env, self.policy, self.on_episode, self.gc_guard = env, policy, on_episode, gc_guard
        self.loop = EpisodeLoop(
            env.view,
            max_episode_steps,
            [recorder] if recorder is not None else None,
            meta=meta,
        )
        self.timer = LoopTimer()
        self.report = EvalReport()
        self._faults: list[str] = []
        # a refused step ends the episode there (truncated), as in the env worker; a dead server raises
        transport = env.transport
        self.refused = RefusedSteps(self.loop.view.step, lambda: transport.dead, self._faults.append)
        self._first = True

    def run(self, episodes: int, first_index: int = 0) -> EvalReport:
        """Evaluate ``episodes`` episodes (indices from ``first_index``); a KeyboardInterrupt ends it early,
        with the report saying so (the caller closes the env, which stops the arm)."""
        try:
            for k in range(first_index, first_index + episodes):
                if self.gc_guard is not None:
                    self.gc_guard.idle()  # the full collection the loop owes, between episodes, never in a step
                self._episode(k)
        except KeyboardInterrupt as e:
            cause = interrupt_cause(e)
            self.report.status, self.report.signal = RunStatus.INTERRUPTED, int(cause)
            self.report.reason = (
                f"{cause_text(cause)} after {len(self.report.episodes)} of {episodes} episodes; the "
                "arm was stopped and the running episode's steps kept on disk"
            )
        except BaseException as e:
            self.report.status, self.report.reason = RunStatus.FAILED, f"{type(e).__name__}: {e}"
            raise
        finally:
            self.report.loop_health = self.timer.summary(1)
        return self.report

    def _episode(self, k: int) -> None:
        seed = EVAL_SEED_BASE + k
        results: list = []
        self._faults, self._first = [], True
        self.loop.run(
            LoopHooks(
                act=self._act,
                choose=lambda book: EVAL,
                report=lambda _kind, r: results.append(r),
                step=self.refused,
                note=self._faults.append,
                stepped=lambda step: self.timer.stepped(step.timing),
            ),
            seed=seed,
        )
        ret, env_success, length, interventions = results[0]
        episode = EvalEpisode(
            k,
            seed,
            bool(env_success) and not interventions,
            int(length),
            float(ret),
            self._faults[0] if self._faults else None,
            interventions > 0,
            bool(env_success),
        )
        self.report.episodes.append(episode)
        if self.on_episode is not None:
            self.on_episode(episode)
        if self.refused.in_a_row > MAX_REFUSALS_IN_A_ROW:
            raise self.refused.last

    def _act(self, obs: dict, rows: list[int], evaluating: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._first:
            self.timer.episode_started()
            self._first = False
        answer = self.policy.act(obs, np.ones(len(rows), bool))
        self.timer.actions_received()
        return answer.actions, answer.versions


def evaluate(
    config: Config,
    checkpoint: PolicyCheckpoint,
    episodes: int,
    run_dir,
    robot_rank: int = 0,
    on_episode: Callable[[EvalEpisode], None] | None = None,
    first_index: int = 0,
) -> EvalReport:
    """Evaluate ``checkpoint`` for ``episodes`` episodes on arm ``robot_rank`` of ``config``; episodes and the
    config snapshot go to ``run_dir`` (a `RunDir`). The checkpoint is refused, before any step, when its spec
    does not match the env's. The env is closed (the arm stopped) whatever happens. Episode indices (and so
    seeds) start at ``first_index``: `rlhw.rl.eval_cells` gives each cell its own block of them."""
    import torch

    from rlhw.rl.sac import resolve_device
    from rlhw.robot.factory import declares_real_arm
    from rlhw.runtime.isolation import GcGuard, apply_loop_isolation

    torch.set_num_threads(1)  # one small forward pass per step; see rlhw.cli.trainer
    run_dir.write_config(config)
    env = OpenEnv(config, robot_rank, run_dir.path / "logs")
    recorder = None
    guard = GcGuard()
    try:
        checkpoint.check_spec(env.spec, "--checkpoint")
        if (note := checkpoint.rate_note(env.spec)) is not None:
            log.warning("%s", note)
        policy = deterministic_policy(checkpoint, env.spec, config.train.sac, resolve_device(config.train.device))
        if config.train.record_episodes:
            fsync = config.train.fsync_episodes
            fsync = (config.env.sim is None and declares_real_arm(config)) if fsync == "auto" else bool(fsync)
            recorder = EpisodeRecorder(
                run_dir.episodes / f"env{robot_rank}", fsync=fsync, meta={PROVENANCE_KEY: recorded_env(config.env)}
            )
        meta = {"robot_rank": robot_rank, "checkpoint": str(checkpoint.path), "policy_version": checkpoint.updates}
        evaluation = Evaluation(env, policy, recorder, config.env.max_episode_steps, meta, on_episode, guard)
        with _scheduling_restored():  # the loop is the calling thread: a caller that goes on gets it back as it was
            isolation = apply_loop_isolation(config.cluster.node_env(0).isolation)
            guard.start()
            report = evaluation.run(episodes, first_index)
        report.loop_health["loop_isolation"] = isolation
        return report
    finally:
        guard.stop()
        if recorder is not None:
            recorder.close()  # an interrupted episode's steps stay on disk (.steps, read as incomplete)
        env.close()


@contextmanager
def _scheduling_restored():
    """The calling thread's CPU affinity, scheduling policy and niceness put back afterwards: `evaluate` applies
    node 0's loop isolation (SCHED_FIFO on a real-arm config) to the thread that calls it, which in a test or a
    benchmark goes on after the evaluation, and whatever it starts would inherit the real-time priority."""
    affinity, policy = os.sched_getaffinity(0), os.sched_getscheduler(0)
    param, nice = os.sched_getparam(0), os.getpriority(os.PRIO_PROCESS, 0)
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(0, policy, param)
            os.setpriority(os.PRIO_PROCESS, 0, nice)
            os.sched_setaffinity(0, affinity)
        except PermissionError:  # lowering one's own priority is always allowed; raising it back may not be
            log.warning("could not restore the calling thread's scheduling after the evaluation")
