"""dm_env_rpc on the same port: its own compliance test bases, run against the MuJoCo backend
(configs/sim_reach.yaml through make_env), and its DmEnvAdaptor driving the env."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import compliance, dm_env_adaptor, dm_env_rpc_pb2, error, tensor_utils
from dm_env_rpc.v1 import connection as dm_connection

from rlhw.config import load_config
from rlhw.config.server import ServerConfig
from rlhw.env.client import RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.server import EnvServer
from rlhw.robot import make_env

pytestmark = pytest.mark.timeout(120)

_SERVER: EnvServer | None = None


def _server() -> EnvServer:
    """One MuJoCo env server for the whole module (building the sim costs seconds)."""
    global _SERVER
    if _SERVER is None:
        config = load_config("configs/sim_reach.yaml", ["env.sim=mujoco"])
        _SERVER = EnvServer(make_env(config), ServerConfig(port=0, watchdog_s=30.0)).start()
    return _SERVER


def teardown_module(module):
    global _SERVER
    if _SERVER is not None:
        _SERVER.stop(grace_s=0.5)
        _SERVER = None


class _Connected:
    """Opens a dm_env_rpc connection per test, like the Catch example's test base."""

    def setUp(self):
        super().setUp()
        self._channel = grpc.insecure_channel(_server().address)
        grpc.channel_ready_future(self._channel).result(timeout=10)
        self._connection = dm_connection.Connection(self._channel)
        # Cleanups run after every tearDown (the compliance bases still send LeaveWorld in theirs).
        self.addCleanup(self._channel.close)
        self.addCleanup(self._connection.close)

    @property
    def connection(self):
        return self._connection


class _WithWorld(_Connected):
    def setUp(self):
        super().setUp()
        self._world_name = self._connection.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
        self.addCleanup(self._connection.send, dm_env_rpc_pb2.DestroyWorldRequest(world_name=self._world_name))
        self.addCleanup(self._connection.send, dm_env_rpc_pb2.LeaveWorldRequest())

    @property
    def world_name(self):
        return self._world_name


class CreateDestroyWorldCompliance(_Connected, compliance.CreateDestroyWorld):
    @property
    def required_world_settings(self):
        return {}

    @property
    def invalid_world_settings(self):
        return {"seed": tensor_utils.pack_tensor(1), "no_such_setting": tensor_utils.pack_tensor("x")}

    @property
    def has_multiple_world_support(self):
        return False


class JoinLeaveWorldCompliance(_WithWorld, compliance.JoinLeaveWorld):
    @property
    def invalid_join_settings(self):
        return {"agent": tensor_utils.pack_tensor(2)}


class ResetCompliance(_WithWorld, compliance.Reset):
    def join_world(self):
        return self._connection.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=self._world_name)).specs


class ResetWorldCompliance(_WithWorld, compliance.ResetWorld):
    pass


class StepCompliance(_WithWorld, compliance.Step):
    def setUp(self):
        super().setUp()
        self._specs = self._connection.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=self._world_name)).specs

    @property
    def specs(self):
        return self._specs


def test_dm_env_adaptor_drives_the_mujoco_env_through_episodes():
    channel = grpc.insecure_channel(_server().address)
    conn = dm_connection.Connection(channel)
    env, world = dm_env_adaptor.create_and_join_world(conn, create_world_settings={}, join_world_settings={})
    try:
        assert env.action_spec()["action"].shape == (3,)
        assert {"ee_position", "target_position"} <= set(env.observation_spec())
        ts = env.reset()
        assert ts.first() and ts.observation["ee_position"].shape == (3,)
        rewards = []
        for _ in range(60):  # sim_reach truncates at 50 steps: the adaptor sees LAST, then FIRST
            ts = env.step({"action": np.full(3, 0.1, np.float32)})
            rewards.append(ts.reward)
            if ts.last():
                break
        assert ts.last() and ts.discount == 1.0  # truncation is INTERRUPTED, not a terminal state
        assert all(np.isfinite(rewards))
        assert env.step({"action": np.zeros(3, np.float32)}).first()
    finally:
        env.close()
        conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
        channel.close()


def test_dm_env_rpc_and_native_clients_share_the_single_controller_rule():
    channel = grpc.insecure_channel(_server().address)
    conn = dm_connection.Connection(channel)
    world = conn.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
    conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world))
    native = RemoteEnv(_server().address)
    try:
        from rlhw.env.client import ControlConflictError

        with pytest.raises(ControlConflictError, match="arm is controlled by session peer:dm_env_rpc:"):
            native.reset()
    finally:
        conn.send(dm_env_rpc_pb2.LeaveWorldRequest())
        conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
        conn.close()
        channel.close()
        native.close()
    assert _server().env_host.control.controller == ""


def test_creating_a_second_world_is_refused_with_a_reason():
    channel = grpc.insecure_channel(_server().address)
    a, b = dm_connection.Connection(channel), dm_connection.Connection(channel)
    world = a.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
    try:
        with pytest.raises(error.DmEnvRpcError, match="exists already"):
            b.send(dm_env_rpc_pb2.CreateWorldRequest())
    finally:
        a.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
        channel.close()


def test_batched_servers_refuse_dm_env_rpc_joins_and_point_to_the_native_service():
    server = EnvServer(FakeEnv(num_envs=2), ServerConfig(port=0)).start()
    channel = grpc.insecure_channel(server.address)
    try:
        conn = dm_connection.Connection(channel)
        world = conn.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
        with pytest.raises(error.DmEnvRpcError, match="single envs only"):
            conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world))
    finally:
        channel.close()
        server.stop(grace_s=0.2)


def test_a_step_with_a_camera_says_what_dm_env_rpcs_own_packing_says():
    """The camera frame and the float observations go after the rest of the answer as messages of their own
    (rlhw.env.declared); a dm_env_rpc client reads the same tensors as if tensor_utils had packed them."""
    env = FakeEnv(cameras=1, image_hw=(6, 5))
    server = EnvServer(env, ServerConfig(port=0)).start()
    channel = grpc.insecure_channel(server.address)
    try:
        conn = dm_connection.Connection(channel)
        world = conn.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
        specs = conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world)).specs
        names = {uid: s.name for uid, s in specs.observations.items()}
        action = {1: tensor_utils.pack_tensor(np.full(7, 0.5, np.float32))}
        request = dm_env_rpc_pb2.StepRequest(requested_observations=list(names), actions=action)
        conn.send(request)  # (starts the episode)
        response = conn.send(request)
        assert sorted(response.observations) == sorted(names)
        twin = FakeEnv(cameras=1, image_hw=(6, 5))  # the same env, stepped here as the server stepped it
        twin.reset()
        obs = twin.step(np.full(7, 0.5, np.float32)).obs
        for uid, tensor in response.observations.items():
            if names[uid] in obs:
                assert tensor == tensor_utils.pack_tensor(obs[names[uid]][0]), names[uid]
        assert {names[uid] for uid in server.dm.declared} == set(obs)  # (each went as a message of its own)
    finally:
        channel.close()
        server.stop(grace_s=0.2)
