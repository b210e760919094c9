"""The `env:` section of an rlhw config: which task runs, on which driver, at what rate, inside which limits.

Every limit has a safe default, so a config that says nothing about safety still gets a bounded
workspace, slow steps and a slow reset. Positions are metres in the robot's base frame, angles are
radians, rates are per second. The values are validated once here; drivers and tasks trust them.

Who reads what:
- ``rlhw.robot.make_env`` (driver choice, sim mode, cameras, control rate, num_envs);
- ``rlhw.robot.safety`` (``safety``), ``rlhw.robot.env`` (``reset``, ``max_episode_steps``);
- tasks (``action``, ``reach``, ``task_options``); the env server and the RL pipeline (``num_envs``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlhw.config.base import StrictModel
from rlhw.config.vision import RewardConfig
from rlhw.drivers_registry import teleop_devices
from rlhw.errors import ConfigError, FaultKind

Vec3 = tuple[float, float, float]
Vec7 = tuple[float, float, float, float, float, float, float]

#: Franka Research 3 joint position limits (radians), from Franka's robot specification.
FR3_Q_MIN: Vec7 = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
FR3_Q_MAX: Vec7 = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
#: FR3 joint velocity limits (rad/s).
FR3_DQ_MAX: Vec7 = (2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26)
#: The usual "ready" posture (same as rlhw.robot.arm.HOME_Q).
FR3_HOME_Q: Vec7 = (0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4)


def _check_box(low: Vec3, high: Vec3, what: str, path: str) -> None:
    for axis, lo, hi in zip("xyz", low, high):
        if not lo < hi:
            raise ConfigError(path, f"{what}: low.{axis}={lo} must be < high.{axis}={hi}; swap or widen the box")


def _vector(n: int, hint: str):
    """A before-validator: a list of exactly ``n`` numbers, with a message that shows the shape."""

    def check(cls, value):
        if isinstance(value, (list, tuple)) and len(value) != n:
            raise ConfigError("", f"expected {n} numbers {hint}, got {len(value)}: {list(value)}")
        return value

    return classmethod(check)


def _all_finite(values, what: str):
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{what} must be finite numbers, got {list(values)}")
    return values


class SafetyConfig(StrictModel):
    """Limits the safety layer enforces on every command, independent of the driver."""

    workspace_low: Vec3 = Field(
        (0.25, -0.30, 0.10), description="lower corner of the allowed end-effector box (m, base frame)"
    )
    workspace_high: Vec3 = Field(
        (0.70, 0.30, 0.60), description="upper corner of the allowed end-effector box (m, base frame)"
    )
    max_step_m: float = Field(
        0.03,
        allow_inf_nan=False,
        gt=0,
        le=0.2,
        description="largest end-effector displacement one step may command (m)",
    )
    max_velocity_mps: float = Field(
        0.3,
        allow_inf_nan=False,
        gt=0,
        le=2.0,
        description="largest commanded end-effector speed (m/s); with the control period this caps the step further",
    )
    joint_limit_margin_rad: float = Field(
        0.05,
        allow_inf_nan=False,
        ge=0,
        le=0.5,
        description="a measured joint closer than this to its limit stops the arm with fault 'limit'",
    )
    q_min: Vec7 = Field(FR3_Q_MIN, description="joint lower limits (rad); default FR3")
    q_max: Vec7 = Field(FR3_Q_MAX, description="joint upper limits (rad); default FR3")
    dq_max: Vec7 = Field(
        FR3_DQ_MAX, description="joint speed limits (rad/s); a faster measured joint stops the arm with fault 'limit'"
    )
    gripper_max_speed_mps: float = Field(
        0.1, allow_inf_nan=False, gt=0, le=1.0, description="largest commanded change of finger width per second (m/s)"
    )
    max_recoveries: int = Field(
        3, ge=1, le=20, description="strikes (failed recoveries, or faults right after one) before the env locks itself"
    )
    camera_max_age_s: float = Field(
        0.5,
        allow_inf_nan=False,
        gt=0,
        description="a camera frame older than this is a 'camera_stall' fault (real-time drivers)",
    )
    max_contact_force_n: float = Field(
        40.0,
        allow_inf_nan=False,
        gt=0,
        le=200,
        description="a measured external force (norm, N) above this stops the arm with fault 'contact'",
    )
    max_contact_torque_nm: float = Field(
        8.0,
        allow_inf_nan=False,
        gt=0,
        le=50,
        description="a measured external torque (norm, Nm, about the TCP) above this stops the arm with fault 'contact'",
    )
    contact_zone_speed_mps: float = Field(
        0.03,
        allow_inf_nan=False,
        gt=0,
        le=0.5,
        description="largest commanded hand speed (m/s) inside the contact zone a task declares around its target (insert)",
    )

    _xyz = field_validator("workspace_low", "workspace_high", mode="before")(_vector(3, "[x, y, z]"))
    _joints = field_validator("q_min", "q_max", "dq_max", mode="before")(_vector(7, "(one per joint)"))

    @field_validator("workspace_low", "workspace_high", "q_min", "q_max", "dq_max")
    @classmethod
    def _finite(cls, v, info):
        return _all_finite(v, info.field_name)

    @field_validator("dq_max")
    @classmethod
    def _positive_speeds(cls, v):
        if any(x <= 0 for x in v):
            raise ValueError(f"every joint speed limit must be > 0, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _boxes(self):
        _check_box(self.workspace_low, self.workspace_high, "workspace", "workspace_low")
        for i, (lo, hi) in enumerate(zip(self.q_min, self.q_max)):
            if not lo + 2 * self.joint_limit_margin_rad < hi:
                raise ConfigError(
                    "q_min",
                    f"joint {i + 1}: q_min={lo} + 2*joint_limit_margin_rad must be < q_max={hi}; check the limits or shrink the margin",
                )
        return self


class ResetConfig(StrictModel):
    """How an episode starts: a slow joint move home, then an optional random offset of the hand."""

    home_q: Vec7 = Field(
        FR3_HOME_Q, description="joint posture to move to at every reset (rad); must lie inside the joint limits"
    )
    speed_factor: float = Field(
        0.2,
        allow_inf_nan=False,
        gt=0,
        le=0.5,
        description="relative dynamics of the reset move (fraction of max speed/accel); reduced on purpose",
    )
    timeout_s: float = Field(
        20.0, allow_inf_nan=False, gt=0, le=120, description="the reset move fails with fault 'timeout' after this"
    )
    randomize_radius_m: float = Field(
        0.0,
        allow_inf_nan=False,
        ge=0,
        le=0.2,
        description="after homing, move the hand to a random point within this radius (clipped to the workspace); 0 = off",
    )
    at_home_tolerance_rad: float = Field(
        0.01,
        allow_inf_nan=False,
        ge=0,
        le=0.1,
        description="skip the homing move when every joint is already this close to home_q",
    )
    settle_s: float = Field(
        1.0, allow_inf_nan=False, gt=0, le=10, description="time given to the randomizing move to settle"
    )

    _joints = field_validator("home_q", mode="before")(_vector(7, "(one per joint)"))

    @field_validator("home_q")
    @classmethod
    def _finite(cls, v):
        return _all_finite(v, "home_q")


class ActionConfig(StrictModel):
    """How a policy's action in [-1, 1] becomes a command."""

    scale_m: float = Field(
        0.025,
        allow_inf_nan=False,
        gt=0,
        le=0.2,
        description="end-effector displacement (m) for an action of 1.0 along an axis",
    )
    gripper: bool = Field(False, description="add a 4th action component: -1 closes the fingers, +1 opens them fully")


