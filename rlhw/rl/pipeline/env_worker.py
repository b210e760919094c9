"""Env worker: one per robot (placement component ``env``), next to the arm.

It owns its env behind a transport (``train.env_transport``: in this process for simulators, no server child
and no serialisation; a `rlhw serve-env` child and a `RemoteEnv` client to it for real arms, which keeps their
isolation) and runs the robot loop in a thread: the episode loop of `rlhw.rl.episode_loop` (the local runner's
too), whose policy sends the observation to its rollout worker over the step lane (`rlhw.rl.pipeline.lane`)
and waits for the action on the same lane, or, with ``train.policy_at: env``, asks the policy next to the arm
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

import json
import os
import threading
from pathlib import Path

import numpy as np

from rlhw.config.root import Config
from rlhw.errors import ConfigError
from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
from rlhw.rl.episode_loop import BatchView, EpisodeLoop, LoopHooks, RefusedSteps
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.fault_signal import FaultSignal
from rlhw.rl.instances import EVAL, TRAIN, Instances
from rlhw.rl.pipeline.acting import PolicyNextToArm
from rlhw.rl.pipeline.env_server import EnvServerError, EnvServerProcess, open_remote_env
from rlhw.rl.pipeline.lane import EnvLaneEnd, LaneAddress, join
from rlhw.rl.pipeline.lane_frames import actions_bound
from rlhw.rl.pipeline.loop_health import LoopTimer
from rlhw.rl.pipeline.messages import Actions, EnvProgress, EnvStep, EpisodeResult, JudgeReport
from rlhw.rl.pipeline.utd_gate import UtdGate
from rlhw.rl.replay import TransitionBatch
from rlhw.rl.sac import resolve_device
from rlhw.rl.seeds import SeedStream, episode_seed, rank_seed
from rlhw.rl.verdicts import VerdictTally
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


class EnvWorker(Worker):
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
        self._setup(config, run_dir, num_rollout, channel_prefix)
        if config.train.policy_at == "env":  # act next to the arm: the lane is a policy in this process
            self.lane: EnvLaneEnd = PolicyNextToArm(
                self.spec(), config, self.rank, num_learner, channel_prefix, resolve_device(self.cfg.device)
            )
        else:
            self.lane = open_env_lane(config, self.rank, self.rollout_rank, lane_addresses, lane_token, self.spec())
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"env-loop-{self.rank}")
        self.thread.start()

    def _setup(self, config: Config, run_dir: str, num_rollout: int, channel_prefix: str) -> None:
        """Everything but the rollout worker's lanes and the loop thread: the env behind its transport, the
        episode loop and its hooks, the counters (a test drives `_run_episodes` on what this builds)."""
        self.config = config
        self.cfg = config.train
        self.num_envs = int(config.env.num_envs)
        self.robot_rank = robot_rank_of_worker(self.rank)
        self.rollout_rank = self.rank % num_rollout if num_rollout else -1  # -1: it acts itself (policy_at=env)
        self.run_dir = Path(run_dir)
        self.channel_prefix = channel_prefix
        self.server: EnvServerProcess | None = None
        self.env = None
        self.restarts = 0
        self.lock = threading.Condition()
        self.gate = UtdGate(self.lock)  # async mode: the learner's pace (rlhw.rl.pipeline.utd_gate)
        self.budget = 0  # train steps still to collect (sync mode); ignored when unlimited
        self.unlimited = False
        self.eval_pending = 0
        self.stopping = False
        self.error: str | None = None
        self.status = "idle"
        self.train_steps = 0
        self.episodes: list[EpisodeResult] = []  # finished train episodes since the last poll
        self.eval_results: list[EpisodeResult] = []
        self.timer = LoopTimer()
        self._clear_judge()  # a simulated arm's judge, for the controller alone (`JudgeReport`)
        self._judged_episode = False  # the judge saw a step of the running episode (one instance: see _stepped)
        self._judge = False  # a simulator's judge has reported on a step: every poll from then on carries its report
        self.isolation = config.cluster.node_env(self.info.node_rank).isolation
        self.loop_isolation: dict | None = None  # what took effect in the loop thread (its start sets it)
        self.gc_guard = GcGuard()
        self.faults: list[str] = []
        # a refused step (the server's refusal, or in process what the server would refuse) ends the running
        # episode(s) there; the env worker's view changes when its server is restarted, hence the lambdas
        self.refused = RefusedSteps(
            lambda actions: self.episode_loop.view.step(actions),
            lambda: self.server is not None and not self.server.alive(),
            lambda text: self.faults.append(text),
            f"episodes of all {self.num_envs} instances truncated" if self.num_envs > 1 else "episode truncated",
        )
        self.transport = env_transport(config, self.robot_rank)
        fsync = self.cfg.fsync_episodes
        if fsync == "auto":
            from rlhw.robot.factory import declares_real_arm

            fsync = config.env.sim is None and declares_real_arm(config)
        meta = {PROVENANCE_KEY: recorded_env(config.env)}  # a run's episodes may be a later run's demos
        self.recorders = (
            [
                EpisodeRecorder(episode_dir(self.run_dir, self.rank, i, self.num_envs), fsync=bool(fsync), meta=meta)
                for i in range(self.num_envs)
            ]
            if self.cfg.record_episodes
            else None
        )
        self._start_env()
        self.rng = np.random.default_rng(rank_seed(self.cfg.seed, SeedStream.EPISODES, self.rank))
        self._pending: TransitionBatch | None = None  # train transitions that go with the next observation
        self._first_obs = True
        self.hooks = LoopHooks(
            act=self._act,
            choose=self._choose,
            report=self._report_locked,
            sink=self._sink,
            step=self._step,
            note=lambda text: self.faults.append(text),
            stepped=self._stepped,
            stopping=lambda: self.stopping,
        )

    # ---- the env behind its transport
    def _start_env(self) -> None:
        """The env and the episode loop over it: in this process (a simulator), or a server child's client.

        In process the env is built here but opened by its first reset, in the loop thread: the threads its
        drivers start then (a simulated camera's render thread, Mesa's rasteriser threads) inherit the loop's
        scheduling (``loop_priority``). Opened here, at Ray's nice 15, they rendered every observation the
        SCHED_FIFO loop waited for behind every ordinary process (the rehearsal's late steps, "mostly observe")."""
        if self.transport == "in_process":
            from rlhw.robot.factory import make_batched_env, make_env

            make = make_env if self.num_envs == 1 else make_batched_env
            self.env = make(self.config, self.robot_rank, connect=False)
            view = BatchView(self.env, self.env.spec)
        else:
            self._start_server()
            view = BatchView(self.env, self.env.env_spec, self.env.step_typed)
        self.episode_loop = EpisodeLoop(
            view,
            self.config.env.max_episode_steps,
            self.recorders,
            meta={"robot_rank": self.robot_rank, "env_rank": self.rank},
            fault_signal=FaultSignal.from_config(self.cfg),
        )

    def _start_server(self) -> None:
        log = self.run_dir / "logs" / f"env{self.rank}-server.log"
        self.server, self.env = open_remote_env(self.config, self.robot_rank, log, f"rlhw-train-env{self.rank}")

    def _restart_server(self, why: str) -> None:
        """A dead server child replaced by a new one (only the server transport has a child to restart)."""
        self.restarts += 1
        self.faults.append(f"env server restarted ({why})")
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - the old client may be broken already
            pass
        self.server.stop()
        self._start_env()

    @property
    def wait_inside(self) -> bool:
        """Where the UTD gate may hold the loop: before any train step of a simulator in this process; only
        between episodes for a real arm (behind its server) and for a simulation that keeps real time as a real
        arm does (``env.pace: real_time``) or that a person drives (`RobotEnv.paced`)."""
        return self.transport == "in_process" and not self.env.paced

    def spec(self) -> EnvSpec:
        """What the learners build their networks from: the env's spec (shapes per instance)."""
        return self.episode_loop.view.spec

    # ---- control from the controller (all return at once)
    def set_exploration(self, random_actions: bool) -> None:
        """Uniform random actions (warm-up) or the policy's own, when this env worker acts (policy_at=env)."""
        self.lane.set_exploration(random_actions)

    def collect(self, steps: int) -> None:
        with self.lock:
            self.budget += int(steps)
            self.lock.notify_all()

    def run_async(self) -> None:
        with self.lock:
            self.unlimited = True
            self.lock.notify_all()

    def allow(self, steps: int) -> None:
        """Async mode: the train steps this worker may have collected (the controller's grant; see `UtdGate`)."""
        self.gate.allow(steps)

    def evaluate(self, episodes: int) -> None:
        with self.lock:
            self.eval_pending += int(episodes)
            self.lock.notify_all()

    def poll(self) -> EnvProgress:
        """Counters and finished episodes since the last poll; ``error`` when the loop has failed."""
        with self.lock:
            out = EnvProgress(
                rank=self.rank,
                train_steps=self.train_steps,
                idle=self._idle(),
                status=self.status,
                restarts=self.restarts,
                eval_pending=self.eval_pending,
                episodes=self.episodes,
                eval_results=self.eval_results,
                faults=self.faults,
                error=self.error,
                utd_wait_s=self.gate.waited_s,
                judge=JudgeReport(self._judged_steps, self._judged_evals, self._verdicts) if self._judge else None,
            )
            self.episodes, self.eval_results, self.faults = [], [], []
            self._clear_judge()
            return out

    def _clear_judge(self) -> None:
        """What the judge saw since the last poll (caller holds the lock, or nothing runs yet)."""
        self._judged_steps, self._judged_evals, self._verdicts = 0, 0, VerdictTally()

    def server_pid(self) -> int | None:
        """Process id of the env server child (tests kill it to check the restart); None in process."""
        return self.server.proc.pid if self.server is not None and self.server.proc is not None else None

    def loop_health(self) -> dict:
        """Observation-to-action latency and step lateness of every step so far, and the loop's isolation."""
        server = self.server.loop_isolation if self.server is not None else None
        return {**self.timer.summary(self.num_envs), "loop_isolation": self.loop_isolation, "server_isolation": server}

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.thread.join(timeout=self.cfg.step_timeout_s + 5)
        self.lane.close()
        self._close_recorders()
        try:
            if self.env is not None:
                self.env.close()
        finally:
            if self.server is not None:
                self.server.stop()

    def _close_recorders(self) -> None:
        for r in self.recorders or ():
            r.close()

    # ---- the robot loop (thread)
    def _idle(self) -> bool:
        return self.eval_pending == 0 and not self.unlimited and self.budget <= 0 and self.status != "episode"

    def _wait_for_work(self) -> bool:
        """Wait until there is something to collect (False: stop). Called only between runs of the episode
        loop, so it also runs the full garbage collection the loop owes, and the UTD gate holds a real arm here
        (between episodes, never inside one) until the learner has caught up; eval episodes are not held."""
        self.gc_guard.idle()
        with self.lock:
            if self.unlimited and self.gate.blocks(self.train_steps):
                self.status = "waiting"
                self.gate.wait(self.train_steps, lambda: self.stopping or self.eval_pending > 0)
            while not self.stopping:
                if self.eval_pending > 0 or self.unlimited or self.budget > 0:
                    self.status = "episode"
                    return True
                self.status = "idle"
                self.lock.wait(0.5)
            return False

    def _loop(self) -> None:
        try:
            self.loop_isolation = apply_loop_isolation(self.isolation)  # this thread: Linux applies it per thread
            self.gc_guard.start()
            while self._wait_for_work():
                try:
                    self._run_episodes()
                except EnvServerError:
                    raise
                except Exception as e:  # noqa: BLE001 - a robot/server failure: restart the server or give up
                    if self.server is not None and not self.server.alive() and self.restarts < self.cfg.env_restarts:
                        self._restart_server(f"{type(e).__name__}: {e}")
                        continue
                    raise
        except BaseException as e:  # noqa: BLE001 - reported through poll(); the controller decides
            with self.lock:
                server_note = ""
                if self.server is not None and not self.server.alive():
                    server_note = f" (env server exited; its last output: {self.server.tail()})"
                self.error = f"{type(e).__name__}: {e}{server_note}"
                self.status = "failed"
        finally:
            self.gc_guard.stop()
            self._close_recorders()

    def _run_episodes(self) -> None:
        """One run of the episode loop: one episode with one instance (a real arm waits for work before its
        next reset), else until every instance is idle. Then the last transitions go out; a fourth refused
        step in a row fails the loop once the episodes it cut short are reported."""
        self._first_obs = True
        self.episode_loop.run(self.hooks, seed=episode_seed(self.rng))
        self._put_transitions(self._pending)
        self._pending = None
        if self.refused.in_a_row > 3:
            raise self.refused.last

    # ---- the episode loop's hooks (loop thread)
    def _act(self, obs: dict, rows: list[int], evaluating: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The policy, on the rollout worker or next to the arm: the observations go out with the previous step's
        train transitions, the actions and their versions come back."""
        self._put(obs, rows, evaluating, self._pending)
        self._pending = None
        if self._first_obs:
            self.timer.episode_started()
            self._first_obs = False
        elif self.num_envs > 1:  # whose episodes may never all end at once, giving `_wait_for_work` no chance
            self.gc_guard.if_due()  # the idle part of the step: the policy is computing the action
        answer = self._actions()
        return answer.actions, answer.versions

    def _choose(self, book: Instances) -> str:
        with self.lock:
            return book.choose(self.budget, self.unlimited, self.eval_pending)

    def _sink(self, transitions: TransitionBatch) -> None:
        """A step's train transitions: counted against the budget, sent with the next observation."""
        self._count_train_steps(len(transitions["reward"]))
        self._pending = transitions

    def _report_locked(self, kind: str, result: EpisodeResult) -> None:
        with self.lock:
            self._report(kind, result)

    def _report(self, kind: str, result: EpisodeResult) -> None:
        """A finished episode, for the controller's next poll (caller holds the lock)."""
        judged, self._judged_episode = self._judged_episode, False
        if kind == EVAL:
            self.eval_pending -= 1
            self.eval_results.append(result)
            self._judged_evals += judged  # its success is the judge's verdict (`Step.outcome`)
        elif kind == TRAIN:
            self.episodes.append(result)

    def _stepped(self, step: Step) -> None:
        """After each env step: the loop timer, and where a simulator judged the step, the judge's report (the
        classifier against the judge on train steps). Only a single env has a judge (a batch reports none), so
        the step is one instance's, of the episode the book says is running."""
        self.timer.stepped(step.timing)
        if step.judge_success is None:
            return
        with self.lock:
            self._judged_steps += step.num_envs
            self._judged_episode = self._judge = True
            if self.episode_loop.book.rows(TRAIN):
                self._verdicts.add_step(step)

    def _count_train_steps(self, n: int) -> None:
        with self.lock:
            self.train_steps += n
            self.budget -= n

    def _put(self, obs: dict | None, rows, evaluating, transitions: TransitionBatch | None) -> None:
        self.lane.send(
            EnvStep(
                env=self.rank,
                obs=obs,
                rows=tuple(rows),
                evaluating=np.asarray(evaluating, bool),
                transitions=transitions,
            )
        )

    def _put_transitions(self, transitions: TransitionBatch | None) -> None:
        """The last transitions of a phase, when no instance wants an action any more."""
        if transitions is not None:
            self._put(None, (), np.zeros(0, bool), transitions)

    def _step(self, actions: np.ndarray) -> Step | None:
        """The env's step, or None when it refused or timed out (e.g. the server's watchdog stopped the arm
        after a stall): the episode loop then ends the running episode(s) there, truncated; what was
        recorded so far stays on disk. A dead server raises (``_loop`` restarts it or gives up), and so does
        `_run_episodes` after a fourth refusal in a row."""
        if self.wait_inside and self.episode_loop.book.rows(TRAIN):
            with self.lock:  # a simulator waits for the learner before its next train step
                self.gate.wait(self.train_steps, lambda: self.stopping)
        return self.refused(actions)

    def _actions(self) -> Actions:
        """The policy's answer: one row per instance that asked."""
        answer = self.lane.actions()
        self.timer.actions_received()
        return Actions(np.asarray(answer.actions, np.float32), np.asarray(answer.versions, np.int64))


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


def env_transport(config: Config, robot_rank: int) -> str:
    """``in_process`` or ``server``: where env worker ``robot_rank``'s env runs (``train.env_transport``; auto:
    in this process when it is simulated). A real arm runs in a server child, so that a hung or crashed driver
    cannot take the worker down and the worker can restart it."""
    from rlhw.robot.factory import plan_env

    choice = config.train.env_transport
    simulated = plan_env(config, robot_rank).simulated
    if choice == "in_process" and not simulated:
        raise ConfigError(
            "train.env_transport",
            "is in_process, but this run drives a real arm, which runs only "
            "behind its env server child (a hung driver must not stall the "
            "robot loop, and the worker restarts a dead server); set "
            "train.env_transport=auto or server, or env.sim=mujoco to rehearse",
        )
    if choice == "auto":
        return "in_process" if simulated else "server"
    return choice
