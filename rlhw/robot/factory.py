"""`make_env(config, robot_rank)`: from a validated config to a connected `RobotEnv` (no motion).

Which drivers (``env.driver`` / ``env.camera_driver`` / ``env.sim``):

- the *hardware entry* is Franka rank ``robot_rank`` of the node group that ``cluster.component_placement``
  gives the ``env`` component (robots are ranked in config order); it may be absent (sim configs);
- ``env.sim`` set: arm and cameras are that simulator (``mujoco`` or ``mock``) whatever the hardware
  says, and the placement stays as it is; the entry's ``camera_serials`` become the simulated cameras'
  names (else ``env.sim_cameras``);
- ``env.driver: auto``: ``franka`` when there is a hardware entry, else ``mujoco``;
- ``env.camera_driver: auto``: ``realsense`` for the franka driver, else the arm's simulator.

How each driver is built: the factory hands its class an `rlhw.robot.build.ArmBuild` / `CameraBuild` and
calls ``from_plan``; the driver reads what it needs, and the factory never branches on a driver's name:

- franka: its Franka hardware entry (`FrankaConfig`: ``robot_ip``, the validated ``controller``, ``gripper``)
  and ``env.driver_timeout_s``;
- realsense: its serial, and the RealSense hardware entry that declares it (any node group) as its validated
  `RealSenseOptions`, or the defaults;
- simulators (mujoco, mock): name, seed, ``env.reset.home_q`` and the task's ``sim_arm_options``; their cameras
  render the arm at ``env.image_size``; the mock also takes ``env.mock_faults``.

A keyword argument that a driver's signature does not take is a ConfigError naming the config key it came
from, never dropped (`rlhw.robot.build.construct_driver`).

Cameras are only built when ``env.images`` is true.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rlhw.config import ClusterConfig, ComponentRule, Config
from rlhw.errors import ConfigError
from rlhw.hardware.registry import HardwareEntry
from rlhw.hardware.types.franka import FrankaConfig
from rlhw.robot.arm import Arm
from rlhw.robot.batch import BatchedEnv
from rlhw.robot.build import ArmBuild, CameraBuild
from rlhw.robot.camera import Camera
from rlhw.robot.env import RobotEnv
from rlhw.robot.registry import arm_class, camera_class
from rlhw.robot.task_registry import make_task

log = logging.getLogger(__name__)

SIMULATORS = ("mujoco", "mock")  # the drivers whose arm (and cameras) a simulator stands in for
#: What ``auto`` means: ``env.driver`` the real arm's driver when the env's node group declares a Franka, else
#: the simulator; ``env.camera_driver`` the real cameras' driver beside a real arm, else the arm's simulator.
AUTO_REAL_ARM, AUTO_SIMULATOR, AUTO_REAL_CAMERA = "franka", "mujoco", "realsense"


@dataclass
class EnvPlan:
    """The resolved choice of drivers for one env instance (also handy for dry runs and status)."""

    arm_driver: str
    camera_driver: str | None
    camera_names: tuple[str, ...]
    robot: str
    hardware: Any = None
    arm_kwargs: dict[str, Any] = field(default_factory=dict)
    beside_real_arm: bool = False  # ``env.driver: auto`` fell back to a simulator in a config that declares a Franka

    @property
    def simulated(self) -> bool:
        """The one answer to "is this env simulated?" (in-process transport, ``env.num_envs`` > 1, the env
        server's watchdog, the smoke test's motion prompt): its arm is a simulator that the config chose
        (``env.sim``, or ``env.driver`` naming one). An ``auto`` fallback beside a declared Franka is treated
        as real: the config is a real cell's, so it keeps a real arm's guards."""
        return self.arm_driver in SIMULATORS and not self.beside_real_arm


def declares_real_arm(config: Config) -> bool:
    """Some node group of the config declares a Franka (whichever component it hosts)."""
    try:
        return any(g.hardware is not None and g.hardware.type == "Franka" for g in config.cluster.node_groups)
    except Exception:  # noqa: BLE001 - a config without a cluster section (tests, tools) declares none
        return False


def _env_components(cluster: ClusterConfig) -> list[ComponentRule]:
    env = cluster.components().get("env")
    return [env[1]] if env is not None else []


def franka_entry(config: Config, robot_rank: int) -> FrankaConfig | None:
    """The Franka hardware entry for ``robot_rank`` in the env component's node group, or None."""
    groups = {g.label: g for g in config.cluster.node_groups}
    for rule in _env_components(config.cluster):
        for entry in rule.entries:
            group = groups.get(entry.node_group) if entry.node_group else None
            hw = group.hardware if group is not None else None
            if hw is None or hw.type != "Franka":
                continue
            if not 0 <= robot_rank < len(hw.configs):
                raise ConfigError(
                    "robot_rank",
                    f"robot rank {robot_rank} is out of range: node group {entry.node_group!r} has {len(hw.configs)} "
                    f"Franka arm(s) (ranks 0-{len(hw.configs) - 1})",
                )
            return hw.configs[robot_rank]
    return None


def declared_entry(config: Config, identity: str) -> HardwareEntry | None:
    """The hardware entry (any node group, any type) that declares the device named ``identity`` (a camera's
    serial), or None: what a camera driver reads as its validated hardware model."""
    for group in config.cluster.node_groups:
        if group.hardware is not None:
            for entry in group.hardware.configs:
                if entry.identity() == identity:
                    return entry
    return None