class ReachConfig(StrictModel):
    """The `reach` task: move the hand to a target sampled uniformly in a box."""

    target_low: Vec3 = Field(
        (0.32, -0.15, 0.20), description="lower corner of the target box (m); must lie inside the workspace"
    )
    target_high: Vec3 = Field(
        (0.55, 0.15, 0.45), description="upper corner of the target box (m); must lie inside the workspace"
    )
    success_m: float = Field(
        0.03,
        allow_inf_nan=False,
        gt=0,
        le=0.2,
        description="the episode succeeds when the hand is this close to the target",
    )
    terminate_on_success: bool = Field(True, description="end the episode (terminated=True) on success")
    reward_scale_m: float = Field(
        0.1,
        allow_inf_nan=False,
        gt=0,
        description="reward = -distance / reward_scale_m, so 10 cm away costs 1 per step",
    )

    _xyz = field_validator("target_low", "target_high", mode="before")(_vector(3, "[x, y, z]"))

    @model_validator(mode="after")
    def _box(self):
        _check_box(self.target_low, self.target_high, "reach target box", "target_low")
        return self


#: The faults the mock drivers inject (drivers/mock.py): an arm's, a camera's, and ``drop_frames``,
#: which is no fault (the mock camera skips frames and raises nothing).
MOCK_ARM_FAULTS = frozenset(
    {FaultKind.REFLEX, FaultKind.TIMEOUT, FaultKind.NETWORK, FaultKind.HANG, FaultKind.RECOVER_FAIL}
)
MOCK_CAMERA_FAULTS = frozenset({FaultKind.CAMERA_STALL})
DROP_FRAMES = "drop_frames"
MOCK_INJECTIONS = (*sorted(MOCK_ARM_FAULTS | MOCK_CAMERA_FAULTS), DROP_FRAMES)


