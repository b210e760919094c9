"""Acting next to the arm (`train.policy_at: env`): the env worker's own policy answers at once, and new
weights and outgoing transitions are handled by a feeder thread, never inside the robot's step.

The weights and replay channels are stand-ins here (their Ray side is covered by tests/rl/test_pipeline.py,
where an env worker acting next to its arm learns from weights sent across nodes).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlhw.config.train import SacConfig, TrainConfig
from rlhw.rl.acting import ActingPolicy
from rlhw.rl.pipeline import acting
from rlhw.rl.pipeline.acting import FeederError, PolicyNextToArm
from rlhw.rl.pipeline.lane import LaneError
from rlhw.rl.pipeline.messages import EnvStep, PolicyWeights
from rlhw.rl.replay import transition_batch
from rlhw.robot.spec import EnvSpec, TensorSpec
from tests.waiting import wait_until

SPEC = EnvSpec(
    observations={"pos": TensorSpec("pos", "float32", (3,))},
    action=TensorSpec("action", "float32", (2,), low=-1.0, high=1.0),
    control_hz=10.0,
)
SAC = SacConfig(hidden_sizes=[8, 8])


class _Channel:
    """A weights or replay channel: what was put, per key; thread-safe like the real one."""

    def __init__(self):
        self.items: dict = {}
        self.lock = threading.Lock()
        self.put_threads: list[str] = []

    def put(self, item, key=None, timeout=None):
        with self.lock:
            self.items.setdefault(key, []).append(item)
            self.put_threads.append(threading.current_thread().name)

    def qsize(self, key=None):
        with self.lock:
            return len(self.items.get(key, []))

    def get_batch(self, count, key=None, timeout=None):
        with self.lock:
            got, self.items[key] = self.items[key][:count], self.items[key][count:]
            return got


def _weights(policy: ActingPolicy, version: int, value: float) -> PolicyWeights:
    return PolicyWeights(
        version, {k: np.full(v.shape, value, np.float32) for k, v in policy.current[0].state_dict().items()}
    )


def _step(k: int = 1, transitions: bool = False) -> EnvStep:
    x = np.zeros((k, 3), np.float32)
    tr = transition_batch({"pos": x}, {"pos": x}, np.zeros((k, 2)), np.ones(k), np.zeros(k), [False] * k)
    return EnvStep(
        env=0,
        obs={"pos": x},
        rows=tuple(range(k)),
        evaluating=np.zeros(k, bool),
        transitions=tr if transitions else None,
    )


def test_new_weights_replace_the_network_whole_so_an_action_never_mixes_two_versions():
    policy = ActingPolicy(SPEC, SAC, torch.device("cpu"), seed=0)
    before, _ = policy.current
    kept = {k: v.clone() for k, v in before.state_dict().items()}
    policy.load(_weights(policy, version=7, value=0.01))
    after, version = policy.current
    assert after is not before and version == 7
    assert all(torch.equal(kept[k], v) for k, v in before.state_dict().items())  # the old one, untouched
    policy.random_actions = False
    answer = policy.act({"pos": np.zeros((2, 3), np.float32)}, np.array([False, True]))
    assert answer.versions.tolist() == [7, 7] and answer.actions.shape == (2, 2)


def test_warm_up_actions_are_uniform_with_version_minus_one_and_eval_rows_use_the_policy_once_it_has_weights():
    policy = ActingPolicy(SPEC, SAC, torch.device("cpu"), seed=0)
    assert policy.act({"pos": np.zeros((2, 3), np.float32)}, np.array([False, True])).versions.tolist() == [-1, -1]
    policy.load(_weights(policy, version=3, value=0.0))
    answer = policy.act({"pos": np.zeros((2, 3), np.float32)}, np.array([False, True]))
    assert answer.versions.tolist() == [-1, 3]  # still exploring at random; the eval row acted with the weights
    np.testing.assert_allclose(answer.actions[1], 0.0, atol=1e-6)  # all-zero weights: the mean action is 0


@pytest.fixture
def next_to_arm(monkeypatch):
    channels: dict[str, _Channel] = {}
    monkeypatch.setattr(
        "rlhw.runtime.channel.Channel.connect",
        staticmethod(lambda name, timeout_s=60: channels.setdefault(name, _Channel())),
    )
    monkeypatch.setattr(acting, "WEIGHTS_POLL_S", 0.0)
    config = SimpleNamespace(train=TrainConfig(sac=SAC, step_timeout_s=5.0))
    lane = PolicyNextToArm(
        SPEC, config, env_rank=2, num_learner_ranks=2, channel_prefix="run.", device=torch.device("cpu")
    )
    yield lane, channels["run.rlhw.train.weights"], channels["run.rlhw.train.replay"]
    lane.close()


def test_the_arms_own_policy_answers_at_once_and_follows_new_weights_without_the_loop_asking(next_to_arm):
    lane, weights, _ = next_to_arm
    lane.set_exploration(False)
    lane.send(_step())
    assert lane.actions().versions.tolist() == [-1]  # no weights yet: the initial network is version -1
    weights.put(_weights(lane.policy, version=5, value=0.0), key=2)  # this env worker's key: its rank
    assert wait_until(lambda: lane.policy.version == 5, timeout_s=5.0)
    lane.send(_step())
    assert lane.actions().versions.tolist() == [5]
    with pytest.raises(LaneError, match="without an observation sent first"):
        lane.actions()


def test_transitions_reach_the_learner_ranks_from_the_feeder_thread_not_the_robot_loop(next_to_arm):
    lane, _, replay = next_to_arm
    for _ in range(acting.REPLAY_FLUSH_N):
        lane.send(_step(transitions=True))
        lane.actions()
    assert wait_until(lambda: replay.qsize(key=0) == 1, timeout_s=5.0)
    assert len(replay.items[0][0]["reward"]) == acting.REPLAY_FLUSH_N
    assert set(replay.put_threads) == {"policy-feeder-2"}
    lane.send(_step(transitions=True))
    lane.close()  # what is still pending goes out on close, to the next learner rank
    assert replay.qsize(key=1) == 1


def test_a_failed_feeder_fails_the_robot_loop_at_its_next_step_with_the_cause(next_to_arm, monkeypatch):
    lane, _, replay = next_to_arm

    def dead_channel(*_args, **_kwargs):
        raise TimeoutError("the replay channel did not take the batch within 5 s")

    monkeypatch.setattr(replay, "put", dead_channel)
    lane.send(_step(transitions=True))
    lane.actions()
    assert wait_until(lambda: lane.feeder.error is not None, timeout_s=5.0)
    with pytest.raises(FeederError, match="no longer reach the learners: TimeoutError: the replay channel"):
        lane.send(_step())
