"""The single controller: `train_pipeline(config, run_dir)` drives env, rollout and actor groups on Ray.

    env workers (robot nodes) --obs--> rollout workers --actions--> env workers
                                        rollout workers --replay--> actor workers --weights--> rollout workers

The controller never touches observations or transitions: those move through channels (payloads by
object-store reference). It only decides how much to collect, how many updates to run, when to evaluate,
log and checkpoint, and when to stop. ``train.mode``:

- ``sync``: collect ``steps_per_iteration`` env steps (whole episodes: a robot is never paused mid-episode),
  then run the updates they pay for (``utd_ratio``), repeat;
- ``async``: the robots step continuously while the controller runs updates in chunks as data arrives.

A dead env worker (or a failed robot loop) ends the run cleanly: the controller saves a checkpoint, writes
``run.json`` with the worker's name and reason, and returns; every transition is already on disk.
"""

from __future__ import annotations

import math
import time
import uuid

from rlhw.errors import ConfigError, WorkerError
from rlhw.rl.demos import load_demos
from rlhw.rl.pipeline.actor_worker import ActorWorker
from rlhw.rl.pipeline.env_worker import (ACTION_CHANNEL, OBS_CHANNEL, REPLAY_CHANNEL, WEIGHTS_CHANNEL,
                                         EnvWorker, has_real_arm)
from rlhw.rl.pipeline.rollout_worker import RolloutWorker
from rlhw.rl.rundir import RunDir
from rlhw.rl.session import Counters, StopReason, TrainingSession, interrupted

POLL_S = 0.05
CALL_TIMEOUT_S = 120.0
UPDATE_CHUNK = 50  # async mode: updates per controller call (bounds how stale a poll can get)


class PipelineFailure(Exception):
    def __init__(self, who: str, reason: str):
        self.who, self.reason = who, reason
        super().__init__(f"{who}: {reason}")


def _check(config) -> None:
    n = config.env.num_envs
    if n > 1:
        from rlhw.robot.factory import SIMULATORS, plan_env

        arm = plan_env(config, 0).arm_driver
        if arm in SIMULATORS and config.env.sim is None and config.env.driver in ("auto", "franka") \
                and has_real_arm(config):
            arm = "franka"  # rank 0 is simulated, but another env worker drives a real arm
        if arm not in SIMULATORS:
            raise ConfigError("env.num_envs", f"is {n}, but the env workers drive a real {arm} arm, which hosts one "
                                              "env instance (one controller per arm): set env.num_envs=1 and place "
                                              "one env worker per arm, or set env.sim=mujoco to rehearse in simulation")
    for comp in ("env", "rollout", "actor"):
        if comp not in config.cluster.components():
            raise ConfigError("cluster.component_placement", f"has no '{comp}' component; the training pipeline "
                                                              "needs env, rollout and actor placed")


