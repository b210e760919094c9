"""BatchedEnv: N envs stepped together, with same-step autoreset exactly as documented."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.errors import FaultKind
from rlhw.robot import make_batched_env
from rlhw.robot.batch import BatchedEnv
from tests.robot.conftest import greedy_action, make_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def batch():
    envs = []

    def build(**env):
        b = make_batched_env(make_config(env))
        envs.append(b)
        return b

    yield build
    for b in envs:
        b.close()


def test_batched_shapes_carry_a_leading_num_envs_dimension(batch):
    b = batch(num_envs=3, images=True, image_size=[16, 16])
    assert b.spec.num_envs == 3
    first = b.reset(seed=0)
    obs = first.obs
    assert obs["ee_position"].shape == (3, 3) and obs["image_front"].shape == (3, 16, 16, 3)
    assert first.num_envs == 3 and first.success.shape == (3,) and len(first.notes) == 3
    assert set(first.stamps) == set(obs) and all(t.shape == (3,) for t in first.stamps.values())
    assert first.timing["total"] > 0  # each phase's slowest instance
    step = b.step(np.zeros((3, 3), np.float32))
    assert step.obs["image_front"].shape == (3, 16, 16, 3) and step.executed.shape == (3, 3)
    assert step.reward.shape == (3,) and step.terminated.dtype == bool and step.truncated.shape == (3,)
    assert step.success.shape == step.intervened.shape == (3,) and step.fault == (None,) * 3
    assert all(t.shape == (3,) for t in step.stamps.values()) and step.timing["total"] > 0
    assert step.final_obs is None and step.final_mask is None  # no instance ended


def test_instances_are_seeded_differently(batch):
    b = batch(num_envs=3)
    obs = b.reset(seed=5).obs
    targets = {tuple(t) for t in obs["target_position"].round(5)}
    assert len(targets) == 3


def test_same_step_autoreset_returns_the_next_episodes_first_observation(batch):
    b = batch(num_envs=2, max_episode_steps=30)
    obs = b.reset(seed=1).obs
    for _ in range(30):
        actions = np.stack([greedy_action({"to_target": obs["to_target"][0]}), np.zeros(3, np.float32)])
        prev = obs
        step = b.step(actions)
        obs = step.obs
        if step.terminated[0]:
            break
    assert step.terminated[0] and not (step.terminated[1] or step.truncated[1])
    assert step.final_mask.tolist() == [True, False]
    final = {k: v[0] for k, v in step.final_obs.items()}
    # the final observation is the successful one: close to its target
    assert np.linalg.norm(final["to_target"]) < 0.03 and step.success[0]
    np.testing.assert_array_equal(step.last["to_target"][0], final["to_target"])  # what a learner stores
    # obs[0] starts the next episode: a fresh target, at home, episode_step 0
    assert not np.allclose(obs["target_position"][0], final["target_position"])
    assert np.allclose(obs["ee_position"][0], [0.307, 0.0, 0.487], atol=1e-6)
    assert b.envs[0].episode_step == 0 and b.envs[1].episode_step > 0
    # the other instance just continued
    assert np.allclose(obs["target_position"][1], prev["target_position"][1])


def test_truncation_by_a_fault_also_autoresets(batch):
    b = batch(num_envs=2, mock_faults=[{"kind": "reflex", "after": 1}])
    b.reset(seed=0)
    b.step(np.zeros((2, 3), np.float32))
    step = b.step(np.zeros((2, 3), np.float32))
    assert step.truncated.tolist() == [True, True] and step.fault == (FaultKind.REFLEX, FaultKind.REFLEX)
    assert step.final_mask.all() and all(b_env.episode_step == 0 for b_env in b.envs)


def test_a_wrong_batch_shape_is_a_clear_error(batch):
    b = batch(num_envs=2)
    b.reset()
    with pytest.raises(ValueError, match=r"expected \(2, 3\)"):
        b.step(np.zeros(3, np.float32))


def test_envs_with_different_specs_cannot_be_batched():
    from rlhw.robot import make_env

    a = make_env(make_config())
    c = make_env(make_config({"action": {"gripper": True}}))
    with pytest.raises(ValueError, match="same observation and action"):
        BatchedEnv([a, c])
    a.close()
    c.close()
