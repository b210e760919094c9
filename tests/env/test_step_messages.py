"""A step on the wire says exactly what protobuf's own serialisation of it says, for every kind of step, in any
order, and protobuf's bytes are what the writer's declared tensors assume.

The writer appends each observation the spec declares as the bytes protobuf writes before that tensor's data, then
the array's bytes (`DeclaredTensor`); everything else is protobuf's `fill_step`. Each answer is checked here against
protobuf's serialisation of the whole step (`fill_step` with every observation), parsed both, on every kind of step
and on random specs; and each declared prefix against protobuf's bytes for a message holding only that tensor, so
that a protobuf that writes its bytes otherwise fails here, not on a robot.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.env.declared import DeclaredTensor
from rlhw.env.step_messages import StepReader, StepWriter, declare_observation, fill_step, wire_observations
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
        ("a non-contiguous frame", _strided(_one(15)), ACTION),
        ("usual", _one(16), ACTION),
    ]


_FIELDS = ("reward", "terminated", "truncated", "success", "executed", "intervened", "fault", "fault_message")
_FIELDS += ("stamps", "timing")


def _retyped(step: Step, name: str, dtype) -> Step:
    obs = dict(step.obs, **{name: step.obs[name].astype(dtype)})
    return Step(obs, *[getattr(step, f) for f in _FIELDS])


def _strided(step: Step) -> Step:
    """The camera's frame as a view every other column of a wider one: the same values, not C-contiguous."""
    wide = np.repeat(step.obs["wrist"], 2, axis=2)[:, :, ::2]
    assert not wide[0].flags.c_contiguous
    return Step(dict(step.obs, wrist=wide), *[getattr(step, f) for f in _FIELDS])


def _plain(step: Step, timing: dict, action: np.ndarray, in_session: bool) -> bytes:
    """Protobuf's serialisation of the whole step, every observation set by protobuf's generated code."""
    response = pb.SessionResponse() if in_session else pb.StepResponse()
    obs, stamps = wire_observations(step.obs, step.stamps, step.num_envs)
    fill_step(response.step if in_session else response, step, timing, action, obs, stamps)
    return response.SerializeToString()


def _server_timing(step: Step) -> dict:
    return {"validate": 2e-5, **step.timing, "server": 4e-5}


def _read(reader: StepReader, data: bytes, action: np.ndarray, in_session: bool) -> Step:
    """As `RemoteEnv` reads an answer: the declared observations it ends with as views, the rest parsed."""
    message, views = reader.parse(data, in_session)
    return reader.read(message.step if in_session else message, action, views)


def _parsed(reader: StepReader, data: bytes, action: np.ndarray, in_session: bool) -> Step:
    """Protobuf's parse of the whole answer, then the reader."""
    message = pb.SessionResponse.FromString(data).step if in_session else pb.StepResponse.FromString(data)
    return reader.read(message, action)


@pytest.mark.parametrize("in_session", [True, False])
def test_every_kind_of_step_in_any_order_says_what_protobufs_serialisation_says(in_session):
    spec = _spec()
    writer, reader, parse = StepWriter(spec), StepReader(spec), (pb.SessionResponse if in_session else pb.StepResponse)
    for what, step, action in _steps() + _steps()[::-1]:
        timing = _server_timing(step)
        data, plain = writer.serialize(step, timing, action, in_session), _plain(step, timing, action, in_session)
        assert parse.FromString(data) == parse.FromString(plain), what
        _assert_same(_read(reader, data, action, in_session), _parsed(reader, plain, action, in_session))


def test_every_observation_of_the_spec_is_declared_and_its_bytes_appended():
    spec = _spec()
    writer, step = StepWriter(spec), _one(1)
    for in_session in (True, False):
        assert writer.declared[in_session].keys() == spec.observations.keys()
        data = writer.serialize(step, _server_timing(step), ACTION, in_session)
        assert data.endswith(writer.declared[in_session]["wrist"].prefix + step.obs["wrist"][0].tobytes())


@pytest.mark.parametrize("in_session", [True, False])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_a_declared_prefix_is_what_protobuf_writes_before_the_tensors_data(in_session, num_envs):
    """The test that fails when protobuf writes a message's bytes in another order than the writer assumes."""
    rng = np.random.default_rng(0)
    for name, spec in _spec().observations.items():
        declared = declare_observation(name, spec, num_envs, in_session)
        assert declared is not None, name
        for _ in range(3):
            value = (rng.normal(size=declared.shape) * 100).astype(declared.dtype)
            message = pb.SessionResponse() if in_session else pb.StepResponse()
            tensor = (message.step if in_session else message).observation.tensors[name]
            tensor.dtype, tensor.data = pb.FLOAT32 if spec.dtype == "float32" else pb.UINT8, value.tobytes()
            tensor.shape.extend(declared.shape)
            assert b"".join(declared.pieces(value)) == message.SerializeToString(), name


@pytest.mark.parametrize("in_session", [True, False])
def test_the_reader_reads_declared_observations_as_views_of_the_received_bytes(in_session):
    spec = _spec()
    writer, reader, step = StepWriter(spec), StepReader(spec), _one(1)
    data = writer.serialize(step, _server_timing(step), ACTION, in_session)
    message, views = reader.parse(data, in_session)
    assert views.keys() == spec.observations.keys()
    assert all(np.shares_memory(v, np.frombuffer(data, np.uint8)) for v in views.values())
    assert not (message.step if in_session else message).observation.tensors  # (protobuf parsed none of them)


