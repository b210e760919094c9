"""The pipeline's worker groups and channels, launched on a cluster: `Pipeline` (rlhw.rl.pipeline.controller
runs the training loop on it; tests and benchmarks launch one on their own).

Apart from the loop because launching is its own concern: what a layout refuses before any worker starts
(`check_layout`), the order the groups start in (the learners, then the rollout workers whose lane addresses
the env workers need, then the env workers as a `Fleet` of cells), what the env spec must fit before anything
trains (demos, a warm start), and how every group and channel is released, whatever failed.

A `PipelineFailure` names the worker whose failure ends the run: a rollout worker's loop (it acts for every
cell it serves), the last cell in the run; a cell that dies while others are left only leaves the run
(`Fleet.drop`), whichever process acts for it.
"""

from __future__ import annotations

import secrets
import uuid

from rlhw.config.root import Config
from rlhw.errors import ConfigError
from rlhw.rl.checkpoint import checked_init_from
from rlhw.rl.demos import env_provenance, load_demos
from rlhw.rl.pipeline.env_worker import EnvWorker
from rlhw.rl.pipeline.fleet import Fleet
from rlhw.rl.pipeline.learner_worker import LearnerWorker
from rlhw.rl.pipeline.messages import REPLAY_CHANNEL, WEIGHTS_CHANNEL, EnvProgress, RolloutProgress, expect
from rlhw.rl.pipeline.rollout_worker import RolloutWorker
from rlhw.rl.rundir import RunDir
from rlhw.rl.spaces import observation_shapes

CALL_TIMEOUT_S = 120.0  # a call on a worker group: launching, polling, stopping


class PipelineFailure(Exception):
    def __init__(self, who: str, reason: str):
        self.who, self.reason = who, reason
        super().__init__(f"{who}: {reason}")


def check_layout(config: Config) -> None:
    """What the pipeline refuses before any worker starts: the env layout a run cannot keep (a batch on a real arm,
    a rehearsal whose judge would not reach the controller, a component missing from the placement)."""
    from rlhw.rl.env_transport import env_transport
    from rlhw.robot.factory import plan_env

    n = config.env.num_envs
    simulated = plan_env(config, 0).simulated  # refuses, before any worker starts, a real arm with no Franka placed
    if n > 1 and not simulated:  # an auto fallback beside a declared Franka counts as real
        raise ConfigError(
            "env.num_envs",
            f"is {n}, but the env workers drive a real arm, which hosts one "
            "env instance (one controller per arm): set env.num_envs=1 and place "
            "one env worker per arm, or set env.sim=mujoco to rehearse in simulation",
        )
    if config.env.sim_state == "hidden" and env_transport(config, 0) == "server":
        raise ConfigError(
            "env.sim_state",
            "is hidden (a rehearsal), but the env is placed on a Franka rank, so it runs behind a server child, "
            "and the simulator judge's verdict does not cross the server yet (eval/success_rate would have no "
            "judge): rehearse on a node group without arm hardware, as configs/sim_push_cube_pixels.yaml does",
        )
    if config.env.teleop.device == "keyboard":
        raise ConfigError(
            "env.teleop.device",
            "is keyboard, which reads the terminal of the process the env runs in, but the pipeline runs the env "
            "in an env worker (a Ray actor, or its serve-env child) whose input is /dev/null, so the operator's "
            "keys would never arrive: use env.teleop.device=spacemouse (read over USB wherever the env runs), or "
            "train.runner=local to train from this terminal",
        )
    needed = ("env", "learner") if config.train.policy_at == "env" else ("env", "rollout", "learner")
    for comp in needed:
        if comp not in config.cluster.components():
            raise ConfigError(
                "cluster.component_placement",
                f"has no '{comp}' component; the training pipeline "
                f"needs {', '.join(needed)} placed"
                + (
                    ""
                    if comp != "rollout"
                    else " (or set train.policy_at=env to act in the env workers, next to the arms)"
                ),
            )


