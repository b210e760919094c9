"""`make_env(config, robot_rank)`: from a validated config to a connected `RobotEnv` (no motion).

Which drivers (``env.driver`` / ``env.camera_driver`` / ``env.sim``):

- the *hardware entry* is Franka rank ``robot_rank`` of the node group that ``cluster.component_placement``
  gives the ``env`` component (robots are ranked in config order); it may be absent (sim configs);
- ``env.sim`` set: arm and cameras are that simulator (``mujoco`` or ``mock``) whatever the hardware
  says, and the placement stays as it is; the entry's ``camera_serials`` become the simulated cameras'
  names (else ``env.sim_cameras``);
- ``env.driver: auto``: ``franka`` when there is a hardware entry, else ``mujoco``;
- ``env.camera_driver: auto``: ``realsense`` for the franka driver, else the arm's simulator.

What each driver receives (keyword arguments; one that the driver's signature does not take is a
ConfigError naming the config key it came from, never dropped):

- franka: ``robot_ip``, the entry's validated ``controller`` (`FrankaController`, the driver's one
  options schema), ``gripper``, ``timeout_s`` (``env.driver_timeout_s``);
- realsense: ``serial``, and ``width``/``height``/``fps``/``depth`` from a RealSense hardware entry
  with that serial (any node group), when there is one;
- mujoco cameras: ``serial`` and ``name`` (the name), ``arm`` (the simulated arm they render),
  ``width``, ``height``, ``index``, ``meshes``; mock cameras: ``serial``, ``arm``, ``width``,
  ``height``, ``faults`` (``env.mock_faults``), ``seed``;
- mujoco/mock arms: ``name``, ``seed``, ``home_q``, plus the task's ``sim_arm_options`` (e.g. a cube);
  the mock also gets ``faults`` (``env.mock_faults``) and ``timeout_s``.

Cameras are only built when ``env.images`` is true.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from rlhw.config import ClusterConfig, ComponentRule, Config
from rlhw.errors import ConfigError
from rlhw.hardware.types.franka import FrankaConfig
from rlhw.hardware.types.realsense import RealSenseConfig
from rlhw.robot.arm import Arm
from rlhw.robot.batch import BatchedEnv
from rlhw.robot.camera import Camera
from rlhw.robot.env import RobotEnv
from rlhw.robot.registry import arm_class, camera_class
from rlhw.robot.tasks import make_task

log = logging.getLogger(__name__)

SIMULATORS = ("mujoco", "mock")  # the drivers whose arm (and cameras) a simulator stands in for


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
        return any(getattr(g.hardware, "type", None) == "Franka" for g in config.cluster.node_groups if g.hardware)
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


#: The fields of a RealSense hardware entry that the realsense driver takes.
_REALSENSE_SETTINGS = ("width", "height", "fps", "depth")


def _realsense_entry(config: Config, serial: str) -> tuple[RealSenseConfig, str] | None:
    """The RealSense hardware entry (any node group) that declares camera ``serial``, and its config path."""
    for g, group in enumerate(config.cluster.node_groups):
        hw = group.hardware
        if hw is None or hw.type != "RealSense":
            continue
        for c, entry in enumerate(hw.configs):
            if entry.serial == serial:
                return entry, f"cluster.node_groups[{g}].hardware.configs[{c}]"
    return None


def realsense_settings(config: Config, serial: str) -> dict[str, Any]:
    """width/height/fps/depth of camera ``serial`` when a RealSense hardware entry declares it."""
    found = _realsense_entry(config, serial)
    return {} if found is None else {k: getattr(found[0], k) for k in _REALSENSE_SETTINGS}


def _realsense_args(config: Config, serial: str) -> dict[str, DriverArg]:
    found = _realsense_entry(config, serial)
    return {} if found is None else {k: DriverArg(getattr(found[0], k), f"{found[1]}.{k}") for k in _REALSENSE_SETTINGS}


def plan_env(config: Config, robot_rank: int = 0) -> EnvPlan:
    env = config.env
    if robot_rank < 0:
        raise ConfigError("robot_rank", f"must be >= 0, got {robot_rank}")
    hw = franka_entry(config, robot_rank)
    serials = hw.camera_serials if hw is not None else ()
    if env.sim is not None:
        arm_driver = env.sim
    elif env.driver == "auto":
        arm_driver = "franka" if hw is not None else "mujoco"
    else:
        arm_driver = env.driver
    if arm_driver == "franka" and hw is None:
        raise ConfigError(
            "env.driver",
            "the franka driver needs a Franka hardware entry in the env component's node group "
            "(cluster.node_groups[*].hardware with type: Franka); for a simulator set env.sim=mujoco",
        )
    if env.sim is not None:
        camera_driver = env.sim
    elif env.camera_driver == "auto":
        camera_driver = "realsense" if arm_driver == "franka" else arm_driver
    else:
        camera_driver = env.camera_driver
    if camera_driver in SIMULATORS and arm_driver != camera_driver:
        raise ConfigError(
            "env.camera_driver",
            f"simulated {camera_driver} cameras render a {camera_driver} arm, but the arm driver is {arm_driver!r}; "
            f"use camera_driver: auto or the same simulator",
        )
    if camera_driver == "realsense":
        names = serials
        if env.images and not names:
            raise ConfigError(
                "env.images",
                f"images are on but Franka rank {robot_rank} lists no camera_serials for the realsense driver; "
                "add camera_serials to the hardware entry or set env.images=false",
            )
    else:
        names = serials or tuple(env.sim_cameras)
    robot = f"franka@{hw.robot_ip}" if arm_driver == "franka" else f"{arm_driver}-sim{robot_rank}"
    beside_real = env.sim is None and env.driver == "auto" and declares_real_arm(config)
    return EnvPlan(
        arm_driver,
        camera_driver if env.images else None,
        names if env.images else (),
        robot,
        hw,
        beside_real_arm=beside_real,
    )


@dataclass(frozen=True)
class DriverArg:
    """One keyword argument for a driver, and the config key it comes from (named when it is refused)."""

    value: Any
    path: str


def construct_driver(cls: type, driver: str, **args: DriverArg) -> Any:
    """Construct driver ``cls`` with exactly ``args``.

    Why refuse instead of dropping: a dropped argument is a setting the user believes in and the
    driver never follows (a camera that ignores its resolution, an arm that ignores its scene).
    """
    params = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k in args if k not in params)
        if unknown:
            key = unknown[0]
            takes = [k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
            raise ConfigError(
                args[key].path,
                f"the {driver} driver ({cls.__name__}) takes no argument {key!r}; remove it, or pick a driver that "
                f"takes it (the {driver} driver takes: {', '.join(takes)})",
            )
    return cls(**{k: a.value for k, a in args.items()})


def build_arm(
    config: Config, plan: EnvPlan, *, seed: int, index: int = 0, sim_options: dict[str, Any] | None = None
) -> Arm:
    """Construct (not connect) the arm ``plan`` chose; ``sim_options`` are the task's scene options
    (simulators only). Also used alone, without a task (`rlhw record-pose`)."""
    env_cfg = config.env
    arm_cls = arm_class(plan.arm_driver)
    if plan.arm_driver == "franka":
        hw = plan.hardware
        return arm_cls(hw.robot_ip, hw.controller, gripper=hw.gripper, timeout_s=env_cfg.driver_timeout_s)
    name = f"{plan.robot}.{index}" if index else plan.robot
    args = dict(
        name=DriverArg(name, "env.driver"),
        seed=DriverArg(seed, "env.seed"),
        home_q=DriverArg(tuple(env_cfg.reset.home_q), "env.reset.home_q"),
    )
    args.update(
        {k: DriverArg(v, "env.task") for k, v in (sim_options or {}).items()}
    )  # the task asks its scene for them
    if plan.arm_driver == "mock":
        args.update(
            faults=DriverArg(env_cfg.mock_faults, "env.mock_faults"),
            timeout_s=DriverArg(min(env_cfg.driver_timeout_s, 0.5), "env.driver_timeout_s"),
        )
    return construct_driver(arm_cls, plan.arm_driver, **args)


def build_cameras(config: Config, plan: EnvPlan, arm: Arm, seed: int) -> dict[str, Camera]:
    """Construct (not open) the cameras ``plan`` chose, by name; simulated ones render ``arm``."""
    if plan.camera_driver is None:
        return {}
    env_cfg = config.env
    driver = plan.camera_driver
    cam_cls = camera_class(driver)
    h, w = env_cfg.image_size
    cameras = {}
    for i, name in enumerate(plan.camera_names):
        serial = DriverArg(name, "env.camera_driver")
        if driver == "realsense":
            cameras[name] = construct_driver(cam_cls, driver, serial=serial, **_realsense_args(config, name))
            continue
        args = dict(
            serial=serial,
            arm=DriverArg(arm, "env.camera_driver"),
            width=DriverArg(w, "env.image_size"),
            height=DriverArg(h, "env.image_size"),
        )
        if driver == "mock":
            args.update(
                faults=DriverArg(env_cfg.mock_faults, "env.mock_faults"), seed=DriverArg(seed + 17 * i, "env.seed")
            )
        else:
            args.update(
                name=serial,
                index=DriverArg(i, "env.camera_driver"),
                meshes=DriverArg(env_cfg.sim_camera_meshes, "env.sim_camera_meshes"),
            )
        cameras[name] = construct_driver(cam_cls, driver, **args)
    return cameras


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
