"""The env contract is one type, `EnvContract` (rlhw/robot/step.py), and every env that the server hosts or the
episode loop steps satisfies it: a `RobotEnv`, a `BatchedEnv`, a `FakeEnv`, and a `RemoteEnv`'s typed side
(`RemoteEnv.typed`: a RemoteEnv is a gymnasium.Env, whose own ``spec`` and ``reset`` are Gymnasium's).

``isinstance`` with a runtime-checkable Protocol checks the members by name only; what each call returns is
checked by one typed reset and step: a `Reset` and a `Step` of ``spec.num_envs`` instances, the spec's
observations, each with a leading instance axis."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

from rlhw.env.fake_env import FakeEnv
from rlhw.env.remote_env import RemoteEnv
from rlhw.robot import make_batched_env, make_env
from rlhw.robot.step import EnvContract, Reset, Step
from tests.robot.conftest import make_config

pytestmark = pytest.mark.timeout(60)

ENVS: dict[str, Callable] = {
    "RobotEnv": lambda serve: make_env(make_config()),
    "BatchedEnv": lambda serve: make_batched_env(make_config({"num_envs": 2})),
    "FakeEnv": lambda serve: FakeEnv(cameras=1, image_hw=(8, 8)),
    "FakeEnv of 3": lambda serve: FakeEnv(num_envs=3),
    "RemoteEnv.typed": lambda serve: RemoteEnv(serve(FakeEnv(num_envs=2)).address).typed,
}


@pytest.mark.parametrize("name", ENVS)
def test_every_env_satisfies_the_contract_and_resets_and_steps_typed(name, serve):
    env = ENVS[name](serve)
    try:
        assert isinstance(env, EnvContract)
        n, names = env.spec.num_envs, set(env.spec.observations)
        first = env.reset(seed=0)
        assert isinstance(first, Reset) and first.num_envs == n and first.success.shape == (n,)
        assert set(first.obs) == names and all(v.shape[0] == n for v in first.obs.values())
        action = np.zeros(((n,) if n > 1 else ()) + env.spec.action.shape, np.float32)  # one instance: unbatched
        step = env.step(action)
        assert isinstance(step, Step) and step.num_envs == n and set(step.obs) == names
        assert isinstance(env.status(), Mapping)
        env.stop()
    finally:
        env.close()


def test_a_remote_envs_typed_status_is_the_served_envs_own(serve, clients):
    served = FakeEnv()
    typed = clients(RemoteEnv(serve(served).address)).typed
    typed.reset(seed=1)
    typed.step(np.zeros(typed.spec.action.shape, np.float32))
    assert typed.status() == served.status() == {"steps": 1, "resets": 1, "stops": 0, "closed": False}
