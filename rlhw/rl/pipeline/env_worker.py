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

Messages to the rollout worker (dict), one per env step, batched whatever ``num_envs`` is:

- ``env``: env rank (the rollout worker answers on the ``actions`` channel with key = env rank);
- ``obs``: ``{name: (k, ...) array}``, the observations of the k instances that want an action (None when
  k = 0), and ``rows``: those instances' indices;
- ``eval``: bool array (k,), which of them are in an eval episode (deterministic action);
- ``transitions``: the train transitions of this step, stacked in the replay buffer's field names
  (``obs/<name>``, ``next_obs/<name>``, ``action``, ``reward``, ``terminated``, ``intervened``), or None.
  ``action`` is what the arm executed (the env's ``info["executed_action"]``: an operator's command while
  they have taken over), ``intervened`` whether an operator did (``info["intervened"]``).

The answer is ONE ``(actions, policy_versions)`` pair: actions (k, action...) in the order of ``rows`` and
the version of the weights that chose each (-1: a uniform random action). The recorder stores the version
with the step (-1 where an operator acted instead).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from rlhw.env.client import EnvServiceError
from rlhw.rl.episodes import EpisodeRecorder, executed, executed_batch
from rlhw.rl.pipeline.env_server import EnvServerError, EnvServerProcess
from rlhw.rl.pipeline.instances import EVAL, IDLE, TRAIN, Instances
from rlhw.runtime.worker import Worker

OBS_CHANNEL = "rlhw.train.obs"
ACTION_CHANNEL = "rlhw.train.actions"
REPLAY_CHANNEL = "rlhw.train.replay"
WEIGHTS_CHANNEL = "rlhw.train.weights"


def encode_message(msg: dict) -> bytes:
    """An env message as one bytes object (pickle protocol 5). Why: Ray serializes a dict of ~20 small
    numpy arrays field by field, and the channel actor decodes and re-encodes it on the way through;
    for an 8-instance reach message one bytes object measured ~1.2 ms less per put and ~0.7 ms less
    per get on the 2-core VM. Large messages (camera images) still go through the object store: the
    channel wraps big bytes like any other large payload."""
    return pickle.dumps(msg, protocol=5)


