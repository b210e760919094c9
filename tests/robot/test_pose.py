"""`Pose`: one convention (scalar-last quaternions), franky's `Affine` algebra, checks where numbers come in."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from rlhw.robot.arm import ArmState
from rlhw.robot.pose import IDENTITY, Pose, rotation_error

DOWN = (1.0, 0.0, 0.0, 0.0)  # half a turn about x: the hand pointing at the table


def about_z(angle: float) -> tuple[float, float, float, float]:
    return (0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2))


def random_pose(rng: np.random.Generator) -> Pose:
    return Pose(rng.uniform(-1, 1, 3), rng.normal(size=4))


def test_the_7_vector_is_position_then_a_scalar_last_quaternion_and_comes_back_exactly():
    vector = [0.5, -0.1, 0.3, 0.0, 0.6, 0.0, 0.8]
    pose = Pose.from_vector(vector)
    assert pose.position.tolist() == [0.5, -0.1, 0.3] and pose.quaternion.tolist() == [0.0, 0.6, 0.0, 0.8]
    assert pose.vector.tolist() == vector


def test_mujocos_scalar_first_order_converts_both_ways():
    pose = Pose.from_wxyz([0.1, 0.2, 0.3], [0.8, 0.0, 0.6, 0.0])
    assert pose.quaternion.tolist() == [0.0, 0.6, 0.0, 0.8]
    assert pose.wxyz == (0.8, 0.0, 0.6, 0.0)


def test_a_quaternion_is_normalised_but_a_unit_one_is_kept_bit_for_bit():
    assert Pose(quaternion=(0, 0, 0, 2.0)).quaternion.tolist() == [0, 0, 0, 1.0]
    q = np.array([0.1, 0.2, 0.3, 0.9])
    q /= np.linalg.norm(q)  # unit up to rounding
    assert Pose(quaternion=q).quaternion.tolist() == q.tolist()


@pytest.mark.parametrize(
    "position, quaternion, match",
    [
        ((0.1, float("nan"), 0.3), DOWN, "pose position: expected 3 finite numbers"),
        ((0.1, 0.2), DOWN, "pose position"),
        ((0.1, 0.2, 0.3), (0, 0, 0, float("inf")), "pose quaternion: expected 4 finite numbers"),
        ((0.1, 0.2, 0.3), (0, 0, 0, 0), "zero length"),
        ((0.1, 0.2, 0.3), (1.0, 0.0, 0.0), r"\[qx, qy, qz, qw\]"),
    ],
)
def test_bad_numbers_are_refused_naming_the_part_and_the_convention(position, quaternion, match):
    with pytest.raises(ValueError, match=match):
        Pose(position, quaternion)


def test_a_vector_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match=r"7 numbers \[x, y, z, qx, qy, qz, qw\]"):
        Pose.from_vector([0.1, 0.2, 0.3, 1.0])


def test_a_pose_is_immutable_its_arrays_too():
    pose = Pose((0.1, 0.2, 0.3), DOWN)
    with pytest.raises(AttributeError, match="immutable"):
        pose.position = np.zeros(3)
    with pytest.raises(ValueError, match="read-only"):
        pose.position[0] = 1.0
    source = np.array([0.1, 0.2, 0.3])
    Pose.unchecked(source, np.array(DOWN))
    source[0] = 5.0  # the caller's own array stays writable


def test_composition_and_inverse_match_4x4_matrices():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = random_pose(rng), random_pose(rng)
        np.testing.assert_allclose((a * b).matrix, a.matrix @ b.matrix, atol=1e-12)
        np.testing.assert_allclose(a.inverse().matrix, np.linalg.inv(a.matrix), atol=1e-12)
        assert (a * a.inverse()).isclose(IDENTITY, 1e-12, 1e-7)
        point = rng.uniform(-1, 1, 3)
        np.testing.assert_allclose(a.transform(point), (a.matrix @ [*point, 1.0])[:3], atol=1e-12)


def test_composition_matches_frankys_affine():
    franky = pytest.importorskip("franky")
    rng = np.random.default_rng(1)
    a, b = random_pose(rng), random_pose(rng)
    theirs = franky.Affine(a.position, a.quaternion) * franky.Affine(b.position, b.quaternion)
    np.testing.assert_allclose((a * b).matrix, theirs.matrix, atol=1e-12)
    np.testing.assert_allclose(a.inverse().matrix, franky.Affine(a.position, a.quaternion).inverse.matrix, atol=1e-12)


def test_distance_is_the_translation_and_the_rotation_angle_the_short_way_round():
    a = Pose((0.0, 0.0, 0.0), about_z(0.0))
    b = Pose((0.3, 0.4, 0.0), about_z(0.5))
    assert a.distance(b) == pytest.approx((0.5, 0.5))
    assert a.distance(b).translation_m == pytest.approx(0.5) and a.distance(b).rotation_rad == pytest.approx(0.5)
    flipped = Pose((0.3, 0.4, 0.0), -np.array(about_z(0.5)))  # q and -q: one orientation
    assert a.angle_to(flipped) == pytest.approx(0.5) and b.isclose(flipped) and b != flipped
    np.testing.assert_allclose(a.rotation_to(b), [0.0, 0.0, 0.5], atol=1e-12)


def test_the_rotation_error_is_the_rotation_vector_from_current_to_goal():
    half = 0.15
    assert rotation_error((0, 0, 0, 1), (np.sin(half), 0, 0, np.cos(half))) == pytest.approx((0.3, 0, 0))
    assert rotation_error((0, 0, 0, 1), (0, 0, 0, -1)) == pytest.approx((0, 0, 0))


def test_with_position_and_translated_keep_the_orientation():
    pose = Pose((0.4, 0.0, 0.3), DOWN)
    assert pose.with_position((0.5, 0.1, 0.2)) == Pose((0.5, 0.1, 0.2), DOWN)
    assert pose.translated((0.0, 0.0, 0.1)).isclose(Pose((0.4, 0.0, 0.4), DOWN))
    assert pose.translated((0.0, 0.0, 0.1)).isclose(Pose((0.0, 0.0, 0.1)) * pose)
    with pytest.raises(ValueError, match="pose position"):
        pose.with_position((0.5, float("nan"), 0.2))


def test_the_down_pose_points_the_hands_z_axis_at_the_table():
    np.testing.assert_allclose(Pose(quaternion=DOWN).rotation_matrix[:, 2], [0, 0, -1], atol=1e-12)


def test_a_pose_pickles_and_an_arm_state_keeps_the_7_vector_for_the_wire():
    pose = Pose((0.4, 0.0, 0.3), DOWN)
    assert pickle.loads(pickle.dumps(pose)) == pose
    state = ArmState(0.0, np.zeros(7), np.zeros(7), pose, 0.04)
    assert state.ee_pose.tolist() == [0.4, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0]
    assert state.ee_position is pose.position
