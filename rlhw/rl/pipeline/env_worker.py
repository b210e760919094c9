"""Env worker: one per robot (placement component ``env``), next to the arm.

It owns the env server child process and a `RemoteEnv` client to it, and runs the robot loop in a thread:
send the observation to its rollout worker through the ``obs`` channel, wait for the action on the
``actions`` channel (keyed by env rank), step, write the step to disk, repeat. The controller only sets
how much to collect (``collect`` / ``run_async`` / ``evaluate``) and polls counters (``poll``), so the
robot loop never waits for the controller or for training.

Messages to the rollout worker (dict): ``env`` rank, ``obs``, ``eval`` flag, ``done`` (no action wanted),
and for every step but the first a ``transition`` (obs, action, reward, terminated, next_obs).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from rlhw.env.client import EnvServiceError
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.pipeline.env_server import EnvServerError, EnvServerProcess
from rlhw.runtime.worker import Worker

OBS_CHANNEL = "rlhw.train.obs"
ACTION_CHANNEL = "rlhw.train.actions"
REPLAY_CHANNEL = "rlhw.train.replay"
WEIGHTS_CHANNEL = "rlhw.train.weights"


def robot_rank_of_worker(rank: int) -> int:
    """The Franka hardware rank this env worker drives (its placement's hardware), else its own rank."""
    hw = json.loads(os.environ.get("RLHW_HARDWARE", "{}"))
    if hw.get("type") == "Franka" and hw.get("ranks"):
        return int(hw["ranks"][0])
    return rank


class EnvWorker(Worker):
    def __init__(self, config, run_dir: str, num_rollout: int, channel_prefix: str = ""):
        import torch

        torch.set_num_threads(1)
        self.config = config
        self.cfg = config.train
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
        self.episodes: list[tuple[float, bool, int]] = []  # finished train episodes since last poll
        self.eval_results: list[tuple[float, bool, int]] = []
        self.latencies: deque[float] = deque(maxlen=20_000)  # obs ready -> action received (s)
        self.lateness: deque[float] = deque(maxlen=20_000)  # RobotEnv's info["timing"]["late"] (s)
        self.periods: deque[float] = deque(maxlen=20_000)  # time between consecutive steps of an episode (s)
        self.faults: list[str] = []
        self.consecutive_faults = 0
        fsync = self.cfg.fsync_episodes
        if fsync == "auto":
            fsync = config.env.sim is None and _has_real_arm(config)
        self.recorder = (EpisodeRecorder(self.run_dir / "episodes" / f"env{self.rank}", fsync=bool(fsync))
                         if self.cfg.record_episodes else None)
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
        if self.env.num_envs != 1:
            raise EnvServerError(f"env server serves {self.env.num_envs} instances; the pipeline drives one per "
                                 "env worker (set env.num_envs=1 and place more env workers)")

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
        """What the learners need to build their networks: observation and action specs."""
        s = self.env.env_spec
        return {"observations": {k: (tuple(v.shape), v.dtype) for k, v in s.observations.items()},
                "action_shape": tuple(s.action.shape),
                "action_low": None if s.action.low is None else np.broadcast_to(s.action.low, s.action.shape).tolist(),
                "action_high": None if s.action.high is None else np.broadcast_to(s.action.high, s.action.shape).tolist(),
                "control_hz": s.control_hz, "robot": s.robot, "address": self.env.address}

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
        """Observation-to-action latency and step lateness of every step so far (for benchmarks)."""
        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        out = {"steps": len(self.latencies), "latency_p50_ms": float(np.percentile(lat, 50) * 1e3),
               "latency_p99_ms": float(np.percentile(lat, 99) * 1e3), "latency_max_ms": float(lat.max() * 1e3),
               "timed_steps": len(self.lateness), "late_steps": None, "lateness_p99_ms": None,
               "period_p50_ms": None, "period_p99_ms": None}
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
        if self.recorder is not None:
            self.recorder.close()
        try:
            if self.env is not None:
                self.env.close()
        finally:
            if self.server is not None:
                self.server.stop()

    # ---- the robot loop (thread)
    def _idle(self) -> bool:
        return self.eval_pending == 0 and not self.unlimited and self.budget <= 0 and self.status != "episode"

    def _next_kind(self) -> str | None:
        """Wait for work; returns 'eval', 'train' or None (stop). Called only between episodes."""
        with self.lock:
            while not self.stopping:
                if self.eval_pending > 0:
                    return "eval"
                if self.unlimited or self.budget > 0:
                    return "train"
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
                    result = self._episode(kind)
                except EnvServerError:
                    raise
                except Exception as e:  # noqa: BLE001 - a robot/server failure: restart the server or give up
                    if self.server is not None and not self.server.alive() and self.restarts < self.cfg.env_restarts:
                        self._restart_server(f"{type(e).__name__}: {e}")
                        continue
                    raise
                with self.lock:
                    if kind == "eval":
                        self.eval_pending -= 1
                        self.eval_results.append(result)
                    else:
                        self.episodes.append(result)
        except BaseException as e:  # noqa: BLE001 - reported through poll(); the driver decides
            with self.lock:
                server_note = ""
                if self.server is not None and not self.server.alive():
                    server_note = f" (env server exited; its last output: {self.server.tail()})"
                self.error = f"{type(e).__name__}: {e}{server_note}"
                self.status = "failed"
        finally:
            if self.recorder is not None:
                self.recorder.close()

    def _episode(self, kind: str) -> tuple[float, bool, int]:
        evaluating = kind == "eval"
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        if self.recorder is not None:
            self.recorder.begin(obs, kind=kind, meta={"robot_rank": self.robot_rank, "env_rank": self.rank})
        self.obs_ch.put({"env": self.rank, "obs": obs, "eval": evaluating, "done": False},
                        key=self.rollout_rank, timeout=self.cfg.step_timeout_s)
        t_obs = time.perf_counter()
        ret, success, length = 0.0, False, 0
        t_prev_step = time.perf_counter()
        while True:
            action = self.act_ch.get(key=self.rank, timeout=self.cfg.step_timeout_s)
            self.latencies.append(time.perf_counter() - t_obs)
            try:
                next_obs, reward, terminated, truncated, info = self.env.step(np.asarray(action, dtype=np.float32))
            except EnvServiceError as e:
                if self.server is not None and not self.server.alive():
                    raise  # the server died: restart it (or give up) in _loop
                # The server refused or timed out (e.g. its watchdog stopped the arm after a stall): the
                # episode ends here, truncated; what was recorded so far stays on disk.
                self.faults.append(f"step refused, episode truncated: {e}")
                self.consecutive_faults += 1
                if self.consecutive_faults > 3:
                    raise
                break
            self.consecutive_faults = 0
            t_obs = time.perf_counter()
            timing = info.get("timing", {})
            late = timing.get("late", timing.get("env.late"))  # the env server prefixes env phases "env."
            if length > 0:
                self.periods.append(time.perf_counter() - t_prev_step)
            t_prev_step = time.perf_counter()
            if late is not None and math.isfinite(late):
                self.lateness.append(float(late))
            step_success = bool(np.any(info.get("success", False)))
            if self.recorder is not None:
                self.recorder.step(action, reward, terminated, truncated, next_obs, step_success)
            if info.get("fault"):
                self.faults.append(f"{info['fault']}: {info.get('fault_message')}")
            ret += float(reward)
            length += 1
            success = success or step_success
            done = bool(terminated or truncated)
            msg = {"env": self.rank, "obs": next_obs, "eval": evaluating, "done": done}
            if not evaluating:
                msg["transition"] = {"obs": obs, "action": np.asarray(action, np.float32), "reward": float(reward),
                                     "terminated": bool(terminated), "next_obs": next_obs}
                with self.lock:
                    self.train_steps += 1
                    self.budget -= 1
            if not done or not evaluating:
                self.obs_ch.put(msg, key=self.rollout_rank, timeout=self.cfg.step_timeout_s)
            obs = next_obs
            if done or self.stopping:
                break
        if self.recorder is not None:
            self.recorder.end()
        return ret, success, length


def _has_real_arm(config) -> bool:
    try:
        return any(getattr(g.hardware, "type", None) == "Franka" for g in config.cluster.node_groups if g.hardware)
    except Exception:  # noqa: BLE001
        return False