class MockFaultConfig(StrictModel):
    """One scheduled fault of the mock drivers (tests and demos of fault handling)."""

    kind: FaultKind | Literal["drop_frames"]
    after: int = Field(0, ge=0, description="number of matching calls that succeed before the fault fires")
    count: int = Field(1, ge=1, description="how many consecutive calls the fault affects")
    on: str | None = Field(None, description="driver method the fault hits (default: the natural one for the kind)")

    @field_validator("kind", mode="before")
    @classmethod
    def _injectable(cls, kind: Any) -> Any:
        """The kind as a FaultKind (or ``drop_frames``); a kind the mock drivers cannot inject is refused here."""
        if kind not in MOCK_INJECTIONS:
            raise ValueError(
                f"{kind!r} is not a fault the mock drivers inject; use one of {', '.join(map(str, MOCK_INJECTIONS))}"
            )
        return kind if kind == DROP_FRAMES else FaultKind(kind)


class TeleopConfig(StrictModel):
    """The operator's device (``env.teleop``): read on the robot node, once per env step.

    See docs/teleop.md. ``device: none`` (the default) reads nothing; any other device lets an
    operator take over: while its reading is active the env executes the operator's action instead
    of the client's, through the same safety layer.
    """

    device: str = Field(
        "none",
        description="teleop device: none, or a registered device (rlhw.drivers_registry.teleop_devices): spacemouse "
        "(3Dconnexion, pyspacemouse), keyboard (the terminal), scripted (a simulated expert), or a plugin's",
    )
    always_active: bool = Field(
        False, description="execute the operator's action on every step, active or not (rlhw record-demos sets it)"
    )
    read_timeout_s: float = Field(
        0.05, allow_inf_nan=False, gt=0, le=1.0, description="bound on one read of the device per step"
    )
    open_timeout_s: float = Field(
        5.0, allow_inf_nan=False, gt=0, le=60, description="bound on finding and opening the device"
    )
    verdict_timeout_s: float = Field(
        4.0,
        allow_inf_nan=False,
        gt=0,
        le=120,
        description="spacemouse/keyboard: how long a person has to say whether a success the success classifier "
        "called is real (keyboard y / n, spacemouse first / second button), the arm holding still; no answer keeps "
        "the classifier's call. At least 1 s below server.step_deadline_s (5 s) and train.step_timeout_s: the step "
        "waits for the answer",
    )
    deadband: float = Field(
        0.1,
        allow_inf_nan=False,
        ge=0,
        lt=1,
        description="spacemouse: deflections below this fraction of full scale read as 0",
    )
    gain: float = Field(
        1.0,
        allow_inf_nan=False,
        gt=0,
        le=5,
        description="spacemouse/keyboard: twist = gain * deflection, clipped to [-1, 1]",
    )
    spacemouse_name: str | None = Field(
        None, description="spacemouse: pyspacemouse device name (e.g. SpaceMouseCompact); None = the first one found"
    )
    keyboard_hold_s: float = Field(
        0.15,
        allow_inf_nan=False,
        gt=0,
        le=2,
        description="keyboard: a motion key moves the hand for this long after its last press (terminals send no key-up)",
    )
    mode: Literal["demo", "intervene"] = Field(
        "demo",
        description="scripted: demo = always drives; intervene = takes over when the policy stops making progress",
    )
    noise: float = Field(
        0.1, allow_inf_nan=False, ge=0, le=1, description="scripted: std of Gaussian noise added to the expert's action"
    )
    hesitation: float = Field(
        0.05,
        allow_inf_nan=False,
        ge=0,
        le=1,
        description="scripted: probability per step of starting a pause (zero motion)",
    )
    pause_steps: int = Field(3, ge=1, le=100, description="scripted: length of one pause (steps)")
    patience: int = Field(
        5, ge=1, le=1000, description="scripted intervene: take over after this many steps without progress"
    )
    intervene_prob: float = Field(
        1.0,
        allow_inf_nan=False,
        ge=0,
        le=1,
        description="scripted intervene: probability of taking over when the policy strays, at the start of the run",
    )
    intervene_decay: float = Field(
        0.98,
        allow_inf_nan=False,
        gt=0,
        le=1,
        description="scripted intervene: intervene_prob is multiplied by this after every episode",
    )
    takeover_steps: int = Field(8, ge=1, le=1000, description="scripted intervene: steps driven before giving back")
    seed: int = Field(0, ge=0, description="scripted: seed of its noise and decisions")

    @field_validator("device")
    @classmethod
    def _registered_device(cls, value: str) -> str:
        """The registry, not a closed list, says which devices exist: a plugin's device is valid once registered."""
        known = teleop_devices()
        if value != "none" and value not in known:
            raise ValueError(f"unknown teleop device {value!r}; registered devices: none, {', '.join(known)}")
        return value


