"""Env worker: one per robot (placement component ``env``), next to the arm.

It owns the env server child process and a `RemoteEnv` client to it, and runs the robot loop in a thread:
send the observation to its rollout worker through the ``obs`` channel, wait for the action on the
``actions`` channel (keyed by env rank), step, write the step to disk, repeat. The controller only sets
how much to collect (``collect`` / ``run_async`` / ``evaluate``) and polls counters (``poll``), so the
robot loop never waits for the controller or for training.

One env worker may serve several env instances (``env.num_envs`` > 1, simulators only): its env server
steps them together and one message per env step carries all of them, so the channel and gRPC costs of a
step are paid once per batch instead of once per instance. Per-instance episode bookkeeping (which
instances train, evaluate or idle) is in `rlhw.rl.pipeline.instances`.

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

from rlhw.env.client import EnvServiceError
from rlhw.rl.episodes import EpisodeRecorder, executed, executed_batch
from rlhw.rl.pipeline.env_server import EnvServerError, EnvServerProcess
from rlhw.rl.instances import EVAL, IDLE, TRAIN, Instances
from rlhw.rl.pipeline.loop_health import LoopTimer
from rlhw.rl.pipeline.messages import (ACTION_CHANNEL, OBS_CHANNEL, Actions, EnvProgress, EnvStep, EpisodeResult,
                                       encode_env_step, expect)
from rlhw.rl.replay import TransitionBatch, transition_batch
from rlhw.rl.spaces import neutral_actions
from rlhw.robot.spec import EnvSpec
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


def final_observations(next_obs: dict, info: dict, ended: np.ndarray) -> dict:
    """Each instance's observation after its action: ``next_obs``, except where an instance's episode ended and
    the batched env autoreset it (its last observation is then in ``info["final_observation"]``)."""
    if not ended.any():
        return next_obs
    final, mask = info.get("final_observation") or {}, info.get("_final_observation")
    mask = ended if mask is None else np.asarray(mask, bool) & ended
    if not final or not mask.any():
        return next_obs
    last = {k: np.array(v) for k, v in next_obs.items()}
    for k in last:
        last[k][mask] = np.asarray(final[k])[mask]
    return last


class EnvWorker(Worker):
    def __init__(self, config, run_dir: str, num_rollout: int, channel_prefix: str = ""):
        import torch

        torch.set_num_threads(1)
        self.config = config
        self.cfg = config.train
        self.num_envs = int(config.env.num_envs)
        self.robot_rank = robot_rank_of_worker(self.rank)
        self.rollout_rank = self.rank % num_rollout
        self.run_dir = Path(run_dir)
        self.channel_prefix = channel_prefix
        self.server: EnvServerProcess | None = None
        self.env = None
        self.restarts = 0
        self.lock = threading.Condition()
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
        self.isolation = config.cluster.node_env(self.info.node_rank).isolation
        self.loop_isolation: dict | None = None  # what took effect in the loop thread (its start sets it)
        self.gc_guard = GcGuard()
        self.faults: list[str] = []
        self.consecutive_faults = 0
        self.instances = Instances(self.num_envs, config.env.max_episode_steps)
        fsync = self.cfg.fsync_episodes
        if fsync == "auto":
            fsync = config.env.sim is None and has_real_arm(config)
        self.recorders = ([EpisodeRecorder(episode_dir(self.run_dir, self.rank, i, self.num_envs), fsync=bool(fsync))
                           for i in range(self.num_envs)] if self.cfg.record_episodes else None)
        self._start_server()
        from rlhw.runtime.channel import Channel

        self.obs_ch = Channel.connect(channel_prefix + OBS_CHANNEL, timeout_s=60)
        self.act_ch = Channel.connect(channel_prefix + ACTION_CHANNEL, timeout_s=60)
        self.rng = np.random.default_rng(self.cfg.seed + 1000 + self.rank)
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"env-loop-{self.rank}")
        self.thread.start()

    # ---- server child
    def _start_server(self) -> None:
        from rlhw.env.client import RemoteEnv

        log = self.run_dir / "logs" / f"env{self.rank}-server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.server = EnvServerProcess(self.config, self.robot_rank, log, self.cfg.env_start_timeout_s)
        address = self.server.start()
        token = self.config.server.resolve_token() if hasattr(self.config.server, "resolve_token") else None
        self.env = RemoteEnv(address, token=token, timeout_s=self.cfg.step_timeout_s,
                             reset_timeout_s=max(self.cfg.step_timeout_s, self.config.server.reset_deadline_s),
                             reconnect_s=5.0, session_id=f"rlhw-train-env{self.rank}")
        if self.env.num_envs != self.num_envs:
            raise EnvServerError(f"env server at {address} serves {self.env.num_envs} env instance(s), but "
                                 f"env.num_envs is {self.num_envs}: the server must be started from the same config")
        self._idle_action = neutral_actions(self.env.env_spec.action, self.num_envs)  # for idle instances of a batch

    def _restart_server(self, why: str) -> None:
        self.restarts += 1
        self.faults.append(f"env server restarted ({why})")
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - the old client may be broken already
            pass
        self.server.stop()
        self._start_server()

    def spec(self) -> EnvSpec:
        """What the learners build their networks from: the env's spec (shapes per instance)."""
        return self.env.env_spec

    # ---- control from the controller (all return at once)
    def collect(self, steps: int) -> None:
        with self.lock:
            self.budget += int(steps)
            self.lock.notify_all()

    def run_async(self) -> None:
        with self.lock:
            self.unlimited = True
            self.lock.notify_all()

    def evaluate(self, episodes: int) -> None:
        with self.lock:
            self.eval_pending += int(episodes)
            self.lock.notify_all()

    def poll(self) -> EnvProgress:
        """Counters and finished episodes since the last poll; ``error`` when the loop has failed."""
        with self.lock:
            out = EnvProgress(rank=self.rank, train_steps=self.train_steps, idle=self._idle(), status=self.status,
                              restarts=self.restarts, eval_pending=self.eval_pending, episodes=self.episodes,
                              eval_results=self.eval_results, faults=self.faults, error=self.error)
            self.episodes, self.eval_results, self.faults = [], [], []
            return out

    def server_pid(self) -> int | None:
        """Process id of the env server child (tests kill it to check the restart)."""
        return self.server.proc.pid if self.server is not None and self.server.proc is not None else None

    def loop_health(self) -> dict:
        """Observation-to-action latency and step lateness of every step so far, and the loop's isolation."""
        return {**self.timer.summary(self.num_envs), "loop_isolation": self.loop_isolation}

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.thread.join(timeout=self.cfg.step_timeout_s + 5)
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

    def _next_kind(self) -> str | None:
        """Wait for work; returns 'eval', 'train' or None (stop). Called only between episodes, so it also
        runs the full garbage collection the loop owes."""
        self.gc_guard.idle()
        with self.lock:
            while not self.stopping:
                if self.eval_pending > 0:
                    return EVAL
                if self.unlimited or self.budget > 0:
                    return TRAIN
                self.status = "idle"
                self.lock.wait(0.5)
            return None

    def _loop(self) -> None:
        try:
            self.loop_isolation = apply_loop_isolation(self.isolation)  # this thread: Linux applies it per thread
            self.gc_guard.start()
            while True:
                kind = self._next_kind()
                if kind is None:
                    return
                with self.lock:
                    self.status = "episode"
                try:
                    if self.num_envs == 1:
                        result = self._episode(kind)
                    else:
                        self._phase()
                        continue
                except EnvServerError:
                    raise
                except Exception as e:  # noqa: BLE001 - a robot/server failure: restart the server or give up
                    if self.server is not None and not self.server.alive() and self.restarts < self.cfg.env_restarts:
                        self._restart_server(f"{type(e).__name__}: {e}")
                        continue
                    raise
                with self.lock:
                    self._report(kind, result)
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

    def _report(self, kind: str, result: EpisodeResult) -> None:
        """A finished episode, for the controller's next poll (caller holds the lock)."""
        if kind == EVAL:
            self.eval_pending -= 1
            self.eval_results.append(result)
        elif kind == TRAIN:
            self.episodes.append(result)

    def _count_train_steps(self, n: int) -> None:
        with self.lock:
            self.train_steps += n
            self.budget -= n

    def _put(self, obs: dict | None, rows, evaluating, transitions: TransitionBatch | None) -> None:
        msg = EnvStep(env=self.rank, obs=obs, rows=tuple(rows), evaluating=np.asarray(evaluating, bool),
                      transitions=transitions)
        self.obs_ch.put(encode_env_step(msg), key=self.rollout_rank, timeout=self.cfg.step_timeout_s)

    def _put_transitions(self, transitions: TransitionBatch | None) -> None:
        """The last transitions of a phase, when no instance wants an action any more."""
        if transitions is not None:
            self._put(None, (), np.zeros(0, bool), transitions)

    def _step(self, action, consequence: str, end_episodes=None):
        """``env.step``, or None when the server refused or timed out (e.g. its watchdog stopped the arm
        after a stall): the running episode(s) end there, truncated (``end_episodes``, or the caller
        after None); what was recorded so far stays on disk. A dead server, or a fourth refusal in a
        row, raises (``_loop`` restarts the server or gives up)."""
        try:
            result = self.env.step(action)
        except EnvServiceError as e:
            if self.server is not None and not self.server.alive():
                raise
            self.faults.append(f"step refused, {consequence}: {e}")
            self.consecutive_faults += 1
            if end_episodes is not None:
                end_episodes()
            if self.consecutive_faults > 3:
                raise
            return None
        self.consecutive_faults = 0
        return result

    def _actions(self) -> Actions:
        """The rollout worker's answer: one row per instance that asked."""
        answer = expect(self.act_ch.get(key=self.rank, timeout=self.cfg.step_timeout_s), Actions,
                        self.channel_prefix + ACTION_CHANNEL)
        self.timer.actions_received()
        return Actions(np.asarray(answer.actions, np.float32), np.asarray(answer.versions, np.int64))

    # ---- one instance: one episode at a time, explicit reset (the real-robot path)
    def _episode(self, kind: str) -> EpisodeResult:
        evaluating = kind == EVAL
        flags = np.array([evaluating])
        recorder = self.recorders[0] if self.recorders else None
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        if recorder is not None:
            recorder.begin(obs, kind=kind, meta={"robot_rank": self.robot_rank, "env_rank": self.rank})
        self._put(_one(obs), (0,), flags, None)
        self.timer.episode_started()
        ret, success, length, interventions = 0.0, False, 0, 0
        while True:
            answer = self._actions()
            action, version = answer.actions[0], int(answer.versions[0])
            stepped = self._step(action, "episode truncated")
            if stepped is None:
                break
            next_obs, reward, terminated, truncated, info = stepped
            self.timer.stepped(info)
            action, intervened = executed(action, info)
            step_success = bool(np.any(info.get("success", False)))
            if recorder is not None:
                recorder.step(action, reward, terminated, truncated, next_obs, step_success, intervened=intervened,
                              policy_version=-1 if intervened else version)
            if info.get("fault"):
                self.faults.append(f"{info['fault']}: {info.get('fault_message')}")
            ret, length, interventions = ret + float(reward), length + 1, interventions + int(intervened)
            success = success or step_success
            done = bool(terminated or truncated)
            transitions = None
            if not evaluating:
                transitions = transition_batch(_one(obs), _one(next_obs), action[None], [reward], [terminated],
                                               [intervened])
                self._count_train_steps(1)
            if not done:
                self._put(_one(next_obs), (0,), flags, transitions)
            else:
                self._put_transitions(transitions)
            obs = next_obs
            if done or self.stopping:
                break
        if recorder is not None:
            recorder.end()
        return ret, success, length, interventions

    # ---- several instances (simulators): one phase steps them all until every one is idle
    def _phase(self) -> None:
        """Reset every instance, then step them together; each instance's episode kind is decided when it
        starts (here or at its same-step autoreset). Returns when every instance is idle, on stop, or after
        a refused step (which truncates the running episodes; the next phase resets all instances)."""
        book = self.instances
        obs = self._start_phase()
        rows = book.rows()
        if not rows:
            return
        self._put(_rows_of(obs, rows), rows, self._evaluating(rows), None)
        self.timer.episode_started()
        while True:
            answer = self._actions()
            actions = self._idle_action.copy()
            actions[rows] = answer.actions
            versions = np.full(self.num_envs, -1, np.int64)
            versions[rows] = answer.versions
            stepped = self._step(actions, f"episodes of all {self.num_envs} instances truncated", self._end_running)
            if stepped is None:
                return
            next_obs, reward, terminated, truncated, info = stepped
            self.timer.stepped(info)
            actions, intervened = executed_batch(actions, info, self.num_envs)
            ended = np.logical_or(terminated, truncated)
            last = final_observations(next_obs, info, ended)
            success = np.broadcast_to(np.asarray(info.get("success", False), bool), (self.num_envs,))
            self._note_instance_faults(info)
            book.step(reward, success, intervened)
            transitions = self._phase_transitions(obs, last, actions, reward, terminated, intervened)
            if self.recorders is not None:
                for i in rows:
                    self.recorders[i].step(actions[i], reward[i], terminated[i], truncated[i],
                                           {k: v[i] for k, v in last.items()}, success[i], intervened=intervened[i],
                                           policy_version=-1 if intervened[i] else versions[i])
            if self.stopping:
                self._end_running()
                self._put_transitions(transitions)
                return
            self._restart_ended(ended, next_obs)
            obs, rows = next_obs, book.rows()
            if not rows:
                self._put_transitions(transitions)
                return
            self._put(_rows_of(obs, rows), rows, self._evaluating(rows), transitions)
            self.gc_guard.if_due()  # the idle part of the step: the policy is computing the action

    def _start_phase(self) -> dict:
        """Reset every instance (instance i gets seed + i) and choose each one's episode kind."""
        book = self.instances
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        with self.lock:
            book.clear()
            for i in range(self.num_envs):
                book.start(i, book.choose(self.budget, self.unlimited, self.eval_pending))
        for i in book.rows():
            self._begin(i, obs, book.kind[i])
        return obs

    def _evaluating(self, rows: list[int]) -> np.ndarray:
        return np.array([self.instances.kind[i] == EVAL for i in rows])

    def _begin(self, i: int, obs: dict, kind: str) -> None:
        if self.recorders is not None and kind != IDLE:
            self.recorders[i].begin({k: v[i] for k, v in obs.items()}, kind=kind,
                                    meta={"robot_rank": self.robot_rank, "env_rank": self.rank, "instance": i})

    def _phase_transitions(self, obs, last, actions, reward, terminated, intervened) -> TransitionBatch | None:
        """The train instances' transitions of this step (counted against the budget), or None."""
        train = self.instances.rows(TRAIN)
        if not train:
            return None
        self._count_train_steps(len(train))
        return transition_batch(_rows_of(obs, train), _rows_of(last, train), actions[train],
                                np.asarray(reward)[train], np.asarray(terminated)[train], intervened[train])

    def _note_instance_faults(self, info: dict) -> None:
        messages = info.get("fault_message") or [""] * self.num_envs
        for i, fault in enumerate(info.get("fault") or ()):
            if fault:
                self.faults.append(f"instance {i}: {fault}: {messages[i]}")

    def _restart_ended(self, ended: np.ndarray, next_obs: dict) -> None:
        """Report each instance's ended episode and start its next one (the batched env already reset it)."""
        book = self.instances
        for i in np.flatnonzero(ended).tolist():
            kind, result = book.finish(i)
            if kind != IDLE:
                if self.recorders is not None:
                    self.recorders[i].end()
                with self.lock:
                    self._report(kind, result)
            with self.lock:
                kind = book.choose(self.budget, self.unlimited, self.eval_pending)
            book.start(i, kind)
            self._begin(i, next_obs, kind)

    def _end_running(self) -> None:
        """End every running episode where it is (a refused step, or stop): report it, close its file."""
        book = self.instances
        for i in book.rows():
            kind, result = book.finish(i)
            if self.recorders is not None:
                self.recorders[i].end()
            with self.lock:
                self._report(kind, result)


def _one(obs: dict) -> dict:
    """One instance's observation as a batch of 1."""
    return {k: np.asarray(v)[None] for k, v in obs.items()}


def _rows_of(obs: dict, rows: list[int]) -> dict:
    return {k: v[rows] for k, v in obs.items()}


def has_real_arm(config) -> bool:
    try:
        return any(getattr(g.hardware, "type", None) == "Franka" for g in config.cluster.node_groups if g.hardware)
    except Exception:  # noqa: BLE001
        return False
