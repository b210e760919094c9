"""make_env on configs/franky_sim.yaml: the real franka driver path (libfranka protocol) behind RobotEnv.

franky-sim serves FCI on loopback; the env paces steps on the wall clock (the arm is real-time).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.config import load_config
from rlhw.robot import make_env
from tests.robot.conftest import greedy_action

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_reach_runs_on_the_franka_driver_against_franky_sim():
    from drivers.franky_sim import FrankySim

    with FrankySim() as sim:
        entry = "cluster.node_groups.0.hardware.configs.0"
        config = load_config(
            "configs/franky_sim.yaml",
            # franky multiplies the robot's dynamics factor with each motion's: at 1.0 here, the
            # reset's speed_factor (0.2) is the effective one.
            [
                f"{entry}.robot_ip={sim.host}",
                f"{entry}.controller.relative_dynamics_factor=1.0",
                "env.reset.timeout_s=40",
            ],
        )
        env = make_env(config)
        try:
            assert type(env.arm).__name__ == "FrankaArm" and env.realtime
            first = env.reset(seed=0)
            assert first.notes[0].faults == ()  # no fault on the way home
            obs, _ = first.gym()
            home = np.array(config.env.reset.home_q)
            assert np.max(np.abs(env.status()["arm"]["q"] - home)) < 0.02  # homed
            start = np.linalg.norm(obs["to_target"])
            infos = []
            for _ in range(15):
                obs, reward, terminated, truncated, info = env.step(greedy_action(obs)).gym()
                infos.append(info)
                if terminated or truncated:
                    break
            assert all(i["fault"] is None for i in infos), [i["fault_message"] for i in infos]
            assert np.linalg.norm(obs["to_target"]) < start - 0.05  # it moved towards the target
            periods = [i["timing"]["total"] for i in infos[1:]]
            assert np.median(periods) == pytest.approx(0.1, abs=0.03)  # paced at 10 Hz
        finally:
            env.close()