class EnvConfig(StrictModel):
    """The `env:` section. Defaults give a sim-only 10 Hz reach that a safety reviewer would accept."""

    task: str = Field(
        "reach",
        description="task name: 'reach' (built in), 'push_cube' (sim only) or 'insert' (peg in hole at a recorded pose)",
    )
    driver: Literal["auto", "franka", "mujoco", "mock"] = Field(
        "auto", description="arm driver; auto = franka when the env node group has Franka hardware, else mujoco"
    )
    camera_driver: Literal["auto", "realsense", "mujoco", "mock"] = Field(
        "auto", description="camera driver; auto = realsense with real Franka hardware, else the arm's simulator"
    )
    sim: Literal["mujoco", "mock"] | None = Field(
        None, description="sim-only mode: replace every robot and camera by this driver, keeping the placement"
    )
    control_hz: float = Field(10.0, allow_inf_nan=False, gt=0, le=1000, description="policy steps per second")
    pace: Literal["free", "real_time"] = Field(
        "free",
        description="simulators: free = each step as soon as the last one is done (a person at a device still "
        "gets control_hz); real_time = every step keeps env.control_hz on the clock, as a real arm does, so "
        "deadlines, obs->action latency and the UTD gate (between episodes only) behave as on a cell. A real "
        "arm always keeps real time",
    )
    num_envs: int = Field(
        1, ge=1, le=4096, description="env instances per env server (simulators only; 1 for a real arm)"
    )
    max_episode_steps: int = Field(50, ge=1, description="episodes are truncated after this many steps")
    images: bool = Field(False, description="add one uint8 HxWx3 observation 'image_<camera>' per camera")
    image_size: tuple[int, int] = Field((128, 128), description="(height, width) of image observations in pixels")
    sim_cameras: tuple[str, ...] = Field(
        ("front",), description="camera names in sim when the hardware lists no camera serials"
    )
    sim_camera_meshes: Literal["visual", "collision"] = Field(
        "visual",
        description="what MuJoCo cameras draw of the arm: its detailed visual meshes (30-80 ms a frame in "
        "software GL) or its collision shapes (5-10 ms; the fast choice for image training on a CPU)",
    )
    sim_state: Literal["visible", "hidden"] = Field(
        "visible",
        description="simulators: 'hidden' rehearses a real cell: observations, reward, success and done flags "
        "read only what a real cell measures (proprio, wrench, camera frames, recorded poses, the classifier); object "
        "state stays with the scripted operator and the evaluation judge (docs/teach_a_task.md)",
    )
    seed: int = Field(0, ge=0, description="base seed; env instance i of robot r uses seed + 1000*r + i")
    connect_timeout_s: float = Field(
        15.0,
        allow_inf_nan=False,
        gt=0,
        le=300,
        description="bound on opening the arm link and starting each camera (driver process start and warm-up included)",
    )
    driver_timeout_s: float = Field(
        2.0,
        allow_inf_nan=False,
        gt=0,
        le=60,
        description="bound on every non-motion driver call (state, command, stop)",
    )
    safety: SafetyConfig = Field(default_factory=SafetyConfig)
    reset: ResetConfig = Field(default_factory=ResetConfig)
    action: ActionConfig = Field(default_factory=ActionConfig)
    reach: ReachConfig = Field(default_factory=ReachConfig)
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="optional learned success classifier (rlhw train-reward)"
    )
    task_options: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword options of the chosen task (e.g. push_cube)"
    )
    mock_faults: tuple[MockFaultConfig, ...] = Field((), description="faults the mock drivers inject (tests/demos)")
    teleop: TeleopConfig = Field(default_factory=TeleopConfig)

    @field_validator("task")
    @classmethod
    def _task_name(cls, v):
        if not v or not v.replace("_", "").isalnum():
            raise ValueError(f"task name {v!r} must be a word like 'reach' or 'push_cube'")
        return v

    _hw = field_validator("image_size", mode="before")(_vector(2, "[height, width]"))

    @field_validator("image_size")
    @classmethod
    def _image_size(cls, v):
        h, w = v
        if not (8 <= h <= 4096 and 8 <= w <= 4096):
            raise ValueError(f"image_size (height, width) = {tuple(v)} must be between 8 and 4096 pixels each")
        return v

    @field_validator("sim_cameras")
    @classmethod
    def _camera_names(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"sim_cameras has duplicate names: {list(v)}")
        for name in v:
            if not name or not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"camera name {name!r} must be letters, digits, '_' or '-'")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        if self.teleop.device in ("spacemouse", "keyboard") and self.num_envs != 1:
            raise ConfigError(
                "teleop.device",
                f"one {self.teleop.device} drives one arm, but env.num_envs={self.num_envs}; set env.num_envs=1 "
                "or use the scripted expert (one per env instance)",
            )
        if self.reward.classifier is not None and not self.images:
            raise ConfigError("reward.classifier", "the success classifier judges camera frames: set env.images=true")
        s = self.safety
        lo, hi = s.workspace_low, s.workspace_high
        for axis, tlo, thi, wlo, whi in zip("xyz", self.reach.target_low, self.reach.target_high, lo, hi):
            if self.task == "reach" and (tlo < wlo or thi > whi):
                raise ConfigError(
                    "reach.target_low",
                    f"reach target box {axis}=[{tlo}, {thi}] leaves the safety workspace {axis}=[{wlo}, {whi}]; "
                    "shrink env.reach.target_low/high or widen env.safety.workspace_low/high",
                )
        for i, (q, qlo, qhi) in enumerate(zip(self.reset.home_q, s.q_min, s.q_max)):
            if not qlo + s.joint_limit_margin_rad < q < qhi - s.joint_limit_margin_rad:
                raise ConfigError(
                    "reset.home_q",
                    f"reset.home_q joint {i + 1} = {q} is not inside the joint limits [{qlo}, {qhi}] minus the margin "
                    f"{s.joint_limit_margin_rad}; pick a home posture inside the limits",
                )
        return self
