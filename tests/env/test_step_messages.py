"""The usual step's kept messages say exactly what the plain path says, for every kind of step and any order.

The writer refills the message of the last usual step, the reader reads by the spec's layout, the client refills
one request: each is checked here against the plain path (`fill_step`, `StepReader.plain`, `codec.step_request`)
on the same steps, and on messages a plain reader would read otherwise or refuse. A kept message is replaced
before protobuf's arena behind it grows without bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.env import codec
from rlhw.env.step_messages import StepReader, StepRequests, StepWriter, fill_step, is_usual
from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import FaultKind
from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.step import Step, stack

ACTION = np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.6, 0.7], np.float32)


def _spec(num_envs: int = 1, camera: bool = True) -> EnvSpec:
    obs = {
        "joint_pos": TensorSpec("joint_pos", "float32", (7,)),
        "gripper": TensorSpec("gripper", "float32", (1,)),
    }
    if camera:
        obs["wrist"] = TensorSpec("wrist", "uint8", (4, 5, 3))
    return EnvSpec(obs, TensorSpec("action", "float32", (7,), -1.0, 1.0), 10.0, num_envs, "test arm")


def _one(k: int, action=ACTION, camera: bool = True, **changes) -> Step:
    """Instance step number ``k`` of the test spec; ``changes`` replace its fields."""
    rng = np.random.default_rng(k)
    obs = {"joint_pos": rng.normal(size=7).astype(np.float32), "gripper": np.array([0.04 * (k % 2)], np.float32)}
    if camera:
        obs["wrist"] = rng.integers(0, 255, (4, 5, 3), dtype=np.uint8)
    fields = dict(
        success=k % 3 == 0,
        executed=action,
        intervened=False,
        stamps=dict.fromkeys(obs, 1.7e9 + k / 10),
        timing={"env": 1e-4 * k, "env.control": 5e-5},
    )
    fields.update(changes)
    reward, ended = fields.pop("reward", -0.25 * k), fields.pop("terminated", k % 5 == 4)
    return Step.one(obs, reward, ended, False, **fields)


def _steps() -> list[tuple[str, Step, np.ndarray]]:
    """(what, step, the client's action) of every kind, usual steps between the others."""
    other = ACTION[::-1].copy()
    be = _one(7)
    be_obs = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in be.obs.items()}
    return [
        ("usual", _one(1), ACTION),
        ("usual again", _one(2), ACTION),
        ("a fault", _one(3, fault=FaultKind.CONTACT, fault_message="wrench 41 N over 40 N"), ACTION),
        ("usual after a fault", _one(4), ACTION),
        ("an operator's takeover", _one(5, executed=other, intervened=True), ACTION),
        ("a fault before anything was sent", _one(6, executed=np.zeros(7, np.float32)), ACTION),
        ("usual", _one(8), ACTION),
        ("big-endian observations", Step(be_obs, *[getattr(be, f) for f in _FIELDS]), ACTION),
        ("usual", _one(9), ACTION),
        ("another timing phase", _one(10, timing={"env": 1e-3, "env.camera": 2e-3, "env.control": 1e-4}), ACTION),
        ("one phase fewer", _one(11, timing={"env": 1e-3}), ACTION),
        ("no camera (a layout change)", _one(12, camera=False), ACTION),
        ("the camera back", _one(13), ACTION),
        ("a float64 observation", _retyped(_one(14), "gripper", np.float64), ACTION),
        ("usual", _one(15), ACTION),
    ]


_FIELDS = ("reward", "terminated", "truncated", "success", "executed", "intervened", "fault", "fault_message")
_FIELDS += ("stamps", "timing")


def _retyped(step: Step, name: str, dtype) -> Step:
    obs = dict(step.obs, **{name: step.obs[name].astype(dtype)})
    return Step(obs, *[getattr(step, f) for f in _FIELDS])


def _plain(step: Step, timing: dict, action: np.ndarray, in_session: bool) -> bytes:
    response = pb.SessionResponse() if in_session else pb.StepResponse()
    fill_step(response.step if in_session else response, step, timing, action)
    return response.SerializeToString()


def _server_timing(step: Step) -> dict:
    return {"validate": 2e-5, **step.timing, "server": 4e-5}


@pytest.mark.parametrize("in_session", [True, False])
def test_the_writer_says_what_the_plain_path_says_for_every_kind_of_step_in_any_order(in_session):
    writer, parse = StepWriter(), (pb.SessionResponse if in_session else pb.StepResponse).FromString
    for what, step, action in _steps() + _steps()[::-1]:
        timing = _server_timing(step)
        got = parse(writer.serialize(step, timing, action, in_session))
        assert got == parse(_plain(step, timing, action, in_session)), what


def test_a_batch_is_refilled_like_one_instance():
    writer, spec = StepWriter(), _spec(num_envs=3)
    for k in range(4):
        step = stack([_one(3 * k + i) for i in range(3)], [_one(3 * k + i).obs for i in range(3)], {})
        action = np.tile(ACTION, (3, 1))
        timing = _server_timing(step)
        assert is_usual(step, action)
        got = pb.StepResponse.FromString(writer.serialize(step, timing, action, False))
        assert got == pb.StepResponse.FromString(_plain(step, timing, action, False))
        _assert_same(StepReader(spec).usual(got, action), StepReader(spec).plain(got, action))


