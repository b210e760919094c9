"""`Pose`: a rigid transform (a hand's or an object's place in a frame), in one convention everywhere.

Convention: ``position`` in metres; ``quaternion`` a unit quaternion ``[qx, qy, qz, qw]``, scalar LAST
(franky's `Affine`, libfranka, ROS, scipy). A pose ``T`` maps points of its own frame into the frame it
is expressed in (the arm's base frame for `ArmState.pose`): ``T.transform(p) = R p + t``.

The flat 7-vector ``[x, y, z, qx, qy, qz, qw]`` is the wire and file form only (`Pose.vector`,
`Pose.from_vector`): the franka driver's pipe, recorded pose files (rlhw/robot/poses.py), ``status()``.
MuJoCo stores quaternions scalar FIRST: `Pose.from_wxyz` and `Pose.wxyz` are the only places the order
flips, and only the MuJoCo driver calls them. Everything between the drivers and the tasks passes `Pose`.

Named after franky's `Affine` (``translation``/``quaternion``, ``*`` composes, ``inverse()``), but
written on plain floats: a pose has 7 numbers, and a handful of float operations costs less than one
numpy call; drivers build one per control step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

#: Quaternions shorter than this have no direction to normalise to.
MIN_QUATERNION_NORM = 1e-6


class PoseDistance(NamedTuple):
    """How far apart two poses are: the translation (m) and the angle of the rotation between them (rad)."""

    translation_m: float
    rotation_rad: float


def _floats(values, length: int, what: str) -> list[float]:
    """``values`` as ``length`` finite floats, or a ValueError that names ``what`` and the convention."""
    arr = np.asarray(values, dtype=float)
    floats = arr.ravel().tolist()
    # a sum is non-finite iff an element is, or huge finite ones overflow: then look at each
    if arr.shape != (length,) or (not math.isfinite(sum(floats)) and not all(map(math.isfinite, floats))):
        hint = "[x, y, z] in metres" if length == 3 else "[qx, qy, qz, qw] (scalar last)"
        raise ValueError(f"pose {what}: expected {length} finite numbers {hint}, got {values!r}")
    return floats


def _unit(q: list[float], what: str) -> tuple[float, float, float, float]:
    """``q`` normalised; a quaternion already unit to rounding is kept bit for bit (dividing by a norm of
    0.9999999999999999 would only add rounding: a driver's reading or a recorded file comes back exactly)."""
    x, y, z, w = q
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    if norm < MIN_QUATERNION_NORM:
        raise ValueError(f"pose {what}: quaternion {q} has zero length; give a unit quaternion [qx, qy, qz, qw]")
    if abs(norm - 1.0) <= 1e-12:
        return x, y, z, w
    return x / norm, y / norm, z / norm, w / norm


def _frozen(values) -> np.ndarray:
    arr = np.array(values, dtype=float)
    arr.setflags(write=False)
    return arr


def _readonly(values) -> np.ndarray:
    """A read-only view of a float array (the caller's own flags stay as they are), else a new array."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        arr = values.view()
    else:
        arr = np.array(values, dtype=float)
    arr.setflags(write=False)
    return arr


def quaternion_multiply(a, b) -> tuple[float, float, float, float]:
    """The Hamilton product ``a * b`` of two ``[qx, qy, qz, qw]`` quaternions: rotate by ``b``, then ``a``."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def _rotate(q, v) -> tuple[float, float, float]:
    """``v`` rotated by the unit quaternion ``q`` (``q v q*``, expanded)."""
    x, y, z, w = q
    vx, vy, vz = v
    # t = 2 (q_vec x v); v' = v + w t + q_vec x t
    tx, ty, tz = 2.0 * (y * vz - z * vy), 2.0 * (z * vx - x * vz), 2.0 * (x * vy - y * vx)
    return (vx + w * tx + y * tz - z * ty, vy + w * ty + z * tx - x * tz, vz + w * tz + x * ty - y * tx)


def rotation_error(current_xyzw, goal_xyzw) -> tuple[float, float, float]:
    """The rotation from ``current`` to ``goal`` (quaternions x-y-z-w), as a rotation vector (rad,
    base frame), the short way round. Plain floats: the MuJoCo arm's IK calls it every iteration."""
    cx, cy, cz, cw = map(float, current_xyzw)
    gx, gy, gz, gw = map(float, goal_xyzw)
    # e = goal * conj(current)
    ew = gw * cw + gx * cx + gy * cy + gz * cz
    ex = -gw * cx + gx * cw - gy * cz + gz * cy
    ey = -gw * cy + gx * cz + gy * cw - gz * cx
    ez = -gw * cz - gx * cy + gy * cx + gz * cw
    if ew < 0:
        ew, ex, ey, ez = -ew, -ex, -ey, -ez
    sin_half = math.sqrt(ex * ex + ey * ey + ez * ez)
    if sin_half < 1e-12:
        return 2.0 * ex, 2.0 * ey, 2.0 * ez
    scale = 2.0 * math.atan2(sin_half, ew) / sin_half
    return ex * scale, ey * scale, ez * scale


class Pose:
    """A position and a unit quaternion ``[qx, qy, qz, qw]``; immutable (its arrays are read-only).

    ``Pose(position, quaternion)`` checks both (finite, right length, a quaternion with a direction) and
    normalises the quaternion: bad input is a ValueError naming the part. ``a * b`` composes (``b``
    expressed in ``a``'s frame, then both in ``a``'s parent frame: franky's ``Affine * Affine``).
    """

    __slots__ = ("position", "quaternion")
    position: np.ndarray
    quaternion: np.ndarray

    def __init__(self, position: Iterable[float] = (0.0, 0.0, 0.0), quaternion: Iterable[float] = (0.0, 0.0, 0.0, 1.0)):
        _set_position(self, _frozen(_floats(position, 3, "position")))
        _set_quaternion(self, _frozen(_unit(_floats(quaternion, 4, "quaternion"), "quaternion")))

    @classmethod
    def unchecked(cls, position, quaternion) -> Pose:
        """A pose from numbers its caller already knows to be finite, with a unit quaternion (a driver's
        own kinematics, the safety layer's checked target): no checks, no normalising. The arrays are
        taken as they are (made read-only), so the caller must not keep writing to them."""
        pose = object.__new__(cls)
        _set_position(pose, _readonly(position))
        _set_quaternion(pose, _readonly(quaternion))
        return pose

    # -- the wire and file form, and MuJoCo's order --------------------------------------------------
    @classmethod
    def from_vector(cls, vector: Iterable[float]) -> Pose:
        """From ``[x, y, z, qx, qy, qz, qw]`` (a recorded file, the franka driver's pipe, a config)."""
        arr = np.asarray(vector, dtype=float)
        if arr.shape != (7,):
            raise ValueError(f"pose: expected 7 numbers [x, y, z, qx, qy, qz, qw], got {vector!r}")
        return cls(arr[:3], arr[3:])

    @property
    def vector(self) -> np.ndarray:
        """``[x, y, z, qx, qy, qz, qw]``: a new, writable array (the wire and file form)."""
        return np.concatenate([self.position, self.quaternion])

    @classmethod
    def from_wxyz(cls, position: Iterable[float], wxyz: Iterable[float]) -> Pose:
        """From a position and MuJoCo's scalar-first quaternion ``[qw, qx, qy, qz]``."""
        w, x, y, z = _floats(wxyz, 4, "quaternion (w first)")
        pose = object.__new__(cls)
        _set_position(pose, _frozen(_floats(position, 3, "position")))
        _set_quaternion(pose, _frozen(_unit([x, y, z, w], "quaternion (w first)")))
        return pose

    @property
    def wxyz(self) -> tuple[float, float, float, float]:
        """The orientation in MuJoCo's scalar-first order ``(qw, qx, qy, qz)``, as floats."""
        x, y, z, w = self.quaternion.tolist()
        return w, x, y, z

    # -- building ------------------------------------------------------------------------------------
    def with_position(self, position: Iterable[float]) -> Pose:
        """The same orientation at ``position`` (checked)."""
        return Pose.unchecked(_floats(position, 3, "position"), self.quaternion)

    def translated(self, offset: Iterable[float]) -> Pose:
        """The same orientation, moved by ``offset`` (m, in the parent frame): ``Pose(offset) * self``."""
        dx, dy, dz = _floats(offset, 3, "offset")
        x, y, z = self.position.tolist()
        return Pose.unchecked((x + dx, y + dy, z + dz), self.quaternion)

    def __mul__(self, other: Pose) -> Pose:
        if not isinstance(other, Pose):
            return NotImplemented
        q = self.quaternion.tolist()
        rx, ry, rz = _rotate(q, other.position.tolist())
        x, y, z = self.position.tolist()
        qx, qy, qz, qw = quaternion_multiply(q, other.quaternion.tolist())
        norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)  # keep it unit through long chains
        return Pose.unchecked((x + rx, y + ry, z + rz), (qx / norm, qy / norm, qz / norm, qw / norm))

    def inverse(self) -> Pose:
        """The pose that undoes this one: ``p * p.inverse()`` is the identity."""
        x, y, z, w = self.quaternion.tolist()
        conj = (-x, -y, -z, w)
        tx, ty, tz = _rotate(conj, self.position.tolist())
        return Pose.unchecked((-tx, -ty, -tz), conj)

    def transform(self, point: Iterable[float]) -> np.ndarray:
        """``point`` (in this pose's frame) expressed in the parent frame: ``R p + t``."""
        rx, ry, rz = _rotate(self.quaternion.tolist(), _floats(point, 3, "point"))
        x, y, z = self.position.tolist()
        return np.array((x + rx, y + ry, z + rz))

    @property
    def rotation_matrix(self) -> np.ndarray:
        """The 3x3 rotation matrix (columns: this frame's axes in the parent frame)."""
        x, y, z, w = self.quaternion.tolist()
        return np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
            ]
        )

    @property
    def matrix(self) -> np.ndarray:
        """The 4x4 homogeneous transform."""
        m = np.eye(4)
        m[:3, :3] = self.rotation_matrix
        m[:3, 3] = self.position
        return m

    # -- comparing -----------------------------------------------------------------------------------
    def rotation_to(self, other: Pose) -> np.ndarray:
        """The rotation from this orientation to ``other``'s, as a rotation vector (rad, parent frame),
        the short way round (``q`` and ``-q`` are the same orientation)."""
        return np.array(rotation_error(self.quaternion.tolist(), other.quaternion.tolist()))

    def angle_to(self, other: Pose) -> float:
        """The angle (rad, in [0, pi]) of the rotation between the two orientations."""
        rx, ry, rz = rotation_error(self.quaternion.tolist(), other.quaternion.tolist())
        return math.sqrt(rx * rx + ry * ry + rz * rz)

    def distance(self, other: Pose) -> PoseDistance:
        """Translation (m) and rotation angle (rad) between this pose and ``other``."""
        ax, ay, az = self.position.tolist()
        bx, by, bz = other.position.tolist()
        return PoseDistance(math.sqrt((ax - bx) ** 2 + (ay - by) ** 2 + (az - bz) ** 2), self.angle_to(other))

    def isclose(self, other: Pose, translation_m: float = 1e-9, rotation_rad: float = 1e-9) -> bool:
        d = self.distance(other)
        return d.translation_m <= translation_m and d.rotation_rad <= rotation_rad

    def __eq__(self, other: object) -> bool:
        """Exactly the same numbers (``q`` and ``-q`` differ here; `isclose` treats them as one orientation)."""
        if not isinstance(other, Pose):
            return NotImplemented
        return (
            self.position.tolist() == other.position.tolist() and self.quaternion.tolist() == other.quaternion.tolist()
        )

    __hash__ = None  # type: ignore[assignment]  # equal by value, but built on arrays

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(
            f"Pose is immutable; build a new one (with_position, *, Pose(...)) instead of setting {name}"
        )

    def __reduce__(self):
        return (Pose.unchecked, (np.array(self.position), np.array(self.quaternion)))

    def __repr__(self) -> str:
        p = ", ".join(f"{v:.4f}" for v in self.position.tolist())
        q = ", ".join(f"{v:.4f}" for v in self.quaternion.tolist())
        return f"Pose(position=[{p}], quaternion=[{q}])"


# The slots' own setters: Pose.__setattr__ refuses every assignment after construction.
_set_position = Pose.position.__set__  # type: ignore[attr-defined]
_set_quaternion = Pose.quaternion.__set__  # type: ignore[attr-defined]

#: No translation, no rotation.
IDENTITY = Pose()