def test_any_byte_changed_is_read_as_protobufs_parse_of_the_whole_reads_it():
    """Each byte of an answer, set to each of a few values: the reader gives what protobuf's parse of the whole
    message gives, or the same kind of error."""
    spec = _spec()
    writer, reader, step = StepWriter(spec), StepReader(spec), _one(1)
    data = writer.serialize(step, _server_timing(step), ACTION, True)
    for at in range(len(data)):
        for value in (0, data[at] ^ 1):
            changed = data[:at] + bytes([value]) + data[at + 1 :]
            outcomes = []
            for read in (_read, _parsed):
                try:
                    outcomes.append(read(reader, changed, ACTION, True))
                except Exception as e:  # (DecodeError, or a tensor whose bytes do not fit its shape)
                    outcomes.append(type(e))
            got, want = outcomes
            if isinstance(want, Step) and isinstance(got, Step):
                _assert_same(got, want)
            else:
                assert got == want, (at, value)


def test_bytes_that_look_like_a_declared_observation_inside_another_field_are_parsed_as_protobuf_parses_them():
    spec = _spec()
    writer, reader, step = StepWriter(spec), StepReader(spec), _one(1)
    tail = writer.serialize(step, {}, ACTION, False)[-200:]  # ends with the declared camera frame's message
    data = pb.StepResponse(final_observation=pb.Observation(tensors={"x": pb.Tensor(data=tail)})).SerializeToString()
    assert reader.split(data, False)[1]  # the frame's message seems to end it...
    message, views = reader.parse(data, False)
    assert views == {} and message == pb.StepResponse.FromString(data)  # ...but it lies inside final_observation


def test_an_empty_tensor_is_not_declared():
    assert declare_observation("nothing", TensorSpec("nothing", "float32", (0, 3)), 1, True) is None


def test_a_payload_that_is_not_the_arrays_bytes_is_not_declared():
    """int32 values written as varints: no run of the array's bytes in protobuf's, so nothing to declare."""

    def put(message, array):
        message.reward.extend(array.astype(np.float64).tolist())  # (a field whose bytes are not the array's)

    assert DeclaredTensor.declare("rewards", np.int32, (5,), pb.StepResponse, put) is None


def test_a_batch_is_written_and_read_like_one_instance():
    spec = _spec(num_envs=3)
    writer, reader = StepWriter(spec), StepReader(spec)
    action = np.tile(ACTION, (3, 1))
    for k in range(4):
        step = stack([_one(3 * k + i) for i in range(3)], [_one(3 * k + i).obs for i in range(3)], {})
        timing = _server_timing(step)
        data, plain = writer.serialize(step, timing, action, False), _plain(step, timing, action, False)
        assert pb.StepResponse.FromString(data) == pb.StepResponse.FromString(plain)
        got = _read(reader, data, action, False)
        _assert_same(got, _parsed(reader, plain, action, False))
        assert got.terminated.shape == (3,) and got.reward.dtype == np.float64 and got.obs["wrist"].shape[0] == 3


def test_random_specs_are_written_as_protobuf_writes_them():
    """Observation names, dtypes, shapes and memory order, timing keys and batch sizes drawn at random (seed 0); the
    arrays sometimes of another dtype than the spec declares (protobuf's fill then writes them)."""
    rng = np.random.default_rng(0)
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
        writer, reader, action = StepWriter(spec), StepReader(spec), np.tile(ACTION, (n, 1)) if n > 1 else ACTION
        for _ in range(3):
            drawn = {name: kinds[name] if rng.random() < 0.8 else np.float64 for name in shapes}
            obs = {name: (rng.normal(size=(n, *shape)) * 100).astype(drawn[name]) for name, shape in shapes.items()}
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
            data, plain = writer.serialize(step, timing, action, True), _plain(step, timing, action, True)
            assert pb.SessionResponse.FromString(data) == pb.SessionResponse.FromString(plain), case
            _assert_same(_read(reader, data, action, True), _parsed(reader, plain, action, True))


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


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def test_a_long_run_of_steps_holds_no_memory_that_grows():
    """Nothing the writer keeps grows with the steps."""
    usual, frame = _one(1), {"frame": np.zeros((1, 16, 1024), np.uint8)}  # 16 kB
    step = Step(frame, *[getattr(usual, f) for f in _FIELDS[:8]], stamps={}, timing={})
    spec = EnvSpec({"frame": TensorSpec("frame", "uint8", (16, 1024))}, _spec().action, 10.0, 1, "test arm")
    writer = StepWriter(spec)
    for _ in range(2_000):  # warm up allocator pools
        writer.serialize(step, {}, ACTION, True)
    before = _rss_mb()
    for _ in range(40_000):
        writer.serialize(step, {}, ACTION, True)
    assert _rss_mb() - before < 32  # MB


def test_the_writer_counts_observations_written_as_declared_and_those_protobuf_filled():
    writer = StepWriter(_spec())
    writer.serialize(_one(1), {}, ACTION, True)  # three declared observations
    writer.serialize(_retyped(_one(2), "gripper", np.float64), {}, ACTION, True)  # not as declared: filled
    writer.serialize(_strided(_one(3)), {}, ACTION, False)  # the frame not C-contiguous: filled
    assert (writer.written, writer.filled) == (7, 2)
