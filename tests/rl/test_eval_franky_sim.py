"""One policy across drivers: a reach checkpoint made for the MuJoCo arm, evaluated unchanged through the real
franka driver against franky-sim (the libfranka protocol, the env server child, franky's driver process).

Same seeds on both drivers give the same targets, so the episodes compare one by one: every one must succeed
on both, in a similar number of steps (the drivers agree on frames, TCP, gripper width and how far the hand
follows a step's target; see docs/deploy.md for what differed and what was changed).
"""

from __future__ import annotations

import pytest

from rlhw.config import load_config
from rlhw.rl.checkpoint import PolicyCheckpoint
from rlhw.rl.evaluate import evaluate
from rlhw.rl.rundir import RunDir
from tests.rl.reach_policy import reach_checkpoint
from tests.rl.test_eval import ROOT, SMALL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EPISODES = 2


def test_a_mujoco_policy_reaches_as_well_through_the_franka_driver_against_franky_sim(tmp_path):
    from drivers.franky_sim import FrankySim
    from rlhw.robot import make_env

    mujoco = load_config(ROOT / "configs/sim_reach.yaml", SMALL)
    env = make_env(mujoco)
    try:
        spec = env.spec
    finally:
        env.close()
    checkpoint = PolicyCheckpoint.load(reach_checkpoint(tmp_path / "latest.pt", spec, mujoco), "--checkpoint")
    in_mujoco = evaluate(mujoco, checkpoint, EPISODES, RunDir(tmp_path / "mujoco"))
    with FrankySim() as sim:
        franky = load_config(
            ROOT / "configs/franky_sim.yaml",
            [f"cluster.node_groups.0.hardware.configs.0.robot_ip={sim.host}", "env.reset.timeout_s=40"],
        )
        on_franky = evaluate(franky, checkpoint, EPISODES, RunDir(tmp_path / "franky"))
    assert on_franky.status == "finished"
    assert [e.seed for e in on_franky.episodes] == [e.seed for e in in_mujoco.episodes]
    assert all(e.success for e in in_mujoco.episodes), in_mujoco.episodes
    assert all(e.success and e.fault is None for e in on_franky.episodes), on_franky.episodes
    for m, f in zip(in_mujoco.episodes, on_franky.episodes):  # the same target, reached at a similar pace
        assert f.steps <= 2 * m.steps + 4, (m, f)  # (before the gripper fix: 2.6-2.9x; franky-sim runs ~0.9x RT)
    assert on_franky.loop_health["timed_steps"] > 0  # a real-time arm: the loop's deadlines were measured
