"""What a smoke test checks, read from the config: robots, cameras, nodes and env servers.

Real mode (no ``env.sim``): one robot per Franka hardware entry in any node group, the cameras each
arm lists in ``camera_serials`` plus RealSense entries of their own, every node. Sim mode
(``env.sim=mujoco|mock``, or ``env.driver`` set to a simulator): the env component's robots are
replaced by that simulator, the way `rlhw.robot.make_env` builds them, and their cameras become
simulated cameras with the same names; the node ranks stay those of the real setup, so the
placement is exercised as well.

``--node-group G`` keeps what belongs to group G (its robots and their cameras, its cameras, its
nodes); ``--robot R`` keeps Franka rank R (in each selected group) with its cameras, node and env
server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rlhw.config.root import Config
from rlhw.errors import ConfigError
from rlhw.hardware.types.franka import FrankaConfig
from rlhw.hardware.types.realsense import RealSenseConfig, RealSenseOptions
from rlhw.smoke.options import SmokeOptions


@dataclass(frozen=True)
class CameraTarget:
    serial: str
    node_rank: int
    driver: str  # realsense | mujoco | mock
    width: int
    height: int
    fps: float
    depth: bool = False
    robot: str | None = None  # the robot target it observes (sim cameras render that arm)
    group: str | None = None
    playback_file: str | None = None  # check the pipeline on this recording instead of the device
    hardware: RealSenseConfig | None = None  # the validated entry that declares it, which its driver builds from

    @property
    def name(self) -> str:
        return f"camera {self.serial}"


@dataclass(frozen=True)
class RobotTarget:
    name: str  # franka@172.16.0.2, mock-sim0
    node_rank: int
    rank: int  # Franka rank within its node group (the --robot number and serve-env's --robot)
    driver: str  # franka | mujoco | mock
    group: str | None = None
    entry: FrankaConfig | None = None  # when there is a hardware entry
    cameras: tuple[CameraTarget, ...] = ()
    simulated: bool = False  # its env plan's answer (`rlhw.robot.factory.EnvPlan.simulated`)


@dataclass(frozen=True)
class EnvServerTarget:
    robot: RobotTarget | None
    node_rank: int
    address: str | None = None  # connect here instead of starting `rlhw serve-env`

    @property
    def name(self) -> str:
        if self.address:
            return f"env-server {self.address}"
        return f"env-server ({self.robot.name})" if self.robot else "env-server"


@dataclass
class Targets:
    robots: list[RobotTarget] = field(default_factory=list)
    cameras: list[CameraTarget] = field(default_factory=list)  # cameras not attached to a robot target
    nodes: list[int] = field(default_factory=list)
    env_servers: list[EnvServerTarget] = field(default_factory=list)

    def node_ranks(self) -> list[int]:
        ranks = set(self.nodes) | {r.node_rank for r in self.robots} | {c.node_rank for c in self.cameras}
        ranks |= {e.node_rank for e in self.env_servers}
        return sorted(ranks)

    def on_node(self, node_rank: int) -> Targets:
        return Targets(
            robots=[r for r in self.robots if r.node_rank == node_rank],
            cameras=[c for c in self.cameras if c.node_rank == node_rank],
            nodes=[n for n in self.nodes if n == node_rank],
            env_servers=[e for e in self.env_servers if e.node_rank == node_rank],
        )

    def empty(self) -> bool:
        return not (self.robots or self.cameras or self.nodes or self.env_servers)


def sim_driver(config: Config) -> str | None:
    from rlhw.robot.factory import SIMULATORS

    env = config.env
    if env.sim is not None:
        return env.sim
    return env.driver if env.driver in SIMULATORS else None


def _franka_groups(cluster) -> list:
    return [g for g in cluster.node_groups if g.hardware is not None and g.hardware.type == "Franka"]


def _realsense_entries(cluster) -> dict[str, tuple[str, Any]]:
    out = {}
    for g in cluster.node_groups:
        if g.hardware is not None and g.hardware.type == "RealSense":
            for e in g.hardware.configs:
                out[e.serial] = (g.label, e)
    return out


def _env_group_label(cluster) -> str | None:
    env = cluster.components().get("env")
    if env is not None:
        for entry in env[1].entries:
            return entry.node_group
    return None


def _env_node(cluster) -> int:
    """Node of the env component's first process (0 when it cannot be planned)."""
    try:
        from rlhw.placement import plan

        records = plan(cluster).get("env") or []
        return records[0].node_rank if records else 0
    except Exception:  # a plan problem is `rlhw placement`'s to report; the smoke test still runs
        return 0


def _with_images(config: Config):
    """The config with camera observations on, so make_env builds the cameras (sim mode)."""
    return config.model_copy(update={"env": config.env.model_copy(update={"images": True})})


