"""The in-process runner (`train.runner=local`): env, policy and learner in one process, one loop.

It is the baseline the pipeline benchmark compares against and a quick way to debug a task; the real-robot
path is the pipeline (rlhw.rl.pipeline). Both share SAC, the replay buffer, episode recording and the session.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlhw.config.isolation import LoopIsolation
from rlhw.config.root import Config
from rlhw.rl.checkpoint import checked_init_from, checkpoint_state, policy_contract, warm_start
from rlhw.rl.demos import PROVENANCE_KEY, env_provenance, load_demos, recorded_env
from rlhw.rl.episode_loop import Act, BatchView, EpisodeLoop, EpisodeResult, LoopHooks
from rlhw.rl.episodes import EpisodeKind, EpisodeRecorder
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal
from rlhw.rl.policy import choose_actions
from rlhw.rl.replay import MixedReplay, TransitionBatch
from rlhw.rl.resume import resume_run
from rlhw.rl.rundir import RunDir, RunStatus
from rlhw.rl.sac import SAC, resolve_device
from rlhw.rl.seeds import episode_seed, seed_process
from rlhw.rl.session import Counters, StopReason, TrainingSession, interrupted
from rlhw.rl.spaces import AgentSpace
from rlhw.rl.utd_gate import updates_owed
from rlhw.rl.verdicts import VerdictTally
from rlhw.robot.step import Step
from rlhw.runtime.isolation import GcGuard, apply_learner_threads, apply_loop_isolation
from rlhw.runtime.stop_signals import interrupt_cause


def make_agent(config: Config, spec, device) -> SAC:
    space = AgentSpace.from_spec(spec)
    return SAC(space.layout, space.low, space.high, config.train.sac, device=device)


def agent_policy(agent: SAC, rng: np.random.Generator, random_actions: bool = False) -> Act:
    """The episode loop's policy in this process: the one acting rule (`rlhw.rl.policy.choose_actions`) on the
    agent's own network, whose version is the number of updates behind its weights; ``random_actions``: the
    warm-up's uniform random actions (version -1)."""

    def act(obs: dict, rows: list[int], evaluating: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return choose_actions(
            lambda: agent.sample_and_mean(obs),
            evaluating,
            agent.updates,
            random_actions,
            rng,
            agent.act_low,
            agent.act_high,
        )

    return act


def run_episode(
    env,
    agent: SAC,
    rng: np.random.Generator,
    recorder: EpisodeRecorder | None,
    kind: EpisodeKind,
    random_actions: bool = False,
    on_step: Callable[[TransitionBatch], None] | None = None,
    fault_signal: FaultSignal = AS_REPORTED,
    on_info: Callable[[Step], None] | None = None,
) -> EpisodeResult:
    """One ``kind`` episode (train or eval: the policy's mean action) of ``env`` (one instance with the RobotEnv
    contract) through the episode loop; returns (return, success, length, intervened steps). Each step is
    recorded, and in a train episode handed to ``on_step`` as a transition, with the action the arm executed
    and its ``intervened`` flag, a fault step stored as ``fault_signal`` says; ``on_info`` gets each `Step`."""
    loop = EpisodeLoop(BatchView(env), 0, [recorder] if recorder is not None else None, fault_signal=fault_signal)
    results: list[EpisodeResult] = []
    hooks = LoopHooks(
        agent_policy(agent, rng, random_actions),
        lambda book: kind,
        lambda _kind, result: results.append(result),
        sink=on_step,
    )
    if on_info is not None:
        hooks.stepped = on_info
    loop.run(hooks, seed=episode_seed(rng))
    return results[0]


def train_local(
    config: Config,
    run_dir: RunDir,
    env_factory: Callable | None = None,
    resume: bool = False,
    eval_env_factory: Callable | None = None,
) -> StopReason:
    """Train in this process until the target eval success or the step budget. Returns why it stopped.

    Eval episodes run on the training env unless ``eval_env_factory`` gives them their own (a benchmark
    whose scripted operator takes over during training must evaluate the policy alone)."""
    if env_factory is None:
        from rlhw.robot import make_env

        env_factory = make_env
    rng = seed_process(config.train.seed)  # one process in every role: train.seed itself (rlhw.rl.seeds)
    env = eval_env = env_factory(config, 0)
    try:
        if eval_env_factory is not None:
            eval_env = eval_env_factory(config, 0)
        return LocalRun(config, run_dir, env, eval_env, rng, resume).run()
    finally:
        env.close()
        if eval_env is not env:
            eval_env.close()


def one_thread_isolation(isolation: LoopIsolation) -> tuple[LoopIsolation, str | None]:
    """The isolation the local runner's one thread takes, and why a realtime ``loop_priority`` was not taken.

    That thread steps the arm and runs every SGD update. At SCHED_FIFO it would hold its core through each
    update (tens of ms) above every ordinary process, and on a real cell beside the arm driver's own real-time
    threads (a rehearsal found it at FIFO 80 on a core beside another run's robot loop). `runner: pipeline`
    gives the loop a thread of its own, which is what a realtime priority is for."""
    priority = isolation.loop_priority
    if priority is None or priority.realtime is None:
        return isolation, None
    why = (
        f"loop_priority {{realtime: {priority.realtime}}} not taken by train.runner=local: its one thread also runs "
        "the learner's updates, which must not run at real-time priority; use train.runner=pipeline, whose robot "
        "loop has a thread of its own"
    )
    return isolation.model_copy(update={"loop_priority": None}), why


class LocalRun:
    """One local training run on open envs: the agent, its replay, the recorder and the session."""

    def __init__(self, config: Config, run_dir: RunDir, env, eval_env, rng: np.random.Generator, resume: bool):
        cfg = self.cfg = config.train
        self.run_dir, self.env, self.eval_env, self.rng = run_dir, env, eval_env, rng
        space = AgentSpace.from_spec(env.spec)
        self.agent = make_agent(config, env.spec, resolve_device(cfg.device))
        self.contract = policy_contract(env.spec, cfg.sac)
        self.replay = MixedReplay(cfg.buffer_size, cfg.demo_ratio, seed=cfg.seed)
        provenance = env_provenance(config.env)
        self.fault_signal = FaultSignal.from_config(cfg)
        for batch in load_demos(
            cfg.demos,
            space.observation_shapes,
            space.action_shape,
            provenance=provenance,
            fault_signal=self.fault_signal,
        ):
            self.replay.add_demos(batch)
        if resume:
            counters = resume_run(run_dir, self.agent, self.replay, self.fault_signal)
        else:
            counters = Counters()
            if cfg.init_from:
                warm_start(self.agent, checked_init_from(config, env.spec))
        self.recorder = (
            EpisodeRecorder(
                Path(run_dir.episodes) / "env0", fsync=False, meta={PROVENANCE_KEY: recorded_env(config.env)}
            )
            if cfg.record_episodes
            else None
        )
        self.session = TrainingSession(config, run_dir, counters)
        self.isolation = config.cluster.node_env(0).isolation
        self.gc_guard = GcGuard()
        self.verdicts = VerdictTally()  # the classifier against the judge on train steps, per eval period
        self.phases = PhaseClock()

    def run(self) -> StopReason:
        """Train episodes, evaluating, logging and checkpointing as the session says, until it says stop."""
        session = self.session
        self._isolate()
        try:
            while session.stop is None:
                self.gc_guard.idle()  # between episodes: no full collection inside a step
                self._train_episode()
                if session.log_due():
                    session.log()
                if session.eval_due():
                    started = time.perf_counter()
                    results = [
                        run_episode(self.eval_env, self.agent, self.rng, self.recorder, EpisodeKind.EVAL)
                        for _ in range(self.cfg.eval_episodes)
                    ]
                    self.phases.eval_s += time.perf_counter() - started
                    session.record_eval(
                        results, {**(self.verdicts.row() if self.verdicts.steps else {}), **self.phases.row()}
                    )
                    self.verdicts = VerdictTally()
                if session.checkpoint_due() or session.stop is not None:
                    self._save()
                session.check_budget()
            self._save()
            return session.finish()
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (rlhw.runtime.stop_signals)
            self._close_recorder()
            try:
                self._save()
                saved = True
            except Exception:  # noqa: BLE001 - report it in run.json rather than hide the interrupt
                saved = False
            return session.finish(interrupted(session.c.env_steps, saved, interrupt_cause(e)))
        except BaseException as e:
            self._close_recorder()
            self._save()
            session.finish(StopReason(RunStatus.FAILED, f"{type(e).__name__}: {e}"))
            raise
        finally:
            self.gc_guard.stop()

    def _isolate(self) -> None:
        """The loop and the learner are this one thread: node 0's loop_cpus and a nice loop_priority apply to both,
        a realtime one does not (`one_thread_isolation`); learner_threads to torch (else what is set:
        `rlhw.cli.trainer` sets 1); recorded in run.json."""
        isolation, refused = one_thread_isolation(self.isolation)
        record = apply_loop_isolation(isolation)
        if refused:
            record["realtime_refused"] = refused
            warnings.warn(refused, RuntimeWarning, stacklevel=2)
        record["learner_threads"] = apply_learner_threads(self.isolation, default=torch.get_num_threads())
        self.session.status_extra["loop_isolation"] = record
        self.gc_guard.start()

    def _train_episode(self) -> None:
        warmup = self.session.c.env_steps < self.cfg.learning_starts
        result = run_episode(
            self.env,
            self.agent,
            self.rng,
            self.recorder,
            EpisodeKind.TRAIN,
            random_actions=warmup,
            on_step=self._learn,
            fault_signal=self.fault_signal,
            on_info=self._note_step,
        )
        self.session.add_episode(*result)

    def _note_step(self, step: Step) -> None:
        """A train step: the classifier against the judge, and where the step's time went."""
        self.verdicts.add_step(step)
        timing = step.timing
        self.phases.env_steps += 1
        self.phases.env_s += float(timing.get("total", 0.0))
        self.phases.classifier_s += float(timing.get("classifier", 0.0))

    def _learn(self, transitions: TransitionBatch) -> None:
        """A step's transition into replay, then the updates it pays for (``utd_ratio``) once learning has started."""
        cfg, session, replay = self.cfg, self.session, self.replay
        replay.add_batch(transitions)
        session.add_env_steps(len(transitions["reward"]))
        owed = updates_owed(session.c.env_steps, session.c.updates, cfg.utd_ratio, cfg.learning_starts)
        if session.c.env_steps >= cfg.learning_starts and len(replay) >= cfg.sac.batch_size and owed > 0:
            started = time.perf_counter()
            for _ in range(owed):
                metrics = self.agent.update(replay.sample(cfg.sac.batch_size))
            self.phases.update_s += time.perf_counter() - started
            self.phases.updates += owed
            session.add_losses(metrics, owed)
            session.set_extra(**{"losses/alpha": metrics["losses/alpha"], "train/demo_buffer_size": len(replay.demos)})

    def _save(self) -> None:
        c = self.session.c
        self.run_dir.save_checkpoint(checkpoint_state(self.agent, self.contract, c), c.env_steps)

    def _close_recorder(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


@dataclass
class PhaseClock:
    """Where a local run's wall-clock went since it started (totals; metrics.jsonl gets them with every eval):
    env steps (the env's own step time: physics, rendering, the classifier), updates, eval episodes."""

    env_steps: int = 0
    env_s: float = 0.0
    classifier_s: float = 0.0
    updates: int = 0
    update_s: float = 0.0
    eval_s: float = 0.0

    def row(self) -> dict[str, float]:
        return {
            "perf/env_step_ms": 1000 * self.env_s / max(self.env_steps, 1),
            "perf/classifier_ms": 1000 * self.classifier_s / max(self.env_steps, 1),
            "perf/update_ms": 1000 * self.update_s / max(self.updates, 1),
            "perf/env_total_s": self.env_s,
            "perf/update_total_s": self.update_s,
            "perf/eval_total_s": self.eval_s,
        }
