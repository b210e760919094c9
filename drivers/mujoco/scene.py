"""The simulated workcell: franky-sim's FR3 model on a table, plus props, built with MjSpec.

The arm model is the MJCF that ships inside the franky-sim wheel (``franky_sim/assets/fr3.xml``,
FR3 arm with the Franka Hand), so nothing is downloaded at run time and the sim arm has the same
kinematics as the one franky-sim serves over the libfranka protocol. The asset file is never
edited: the scene is composed around it in memory (MjSpec), which adds

- ``table``: the plane the robot base stands on (z = 0 is the table top),
- ``tcp``: a site at the Franka Hand's default TCP (flange + 0.1034 m along z, rotated -45 deg
  about z: the hand body already carries that rotation), the point `ArmState.ee_pose` reports,
  matching franky's ``O_T_EE`` default,
- ``target``: a mocap body with a translucent sphere, a goal marker a task moves per episode
  (mocap positions live in MjData, so each arm has its own),
- ``cube`` (when ``cube=True``): a 5 cm free-floating box for contact tasks, and ``floor_mark``: a flat blue
  square on the table (a mocap body, no collisions), the tape a real cell marks a goal area with,
- ``peg`` and ``hole_block`` (when ``peg=True``, the ``insert`` task): a 2 cm square peg, 6 cm long,
  RIGIDLY attached to the hand (a geom of the hand body, its tip 5 cm past the TCP along the hand's
  approach axis; the fingers are set to its width and, being the hand's children, never collide
  with it), and a static block with a square hole (4 boxes of walls and a floor; clearance
  ``HOLE_CLEARANCE`` in total, 2 mm per side). The block is a mocap body: `hole_block_pose` puts it
  where a recorded goal pose wants it (`MujocoArm.place_hole`), so a config recorded on a real cell
  rehearses the same layout in sim; until then it is parked out of reach and out of view,
- cameras ``front``, ``side`` (fixed, looking at the whole arm from a metre away), ``table`` (fixed, 30 cm
  from the work area and low over the table, framing the cube and the taped square as a lab mounts a task
  camera: the tape spans about 28 of 64 pixels, a 3 cm miss about 7) and ``wrist`` (on the hand),
- gravity compensation on the arm's links, as the real Franka controller compensates gravity.

Compiled models are cached per `SceneOptions`: many arms in one process share one `MjModel` and
each owns only its `MjData`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass

import franky_sim
import mujoco
import numpy as np

from rlhw.robot.pose import Pose

log = logging.getLogger(__name__)

ASSET_DIR = os.path.join(os.path.dirname(franky_sim.__file__), "assets")
ARM_XML = os.path.join(ASSET_DIR, "fr3.xml")
MESH_DIR = os.path.join(ASSET_DIR, "meshes")

ARM_JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))
ARM_ACTUATORS = ARM_JOINTS  # the asset names its position servos after the joints
FINGER_JOINTS = ("finger_joint1", "finger_joint2")
GRIPPER_ACTUATOR = "hand"
#: The hand actuator's control range maps linearly onto finger opening (0..255 -> 0..0.08 m).
GRIPPER_CTRL_MAX = 255.0
ARM_BODIES = tuple(f"fr3_link{i}" for i in range(1, 8)) + ("hand", "left_finger", "right_finger")
TCP_OFFSET = 0.1034

#: Scene cameras in the order sim-only configs map camera serials onto them.
CAMERA_NAMES = ("front", "wrist", "side", "table")
CUBE_HALF_SIZE = 0.025
#: Where an unused cube waits: on the table, out of reach and out of every camera's view.
CUBE_PARKED = np.array([0.0, -1.5, CUBE_HALF_SIZE])
#: The taped goal area of contact tasks: a square this wide (half), this thick (half), flush on the table.
FLOOR_MARK_HALF_SIZE = 0.055
FLOOR_MARK_HALF_HEIGHT = 0.001
FLOOR_MARK_PARKED = np.array([0.0, 1.5, FLOOR_MARK_HALF_HEIGHT])

# The peg-in-hole props (metres). The peg is a box on the hand body, along its approach (z) axis.
PEG_HALF_WIDTH = 0.01
PEG_LENGTH = 0.06
#: How far the peg's tip lies past the TCP along the approach axis.
PEG_TIP = 0.05
HOLE_CLEARANCE = 0.004
BLOCK_HALF_WIDTH = 0.05
#: Depth of the hole (the walls' height); its floor is below that.
HOLE_DEPTH = 0.04
HOLE_PARKED = np.array([0.0, 1.5, 0.0])


def _add_peg_in_hole(spec: mujoco.MjSpec, hand) -> None:
    """The peg on the hand and the block with the hole as a mocap body (origin: the hole's top
    centre, z along the hole's axis, out of the hole)."""
    hand.add_geom(
        name="peg",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[PEG_HALF_WIDTH, PEG_HALF_WIDTH, PEG_LENGTH / 2],
        pos=[0.0, 0.0, TCP_OFFSET + PEG_TIP - PEG_LENGTH / 2],
        mass=0.05,
        rgba=[0.2, 0.4, 0.9, 1.0],
        friction=[0.3, 0.005, 0.0001],
    )
    block = spec.worldbody.add_body(name="hole_block", mocap=True, pos=list(HOLE_PARKED))
    a = PEG_HALF_WIDTH + HOLE_CLEARANCE / 2  # the hole's half width
    b, h = BLOCK_HALF_WIDTH, HOLE_DEPTH / 2
    wall = (b - a) / 2
    rgba, friction = [0.75, 0.65, 0.3, 1.0], [0.3, 0.005, 0.0001]
    # Soft contacts stand in for the compliance of a real arm's impedance controller: the sim
    # arm's joint servos are stiff (about 35 N per mm pressed into a hard block; about 10 with these).
    soft = dict(solref=[0.1, 1.0], solimp=[0.5, 0.95, 0.01, 0.5, 2.0])
    for name, pos, size in (
        ("wall_px", [a + wall, 0.0, -h], [wall, b, h]),
        ("wall_nx", [-a - wall, 0.0, -h], [wall, b, h]),
        ("wall_py", [0.0, a + wall, -h], [a, wall, h]),
        ("wall_ny", [0.0, -a - wall, -h], [a, wall, h]),
        ("hole_floor", [0.0, 0.0, -HOLE_DEPTH - 0.005], [b, b, 0.005]),
    ):
        block.add_geom(
            name=name, type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos, size=size, rgba=rgba, friction=friction, **soft
        )


def hole_block_pose(goal: Pose, insertion_depth_m: float) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Mocap position and quaternion (w, x, y, z: MuJoCo's order) of ``hole_block`` such that the peg
    is ``insertion_depth_m`` deep in the hole, on its axis, when the TCP is at ``goal``. The hole's
    axis is the hand's approach axis (its z) at the goal."""
    top = goal.transform((0.0, 0.0, PEG_TIP - insertion_depth_m))  # out of the hand, into the hole
    # the block's z points out of the hole: the hand's frame turned half a turn about its x
    block = goal * Pose(quaternion=(1.0, 0.0, 0.0, 0.0))
    return top, block.wxyz


@dataclass(frozen=True)
class SceneOptions:
    """What varies between scenes; every arm built with equal options shares one compiled model."""

    cube: bool = False
    peg: bool = False
    timestep: float = 0.002

    def __post_init__(self) -> None:
        if not (0.0 < self.timestep <= 0.01):
            raise ValueError(f"timestep: {self.timestep} s is outside (0, 0.01]; use 0.002 (500 Hz)")


def look_at(position, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion (w, x, y, z) of a MuJoCo camera at ``position`` looking at ``target``.

    A MuJoCo camera looks along its local -z with +y up, so its frame columns are
    (right, up, -forward).
    """
    position, target, up = (np.asarray(v, dtype=float) for v in (position, target, up))
    forward = target - position
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    rot = np.column_stack([right, cam_up, -forward])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rot.flatten())
    return quat


def _build_spec(options: SceneOptions) -> mujoco.MjSpec:
    """The FR3 asset with its hand's TCP site, on a table with a goal marker, the task's objects, and the
    cameras. Built in one fixed order: the compiled model (and its disk cache) depends on it."""
    spec = mujoco.MjSpec.from_file(ARM_XML)
    spec.meshdir = MESH_DIR  # the asset says "assets", relative to itself; meshes live in assets/meshes
    spec.modelname = "rlhw_fr3" + ("_cube" if options.cube else "") + ("_peg" if options.peg else "")
    spec.option.timestep = options.timestep
    spec.visual.global_.offwidth = 640
    spec.visual.global_.offheight = 480
    hand = _tune_arm(spec)
    _add_table_and_target(spec)
    if options.cube:
        _add_cube_and_floor_mark(spec.worldbody)
    if options.peg:
        _add_peg_in_hole(spec, hand)
    _add_cameras(spec.worldbody, hand)
    return spec


def _tune_arm(spec: mujoco.MjSpec):
    """Gravity-compensated links, frictionless fingers, and the TCP site on the hand (returned)."""
    for name in ARM_BODIES:
        spec.body(name).gravcomp = 1.0
    # The finger joints inherit the arm's friction loss (1.137 N) from the asset's class default,
    # more than the hand actuator (max 4 N over two fingers) can overcome near full opening.
    for name in FINGER_JOINTS:
        spec.joint(name).frictionloss = 0.0
    hand = spec.body("hand")
    hand.add_site(name="tcp", pos=[0.0, 0.0, TCP_OFFSET], size=[0.005, 0.005, 0.005], group=4)
    return hand


def _add_table_and_target(spec: mujoco.MjSpec) -> None:
    """A checkered table plane under a top light, and the reach target: a mocap sphere no contact sees."""
    spec.add_texture(
        name="grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        width=256,
        height=256,
        rgb1=[0.55, 0.5, 0.45],
        rgb2=[0.45, 0.4, 0.35],
    )
    spec.add_material(name="table", texrepeat=[8, 8], reflectance=0.0).textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = (
        "grid"
    )
    world = spec.worldbody
    world.add_light(name="top", pos=[0.5, 0.0, 2.0], dir=[0.0, 0.0, -1.0], diffuse=[0.8, 0.8, 0.8], castshadow=False)
    world.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[2.0, 2.0, 0.05],
        material="table",
        friction=[1.0, 0.005, 0.0001],
    )
    target = world.add_body(name="target", mocap=True, pos=[0.5, 0.0, 0.3])
    target.add_geom(
        name="target",
        type=mujoco.mjtGeom.mjGEOM_SPHERE,
        size=[0.02, 0, 0],
        rgba=[0.1, 0.9, 0.2, 0.5],
        contype=0,
        conaffinity=0,
        group=0,
    )


def _add_cube_and_floor_mark(world) -> None:
    """push_cube's free cube and its taped goal mark (a mocap box no contact sees), both parked out of view."""
    cube = world.add_body(name="cube", pos=list(CUBE_PARKED))
    cube.add_freejoint(name="cube")
    cube.add_geom(
        name="cube",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[CUBE_HALF_SIZE] * 3,
        mass=0.1,
        rgba=[0.85, 0.15, 0.1, 1.0],
        friction=[1.0, 0.005, 0.0001],
    )
    mark = world.add_body(name="floor_mark", mocap=True, pos=list(FLOOR_MARK_PARKED))
    mark.add_geom(
        name="floor_mark",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[FLOOR_MARK_HALF_SIZE, FLOOR_MARK_HALF_SIZE, FLOOR_MARK_HALF_HEIGHT],
        rgba=[0.1, 0.3, 0.95, 1.0],
        contype=0,
        conaffinity=0,
        group=0,
    )


def _add_cameras(world, hand) -> None:
    """The scene's cameras, in the order sim-only configs map camera serials onto them."""
    world.add_camera(name="front", pos=[1.15, 0.0, 0.6], quat=look_at([1.15, 0.0, 0.6], [0.45, 0.0, 0.15]), fovy=50.0)
    # Wrist camera: on the hand, beside the fingers, looking down the gripper's approach axis.
    hand.add_camera(
        name="wrist",
        pos=[0.06, 0.0, 0.02],
        quat=look_at([0.06, 0.0, 0.02], [0.0, 0.0, 0.16], up=(1.0, 0.0, 0.0)),
        fovy=70.0,
    )
    world.add_camera(name="side", pos=[0.45, -1.0, 0.6], quat=look_at([0.45, -1.0, 0.6], [0.45, 0.0, 0.1]), fovy=50.0)
    # Task camera: in front of the work area, looking back at the arm, so a pushed cube faces it.
    world.add_camera(name="table", pos=[0.74, 0.0, 0.22], quat=look_at([0.74, 0.0, 0.22], [0.52, 0.0, 0.0]), fovy=58.0)


_CACHE: dict[SceneOptions, mujoco.MjModel] = {}
_LOCK = threading.Lock()


def _disk_cache_path(options: SceneOptions) -> str | None:
    """Where the compiled model is kept between processes, or None when disabled.

    Compiling parses ~40 meshes (seconds; much longer on a busy machine), loading the binary takes
    a fraction of that, and every env server, test process and benchmark builds the same scene.
    The key covers everything the model depends on: options, MuJoCo version, the asset file and
    this module's source. ``RLHW_MUJOCO_CACHE=0`` disables it; ``RLHW_MUJOCO_CACHE=<dir>`` moves it.
    """
    where = os.environ.get("RLHW_MUJOCO_CACHE", "")
    if where.strip() in ("0", "off", "false"):
        return None
    root = where or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlhw", "mujoco")
    digest = hashlib.sha256()
    digest.update(repr((options, mujoco.__version__)).encode())
    for path in (ARM_XML, __file__):
        with open(path, "rb") as f:
            digest.update(f.read())
    return os.path.join(root, f"scene-{digest.hexdigest()[:16]}.mjb")


def _compile(options: SceneOptions) -> mujoco.MjModel:
    path = _disk_cache_path(options)
    if path is not None and os.path.exists(path):
        try:
            return mujoco.MjModel.from_binary_path(path)
        except Exception as e:  # a truncated or foreign file: rebuild it
            log.warning("ignoring unreadable cached model %s: %s", path, e)
    model = _build_spec(options).compile()
    if path is not None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            mujoco.mj_saveModel(model, tmp, None)
            os.replace(tmp, path)  # atomic: concurrent processes never read half a file
        except OSError as e:
            log.warning("could not cache the compiled model at %s: %s", path, e)
    return model


def scene_model(options: SceneOptions = SceneOptions()) -> mujoco.MjModel:
    """The compiled model for ``options``, built once per process and shared (treat as read-only)."""
    with _LOCK:
        model = _CACHE.get(options)
        if model is None:
            model = _compile(options)
            _CACHE[options] = model
        return model


def scene_xml(options: SceneOptions = SceneOptions()) -> str:
    """The composed scene as MJCF text, for inspection in MuJoCo's viewer."""
    return _build_spec(options).to_xml()
