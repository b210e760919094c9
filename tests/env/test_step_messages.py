"""The usual step by its learned layout says exactly what protobuf's plain path says, for every kind of step, in any
order, and for any bytes a peer may send.

The writer writes a usual step's values into the layout learned from an earlier usual step's bytes, the reader
reads them from there; the client writes a request as the prefix protobuf writes before the action's bytes, and
the server reads such a request without a parse. Each is checked here against the plain path (`fill_step`,
`StepReader.plain` after protobuf's parse, `codec.step_request`, `ActionChecker.check`) on the same steps, on
random layouts, and on messages changed byte by byte.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.env import codec
from rlhw.env.step_layout import Layout
from rlhw.env.step_messages import StepPlaces, StepReader, StepRequests, StepWriter, fill_step, is_usual
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.validate import ActionChecker, InvalidRequest
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


def _decode(reader: StepReader, data: bytes, action: np.ndarray, in_session: bool) -> tuple[Step, bool]:
    """As `RemoteEnv` reads an answer: (the Step, whether the learned layout read it)."""
    step = reader.laid_out(data, action, in_session)
    if step is not None:
        return step, True
    message = pb.SessionResponse.FromString(data).step if in_session else pb.StepResponse.FromString(data)
    return reader.read(message, action, data, in_session), False


def _plainly(reader: StepReader, data: bytes, action: np.ndarray, in_session: bool) -> Step:
    message = pb.SessionResponse.FromString(data).step if in_session else pb.StepResponse.FromString(data)
    return reader.plain(message, action)


@pytest.mark.parametrize("in_session", [True, False])
def test_every_kind_of_step_in_any_order_is_written_and_read_as_the_plain_path_does(in_session):
    writer, reader, parse = StepWriter(), StepReader(_spec()), (pb.SessionResponse if in_session else pb.StepResponse)
    read_by_layout = []
    for what, step, action in _steps() + _steps()[::-1]:
        timing = _server_timing(step)
        data = writer.serialize(step, timing, action, in_session)
        assert parse.FromString(data) == parse.FromString(_plain(step, timing, action, in_session)), what
        got, laid_out = _decode(reader, data, action, in_session)
        _assert_same(got, _plainly(reader, data, action, in_session))
        if laid_out:
            read_by_layout.append(what)
    # in the first pass: the usual steps laid out as the usual step before them (big-endian arrays go on the wire
    # little-endian, as any other); a layout change is read plainly once, then learned
    assert read_by_layout[:5] == ["usual again", "usual after a fault", "usual", "big-endian observations", "usual"]


def test_the_writer_writes_usual_steps_by_the_layout_and_the_rest_plainly(monkeypatch):
    written = []
    write = StepPlaces.write
    monkeypatch.setattr(StepPlaces, "write", lambda self, *a: written.append(w := write(self, *a)) or w)
    writer = StepWriter()
    for _, step, action in _steps():
        writer.serialize(step, _server_timing(step), action, True)
    # asked only for usual steps; refused where the layout changed (big-endian arrays cannot be laid out: the
    # layout learned before them stays, and serves the next usual step)
    hits = [True, True, True, False, True] + [False] * 6  # then six layout changes in a row
    assert [w is not None for w in written] == hits


def test_a_batch_is_written_and_read_like_one_instance():
    writer, reader = StepWriter(), StepReader(_spec(num_envs=3))
    action = np.tile(ACTION, (3, 1))
    for k in range(4):
        step = stack([_one(3 * k + i) for i in range(3)], [_one(3 * k + i).obs for i in range(3)], {})
        timing = _server_timing(step)
        assert is_usual(step, action)
        data = writer.serialize(step, timing, action, False)
        assert pb.StepResponse.FromString(data) == pb.StepResponse.FromString(_plain(step, timing, action, False))
        got, laid_out = _decode(reader, data, action, False)
        assert laid_out == (k > 0)
        _assert_same(got, _plainly(reader, data, action, False))
        assert got.terminated.shape == (3,) and got.reward.dtype == np.float64


def test_random_layouts_are_written_and_read_as_the_plain_path_does(monkeypatch):
    """Observation names, dtypes, shapes and memory order, timing keys and batch sizes drawn at random (seed 0)."""
    rng, written = np.random.default_rng(0), []
    write = StepPlaces.write
    monkeypatch.setattr(StepPlaces, "write", lambda self, *a: written.append(w := write(self, *a)) or w)
    dtypes = (np.float32, np.float64, np.uint8, np.int32, np.int64, np.bool_, np.float16, np.uint16)
    for case in range(60):
        n = int(rng.integers(1, 4))
        shapes = {f"o{j}" * int(rng.integers(1, 40)): tuple(rng.integers(1, 6, rng.integers(0, 4))) for j in range(3)}
        kinds = {name: dtypes[rng.integers(len(dtypes))] for name in shapes}
        phases = [f"env.p{j}" * int(rng.integers(1, 30)) for j in range(int(rng.integers(0, 4)))]
        spec = EnvSpec(
            {k: TensorSpec(k, np.dtype(kinds[k]).name, v) for k, v in shapes.items()},
            TensorSpec("action", "float32", (7,), -1.0, 1.0),
            10.0,
            n,
            "random arm",
        )
        writer, reader, action = StepWriter(), StepReader(spec), np.tile(ACTION, (n, 1)) if n > 1 else ACTION
        for k in range(3):
            obs = {name: (rng.normal(size=(n, *shape)) * 100).astype(kinds[name]) for name, shape in shapes.items()}
            if rng.random() < 0.5:  # arrays in Fortran order: the same values, not C-contiguous
                obs = {name: np.asfortranarray(v) for name, v in obs.items()}
            step = Step(
                obs,
                rng.normal(size=n),
                rng.random(n) < 0.5,
                rng.random(n) < 0.5,
                rng.random(n) < 0.5,
                np.tile(ACTION, (n, 1)),
                np.zeros(n, bool),
                (None,) * n,
                ("",) * n,
                {name: 1.7e9 + rng.random(n) for name in obs},
                {p: float(rng.random()) for p in ["env", *phases]},
            )
            timing = _server_timing(step)
            data = writer.serialize(step, timing, action, True)
            assert pb.SessionResponse.FromString(data) == pb.SessionResponse.FromString(
                _plain(step, timing, action, True)
            ), case
            got, laid_out = _decode(reader, data, action, True)
            assert laid_out == (k > 0), case
            _assert_same(got, _plainly(reader, data, action, True))
        assert len(written) == 2 and None not in written, case  # the two later steps written by the layout
        written.clear()


def test_any_byte_changed_is_read_as_protobuf_reads_it_or_left_to_protobuf():
    """Each byte of a laid-out message, set to each of a few values: the reader's layout gives protobuf's reading of
    the changed message, or nothing (the changed byte is not a value's, or not a valid one)."""
    reader, step = StepReader(_spec(camera=False)), _one(1, camera=False)
    data = _plain(step, _server_timing(step), ACTION, True)
    _decode(reader, data, ACTION, True)
    read, left = 0, 0
    for at in range(len(data)):
        for value in (0, 1, 2, 0x7F, 0x80, 0xFF, data[at] ^ 1):
            changed = data[:at] + bytes([value]) + data[at + 1 :]
            got = reader.laid_out(changed, ACTION, True)
            if got is None:
                left += 1
                continue
            read += 1
            _assert_same(got, _plainly(reader, changed, ACTION, True))
    assert read > 0 and left > 0


def test_a_message_laid_out_otherwise_is_left_to_protobuf():
    reader, step = StepReader(_spec()), _one(1)
    good = pb.StepResponse.FromString(_plain(step, _server_timing(step), ACTION, False))
    _decode(reader, good.SerializeToString(), ACTION, False)
    assert reader.laid_out(good.SerializeToString(), ACTION, False) is not None

    def changed(edit) -> bytes:
        message = pb.StepResponse()
        message.CopyFrom(good)
        edit(message)
        return message.SerializeToString()

    otherwise = {
        "the same bytes as another shape": changed(_wrist_as_5x4),
        "a renamed observation": changed(_gripper_renamed),
        "a timing key renamed, of the same length": changed(_timing_renamed),
        "a batched capture time": changed(lambda m: m.observation.capture_time["gripper"].shape.append(1)),
        "two rewards": changed(lambda m: m.reward.append(0.5)),
        "a fault": changed(lambda m: (m.fault.append(pb.FAULT_KIND_CONTACT), m.fault_message.append("41 N"))),
        "the entries in another order": _entries_swapped(good),
        "a field this version does not know": good.SerializeToString() + b"\xa0\x06\x01",
    }
    for what, data in otherwise.items():
        assert reader.laid_out(data, ACTION, False) is None, what
        got, _ = _decode(reader, data, ACTION, False)
        _assert_same(got, _plainly(reader, data, ACTION, False))
    assert _decode(reader, otherwise["the same bytes as another shape"], ACTION, False)[0].obs["wrist"].shape == (
        1,
        5,
        4,
        3,
    )
    # an error in a Session stream is no step: the caller's parse raises it
    error = pb.SessionResponse(error=pb.Error(message="no")).SerializeToString()
    assert reader.laid_out(error, ACTION, True) is None


def _timing_renamed(message: pb.StepResponse) -> None:
    message.timing["env.contrl"] = message.timing.pop("env.control")


def _entries_swapped(message: pb.StepResponse) -> bytes:
    """The same message with its timing entries written in the other order (another server's map order)."""
    out = pb.StepResponse()
    out.CopyFrom(message)
    out.ClearField("timing")
    head = out.SerializeToString()
    entries = []
    for key in reversed(list(message.timing)):
        one = pb.StepResponse()
        one.timing[key] = message.timing[key]
        entries.append(one.SerializeToString())
    return head + b"".join(entries)


def test_a_layout_is_learned_only_from_a_usual_step_it_fully_understands():
    step = _one(1)
    data = _plain(step, _server_timing(step), ACTION, True)
    layout = Layout.learn(data, True)
    assert layout.pack(layout.blank()) == data and layout.read(data)[0::2] == layout.skeleton
    for i, size in enumerate(layout.sizes):  # a value of another size is refused, not padded or cut
        parts = layout.blank()
        parts[layout.at(i)] = bytes(size + 1)
        assert layout.pack(parts) is None
        if size > 1:  # (one element is contiguous whatever its stride)
            parts[layout.at(i)] = np.zeros(2 * size, np.uint8)[::2]  # the right size, not contiguous
            assert layout.pack(parts) is None
    assert Layout.learn(data, False) is None or StepPlaces.learn(data, False, step, _server_timing(step)) is None
    fault = _one(2, fault=FaultKind.CONTACT, fault_message="over 40 N")
    empty = _one(3, camera=False)
    empty = Step({**empty.obs, "nothing": np.zeros((1, 0), np.float32)}, *[getattr(empty, f) for f in _FIELDS])
    message = pb.SessionResponse.FromString(data)
    message.step.timing["env"] = 0.5
    twice = data + pb.SessionResponse(step=pb.StepResponse(reward=[1.0])).SerializeToString()
    refused = {
        "a fault": _plain(fault, {}, ACTION, True),
        "an empty tensor": _plain(empty, {}, ACTION, True),
        "a field twice": twice,
        "cut short": data[:-3],
        "an error": pb.SessionResponse(error=pb.Error(message="no")).SerializeToString(),
    }
    for what, bad in refused.items():
        assert Layout.learn(bad, True) is None, what


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
    assert (a.fault, a.fault_message) == (b.fault, b.fault_message) and a.timing.keys() == b.timing.keys()
    np.testing.assert_array_equal([a.timing[k] for k in a.timing], [b.timing[k] for k in a.timing])  # NaN == NaN
    assert (a.final_obs is None) == (b.final_obs is None)


@pytest.mark.parametrize("in_session", [True, False])
def test_a_request_by_its_prefix_says_what_protobuf_writes_whatever_the_action(in_session):
    requests, parse = StepRequests(), (pb.SessionRequest if in_session else pb.StepRequest).FromString
    wide = np.arange(14, dtype=np.float32).reshape(2, 7)
    for action in (ACTION, ACTION * 2, ACTION.astype(np.float64), wide, wide.T, ACTION.astype(">f4"), ACTION):
        assert parse(requests.serialize(action, in_session)) == parse(codec.step_request(action, in_session))


def _checker(num_envs: int = 1) -> ActionChecker:
    return ActionChecker(_spec(num_envs).action, num_envs)


def _parsed(checker: ActionChecker, data: bytes, in_session: bool):
    """The action as the server reads a request it parses: the checked array, or the InvalidRequest's words."""
    request = pb.SessionRequest.FromString(data).step if in_session else pb.StepRequest.FromString(data)
    try:
        return checker.check(request.action)
    except InvalidRequest as e:
        return str(e)


def _unparsed(checker: ActionChecker, data: bytes, in_session: bool):
    try:
        return checker.from_request(data, in_session)
    except InvalidRequest as e:
        return str(e)


@pytest.mark.parametrize("in_session", [True, False])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_the_usual_request_is_read_unparsed_as_the_parse_reads_it(in_session, num_envs):
    checker, rng = _checker(num_envs), np.random.default_rng(1)
    shape = (num_envs, 7) if num_envs > 1 else (7,)
    actions = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(20)]
    actions += [np.full(shape, 1.5, np.float32), np.full(shape, np.nan, np.float32), np.ones(shape, np.float32)]
    for action in actions:
        data = codec.step_request(action, in_session)
        assert checker.laid_out(data, in_session)
        got, want = _unparsed(checker, data, in_session), _parsed(checker, data, in_session)
        if isinstance(want, str):
            assert got == want  # the same refusal, naming the same field
        else:
            assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def test_any_other_request_is_left_to_the_parse():
    checker, data = _checker(), codec.step_request(ACTION, True)
    others = {
        "float64": codec.step_request(ACTION.astype(np.float64), True),
        "another shape": codec.step_request(ACTION[:6], True),
        "a field after the action": data + b"\xa0\x06\x01",
        "cut short": data[:-1],
        "a reset": pb.SessionRequest(reset=pb.ResetRequest(seed=3)).SerializeToString(),
        "a unary request in a session": codec.step_request(ACTION, False),
    }
    for what, other in others.items():
        assert checker.from_request(other, True) is None, what
    # each byte changed: read as the parse reads it, or left to the parse
    read = 0
    for at in range(len(data)):
        for value in (0, 1, 0x7F, 0x80, 0xFF, data[at] ^ 1):
            changed = data[:at] + bytes([value]) + data[at + 1 :]
            got = _unparsed(checker, changed, True)
            if got is None:
                continue
            read += 1
            want = _parsed(checker, changed, True)
            assert got == want if isinstance(want, str) else got.tobytes() == want.tobytes()
    assert read > 0


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def test_a_long_run_of_steps_holds_no_memory_that_grows():
    """Nothing the writer or the request writer keeps grows with the steps (a protobuf message refilled for ever
    would: upb copies each bytes field set into the message's arena and frees it only with the message)."""
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
    assert _rss_mb() - before < 32  # MB
