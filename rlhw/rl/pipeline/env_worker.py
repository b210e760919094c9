"""Env worker: one per robot (placement component ``env``), next to the arm.

It owns its env behind a transport that the placement decides (`rlhw.rl.env_transport`: in this process for a
simulator with no arm placed, no server child and no serialisation; a `rlhw serve-env` child and a `RemoteEnv`
client to it for an arm the placement gives, real or simulated, which keeps a real arm's isolation) and runs
the robot loop in a thread: the episode loop of `rlhw.rl.episode_loop` (the local runner's too), whose policy
sends the observation to its rollout worker over the step lane (`rlhw.rl.pipeline.lane`) and waits for the
action on the same lane, or, with ``train.policy_at: env``, asks the policy next to the arm
in this process (`rlhw.rl.pipeline.acting`); the loop steps, writes the step to disk, repeats.
The controller only sets how much to collect (``collect`` / ``run_async`` / ``evaluate``) and polls counters
(``poll``), so the robot loop never waits for the controller or for training.

One env worker may serve several env instances (``env.num_envs`` > 1, simulators only): its env steps
them together and one message per env step carries all of them, so the fixed costs of a step (the lane's
round trip, the policy call) are paid once per batch instead of once per instance. Per-instance episode
bookkeeping (which instances train, evaluate or idle) is in `rlhw.rl.instances`.

The messages (one `EnvStep` per env step, batched whatever ``num_envs`` is, answered by ONE `Actions`) are
defined in `rlhw.rl.pipeline.messages`. Each train transition carries what the arm executed (the env's
``info["executed_action"]``: an operator's command while they have taken over) and ``intervened``
(``info["intervened"]``); the recorder stores the acting policy's version with the step (-1 where an
operator acted instead).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

import numpy as np

from rlhw.config.root import Config
from rlhw.env.server_process import EnvServerError
from rlhw.errors import RlhwError
from rlhw.rl.classifier_refresh import ClassifierRefresh
from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
from rlhw.rl.env_transport import EnvTransport
from rlhw.rl.episode_loop import BatchView, EpisodeLoop, EpisodeResult, RefusedSteps
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.fault_signal import FaultSignal
from rlhw.rl.instances import TRAIN
from rlhw.rl.loop_health import LoopTimer
from rlhw.rl.pipeline.acting import PolicyNextToArm
from rlhw.rl.pipeline.env_hooks import EnvLoopHooks
from rlhw.rl.pipeline.lane import EnvLaneEnd, LaneAddress, join
from rlhw.rl.pipeline.lane_frames import actions_bound
from rlhw.rl.pipeline.messages import EnvProgress
from rlhw.rl.pipeline.work_budget import Outbox, WorkBudget
from rlhw.rl.sac import resolve_device
from rlhw.rl.seeds import SeedStream, episode_seed, rank_seed
from rlhw.robot.spec import EnvSpec
from rlhw.robot.step import Step
from rlhw.runtime.isolation import GcGuard, apply_loop_isolation
from rlhw.runtime.worker import Worker


def robot_rank_of_worker(rank: int) -> int:
    """The Franka hardware rank this env worker drives (its placement's hardware), else its own rank."""
    hw = json.loads(os.environ.get("RLHW_HARDWARE", "{}"))
    if hw.get("type") == "Franka" and hw.get("ranks"):
        return int(hw["ranks"][0])
    return rank


def episode_dir(run_dir: Path, env_rank: int, instance: int, num_envs: int) -> Path:
    """Where an instance's episodes go: ``episodes/env<rank>``, or ``episodes/env<rank>.<i>`` with num_envs > 1."""
    name = f"env{env_rank}" if num_envs == 1 else f"env{env_rank}.{instance}"
    return Path(run_dir) / "episodes" / name


def episode_recorders(config: Config, run_dir: Path, env_rank: int) -> list[EpisodeRecorder] | None:
    """One recorder per instance (``train.record_episodes``), each episode fsynced where it was a real arm's
    (``train.fsync_episodes: auto``), with the env's provenance: a run's episodes may be a later run's demos."""
    if not config.train.record_episodes:
        return None
    fsync = config.train.fsync_episodes
    if fsync == "auto":
        from rlhw.robot.factory import declares_real_arm

        fsync = config.env.sim is None and declares_real_arm(config)
    meta = {PROVENANCE_KEY: recorded_env(config.env)}
    n = int(config.env.num_envs)
    return [EpisodeRecorder(episode_dir(run_dir, env_rank, i, n), fsync=bool(fsync), meta=meta) for i in range(n)]


class EnvWorker(Worker):
    """An env worker composes its work budget (`WorkBudget`, with the poll's `Outbox`), its env transport
    (`EnvTransport`), its episode recorders and the episode loop's hooks (`EnvLoopHooks`) around a step lane;
    it owns the loop thread and the restarts of a dead server child."""

    def __init__(
        self,
        config: Config,
        run_dir: str,
        num_rollout: int,
        channel_prefix: str = "",
        lane_addresses: list[LaneAddress | None] | None = None,
        lane_token: bytes | None = None,
        num_learner: int = 1,
    ):
        import torch

        torch.set_num_threads(1)
        self._setup(config, run_dir, num_rollout)
        if config.train.policy_at == "env":  # act next to the arm: the lane is a policy in this process
            device = resolve_device(self.cfg.device)
            self.policy = PolicyNextToArm(self.spec(), config, self.rank, num_learner, channel_prefix, device)
            self.attach_lane(self.policy)
        else:
            self.attach_lane(
                open_env_lane(config, self.rank, self.rollout_rank, lane_addresses, lane_token, self.spec())
            )
        self.thread = threading.Thread(target=self.run_loop, daemon=True, name=f"env-loop-{self.rank}")
        self.thread.start()

    @classmethod
    def detached(cls, config: Config, run_dir: str, lane: EnvLaneEnd | None = None) -> EnvWorker:
        """An env worker without Ray, a rollout worker or a loop thread: its env (behind its transport), episode
        loop, hooks and counters, and ``lane`` if given. Tests drive its `run_episodes` and `run_loop`."""
        w = cls.__new__(cls)
        w._setup(config, run_dir, 1)
        if lane is not None:
            w.attach_lane(lane)
        return w

    def _setup(self, config: Config, run_dir: str, num_rollout: int) -> None:
        """Everything but the lane and the loop thread."""
        self.config, self.cfg = config, config.train
        self.num_envs = int(config.env.num_envs)
        self.robot_rank = robot_rank_of_worker(self.rank)
        self.rollout_rank = self.rank % num_rollout if num_rollout else -1  # -1: it acts itself (policy_at=env)
        self.run_dir = Path(run_dir)
        self.policy: PolicyNextToArm | None = None  # the policy when it acts next to the arm (policy_at=env)
        self.error: str | None = None  # why the loop failed, for the controller's poll
        self.work = WorkBudget()
        self.outbox = Outbox(self.work)
        self.timer = LoopTimer()
        self.isolation = config.cluster.node_env(self.info.node_rank).isolation
        self.loop_isolation: dict | None = None  # what took effect in the loop thread (its start sets it)
        self.gc_guard = GcGuard()
        log = self.run_dir / "logs" / f"env{self.rank}-server.log"
        self.transport = EnvTransport(config, self.robot_rank, log, f"rlhw-train-env{self.rank}", self.isolation)
        self.recorders = episode_recorders(config, self.run_dir, self.rank)
        # a refused step (the server's refusal, or in process what the server would refuse) ends the running
        # episode(s) there; the view changes when the server is restarted, hence the lambda
        self.refused = RefusedSteps(
            lambda actions: self.episode_loop.view.step(actions),
            lambda: self.transport.dead,
            self.outbox.note,
            f"episodes of all {self.num_envs} instances truncated" if self.num_envs > 1 else "episode truncated",
        )
        self.episode_loop = self._episode_loop(self.transport.open())
        self.rng = np.random.default_rng(rank_seed(self.cfg.seed, SeedStream.EPISODES, self.rank))
        self.acting = EnvLoopHooks(
            self.rank,
            self.num_envs,
            self.work,
            self.outbox,
            self.timer,
            self.gc_guard,
            step=self.refused,
            training=lambda: bool(self.episode_loop.book.rows(TRAIN)),
            wait_inside=lambda: self.transport.wait_inside,
        )
        self.hooks = self.acting.hooks()
        self.retrained: str | None = None  # a retrained classifier for the next run of the episode loop
        self.refresh = self._classifier_refresh()
        if self.refresh is not None:
            self.hooks = dataclasses.replace(self.hooks, stepped=self._stepped, report=self._report)

    def _classifier_refresh(self) -> ClassifierRefresh | None:
        """The classifier's retraining from the operator's rejections (rlhw/rl/classifier_refresh.py), where this
        run has a classifier, an operator to ask, one instance and recorded episodes (the retraining's data). The
        env takes a retrained classifier at the start of the next run of the episode loop (`_take_classifier`),
        in this process or served from a child alike."""
        reward = self.config.env.reward
        if reward.classifier is None or reward.retrain_after_rejections == 0 or self.config.env.teleop.device == "none":
            return None
        if self.num_envs != 1 or not self.recorders:
            self.outbox.notice(
                "the classifier is not retrained during this run (env.reward.retrain_after_rejections): that needs "
                "one env instance (env.num_envs=1) with its episodes recorded (train.record_episodes)"
            )
            return None
        return ClassifierRefresh(
            reward.classifier,
            [r.dir for r in self.recorders],
            self.run_dir / "reward" / f"env{self.rank}",  # a cell retrains its own (a fleet has several)
            reward.retrain_after_rejections,
            use=self._retrained,
        )

    def _retrained(self, path: str) -> None:
        self.retrained = path

    def _take_classifier(self) -> None:
        """The env judges with a retrained classifier from here on (`EnvTransport.use_classifier`). Only between
        runs of the episode loop, never from `_report` inside one, and at most once per retraining: a served env
        takes it as a new server child started with it, and a real arm's new child is a new connection to the
        arm, which belongs between episodes."""
        path, self.retrained = self.retrained, None
        if path is not None and (view := self.transport.use_classifier(path)) is not None:
            self.episode_loop = self._episode_loop(view)

    def _stepped(self, step: Step) -> None:
        self.acting.stepped(step)
        self.refresh.stepped(step, self.acting.training())

    def _report(self, kind: str, result: EpisodeResult) -> None:
        """An episode ended: the outbox hears of it, and a finished retraining is recorded for the next run of the
        episode loop (`_take_classifier`), or one is started."""
        self.outbox.report(kind, result)
        if text := self.refresh.between_episodes():
            self.outbox.notice(text)

    def attach_lane(self, lane: EnvLaneEnd) -> None:
        """The step lane the loop's observations go out on and its actions come back from."""
        self.acting.lane = lane

    @property
    def lane(self) -> EnvLaneEnd | None:
        return self.acting.lane

    @property
    def env(self):
        """The env in this process, or the server child's client."""
        return self.transport.env

    def _episode_loop(self, view: BatchView) -> EpisodeLoop:
        return EpisodeLoop(
            view,
            self.config.env.max_episode_steps,
            self.recorders,
            meta={"robot_rank": self.robot_rank, "env_rank": self.rank},
            fault_signal=FaultSignal.from_config(self.cfg),
        )

    def _restart_server(self, why: str) -> None:
        self.outbox.note(f"env server restarted ({why})")
        self.episode_loop = self._episode_loop(self.transport.restart())

    def spec(self) -> EnvSpec:
        """What the learners build their networks from: the env's spec (shapes per instance)."""
        return self.episode_loop.view.spec

    # ---- control from the controller (all return at once)
    def set_exploration(self, random_actions: bool) -> None:
        """Uniform random actions (warm-up) or the policy's own, when this env worker acts (policy_at=env)."""
        if self.policy is None:
            raise RlhwError(
                f"env worker {self.rank} does not act (train.policy_at is {self.cfg.policy_at!r}): "
                "set_exploration goes to the rollout workers, whose policy acts for it"
            )
        self.policy.set_exploration(random_actions)

    def collect(self, steps: int) -> None:
        self.work.collect(steps)

    def run_async(self) -> None:
        self.work.run_async()

    def allow(self, steps: int) -> None:
        """Async mode: the train steps this worker may have collected (the controller's grant; see `UtdGate`)."""
        self.work.allow(steps)

    def evaluate(self, episodes: int) -> None:
        self.work.evaluate(episodes)

    def poll(self) -> EnvProgress:
        """Counters and finished episodes since the last poll; ``error`` when the loop has failed."""
        work = self.work
        with work.lock:
            return EnvProgress(
                rank=self.rank,
                train_steps=work.train_steps,
                idle=work.idle(),
                status=work.status,
                restarts=self.transport.restarts,
                eval_pending=work.eval_pending,
                error=self.error,
                utd_wait_s=work.gate.waited_s,
                **self.outbox.take(),
            )

    def server_pid(self) -> int | None:
        """Process id of the env server child (tests kill it to check the restart); None in process."""
        return self.transport.server_pid()

    def loop_health(self) -> dict:
        """Observation-to-action latency and step lateness of every step so far, and the loop's isolation."""
        server = self.transport.server_isolation()
        return {**self.timer.summary(self.num_envs), "loop_isolation": self.loop_isolation, "server_isolation": server}

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        self.work.stop()
        self.thread.join(timeout=self.cfg.step_timeout_s + 5)
        self.lane.close()
        self._close_recorders()
        self.transport.close()

    def _close_recorders(self) -> None:
        for r in self.recorders or ():
            r.close()

    # ---- the robot loop (thread)
    def wait_for_work(self) -> bool:
        """Wait until there is something to collect (False: stop). Called only between runs of the episode
        loop, so it also runs the full garbage collection the loop owes, and the UTD gate holds a real arm here
        (between episodes, never inside one) until the learner has caught up; eval episodes are not held."""
        self.gc_guard.idle()
        return self.work.wait_for_work()

    def run_loop(self) -> None:
        """The loop thread: runs of the episode loop while there is work; a dead server child is restarted
        (``train.env_restarts``); a failure is reported through `poll` (the controller decides)."""
        try:
            self.loop_isolation = apply_loop_isolation(self.isolation)  # this thread: Linux applies it per thread
            self.gc_guard.start()
            while self.wait_for_work():
                try:
                    self.run_episodes()
                except EnvServerError:
                    raise
                except Exception as e:  # noqa: BLE001 - a robot/server failure: restart the server or give up
                    if self.transport.may_restart():
                        self._restart_server(f"{type(e).__name__}: {e}")
                        continue
                    raise
        except BaseException as e:  # noqa: BLE001 - reported through poll(); the controller decides
            with self.work.lock:
                self.error = f"{type(e).__name__}: {e}{self.transport.exit_note()}"
                self.work.status = "failed"
        finally:
            self.gc_guard.stop()
            self._close_recorders()

    def run_episodes(self) -> None:
        """One run of the episode loop: one episode with one instance (a real arm waits for work before its
        next reset), else until every instance is idle. Then the last transitions go out; a fourth refused
        step in a row fails the loop once the episodes it cut short are reported. A retrained classifier is taken
        first (`_take_classifier`)."""
        self._take_classifier()
        self.acting.start_run()
        self.episode_loop.run(self.hooks, seed=episode_seed(self.rng))
        self.acting.end_run()
        if self.refused.in_a_row > 3:
            raise self.refused.last


def open_env_lane(
    config: Config,
    rank: int,
    rollout_rank: int,
    addresses: list[LaneAddress | None] | None,
    token: bytes | None,
    spec: EnvSpec,
) -> EnvLaneEnd:
    """The env end of the step lane: a stream to rollout worker ``rollout_rank`` (joined again while it is
    refused for a flood or a timeout, within ``train.env_start_timeout_s``; its answers bounded by what ``spec``
    allows)."""
    if not addresses or addresses[rollout_rank] is None or token is None:
        raise ValueError(
            "a step lane needs its rollout worker's lane address and the run's lane token (the Pipeline passes both)"
        )
    bound = actions_bound(spec, config.env.num_envs)
    within_s, timeout = config.train.env_start_timeout_s, config.train.step_timeout_s
    return join(addresses[rollout_rank], token, rank, rollout_rank, timeout, within_s, bound)
