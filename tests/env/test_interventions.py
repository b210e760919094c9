"""Human interventions reported by the env (info["intervened"], info["executed_action"]) reach
the client: StepResponse.intervened / executed_action, back into RemoteEnv's step info."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.env.client import RemoteEnv
from rlhw.env.fake_env import FakeEnv

ACTION = np.linspace(-0.5, 0.5, 7, dtype=np.float32)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cameras", [0, 1], ids=["proprio", "image"])
@pytest.mark.parametrize("use_session", [True, False], ids=["session", "unary"])
def test_an_operator_takeover_reaches_the_client_step_info(serve, clients, use_session, cameras):
    server = serve(FakeEnv(intervene_every=3, cameras=cameras))
    env = clients(RemoteEnv(server.address, use_session=use_session))
    env.reset()
    for t in range(1, 7):
        *_, info = env.step(ACTION)
        taken = t % 3 == 0
        assert info["intervened"] is taken
        assert info["executed_action"].dtype == np.float32 and info["executed_action"].shape == (7,)
        np.testing.assert_array_equal(info["executed_action"], -ACTION if taken else ACTION)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False], ids=["session", "unary"])
def test_an_env_that_reports_no_interventions_gives_intervened_false_and_the_action_as_executed(
    serve, clients, use_session
):
    """Nothing new to say goes on the wire (the step keeps the writer's cached layout): the client's own action is
    the executed one, as every `Step` carries it."""
    server = serve(FakeEnv())
    env = clients(RemoteEnv(server.address, use_session=use_session))
    env.reset()
    for _ in range(4):  # every step, not only the first
        step = env.step_typed(ACTION)
        assert step.intervened.tolist() == [False]
        np.testing.assert_array_equal(step.executed, ACTION[None])
    *_, info = env.step(ACTION)
    assert info["intervened"] is False
    np.testing.assert_array_equal(info["executed_action"], ACTION)


@pytest.mark.timeout(60)
def test_batched_interventions_are_per_instance_and_executed_actions_batched_like_the_action(serve, clients):
    server = serve(FakeEnv(num_envs=3, intervene_every=2))
    env = clients(RemoteEnv(server.address))
    env.reset()
    actions = np.stack([ACTION, 0.5 * ACTION, 0.25 * ACTION])
    for t in (1, 2):
        *_, info = env.step(actions)
        taken = t % 2 == 0
        np.testing.assert_array_equal(info["intervened"], [taken, False, False])
        expected = actions.copy()
        if taken:
            expected[0] = -actions[0]
        assert info["executed_action"].shape == (3, 7)
        np.testing.assert_array_equal(info["executed_action"], expected)
