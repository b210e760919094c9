"""RobotEnv keeps the contract in rlhw/robot/env.py; reach on the mock is solvable and well shaped."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from drivers.mock import MockArm
from rlhw.errors import SafetyViolation
from rlhw.robot.env import RobotEnv
from rlhw.robot.task_registry import make_task
from tests.robot.conftest import greedy_action, make_config
from tests.robot.fake_clock import FakeClock

pytestmark = pytest.mark.timeout(60)

INFO_KEYS = {"timestamps", "timing", "success", "fault", "fault_message"}


def check_obs(env, obs):
    assert set(obs) == set(env.spec.observations)
    for name, spec in env.spec.observations.items():
        assert obs[name].dtype == np.dtype(spec.dtype) and obs[name].shape == spec.shape, name


def test_reset_and_step_return_what_the_spec_promises(mock_env):
    env = mock_env(images=True, sim_cameras=["front", "wrist"], image_size=[64, 80])
    assert env.spec.num_envs == 1 and env.spec.control_hz == 10.0 and env.spec.cameras == ("front", "wrist")
    assert env.spec.action.shape == (3,) and env.spec.action.dtype == "float32"
    assert env.spec.observations["image_wrist"].shape == (64, 80, 3)
    first = env.reset(seed=0)  # one instance: every field has a leading instance axis of 1, as a step's
    check_obs(env, {k: v[0] for k, v in first.obs.items()})
    assert first.num_envs == 1 and first.success.shape == (1,) and set(first.stamps) == set(first.obs)
    assert first.notes[0].faults == () and set(first.notes[0].frame_index) == {"front", "wrist"}
    assert {"total"} <= set(first.timing)
    obs, info = first.gym()  # the Gymnasium edge
    check_obs(env, obs)
    assert {"timestamps", "timing", "success", "reset_faults"} <= set(info) and set(info["timestamps"]) == set(obs)
    step = env.step(np.zeros(3, np.float32))  # one instance: every field has a leading instance axis of 1
    check_obs(env, {k: v[0] for k, v in step.obs.items()})
    assert step.num_envs == 1 and step.reward.dtype == np.float64 and step.terminated.dtype == bool
    assert step.truncated.shape == step.success.shape == step.intervened.shape == (1,)
    assert step.executed.tolist() == [[0.0, 0.0, 0.0]] and step.fault == (None,) and step.fault_message == ("",)
    assert step.final_obs is None and step.judge_success is not None  # a simulated arm: the judge's verdict
    assert set(step.stamps) == set(step.obs)
    assert set(step.notes[0].frame_index) == {"front", "wrist"}  # which camera frame each image is
    assert {"command", "wait", "observe", "total"} <= set(step.timing)
    assert all(abs(t[0] - time.time()) < 5 for t in step.stamps.values())  # wall clock
    obs, reward, terminated, truncated, info = step.gym()  # the Gymnasium edge
    check_obs(env, obs)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert INFO_KEYS <= set(info) and set(info["timestamps"]) == set(obs)


def test_observations_are_copies_the_caller_may_keep(mock_env):
    env = mock_env()
    obs0 = env.reset(seed=0).obs
    kept = obs0["ee_position"].copy()
    env.step(np.ones(3, np.float32))
    assert np.array_equal(obs0["ee_position"], kept)


def test_reach_observation_reward_and_success_agree(mock_env):
    env = mock_env()
    env.reset(seed=3)
    obs, reward, *_ = env.step(np.zeros(3, np.float32)).gym()
    dist = np.linalg.norm(obs["target_position"] - obs["ee_position"])
    assert np.allclose(obs["to_target"], obs["target_position"] - obs["ee_position"], atol=1e-6)
    assert reward == pytest.approx(-dist / 0.1, rel=1e-4)
    t = env.config.reach
    assert np.all(obs["target_position"] >= np.array(t.target_low, np.float32))
    assert np.all(obs["target_position"] <= np.array(t.target_high, np.float32))


def test_the_greedy_policy_reaches_every_target_quickly(mock_env):
    env = mock_env()
    lengths = []
    for seed in range(10):
        obs, _ = env.reset(seed=seed).gym()
        for k in range(1, 51):  # noqa: B007  (k, the episode length, is read after the loop)
            obs, _, terminated, truncated, info = env.step(greedy_action(obs)).gym()
            if terminated or truncated:
                break
        assert terminated and info["success"] and not truncated
        lengths.append(k)
    assert max(lengths) <= 25  # the task is solvable well inside 50 steps


def test_random_actions_rarely_succeed(mock_env):
    env = mock_env()
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(10):
        env.reset(seed=seed)
        for _ in range(50):
            *_, terminated, truncated, info = env.step(rng.uniform(-1, 1, 3).astype(np.float32)).gym()
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins <= 3


def test_episodes_truncate_at_max_episode_steps(mock_env):
    env = mock_env(max_episode_steps=4)
    env.reset(seed=0)
    flags = [env.step(np.zeros(3, np.float32)).gym()[2:4] for _ in range(4)]
    assert flags == [(False, False)] * 3 + [(False, True)]
    with pytest.raises(SafetyViolation, match="episode ended"):
        env.step(np.zeros(3, np.float32))


def test_the_same_seed_gives_the_same_episode(mock_env):
    a, b = mock_env(), mock_env()
    first_a, first_b = a.reset(seed=11), b.reset(seed=11)
    for k in first_a.obs:
        assert np.array_equal(first_a.obs[k], first_b.obs[k]), k
    for _ in range(3):
        act = np.array([0.3, -0.2, 0.1], np.float32)
        oa = a.step(act).gym()[0]
        ob = b.step(act).gym()[0]
    for k in oa:
        assert np.array_equal(oa[k], ob[k])


def test_a_wrong_action_shape_is_a_clear_error(mock_env):
    env = mock_env()
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(4,\), expected \(3,\)"):
        env.step(np.zeros(4, np.float32))


def test_out_of_range_actions_are_clipped_to_unit_box(mock_env):
    env = mock_env(safety={"max_step_m": 0.2, "max_velocity_mps": 2.0})
    obs, _ = env.reset().gym()
    env.step(np.array([5.0, 0, 0], np.float32))
    sent = env.arm.motions[-1][1]
    assert sent[0] - obs["ee_position"][0] == pytest.approx(0.025, abs=1e-6)


def test_simulated_time_steps_do_not_sleep(monkeypatch):
    cfg = make_config({"control_hz": 2})
    clock = FakeClock()
    env = RobotEnv(make_task("reach", cfg.env), MockArm(), {}, cfg.env, clock=clock)
    env.reset()
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail(f"a simulated-time step slept {s} s"))
    for _ in range(20):
        env.step(np.zeros(3, np.float32))
    assert clock.wakeups == [] and clock.now() == 0.0  # no sleep on the env's clock either
    assert env.arm.sim_time >= 10.0  # 20 steps = 10 s of simulated time
    env.close()


def realtime_env(hz: float, clock: FakeClock) -> RobotEnv:
    cfg = make_config({"control_hz": hz})
    arm = MockArm(realtime=True)
    env = RobotEnv(make_task("reach", cfg.env), arm, {}, cfg.env, clock=clock)
    env.connect()
    return env


def test_a_realtime_arm_is_stepped_at_the_control_rate():
    clock = FakeClock()
    env = realtime_env(20, clock)
    env.reset(seed=0)
    start = clock.now()
    clock.wakeups.clear()
    infos = [env.step(np.zeros(3, np.float32)).gym()[-1] for _ in range(10)]
    deadlines = [start]
    for _ in range(10):
        deadlines.append(deadlines[-1] + 0.05)
    assert clock.wakeups == deadlines[1:]  # each step ends exactly where its 50 ms period ends
    assert [i["timing"]["wait"] for i in infos] == [b - a for a, b in zip(deadlines, deadlines[1:])]
    assert all(i["timing"]["late"] == 0.0 for i in infos)
    env.close()


def test_a_late_step_resynchronises_instead_of_bursting():
    clock = FakeClock()
    env = realtime_env(20, clock)
    env.reset(seed=0)
    start = clock.now()
    env.step(np.zeros(3, np.float32))
    assert clock.now() == start + 0.05
    clock.advance(0.2)  # the policy took 4 periods
    late = env.step(np.zeros(3, np.float32)).gym()[-1]["timing"]
    assert late["late"] == pytest.approx(0.15, abs=1e-12) and late["wait"] == 0.0  # due at start + 0.1
    resumed = clock.now()
    assert resumed == start + 0.05 + 0.2
    env.step(np.zeros(3, np.float32))
    assert clock.now() == resumed + 0.05  # the next step waits a full period again, no burst
    env.close()


def test_each_step_reports_how_old_its_observation_was_when_the_action_arrived():
    clock = FakeClock()
    env = realtime_env(20, clock)
    env.reset(seed=0)
    clock.advance(0.03)  # the policy took 30 ms to answer the reset's observation
    first = env.step(np.zeros(3, np.float32)).gym()[-1]["timing"]
    assert first["obs_age"] == pytest.approx(0.03, abs=1e-12)
    second = env.step(np.zeros(3, np.float32)).gym()[-1]["timing"]  # answered at once
    assert second["obs_age"] == pytest.approx(0.0, abs=1e-12)
    env.close()


def test_status_is_json_and_reads_nothing_from_the_driver(mock_env):
    env = mock_env()
    env.reset()
    calls = dict(env.arm.calls)
    status = json.loads(json.dumps(env.status()))
    assert env.arm.calls == calls
    assert status["task"]["name"] == "reach" and status["episode_active"] and status["arm"]["errors"] == []
    assert status["limits"]["max_step_m"] == pytest.approx(0.03)


def test_close_is_idempotent_and_stops_the_arm(mock_env):
    env = mock_env(images=True)
    env.reset()
    env.close()
    env.close()
    assert not env.arm.connected and env.arm.calls["stop"] >= 1
    with pytest.raises(SafetyViolation, match="closed"):
        env.reset()


def test_images_are_fitted_to_the_configured_size():
    from rlhw.robot.images import fit_image

    img = np.arange(480 * 640 * 3, dtype=np.uint32).reshape(480, 640, 3).astype(np.uint8)
    out = fit_image(img, 128, 128)
    assert out.shape == (128, 128, 3) and out.dtype == np.uint8
    assert fit_image(out, 128, 128) is out  # already the right size: no copy