def select_targets(config: Config, options: SmokeOptions) -> Targets:
    cluster = config.cluster
    if options.node_group is not None:
        cluster.group(options.node_group)  # PlacementError naming the known groups
    sim = sim_driver(config)
    targets = Targets()
    if sim is None:
        _real_targets(config, options, targets)
    else:
        _sim_targets(config, options, sim, targets)
    _apply_playback(targets, options)
    if options.robot is not None and not targets.robots:
        groups = [g.label for g in _franka_groups(cluster)]
        raise ConfigError(
            "--robot",
            f"no Franka rank {options.robot} in "
            + (f"node group {options.node_group!r}" if options.node_group else "the config")
            + (f" (Franka groups: {', '.join(groups)})" if groups else " (the config declares no Franka arms)"),
        )
    # nodes
    if options.robot is not None:
        targets.nodes = sorted({r.node_rank for r in targets.robots})
    elif options.node_group is not None:
        targets.nodes = list(cluster.group(options.node_group).node_ranks)
    else:
        targets.nodes = list(range(cluster.num_nodes))
    # env servers: one in front of each robot, or the given address
    if options.env_server:
        first = targets.robots[0] if targets.robots else None
        targets.env_servers = [EnvServerTarget(first, first.node_rank if first else 0, options.env_server)]
    else:
        targets.env_servers = [EnvServerTarget(r, r.node_rank) for r in targets.robots]
    if not options.wants("nodes"):
        targets.nodes = []
    if not options.wants("env-server"):
        targets.env_servers = []
    if not options.wants("cameras"):
        targets.cameras = []
        targets.robots = [dataclasses.replace(r, cameras=()) for r in targets.robots]
    if not options.wants("robots"):
        # robots stay listed for their cameras and env servers, but get no arm checks
        targets.robots = [r for r in targets.robots if r.cameras or any(e.robot is r for e in targets.env_servers)]
    return targets


def _real_targets(config: Config, options: SmokeOptions, targets: Targets) -> None:
    from rlhw.robot.factory import declared_entry

    cluster = config.cluster
    attached: set[str] = set()
    driver = config.env.driver if config.env.driver != "auto" else "franka"
    cam_driver = config.env.camera_driver if config.env.camera_driver != "auto" else "realsense"
    for g in _franka_groups(cluster):
        for rank, entry in enumerate(g.hardware.configs):
            attached.update(entry.camera_serials)
            if options.node_group is not None and g.label != options.node_group:
                continue
            if options.robot is not None and rank != options.robot:
                continue
            name = f"franka@{entry.robot_ip}"
            cams = tuple(
                _camera(serial, entry.node_rank, cam_driver, declared_entry(config, serial), name, g.label)
                for serial in entry.camera_serials
            )
            targets.robots.append(RobotTarget(name, entry.node_rank, rank, driver, g.label, entry, cams))
    if options.robot is not None:
        return
    for serial, (label, entry) in _realsense_entries(cluster).items():
        if serial in attached:
            continue
        if options.node_group is not None and label != options.node_group:
            continue
        targets.cameras.append(_camera(serial, entry.node_rank, cam_driver, entry, None, label))


def _camera(serial, node_rank, driver, entry, robot, group) -> CameraTarget:
    """A real camera's target; ``entry`` is the hardware entry that declares it (its stream settings), if any."""
    hardware = entry if isinstance(entry, RealSenseConfig) else None
    stream = hardware or RealSenseOptions()
    return CameraTarget(
        serial=serial,
        node_rank=node_rank,
        driver=driver,
        width=stream.width,
        height=stream.height,
        fps=float(stream.fps),
        depth=stream.depth,
        robot=robot,
        group=group,
        hardware=hardware,
    )


def _sim_targets(config: Config, options: SmokeOptions, sim: str, targets: Targets) -> None:
    from rlhw.robot.factory import franka_entry, plan_env

    cluster = config.cluster
    label = _env_group_label(cluster)
    group = None
    if label is not None and label != "node":
        try:
            group = cluster.group(label)
        except ConfigError:
            group = None
    entries = (
        list(group.hardware.configs)
        if group is not None and group.hardware is not None and group.hardware.type == "Franka"
        else []
    )
    ranks = list(range(len(entries))) if entries else [0]
    if options.node_group is not None and options.node_group != label and entries:
        return  # the simulated robots stand in for the env group's arms only
    h, w = config.env.image_size
    for rank in ranks:
        if options.robot is not None and rank != options.robot:
            continue
        entry = franka_entry(config, rank) if entries else None
        node = entry.node_rank if entry is not None else _env_node(cluster)
        env_plan = plan_env(_with_images(config), rank)
        name = env_plan.robot
        cams = tuple(
            CameraTarget(serial=n, node_rank=node, driver=sim, width=w, height=h, fps=30.0, robot=name, group=label)
            for n in env_plan.camera_names
        )
        targets.robots.append(RobotTarget(name, node, rank, sim, label, entry, cams, simulated=env_plan.simulated))


def _apply_playback(targets: Targets, options: SmokeOptions) -> None:
    import os

    wanted = dict(options.camera_playback)
    if not wanted:
        return
    known = [c.serial for r in targets.robots for c in r.cameras] + [c.serial for c in targets.cameras]
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise ConfigError(
            "--camera-playback", f"camera {unknown[0]} is not among the selected cameras ({', '.join(known) or 'none'})"
        )

    def swap(c: CameraTarget) -> CameraTarget:
        if c.serial not in wanted:
            return c
        if c.driver != "realsense":
            raise ConfigError(
                "--camera-playback", f"camera {c.serial} uses the {c.driver} driver; recordings are RealSense (.db3)"
            )
        return dataclasses.replace(c, playback_file=os.path.abspath(wanted[c.serial]))

    targets.cameras = [swap(c) for c in targets.cameras]
    targets.robots = [dataclasses.replace(r, cameras=tuple(swap(c) for c in r.cameras)) for r in targets.robots]