class Pipeline:
    """The three worker groups and their channels, launched on a Cluster. Also used by tests/benchmarks."""

    def __init__(self, config: Config, run_dir: RunDir, cluster=None, resume: bool = False):
        from rlhw.runtime.channel import Channel
        from rlhw.runtime.cluster import Cluster

        check_layout(config)
        self.config = config
        self.run_dir = run_dir
        self.own_cluster = cluster is None
        self.cluster = cluster or Cluster(
            config, probe_hardware=config.env.sim is None, ray_init=_rehearsal_ray_init(config)
        )
        placements = self.cluster.placements
        self.n_env, self.n_learner = len(placements["env"]), len(placements["learner"])
        # Next to the arm, the env workers act and no rollout worker is launched (even where one is placed).
        self.n_rollout = 0 if config.train.policy_at == "env" else len(placements["rollout"])
        prefix = f"{uuid.uuid4().hex[:8]}."
        self.channels = [Channel.create(prefix + name) for name in (REPLAY_CHANNEL, WEIGHTS_CHANNEL)]
        self.groups = []
        try:
            self.learners = LearnerWorker.create_group(
                config, str(run_dir.path), self.n_rollout or self.n_env, prefix
            ).launch(self.cluster, component="learner", ready_timeout_s=CALL_TIMEOUT_S)
            self.groups.append(self.learners)
            lane_token = secrets.token_bytes(32)  # proves a step lane's two ends belong to this run
            lanes = None
            self.rollouts = None
            if self.n_rollout:
                self.rollouts = RolloutWorker.create_group(config, self.n_learner, prefix, lane_token).launch(
                    self.cluster, component="rollout", ready_timeout_s=CALL_TIMEOUT_S
                )
                self.groups.append(self.rollouts)
                lanes = self.rollouts.lane_address().wait(CALL_TIMEOUT_S)
            start_s = config.train.env_start_timeout_s + 30
            self.envs = Fleet(  # the env workers as cells: one that dies leaves the run, the others go on
                EnvWorker.create_group(
                    config, str(run_dir.path), self.n_rollout, prefix, lanes, lane_token, self.n_learner
                ).launch(self.cluster, component="env", ready_timeout_s=start_s)
            )
            self.groups.append(self.envs)
            self.spec = self.envs.execute_on(0).spec().wait(CALL_TIMEOUT_S)[0]
            # Bad demos fail here, with the field named, rather than inside every learner rank.
            load_demos(
                config.train.demos,
                observation_shapes(self.spec),
                tuple(self.spec.action.shape),
                env_provenance(config.env),
            )
            if config.train.init_from and not resume:  # and a warm start that does not fit this env
                checked_init_from(config, self.spec)
            if self.n_learner > 1:
                self.learners.init_collective("auto")
            self.resumed = self.learners.setup(self.spec, resume).wait(CALL_TIMEOUT_S)[0]
            if self.rollouts is not None:
                self.rollouts.setup(self.spec).wait(CALL_TIMEOUT_S)
            self.acting = self.rollouts or self.envs  # whose policy acts: they take set_exploration
        except BaseException:
            self.close()
            raise

    def poll_envs(self) -> list[EnvProgress]:
        """Every cell's progress; a cell whose loop failed leaves the run (the last one ends it). A rollout worker
        acting for several cells is asked first: its death fails each of their lanes, and that is its failure,
        which ends the run naming it, not theirs (no cell is reported lost for it)."""
        results = [expect(r, EnvProgress, "env worker poll()") for r in self.envs.poll().wait(CALL_TIMEOUT_S)]
        if any(r.error for r in results):
            self.check_rollouts()
        for r in results:
            if r.error and not self.envs.drop(r.rank, r.error):  # the last cell in the run: the run ends
                raise PipelineFailure(self.envs.addresses[r.rank], r.error)
        return results

    def check_rollouts(self) -> None:
        """A `PipelineFailure` (a failed loop) or `WorkerError` (a dead worker) naming the first rollout worker
        that can no longer act."""
        if self.rollouts is None:
            return
        for r in self.rollouts.poll().wait(CALL_TIMEOUT_S):
            r = expect(r, RolloutProgress, "rollout worker poll()")
            if r.error:
                raise PipelineFailure(self.rollouts.addresses[r.rank], r.error)

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


def _rehearsal_ray_init(config: Config) -> dict:
    """Sim-only rehearsal of a GPU layout on a machine without those GPUs (``env.sim`` on one node): give the
    embedded Ray as many logical GPUs as the config declares, so the placement is kept as written; the
    workers then find no CUDA device and run on CPU (``train.device: auto``)."""
    if config.env.sim is None or config.cluster.num_nodes != 1:
        return {}
    from rlhw.placement import plan

    # One logical GPU per (process, accelerator) pair: components sharing a GPU are launched as separate
    # groups, and each group asks Ray for its own share.
    declared = [
        a for recs in plan(config.cluster).values() for r in recs if r.node_rank == 0 for a in r.visible_accelerators
    ]
    try:
        import torch

        present = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        present = 0
    return {"num_gpus": len(declared)} if len(declared) > present else {}