class Pipeline:
    """The three worker groups and their channels, launched on a Cluster. Also used by tests/benchmarks."""

    def __init__(self, config, run_dir: RunDir, cluster=None, resume: bool = False):
        from rlhw.runtime.channel import Channel
        from rlhw.runtime.cluster import Cluster

        _check(config)
        self.config = config
        self.run_dir = run_dir
        self.own_cluster = cluster is None
        self.cluster = cluster or Cluster(config, probe_hardware=config.env.sim is None,
                                          ray_init=_rehearsal_ray_init(config))
        placements = self.cluster.placements
        self.n_env, self.n_rollout, self.n_actor = (len(placements[c]) for c in ("env", "rollout", "actor"))
        prefix = f"{uuid.uuid4().hex[:8]}."
        self.channels = [Channel.create(prefix + name) for name in
                         (OBS_CHANNEL, ACTION_CHANNEL, REPLAY_CHANNEL, WEIGHTS_CHANNEL)]
        self.groups = []
        try:
            self.actors = ActorWorker.create_group(config, str(run_dir.path), self.n_rollout, prefix).launch(
                self.cluster, placement="actor", ready_timeout_s=CALL_TIMEOUT_S)
            self.groups.append(self.actors)
            self.rollouts = RolloutWorker.create_group(config, self.n_actor, self.n_env, prefix).launch(
                self.cluster, placement="rollout", ready_timeout_s=CALL_TIMEOUT_S)
            self.groups.append(self.rollouts)
            start_s = config.train.env_start_timeout_s + 30
            self.envs = EnvWorker.create_group(config, str(run_dir.path), self.n_rollout, prefix).launch(
                self.cluster, placement="env", ready_timeout_s=start_s)
            self.groups.append(self.envs)
            self.spec = self.envs.execute_on(0).spec().wait(CALL_TIMEOUT_S)[0]
            # Bad demos fail here, with the field named, rather than inside every actor rank.
            load_demos(config.train.demos, {k: v[0] for k, v in self.spec["observations"].items()},
                       tuple(self.spec["action_shape"]))
            if self.n_actor > 1:
                self.actors.init_collective("auto")
            self.resumed = self.actors.setup(self.spec, resume).wait(CALL_TIMEOUT_S)[0]
            self.rollouts.setup(self.spec).wait(CALL_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def poll_envs(self) -> list[dict]:
        results = self.envs.poll().wait(CALL_TIMEOUT_S)
        for r in results:
            if r["error"]:
                raise PipelineFailure(self.envs.addresses[r["rank"]], r["error"])
        return results

    def check_rollouts(self) -> None:
        for r in self.rollouts.poll().wait(CALL_TIMEOUT_S):
            if r["error"]:
                raise PipelineFailure(self.rollouts.addresses[r["rank"]], r["error"])

    def close(self) -> None:
        for g in reversed(self.groups):
            if hasattr(g.worker_cls, "stop_loop"):
                try:
                    g.stop_loop().wait(30)
                except Exception:  # noqa: BLE001 - a dead worker cannot stop; it is killed below
                    pass
            g.shutdown()
        self.groups = []
        for ch in self.channels:
            try:
                ch.destroy()
            except Exception:  # noqa: BLE001
                pass
        self.channels = []
        if self.own_cluster:
            self.cluster.shutdown()


def _rehearsal_ray_init(config) -> dict:
    """Sim-only rehearsal of a GPU layout on a machine without those GPUs (``env.sim`` on one node): give the
    embedded Ray as many logical GPUs as the config declares, so the placement is kept as written; the
    workers then find no CUDA device and run on CPU (``train.device: auto``)."""
    if config.env.sim is None or config.cluster.num_nodes != 1:
        return {}
    from rlhw.placement import plan

    # One logical GPU per (process, accelerator) pair: components sharing a GPU are launched as separate
    # groups, and each group asks Ray for its own share.
    declared = [a for recs in plan(config.cluster).values() for r in recs if r.node_rank == 0
                for a in r.visible_accelerators]
    try:
        import torch

        present = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        present = 0
    return {"num_gpus": len(declared)} if len(declared) > present else {}


def train_pipeline(config, run_dir: RunDir, resume: bool = False, cluster=None) -> StopReason:
    cfg = config.train
    try:
        pipe = Pipeline(config, run_dir, cluster=cluster, resume=resume)
    except BaseException as e:
        run_dir.write_status("failed", reason=f"the pipeline did not start: {str(e).splitlines()[0]}")
        raise
    r = pipe.resumed
    counters = Counters(env_steps=int(r["env_steps"]), updates=int(r["updates"]), episodes=int(r["episodes"]),
                        best_success=float(r["best_success"]))
    session = TrainingSession(config, run_dir, counters)
    base_steps = counters.env_steps
    collected = [0] * pipe.n_env
    restarts = [0] * pipe.n_env
    session.status_extra["env_restarts"] = restarts  # env server children restarted, per env worker
    explore_random = True

    def checkpoint() -> None:
        pipe.actors.execute_on(0).save_checkpoint({"env_steps": session.c.env_steps, "episodes": session.c.episodes,
                                                    "best_success": session.c.best_success}).wait(CALL_TIMEOUT_S)

    eval_results: list = []  # finished eval episodes, whichever poll brought them in

    def absorb(results: list[dict]) -> None:
        for res in results:
            eval_results.extend(res["eval_results"])  # a poll hands them over once: never drop them
            for ret, success, length, interventions in res["episodes"]:
                session.add_episode(ret, success, length, interventions)
            for fault in res["faults"]:
                session.increment("robot/faults")
                _note(f"{pipe.envs.addresses[res['rank']]}: {fault}")
            collected[res["rank"]] = res["train_steps"]
            restarts[res["rank"]] = res["restarts"]
        total = base_steps + sum(collected)
        if total > session.c.env_steps:
            session.add_env_steps(total - session.c.env_steps)

    def train_owed() -> None:
        nonlocal explore_random
        if explore_random and session.c.env_steps >= cfg.learning_starts:
            pipe.rollouts.set_exploration(False).wait(CALL_TIMEOUT_S)
            explore_random = False
        owed = int(cfg.utd_ratio * (session.c.env_steps - cfg.learning_starts)) - session.c.updates
        while owed > 0:
            n = min(owed, UPDATE_CHUNK) if cfg.mode == "async" else owed
            m = pipe.actors.train(n).wait(CALL_TIMEOUT_S + n)[0]
            if m["updates"] == 0:
                return
            session.add_losses({k: v for k, v in m.items() if k.startswith("losses/")}, m["updates"])
            owed -= m["updates"]
            # A learner slower than the robots (high utd_ratio, async mode) owes updates: logged, never hidden.
            session.set_extra(**{"losses/alpha": m["losses/alpha"], "train/replay_size": m["replay"],
                                 "train/demo_buffer_size": m["demo_buffer"], "perf/updates_behind": max(owed, 0)})
            if cfg.mode == "async":
                absorb(pipe.poll_envs())
                return

    def evaluate() -> None:
        per_env = math.ceil(cfg.eval_episodes / pipe.n_env)
        eval_results.clear()
        pipe.envs.evaluate(per_env).wait(CALL_TIMEOUT_S)
        # In async mode train_owed() polls too: results it brings in land in eval_results through absorb().
        while len(eval_results) < per_env * pipe.n_env:
            absorb(pipe.poll_envs())
            if cfg.mode == "async":
                train_owed()
            else:
                time.sleep(POLL_S)
        results = eval_results[:]
        eval_results.clear()
        session.record_eval(results)

    try:
        per_env_budget = max(1, math.ceil(cfg.steps_per_iteration / pipe.n_env))
        if cfg.mode == "async":
            pipe.envs.run_async().wait(CALL_TIMEOUT_S)
        last_check = time.monotonic()
        while session.stop is None:
            if cfg.mode == "sync":
                pipe.envs.collect(per_env_budget).wait(CALL_TIMEOUT_S)
                while True:  # until every env worker has used its budget and finished its episode
                    polled = pipe.poll_envs()
                    absorb(polled)
                    if all(p["idle"] for p in polled):
                        break
                    time.sleep(POLL_S)
                train_owed()
            else:
                absorb(pipe.poll_envs())
                before = session.c.updates
                train_owed()
                if session.c.updates == before:
                    time.sleep(POLL_S)
            if time.monotonic() - last_check > 2.0:
                pipe.check_rollouts()
                last_check = time.monotonic()
            if session.log_due():
                session.log()
            if session.eval_due():
                evaluate()
            if session.checkpoint_due() or session.stop is not None:
                checkpoint()
            session.check_budget()
        # Stop the robots first (async mode keeps them stepping), count their last steps, then save.
        pipe.envs.stop_loop().wait(CALL_TIMEOUT_S)
        absorb(pipe.poll_envs())
        checkpoint()
        # Data-parallel ranks must hold identical weights; run.json records the evidence.
        session.status_extra["actor_weight_digests"] = pipe.actors.weights_digest().wait(CALL_TIMEOUT_S)
        session.status_extra["loop_health"] = pipe.envs.loop_health().wait(CALL_TIMEOUT_S)
        return session.finish()
    except (PipelineFailure, WorkerError) as e:
        who = e.who if isinstance(e, PipelineFailure) else e.address
        reason = e.reason if isinstance(e, PipelineFailure) else str(e).splitlines()[0]
        _note(f"stopping: {who} failed: {reason}")
        saved = _try(checkpoint)
        return session.finish(StopReason("failed", f"{who} failed: {reason}; "
                                                   f"{'checkpoint saved' if saved else 'checkpoint NOT saved'}, "
                                                   f"episodes on disk in {run_dir.episodes}"))
    except KeyboardInterrupt:
        _note("interrupted: stopping the robots and saving a checkpoint (Ctrl-C again to abandon)")
        stop = interrupted(session.c.env_steps, saved=False)
        try:  # a second Ctrl-C leaves this block; run.json still says what happened
            _try(lambda: pipe.envs.stop_loop().wait(CALL_TIMEOUT_S))
            _try(lambda: absorb(pipe.poll_envs()))
            stop = interrupted(session.c.env_steps, _try(checkpoint))
        finally:
            session.finish(stop)
        return stop
    except BaseException as e:
        _try(checkpoint)
        session.finish(StopReason("failed", f"{type(e).__name__}: {e}"))
        raise
    finally:
        pipe.close()


def _try(fn) -> bool:
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001 - best effort while already failing
        return False


def _note(text: str) -> None:
    import sys

    print(f"rlhw train: {text}", file=sys.stderr, flush=True)