def test_the_reader_reads_every_kind_of_step_as_the_plain_reader_does():
    reader, kinds_read_plainly = StepReader(_spec()), []
    for what, step, action in _steps():
        message = pb.StepResponse.FromString(_plain(step, _server_timing(step), action, False))
        fast = reader.usual(message, action)
        _assert_same(reader.read(message, action), reader.plain(message, action))
        if fast is None:
            kinds_read_plainly.append(what)
        else:
            _assert_same(fast, reader.plain(message, action))
    # all but the unusual steps, and the observations laid out otherwise than the spec says, are read by layout
    assert kinds_read_plainly == [
        "a fault",
        "an operator's takeover",
        "a fault before anything was sent",
        "no camera (a layout change)",
        "a float64 observation",
    ]


def test_a_message_laid_out_otherwise_than_the_spec_falls_to_the_plain_reader_untouched():
    reader, step = StepReader(_spec()), _one(1)
    good = pb.StepResponse.FromString(_plain(step, _server_timing(step), ACTION, False))
    assert reader.usual(good, ACTION) is not None

    def changed(edit) -> pb.StepResponse:
        message = pb.StepResponse()
        message.CopyFrom(good)
        edit(message)
        return pb.StepResponse.FromString(message.SerializeToString())

    reshaped = changed(_wrist_as_5x4)
    renamed = changed(_gripper_renamed)
    batched_stamp = changed(lambda m: m.observation.capture_time["gripper"].shape.append(1))
    two_rewards = changed(lambda m: m.reward.append(0.5))
    for message in (reshaped, renamed, batched_stamp, two_rewards):
        before = message.SerializeToString()
        assert reader.usual(message, ACTION) is None
        assert message.SerializeToString() == before  # reading inserted nothing
        _assert_same(reader.read(message, ACTION), reader.plain(message, ACTION))
    assert reader.read(reshaped, ACTION).obs["wrist"].shape == (1, 5, 4, 3)  # as sent, not as the spec says


def _wrist_as_5x4(message: pb.StepResponse) -> None:
    """The same bytes as another shape: a view by the spec's layout would read them wrongly."""
    tensor = message.observation.tensors["wrist"]
    del tensor.shape[:]
    tensor.shape.extend([5, 4, 3])


def _gripper_renamed(message: pb.StepResponse) -> None:
    tensors = message.observation.tensors
    tensors["hand"].CopyFrom(tensors["gripper"])
    del tensors["gripper"]


def _assert_same(a: Step, b: Step) -> None:
    assert a.obs.keys() == b.obs.keys() and a.stamps.keys() == b.stamps.keys()
    for name in a.obs:
        assert a.obs[name].dtype == b.obs[name].dtype and a.obs[name].shape == b.obs[name].shape, name
        np.testing.assert_array_equal(a.obs[name], b.obs[name])
    for field in ("reward", "terminated", "truncated", "success", "executed", "intervened"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and x.shape == y.shape, field
        np.testing.assert_array_equal(x, y)
    for name in a.stamps:
        assert a.stamps[name].dtype == b.stamps[name].dtype and a.stamps[name].shape == b.stamps[name].shape
        np.testing.assert_array_equal(a.stamps[name], b.stamps[name])
    assert (a.fault, a.fault_message, a.timing) == (b.fault, b.fault_message, b.timing)
    assert (a.final_obs is None) == (b.final_obs is None)


@pytest.mark.parametrize("in_session", [True, False])
def test_a_kept_request_says_what_a_new_one_says_whatever_the_action(in_session):
    requests, parse = StepRequests(), (pb.SessionRequest if in_session else pb.StepRequest).FromString
    wide = np.arange(14, dtype=np.float32).reshape(2, 7)
    for action in (ACTION, ACTION * 2, ACTION.astype(np.float64), wide, wide.T, ACTION.astype(">f4"), ACTION):
        assert parse(requests.serialize(action, in_session)) == parse(codec.step_request(action, in_session))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def test_kept_messages_are_replaced_before_their_arena_grows_without_bound():
    """protobuf copies each bytes field set into its message's arena and frees it only with the message: 40,000
    refills of a 16 kB frame would hold 640 MB."""
    usual, frame = _one(1), {"frame": np.zeros((1, 16, 1024), np.uint8)}  # 16 kB
    step = Step(frame, *[getattr(usual, f) for f in _FIELDS[:8]], stamps={}, timing={})
    writer, requests, action = StepWriter(), StepRequests(), np.zeros(4096, np.float32)  # and a 16 kB action
    for _ in range(2_000):  # warm up allocator pools
        writer.serialize(step, {}, ACTION, True)
        requests.serialize(action, True)
    before = _rss_mb()
    for _ in range(40_000):
        writer.serialize(step, {}, ACTION, True)
        requests.serialize(action, True)
    assert _rss_mb() - before < 32  # MB: a few kept messages at most
