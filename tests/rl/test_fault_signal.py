"""Faults that teach (`train.fault_signal`, rlhw/rl/fault_signal.py): what the learner stores for a step that a
safety fault ended, and what the critic's target makes of it.

The fault is real: the mock arm reports an external force over `env.safety.max_contact_force_n`, the safety
layer stops the arm and `RobotEnv` ends the episode with ``info["fault"] = contact``, as on a cell. The episode
loop hands the step to the sink the way the local runner and the env worker use it; SAC computes the target.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlhw.config import load_config_dict
from rlhw.config.train import FaultStore, SacConfig
from rlhw.errors import ConfigError, FaultKind
from rlhw.rl.episode_loop import BatchView, EpisodeLoop, LoopHooks
from rlhw.rl.episodes import EpisodeRecorder, episode_files, episode_transitions, load_episode
from rlhw.rl.fault_signal import FaultSignal
from rlhw.rl.instances import TRAIN
from rlhw.rl.sac import SAC, ObsLayout, obs_to_tensors
from rlhw.robot import make_env
from tests.robot.conftest import SIM_CLUSTER

pytestmark = pytest.mark.timeout(60)
GAMMA = 0.9
PRESS_AT = 3  # the step (0-based) at which the hand meets an obstacle


def config(**fault_signal):
    return load_config_dict(
        {
            "cluster": SIM_CLUSTER,
            "env": {"sim": "mock", "safety": {"max_contact_force_n": 40.0}},
            "train": {"sac": {"gamma": GAMMA}, "fault_signal": fault_signal},
        }
    )


class PressingArm:
    """A mock-backed `RobotEnv` whose hand meets 45 N at step ``PRESS_AT``: the safety layer's contact fault."""

    def __init__(self, cfg):
        self.env = make_env(cfg)
        self.spec, self.steps = self.env.spec, 0

    def reset(self, seed=None):
        self.env.arm.set_external_wrench(np.zeros(6))
        return self.env.reset(seed=seed)

    def step(self, action):
        if self.steps == PRESS_AT:
            self.env.arm.set_external_wrench([0, 0, 45.0, 0, 0, 0])
        self.steps += 1
        return self.env.step(action)

    def close(self):
        self.env.close()


def run_pressing_episode(tmp_path, **fault_signal):
    """One train episode that a contact fault ends; returns the env's own reports, the sunk transitions and
    the recorded episode."""
    cfg = config(**fault_signal)
    env = PressingArm(cfg)
    reported, sunk = [], []
    real_step = env.step

    def step(action):
        out = real_step(action)
        reported.append(out)
        return out

    env.step = step
    loop = EpisodeLoop(
        BatchView(env),
        0,
        [EpisodeRecorder(tmp_path / "env0")],
        fault_signal=FaultSignal.from_config(cfg.train),
    )
    hooks = LoopHooks(
        act=lambda obs, rows, ev: (np.zeros((len(rows), 3), np.float32), np.zeros(len(rows), np.int64)),
        choose=lambda book: TRAIN,
        report=lambda kind, result: None,
        sink=sunk.append,
    )
    try:
        loop.run(hooks, seed=0)
    finally:
        env.close()
    batch = {k: np.concatenate([b[k] for b in sunk]) for k in sunk[0]}
    return cfg, reported, batch, load_episode(episode_files(tmp_path)[0])


def test_a_contact_fault_step_is_stored_as_an_end_state_worth_standing_still_by_default(tmp_path):
    cfg, reported, stored, recorded = run_pressing_episode(tmp_path)
    assert cfg.train.fault_signal.store is FaultStore.STAND_STILL and cfg.train.fault_signal.penalty == 0.0
    last = reported[-1]
    reward = last.reward[0]
    assert last.fault == (FaultKind.CONTACT,) and last.truncated[0] and not last.terminated[0]  # what happened
    assert len(stored["reward"]) == PRESS_AT + 1
    assert stored["terminated"][-1] == 1.0
    assert stored["reward"][-1] == pytest.approx(reward / (1 - GAMMA))
    before = np.array([r.reward[0] for r in reported[:-1]], np.float32)
    np.testing.assert_array_equal(stored["reward"][:-1], before)  # the clean steps are stored as reported
    assert not stored["terminated"][:-1].any()
    # The episode on disk keeps the env's report and the fault's kind ...
    assert recorded.truncated[-1] and not recorded.terminated[-1]
    assert recorded.fault.tolist() == [""] * PRESS_AT + ["contact"]
    # ... and rebuilt from disk (demos, a resumed run) it is stored as the loop stored it live.
    rebuilt = episode_transitions(recorded, FaultSignal.from_config(cfg.train))
    np.testing.assert_array_equal(rebuilt["reward"], stored["reward"])
    np.testing.assert_array_equal(rebuilt["terminated"], stored["terminated"])


def test_truncate_stores_the_fault_step_as_the_env_reported_it(tmp_path):
    _, reported, stored, _ = run_pressing_episode(tmp_path, store="truncate")
    np.testing.assert_array_equal(stored["reward"], np.array([r.reward[0] for r in reported], np.float32))
    assert not stored["terminated"].any()


