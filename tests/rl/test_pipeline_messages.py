"""The typed messages between the pipeline's processes, and the one spec-to-agent contract they build on.

No Ray here: the workers are built bare (``__new__``) with recording channels, so each test is milliseconds.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhw.rl.loop_health import LoopTimer, loop_metrics
from rlhw.rl.pipeline.messages import (
    WIRE_DTYPES,
    Actions,
    EnvProgress,
    EnvStep,
    FrameError,
    MessageTypeError,
    PolicyWeights,
    pack,
    unpack,
)
from rlhw.rl.replay import transition_batch
from rlhw.rl.spaces import AgentSpace, action_bounds, neutral_actions, zero_observations
from rlhw.robot.spec import EnvSpec, TensorSpec


def _step(k: int = 2) -> EnvStep:
    x = np.arange(2 * k, dtype=np.float32).reshape(k, 2)
    tr = transition_batch({"x": x}, {"x": x + 1}, np.zeros((k, 3)), np.ones(k), np.zeros(k), [True] + [False] * (k - 1))
    return EnvStep(
        env=1, obs={"x": x}, rows=tuple(range(k)), evaluating=np.array([True] + [False] * (k - 1)), transitions=tr
    )


# ------------------------------------------------------------------------------------------ the messages


def test_an_env_step_crosses_the_lane_codec_unchanged():
    sent = _step(3)
    buf, header_len, payload_len = pack(sent)
    got = unpack(buf, 0, header_len, payload_len, EnvStep)
    assert got.env == 1 and got.rows == (0, 1, 2) and got.wanted == 3
    np.testing.assert_array_equal(got.obs["x"], sent.obs["x"])
    np.testing.assert_array_equal(got.evaluating, [True, False, False])
    assert got.transitions["intervened"].dtype == np.float32 and got.transitions["intervened"].tolist() == [1, 0, 0]


def test_messages_are_frozen_so_a_receiver_cannot_change_what_the_sender_keeps():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _step().env = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        Actions(np.zeros((1, 3), np.float32), np.zeros(1, np.int64)).versions = None


def test_a_pickle_on_the_lane_is_not_unpickled_but_refused_as_a_frame_error():
    old = bytearray(pickle.dumps({"env": 0, "obs": None, "rows": [], "eval": np.zeros(0, bool), "transitions": None}))
    with pytest.raises(FrameError):
        unpack(old, 0, 16, len(old) - 16, EnvStep)
    with pytest.raises(MessageTypeError, match="builtins.dict"):
        pack({"env": 0})  # the sender is checked too


def test_every_dtype_and_shape_the_lane_carries_crosses_its_codec_unchanged_into_writable_arrays():
    obs = {str(dt): np.arange(6).reshape(2, 3).astype(dt) for dt in WIRE_DTYPES}
    obs.update(
        {
            "scalar": np.float64(2.5),
            "empty": np.zeros((2, 0, 3), np.float32),
            "big-endian": np.arange(2, dtype=">f8"),
            "strided": np.arange(12, dtype=np.int16).reshape(2, 6)[:, ::2],
            "image": np.full((2, 16, 16, 3), 7, np.uint8),
        }
    )
    sent = EnvStep(env=5, obs=obs, rows=(3, 1), evaluating=np.array([False, True]), transitions=_step(2).transitions)
    buf, header_len, payload_len = pack(sent, front=16, back=16)
    got = unpack(buf, 16, header_len, payload_len, EnvStep)
    assert got.env == 5 and got.rows == (3, 1) and got.evaluating.tolist() == [False, True]
    for name, value in {**obs, **{f"t/{k}": v for k, v in sent.transitions.items()}}.items():
        back = got.obs[name] if name in got.obs else got.transitions[name[2:]]
        np.testing.assert_array_equal(back, value)
        assert back.dtype == np.asarray(value).dtype.newbyteorder("<") and back.shape == np.shape(value)
        assert back.flags.writeable and (back.ctypes.data % 8 == 0 or back.size == 0)  # aligned views of the frame
    answer = unpack(*_packed(Actions(np.ones((2, 7), np.float32), np.array([4, -1]))), Actions)
    assert answer.actions.shape == (2, 7) and answer.versions.tolist() == [4, -1]


def _packed(msg) -> tuple:
    buf, header_len, payload_len = pack(msg)
    return buf, 0, header_len, payload_len


@pytest.mark.parametrize(
    "value, problem",
    [
        (np.array([object()]), "dtype object"),
        (np.zeros(2, np.complex64), "dtype complex64"),
        (np.zeros((1,) * 9, np.float32), "dtype float32 and 9 dimensions"),
        (np.array(["a"]), "dtype <U1"),
    ],
)
def test_an_array_the_codec_cannot_carry_is_refused_at_the_sender_naming_it(value, problem):
    with pytest.raises(MessageTypeError, match=f"EnvStep array 'wrist' has {problem}.*convert it"):
        pack(EnvStep(env=0, obs={"wrist": value}, rows=(0,), evaluating=np.zeros(1, bool)))


def test_a_frame_decodes_only_as_the_message_its_receiver_waits_for():
    with pytest.raises(FrameError, match="Actions where EnvStep was expected"):
        unpack(*_packed(Actions(np.ones((1, 7), np.float32), np.zeros(1, np.int64))), EnvStep)
    buf, start, header_len, payload_len = _packed(_step(2))
    with pytest.raises(FrameError, match="ends past the payload"):
        unpack(buf, start, header_len, payload_len - 16, EnvStep)  # a payload shorter than its header says


def test_an_empty_array_of_a_shape_numpy_cannot_hold_is_a_frame_error_not_a_crash():
    buf, start, header_len, payload_len = _packed(
        EnvStep(env=0, obs={"x": np.zeros((0, 3, 3), np.float32)}, rows=(0,), evaluating=np.zeros(1, bool))
    )
    dims = bytes(buf).index(b"x" + struct.pack("<3I", 0, 3, 3)) + 1
    buf[dims : dims + 12] = struct.pack("<3I", 0, 2**32 - 1, 2**32 - 1)  # no bytes, but 2**64 elements if it had any
    with pytest.raises(FrameError, match="a shape no array of the lane can have"):
        unpack(buf, start, header_len, payload_len, EnvStep)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
    st.integers(-64, 64),
    st.sampled_from([EnvStep, Actions]),
)
def test_no_header_makes_the_decoder_fail_other_than_with_a_frame_error(changes, payload_change, expected):
    """Whatever a peer seals, the receiver gets a message or a FrameError (which drops the peer), never a crash."""
    buf, start, header_len, payload_len = _packed(
        _step(3) if expected is EnvStep else Actions(np.ones((3, 7), np.float32), np.zeros(3, np.int64))
    )
    for at, value in changes:
        buf[at % header_len] = value
    try:
        got = unpack(buf, start, header_len, max(payload_len + payload_change, 0), expected)
    except FrameError:
        return
    assert isinstance(got, expected)


class _Channel:
    def __init__(self, *items):
        self.items, self.puts = list(items), []

    def get(self, key=None, timeout=None):
        return self.items.pop(0)

    def get_batch(self, count, key=None, timeout=None):
        return [self.items.pop(0) for _ in range(count)]

    def qsize(self, key=None):
        return len(self.items)

    def put(self, item, key=None, timeout=None):
        self.puts.append((key, item))


def test_whoever_acts_refuses_weights_that_are_not_policy_weights():
    from rlhw.rl.pipeline.acting import WeightsFollower

    follower = WeightsFollower.__new__(WeightsFollower)
    follower.name, follower.key = "rlhw.train.weights", 0
    follower.channel = _Channel({"version": 3, "state": {}})
    with pytest.raises(MessageTypeError) as e:
        follower.refresh(policy=None)
    assert "rlhw.train.weights carries PolicyWeights messages" in str(e.value)


def test_progress_reports_start_with_nothing_finished_and_no_error():
    p = EnvProgress(rank=2, train_steps=0, idle=True, status="idle", restarts=0, eval_pending=0)
    assert p.episodes == [] and p.eval_results == [] and p.faults == [] and p.error is None
    assert PolicyWeights(version=5, state={}).version == 5


# ------------------------------------------------------------------------------ spec to layout and bounds

_SPEC = EnvSpec(
    observations={"pos": TensorSpec("pos", "float32", (3,)), "cam": TensorSpec("cam", "uint8", (8, 8, 3))},
    action=TensorSpec("action", "float32", (2,), low=np.array([0.5, -2.0]), high=1.0),
    control_hz=10.0,
)


def test_missing_action_bounds_are_the_policys_tanh_range_and_scalars_broadcast():
    low, high = action_bounds(TensorSpec("a", "float32", (4,)))
    assert low.tolist() == [-1] * 4 and high.tolist() == [1] * 4 and low.dtype == np.float32
    low, high = action_bounds(_SPEC.action)
    assert low.tolist() == [0.5, -2.0] and high.tolist() == [1.0, 1.0]


def test_an_idle_instance_gets_zero_moved_inside_the_bounds():
    assert neutral_actions(_SPEC.action, 3).tolist() == [[0.5, 0.0]] * 3


def test_the_agent_space_reads_vectors_and_images_in_a_fixed_order_with_every_shape():
    space = AgentSpace.from_spec(_SPEC)
    assert space.layout.proprio == (("pos", (3,)),) and space.layout.images == (("cam", (8, 8, 3)),)
    assert space.observation_shapes == {"pos": (3,), "cam": (8, 8, 3)} and space.action_shape == (2,)
    zeros = zero_observations(_SPEC, 2)
    assert zeros["cam"].dtype == np.uint8 and zeros["cam"].shape == (2, 8, 8, 3) and zeros["pos"].shape == (2, 3)


# ---------------------------------------------------------------------------------------- loop health


def test_loop_health_counts_latency_per_answer_and_periods_only_within_an_episode():
    now = [0.0]
    timer = LoopTimer(clock=lambda: now[0])
    timer.episode_started()
    for t in (0.01, 0.11, 0.21):  # answers 10 ms after each observation, steps 100 ms apart
        now[0] = t
        timer.actions_received()
        now[0] = t + 0.09
        timer.stepped({"env.late": 0.002})
    timer.episode_started()  # a new episode: no period across the reset
    now[0] = 5.0
    timer.stepped({})
    s = timer.summary(num_envs=1)
    assert s["steps"] == 3 and s["latency_p50_ms"] == pytest.approx(10.0)
    assert len(timer.periods) == 2 and s["period_p50_ms"] == pytest.approx(100.0)
    assert s["late_steps"] == 3 and s["timed_steps"] == 3


def test_big_policy_weights_still_travel_through_the_object_store_not_through_the_channel_actor():
    from rlhw.runtime.payload import LARGE_PAYLOAD_BYTES, payload_nbytes

    weights = PolicyWeights(version=1, state={"w": np.zeros(LARGE_PAYLOAD_BYTES // 4, np.float32)})
    assert payload_nbytes(weights) >= LARGE_PAYLOAD_BYTES  # so the channel wraps it like the old dict
    assert payload_nbytes(Actions(np.zeros((8, 7), np.float32), np.zeros(8, np.int64))) < LARGE_PAYLOAD_BYTES


def test_observation_age_is_summarised_and_the_worst_env_worker_reaches_the_metrics_row():
    timer = LoopTimer(clock=lambda: 0.0)
    timer.episode_started()
    for age in (0.004, 0.006, 0.040):
        timer.actions_received()
        timer.stepped({"env.obs_age": age, "env.late": 0.0})  # through the env server: env.<key>
    quiet = timer.summary(num_envs=1)
    assert quiet["obs_age_p50_ms"] == pytest.approx(6.0) and quiet["obs_age_p99_ms"] > 39.0
    sim = LoopTimer(clock=lambda: 0.0)  # a simulator reports no age
    sim.actions_received()
    sim.stepped({})
    assert sim.summary(num_envs=1)["obs_age_p99_ms"] is None
    row = loop_metrics([quiet, {**quiet, "latency_p99_ms": 80.0, "late_steps": 1}, sim.summary(num_envs=1)])
    assert row["loop/obs_to_action_p99_ms"] == 80.0 and row["loop/obs_age_p99_ms"] == quiet["obs_age_p99_ms"]
    assert row["loop/late_step_share"] == pytest.approx(1 / 6)
