"""The scripted expert: a simulated operator that reads privileged simulator state, never the policy's observations."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.teleop import ScriptedExpert, expert_for, register_expert
from rlhw.errors import ConfigError
from rlhw.robot import make_env
from rlhw.robot.teleop import TeleopEvent
from tests.robot.conftest import make_config


def scripted_env(**teleop):
    return make_env(make_config({"sim": "mujoco", "max_episode_steps": 60, "teleop": {"device": "scripted", **teleop}}))


def run_episode(env, action_fn=lambda obs: np.zeros(3, np.float32), seed=0):
    obs, _ = env.reset(seed=seed)
    infos = []
    while True:
        obs, _, terminated, truncated, info = env.step(action_fn(obs)).gym()
        infos.append(info)
        if terminated or truncated:
            return infos


def test_in_demo_mode_the_expert_drives_every_step_and_reaches_the_target_with_noise_and_pauses():
    env = scripted_env(mode="demo", noise=0.2, hesitation=0.1)
    try:
        for seed in range(3):
            infos = run_episode(env, seed=seed)
            assert all(i["intervened"] for i in infos)
            assert infos[-1]["success"], f"seed {seed}: no success in {len(infos)} steps"
    finally:
        env.close()


def test_the_expert_never_reads_the_policys_observations():
    env = scripted_env(mode="demo", noise=0.0, hesitation=0.0)
    try:
        real_observe = env.task.observe
        # Poison what the policy sees: the expert must still reach, from privileged state alone.
        env.task.observe = lambda state, frames: {
            k: np.full_like(v, np.nan) for k, v in real_observe(state, frames).items()
        }
        infos = run_episode(env)
        assert infos[-1]["success"]
    finally:
        env.close()


def test_in_intervene_mode_it_takes_over_a_stalled_policy_and_gives_back_after_its_steps():
    env = scripted_env(mode="intervene", noise=0.0, hesitation=0.0, patience=3, takeover_steps=4, intervene_prob=1.0)
    try:
        infos = run_episode(env)  # the "policy" never moves: no progress
        flags = [i["intervened"] for i in infos]
        assert flags[:3] == [False, False, False]  # patience: 3 steps without progress first
        first = flags.index(True)
        assert flags[first : first + 4] == [True] * 4 and flags[first + 4] is False  # 4 steps, then back
        assert infos[first]["teleop_events"] == [TeleopEvent.TAKEOVER.value]
        assert infos[first + 4]["teleop_events"] == [TeleopEvent.GIVE_BACK.value]
    finally:
        env.close()


def test_a_policy_that_makes_progress_is_left_alone():
    env = scripted_env(mode="intervene", noise=0.0, hesitation=0.0, patience=3)
    try:
        greedy = lambda obs: np.clip(obs["to_target"] / 0.025, -1, 1).astype(np.float32)  # noqa: E731
        infos = run_episode(env, greedy)
        assert infos[-1]["success"] and not any(i["intervened"] for i in infos)
    finally:
        env.close()


def test_the_intervention_probability_decays_over_the_run():
    env = scripted_env(mode="intervene", intervene_prob=1.0, intervene_decay=0.5)
    try:
        expert = env.takeover.device
        for seed in range(3):
            run_episode(env, seed=seed)
        assert expert.prob == pytest.approx(0.25)  # two episode boundaries seen by the expert
    finally:
        env.close()


def test_a_task_gets_an_expert_with_one_register_call_and_an_unknown_task_is_a_clear_error():
    with pytest.raises(ConfigError, match="no scripted expert for task 'stack'"):
        expert_for("stack")
    from drivers.teleop import scripted

    try:
        register_expert("stack", lambda env: np.zeros(3, np.float32))
        assert expert_for("stack")(None).shape == (3,)
    finally:
        scripted._EXPERTS.pop("stack", None)


def test_an_unknown_mode_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"env\.teleop\.mode"):
        make_config({"teleop": {"device": "scripted", "mode": "nudge"}})
    with pytest.raises(ConfigError, match="demo or intervene"):
        ScriptedExpert(type("E", (), {"task": type("T", (), {"name": "reach"})()})(), mode="nudge")