def decode_message(data: bytes) -> dict:
    return pickle.loads(data)


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
        # finished train episodes since last poll: (return, success, length, intervened steps)
        self.episodes: list[tuple[float, bool, int, int]] = []
        self.eval_results: list[tuple[float, bool, int, int]] = []
        # Loop health, per env-worker step (with num_envs > 1 one step moves every instance):
        self.latencies: deque[float] = deque(maxlen=20_000)  # obs ready -> action received (s)
        self.lateness: deque[float] = deque(maxlen=20_000)  # RobotEnv's info["timing"]["late"] (s)
        self.periods: deque[float] = deque(maxlen=20_000)  # time between consecutive steps of an episode (s)
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
        spec = self.env.env_spec
        shape = (self.num_envs, *spec.action.shape)
        zero = np.zeros(shape, np.float32)
        if spec.action.low is not None or spec.action.high is not None:
            zero = np.clip(zero, spec.action.low, spec.action.high).astype(np.float32)
        self._idle_action = zero  # what an idle instance of a batch gets (simulators only)

    def _restart_server(self, why: str) -> None:
        self.restarts += 1
        self.faults.append(f"env server restarted ({why})")
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - the old client may be broken already
            pass
        self.server.stop()
        self._start_server()

    def spec(self) -> dict:
        """What the learners need to build their networks: observation and action specs (per instance)."""
        s = self.env.env_spec
        return {"observations": {k: (tuple(v.shape), v.dtype) for k, v in s.observations.items()},
                "action_shape": tuple(s.action.shape),
                "action_low": None if s.action.low is None else np.broadcast_to(s.action.low, s.action.shape).tolist(),
                "action_high": None if s.action.high is None else np.broadcast_to(s.action.high, s.action.shape).tolist(),
                "control_hz": s.control_hz, "robot": s.robot, "address": self.env.address,
                "num_envs": self.num_envs}

    # ---- control from the driver (all return at once)
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

    def poll(self) -> dict:
        """Counters and finished episodes since the last poll; ``error`` when the loop has failed."""
        with self.lock:
            out = {"rank": self.rank, "train_steps": self.train_steps, "episodes": self.episodes,
                   "eval_results": self.eval_results, "idle": self._idle(), "error": self.error,
                   "status": self.status, "restarts": self.restarts, "faults": self.faults,
                   "eval_pending": self.eval_pending}
            self.episodes, self.eval_results, self.faults = [], [], []
            return out

    def server_pid(self) -> int | None:
        """Process id of the env server child (tests kill it to check the restart)."""
        return self.server.proc.pid if self.server is not None and self.server.proc is not None else None

    def loop_health(self) -> dict:
        """Observation-to-action latency and step lateness of every step so far (for benchmarks).

        Counted per env-worker step: with num_envs > 1 one step (and one latency) covers all instances."""
        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        out = {"steps": len(self.latencies), "latency_p50_ms": float(np.percentile(lat, 50) * 1e3),
               "latency_p99_ms": float(np.percentile(lat, 99) * 1e3), "latency_max_ms": float(lat.max() * 1e3),
               "timed_steps": len(self.lateness), "late_steps": None, "lateness_p99_ms": None,
               "period_p50_ms": None, "period_p99_ms": None, "num_envs": self.num_envs}
        if self.lateness:  # only real-time envs report lateness; simulators advance simulated time
            late = np.array(self.lateness)
            out.update(late_steps=int((late > 0).sum()), lateness_p99_ms=float(np.percentile(late, 99) * 1e3))
        if self.periods:
            per = np.array(self.periods)
            out.update(period_p50_ms=float(np.percentile(per, 50) * 1e3), period_p99_ms=float(np.percentile(per, 99) * 1e3))
        return out

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
        """Wait for work; returns 'eval', 'train' or None (stop). Called only between episodes."""
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
        except BaseException as e:  # noqa: BLE001 - reported through poll(); the driver decides
            with self.lock:
                server_note = ""
                if self.server is not None and not self.server.alive():
                    server_note = f" (env server exited; its last output: {self.server.tail()})"
                self.error = f"{type(e).__name__}: {e}{server_note}"
                self.status = "failed"
        finally:
            self._close_recorders()

    def _report(self, kind: str, result: tuple[float, bool, int]) -> None:
        """A finished episode, for the controller's next poll (caller holds the lock)."""
        if kind == EVAL:
            self.eval_pending -= 1
            self.eval_results.append(result)
        elif kind == TRAIN:
            self.episodes.append(result)

    def _put(self, obs, rows, evaluating, transitions) -> None:
        msg = {"env": self.rank, "obs": obs, "rows": rows, "eval": evaluating, "transitions": transitions}
        self.obs_ch.put(encode_message(msg), key=self.rollout_rank, timeout=self.cfg.step_timeout_s)

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

    def _actions(self) -> tuple[np.ndarray, np.ndarray]:
        """The rollout worker's answer: (actions, policy versions), one row per instance that asked."""
        actions, versions = self.act_ch.get(key=self.rank, timeout=self.cfg.step_timeout_s)
        return np.asarray(actions, np.float32), np.asarray(versions, np.int64)

    def _note_timing(self, info: dict) -> None:
        timing = info.get("timing", {})
        late = timing.get("late", timing.get("env.late"))  # the env server prefixes env phases "env."
        if late is not None and math.isfinite(late):
            self.lateness.append(float(late))

    # ---- one instance: one episode at a time, explicit reset (the real-robot path)
    def _episode(self, kind: str) -> tuple[float, bool, int, int]:
        evaluating = kind == EVAL
        flags = np.array([evaluating])
        recorder = self.recorders[0] if self.recorders else None
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        if recorder is not None:
            recorder.begin(obs, kind=kind, meta={"robot_rank": self.robot_rank, "env_rank": self.rank})
        self._put({k: np.asarray(v)[None] for k, v in obs.items()}, [0], flags, None)
        t_obs = time.perf_counter()
        ret, success, length, interventions = 0.0, False, 0, 0
        t_prev_step = time.perf_counter()
        while True:
            actions, versions = self._actions()
            action, version = actions[0], int(versions[0])
            self.latencies.append(time.perf_counter() - t_obs)
            stepped = self._step(action, "episode truncated")
            if stepped is None:
                break
            next_obs, reward, terminated, truncated, info = stepped
            t_obs = time.perf_counter()
            if length > 0:
                self.periods.append(time.perf_counter() - t_prev_step)
            t_prev_step = time.perf_counter()
            self._note_timing(info)
            action, intervened = executed(action, info)
            interventions += int(intervened)
            step_success = bool(np.any(info.get("success", False)))
            if recorder is not None:
                recorder.step(action, reward, terminated, truncated, next_obs, step_success, intervened=intervened,
                              policy_version=-1 if intervened else version)
            if info.get("fault"):
                self.faults.append(f"{info['fault']}: {info.get('fault_message')}")
            ret += float(reward)
            length += 1
            success = success or step_success
            done = bool(terminated or truncated)
            transitions = None
            if not evaluating:
                transitions = {**{f"obs/{k}": np.asarray(v)[None] for k, v in obs.items()},
                               **{f"next_obs/{k}": np.asarray(v)[None] for k, v in next_obs.items()},
                               "action": action[None], "reward": np.array([reward], np.float32),
                               "terminated": np.array([terminated], np.float32),
                               "intervened": np.array([intervened], np.float32)}
                with self.lock:
                    self.train_steps += 1
                    self.budget -= 1
            if not done:
                self._put({k: np.asarray(v)[None] for k, v in next_obs.items()}, [0], flags, transitions)
            elif transitions is not None:
                self._put(None, [], flags[:0], transitions)
            obs = next_obs
            if done or self.stopping:
                break
        if recorder is not None:
            recorder.end()
        return ret, success, length, interventions

    # ---- several instances (simulators): one phase steps them all until every one is idle
    def _begin(self, i: int, obs: dict, kind: str) -> None:
        if self.recorders is not None and kind != IDLE:
            self.recorders[i].begin({k: v[i] for k, v in obs.items()}, kind=kind,
                                    meta={"robot_rank": self.robot_rank, "env_rank": self.rank, "instance": i})

    def _end_running(self) -> None:
        """End every running episode where it is (a refused step, or stop): report it, close its file."""
        book = self.instances
        for i in book.rows():
            kind, result = book.finish(i)
            if self.recorders is not None:
                self.recorders[i].end()
            with self.lock:
                self._report(kind, result)

    def _phase(self) -> None:
        """Reset every instance, then step them together; each instance's episode kind is decided when it
        starts (here or at its same-step autoreset). Returns when every instance is idle, on stop, or after
        a refused step (which truncates the running episodes; the next phase resets all instances)."""
        book = self.instances
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))  # instance i gets seed + i
        with self.lock:
            book.clear()
            for i in range(self.num_envs):
                book.start(i, book.choose(self.budget, self.unlimited, self.eval_pending))
        for i in book.rows():
            self._begin(i, obs, book.kind[i])
        rows = book.rows()
        if not rows:
            return
        self._put({k: v[rows] for k, v in obs.items()}, rows, np.array([book.kind[i] == EVAL for i in rows]), None)
        t_obs = t_prev_step = time.perf_counter()
        first = True
        while True:
            acted, acted_versions = self._actions()
            self.latencies.append(time.perf_counter() - t_obs)
            actions = self._idle_action.copy()
            actions[rows] = acted
            versions = np.full(self.num_envs, -1, np.int64)
            versions[rows] = acted_versions
            stepped = self._step(actions, f"episodes of all {self.num_envs} instances truncated", self._end_running)
            if stepped is None:
                return
            next_obs, reward, terminated, truncated, info = stepped
            t_obs = time.perf_counter()
            if not first:
                self.periods.append(t_obs - t_prev_step)
            first, t_prev_step = False, t_obs
            self._note_timing(info)
            actions, intervened = executed_batch(actions, info, self.num_envs)
            ended = np.logical_or(terminated, truncated)
            last = next_obs  # each instance's observation after its action (the final one where it ended)
            if ended.any():
                final, mask = info.get("final_observation") or {}, info.get("_final_observation")
                mask = ended if mask is None else np.asarray(mask, bool) & ended
                if final and mask.any():
                    last = {k: np.array(v) for k, v in next_obs.items()}
                    for k in last:
                        last[k][mask] = np.asarray(final[k])[mask]
            success = np.asarray(info.get("success", False), bool)
            success = np.broadcast_to(success, (self.num_envs,))
            messages = info.get("fault_message") or [""] * self.num_envs
            for i, fault in enumerate(info.get("fault") or ()):
                if fault:
                    self.faults.append(f"instance {i}: {fault}: {messages[i]}")
            book.step(reward, success, intervened)
            train = book.rows(TRAIN)
            transitions = None
            if train:
                transitions = {**{f"obs/{k}": v[train] for k, v in obs.items()},
                               **{f"next_obs/{k}": v[train] for k, v in last.items()},
                               "action": actions[train], "reward": np.asarray(reward, np.float32)[train],
                               "terminated": np.asarray(terminated, np.float32)[train],
                               "intervened": intervened[train].astype(np.float32)}
                with self.lock:
                    self.train_steps += len(train)
                    self.budget -= len(train)
            if self.recorders is not None:
                for i in rows:
                    self.recorders[i].step(actions[i], reward[i], terminated[i], truncated[i],
                                           {k: v[i] for k, v in last.items()}, success[i], intervened=intervened[i],
                                           policy_version=-1 if intervened[i] else versions[i])
            if self.stopping:
                self._end_running()
                if transitions is not None:
                    self._put(None, [], np.zeros(0, bool), transitions)
                return
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
            obs = next_obs
            rows = book.rows()
            if not rows:
                if transitions is not None:
                    self._put(None, [], np.zeros(0, bool), transitions)
                return
            self._put({k: v[rows] for k, v in obs.items()}, rows, np.array([book.kind[i] == EVAL for i in rows]),
                      transitions)


def has_real_arm(config) -> bool:
    try:
        return any(getattr(g.hardware, "type", None) == "Franka" for g in config.cluster.node_groups if g.hardware)
    except Exception:  # noqa: BLE001
        return False
