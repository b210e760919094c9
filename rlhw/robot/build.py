"""What a driver reads to build itself from the env plan, and the one way its keyword arguments are checked.

`rlhw.robot.factory` resolves a plan (which drivers, which hardware entry), then hands each driver class an
`ArmBuild` or a `CameraBuild` and calls its ``from_plan``: the driver picks what it needs: a real driver its
validated hardware model (`FrankaConfig`, `RealSenseOptions`), a simulator the seed, the home pose and the
task's scene options. The factory therefore never branches on a driver's name, and a new driver needs only
its module and its registration (`rlhw.drivers_registry`).

`Arm.from_plan` and `Camera.from_plan` default to a simulator's form (`simulated_arm`, `scene_camera`);
drivers that take other inputs override them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlhw.errors import ConfigError

if TYPE_CHECKING:
    from rlhw.config.env import EnvConfig
    from rlhw.hardware.registry import HardwareEntry


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


@dataclass(frozen=True)
class ArmBuild:
    """Everything an arm driver may read to build itself for one env instance.

    ``hardware`` is the validated hardware entry the plan chose (a `FrankaConfig` for Franka rank
    ``robot_rank``), or None (a sim config); ``sim_options`` are the task's scene options (``cube``, ...),
    which only a simulator can follow."""

    driver: str
    name: str
    seed: int
    env: EnvConfig
    hardware: HardwareEntry | None = None
    sim_options: Mapping[str, Any] = field(default_factory=dict)

    def simulated_args(self) -> dict[str, DriverArg]:
        """A simulated arm's arguments: its name, seed, home pose and the task's scene options."""
        args = {
            "name": DriverArg(self.name, "env.driver"),
            "seed": DriverArg(self.seed, "env.seed"),
            "home_q": DriverArg(tuple(self.env.reset.home_q), "env.reset.home_q"),
        }
        args.update({k: DriverArg(v, "env.task") for k, v in self.sim_options.items()})  # the task asks its scene
        return args


@dataclass(frozen=True)
class CameraBuild:
    """Everything a camera driver may read to build itself: camera ``name`` (a serial), number ``index`` of
    its env's cameras, the ``arm`` it observes (a simulated camera renders it), and ``hardware``: the
    validated hardware entry that declares this camera (a `RealSenseConfig`), or None. ``playback_file``:
    a recording to play instead of the device (the smoke test's ``--camera-playback``)."""

    driver: str
    name: str
    index: int
    seed: int
    env: EnvConfig
    arm: object = None
    hardware: HardwareEntry | None = None
    playback_file: str | None = None

    def rendered_args(self) -> dict[str, DriverArg]:
        """A simulated camera's arguments: its name, the arm it renders and ``env.image_size``."""
        if self.playback_file is not None:
            raise ConfigError(
                "--camera-playback", f"the {self.driver} camera {self.name} renders its arm; it plays no recording"
            )
        h, w = self.env.image_size
        return {
            "serial": DriverArg(self.name, "env.camera_driver"),
            "arm": DriverArg(self.arm, "env.camera_driver"),
            "width": DriverArg(w, "env.image_size"),
            "height": DriverArg(h, "env.image_size"),
        }


def simulated_arm(cls: type, build: ArmBuild) -> Any:
    """`Arm.from_plan`'s default: a simulator built from `ArmBuild.simulated_args`."""
    return construct_driver(cls, build.driver, **build.simulated_args())


def scene_camera(cls: type, build: CameraBuild) -> Any:
    """`Camera.from_plan`'s default: a simulated camera that renders its arm from scene camera ``index``
    with ``env.sim_camera_meshes``."""
    return construct_driver(
        cls,
        build.driver,
        **build.rendered_args(),
        name=DriverArg(build.name, "env.camera_driver"),
        index=DriverArg(build.index, "env.camera_driver"),
        meshes=DriverArg(build.env.sim_camera_meshes, "env.sim_camera_meshes"),
    )