def test_terminal_stores_the_step_reward_minus_the_penalty_as_an_end_state(tmp_path):
    _, reported, stored, _ = run_pressing_episode(tmp_path, store="terminal", penalty=5.0)
    assert stored["terminated"][-1] == 1.0
    assert stored["reward"][-1] == pytest.approx(reported[-1].reward[0] - 5.0)


def test_a_fault_kind_outside_the_configured_kinds_is_stored_as_reported():
    signal = FaultSignal.from_config(config(kinds=["contact"]).train)
    reward, terminated = signal.stored(
        [-1.0, -2.0, -3.0], [False, False, True], [FaultKind.CAMERA_STALL, "", FaultKind.CONTACT]
    )
    np.testing.assert_array_equal(reward, np.array([-1.0, -2.0, -3.0 / (1 - GAMMA)], np.float32))
    np.testing.assert_array_equal(terminated, [False, False, True])
    assert not signal.teaches(FaultKind.LIMIT) and not signal.teaches(None)


def test_the_default_kinds_are_the_faults_the_policys_motion_causes():
    kinds = FaultSignal.from_config(config().train).kinds
    assert kinds == {FaultKind.CONTACT, FaultKind.LIMIT, FaultKind.REFLEX}


def _tiny_sac() -> SAC:
    layout = ObsLayout.from_shapes({"pos": (2,)}, {"pos": "float32"})
    return SAC(layout, -np.ones(3), np.ones(3), SacConfig(hidden_sizes=(16,), batch_size=4, gamma=GAMMA))


def test_the_critic_target_of_a_stored_fault_step_is_its_stored_reward_whatever_follows(tmp_path):
    _, _, stored, _ = run_pressing_episode(tmp_path)
    sac = _tiny_sac()
    n = len(stored["reward"])
    rewards = torch.as_tensor(stored["reward"]).view(-1, 1)
    not_done = 1.0 - torch.as_tensor(stored["terminated"]).view(-1, 1)
    alpha = sac.log_alpha.exp().detach()
    for scale in (0.0, 100.0):  # the observation after the fault does not matter to its target
        next_obs = obs_to_tensors({"pos": np.full((n, 2), scale, np.float32)}, sac.layout, sac.device)
        target = sac.bellman_target(next_obs, rewards, not_done, alpha)
        assert target[-1].item() == pytest.approx(stored["reward"][-1])
        assert not torch.allclose(target[:-1], rewards[:-1])  # the clean steps still bootstrap


def test_the_critic_target_of_a_truncated_fault_step_bootstraps(tmp_path):
    _, _, stored, _ = run_pressing_episode(tmp_path, store="truncate")
    sac = _tiny_sac()
    next_obs = obs_to_tensors({"pos": np.ones((1, 2), np.float32)}, sac.layout, sac.device)
    target = sac.bellman_target(
        next_obs, torch.as_tensor(stored["reward"][-1:]).view(1, 1), torch.ones(1, 1), sac.log_alpha.exp().detach()
    )
    assert target.item() != pytest.approx(float(stored["reward"][-1]))


@pytest.mark.parametrize(
    "fault_signal, path, words",
    [
        ({"store": "pause"}, "train.fault_signal.store", "'truncate', 'terminal' or 'stand_still'"),
        ({"penalty": -1.0}, "train.fault_signal.penalty", "greater than or equal to 0"),
        ({"kinds": ["contact", "bump"]}, "train.fault_signal.kinds[1]", "'contact'"),
        ({"kinds": ["locked"]}, "train.fault_signal.kinds", "locked is not a fault of a step"),
        ({"strore": "terminal"}, "train.fault_signal.strore", "store"),
    ],
)
def test_a_bad_fault_signal_is_refused_naming_the_key(fault_signal, path, words):
    with pytest.raises(ConfigError) as caught:
        config(**fault_signal)
    assert caught.value.path == path and words in str(caught.value)


def test_standing_still_has_no_value_without_discount_and_the_config_says_so():
    with pytest.raises(ConfigError, match="stand_still.*gamma=1"):
        load_config_dict({"cluster": SIM_CLUSTER, "env": {"sim": "mock"}, "train": {"sac": {"gamma": 1.0}}})


def test_the_env_worker_hands_the_learner_a_fault_step_as_configured(tmp_path):
    """The pipeline's path: an env worker (in process, no Ray) stores the fault step as the local runner does."""
    from tests.rl.test_episode_loop import _worker

    w = _worker(
        tmp_path,
        "train.fault_signal.store=terminal",
        "train.fault_signal.penalty=2.5",
        "env.safety.max_contact_force_n=40",
    )
    try:
        real_step, reported = w.env.step, []

        def step(action):
            if len(reported) == 2:
                w.env.arm.set_external_wrench([0, 0, 45.0, 0, 0, 0])
            reported.append(real_step(action))
            return reported[-1]

        w.env.step = step
        w.collect(5)
        w.run_episodes()
        sent = [p[3] for p in w.lane.puts if p[3] is not None]
        reward = np.concatenate([b["reward"] for b in sent])
        terminated = np.concatenate([b["terminated"] for b in sent])
        assert reported[-1].fault == (FaultKind.CONTACT,) and len(reward) == 3
        assert terminated.tolist() == [0.0, 0.0, 1.0]
        assert reward[-1] == pytest.approx(reported[-1].reward[0] - 2.5)
    finally:
        w.env.close()