def plan_env(config: Config, robot_rank: int = 0) -> EnvPlan:
    env = config.env
    if robot_rank < 0:
        raise ConfigError("robot_rank", f"must be >= 0, got {robot_rank}")
    hw = franka_entry(config, robot_rank)
    serials = hw.camera_serials if hw is not None else ()
    if env.sim is not None:
        arm_driver = env.sim
    elif env.driver == "auto":
        arm_driver = AUTO_REAL_ARM if hw is not None else AUTO_SIMULATOR
    else:
        arm_driver = env.driver
    real_arm = arm_driver not in SIMULATORS
    if real_arm and hw is None:
        raise ConfigError(
            "env.driver",
            f"the {arm_driver} driver needs a Franka hardware entry in the env component's node group "
            "(cluster.node_groups[*].hardware with type: Franka); for a simulator set env.sim=mujoco",
        )
    if env.sim is not None:
        camera_driver = env.sim
    elif env.camera_driver == "auto":
        camera_driver = AUTO_REAL_CAMERA if real_arm else arm_driver
    else:
        camera_driver = env.camera_driver
    if camera_driver in SIMULATORS and arm_driver != camera_driver:
        raise ConfigError(
            "env.camera_driver",
            f"simulated {camera_driver} cameras render a {camera_driver} arm, but the arm driver is {arm_driver!r}; "
            f"use camera_driver: auto or the same simulator",
        )
    if camera_driver not in SIMULATORS:
        names = serials
        if env.images and not names:
            raise ConfigError(
                "env.images",
                f"images are on but Franka rank {robot_rank} lists no camera_serials for the {camera_driver} driver; "
                "add camera_serials to the hardware entry or set env.images=false",
            )
    else:
        names = serials or tuple(env.sim_cameras)
    robot = f"{arm_driver}@{hw.identity()}" if real_arm and hw is not None else f"{arm_driver}-sim{robot_rank}"
    beside_real = env.sim is None and env.driver == "auto" and declares_real_arm(config)
    return EnvPlan(
        arm_driver,
        camera_driver if env.images else None,
        names if env.images else (),
        robot,
        hw,
        beside_real_arm=beside_real,
    )


def build_arm(
    config: Config, plan: EnvPlan, *, seed: int, index: int = 0, sim_options: dict[str, Any] | None = None
) -> Arm:
    """Construct (not connect) the arm ``plan`` chose; ``sim_options`` are the task's scene options
    (simulators only). Also used alone, without a task (`rlhw record-pose`)."""
    build = ArmBuild(
        driver=plan.arm_driver,
        name=f"{plan.robot}.{index}" if index else plan.robot,
        seed=seed,
        env=config.env,
        hardware=plan.hardware,
        sim_options=dict(sim_options or {}),
    )
    return arm_class(plan.arm_driver).from_plan(build)


def build_cameras(config: Config, plan: EnvPlan, arm: Arm, seed: int) -> dict[str, Camera]:
    """Construct (not open) the cameras ``plan`` chose, by name; simulated ones render ``arm``."""
    if plan.camera_driver is None:
        return {}
    cam_cls = camera_class(plan.camera_driver)
    return {
        name: cam_cls.from_plan(
            CameraBuild(
                driver=plan.camera_driver,
                name=name,
                index=i,
                seed=seed,
                env=config.env,
                arm=arm,
                hardware=declared_entry(config, name),
            )
        )
        for i, name in enumerate(plan.camera_names)
    }


def make_env(config: Config, robot_rank: int = 0, *, index: int = 0, connect: bool = True) -> RobotEnv:
    """Build task + arm + cameras + safety for Franka rank ``robot_rank`` (or its simulated stand-in).

    ``index`` numbers env instances of one server (num_envs > 1) for seeds and names. The env is
    connected (arm link open, cameras capturing) unless ``connect=False``; nothing moves either way.
    """
    env_cfg = config.env
    plan = plan_env(config, robot_rank)
    seed = env_cfg.seed + 1000 * robot_rank + index
    task = make_task(env_cfg.task, env_cfg, env_cfg.task_options)
    allowed = getattr(task, "drivers", None)
    if allowed is not None and plan.arm_driver not in allowed:
        raise ConfigError(
            "env.task",
            f"task {task.name!r} runs on {', '.join(allowed)} only, not {plan.arm_driver!r}; set env.sim={allowed[0]}",
        )
    arm = build_arm(config, plan, seed=seed, index=index, sim_options=task.sim_arm_options)
    cameras = build_cameras(config, plan, arm, seed)
    robot_env = RobotEnv(task, arm, cameras, env_cfg, seed=seed, robot=plan.robot)
    if connect:
        try:
            robot_env.connect()
        except BaseException:
            robot_env.close()
            raise
    return robot_env


def make_batched_env(config: Config, robot_rank: int = 0, *, connect: bool = True) -> BatchedEnv:
    """``env.num_envs`` instances in one `BatchedEnv` (simulators only: one real arm has one controller)."""
    n = config.env.num_envs
    plan = plan_env(config, robot_rank)
    if n > 1 and not plan.simulated:
        raise ConfigError(
            "env.num_envs",
            f"num_envs={n} needs a simulator: one {plan.arm_driver} arm can host only one env; set env.num_envs=1 or env.sim=mujoco",
        )
    envs: list[RobotEnv] = []
    try:
        for i in range(n):
            envs.append(make_env(config, robot_rank, index=i, connect=connect))
    except BaseException:
        for e in envs:
            e.close()
        raise
    return BatchedEnv(envs)
