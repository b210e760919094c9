"""`rlhw smoke-test` flags: bad ones exit 2 with a message naming the flag; filters pick targets."""

from __future__ import annotations

import pytest

from rlhw.cli.smoke_test import main
from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.smoke import SmokeOptions, select_targets
from tests.smoke.conftest import ROOT, SIM_CONFIG

HETERO = str(ROOT / "configs" / "hetero_18node.yaml")
WORKSTATION = str(ROOT / "configs" / "workstation_franka.yaml")


@pytest.mark.parametrize(
    "argv, words",
    [
        ([SIM_CONFIG, "--bogus"], "unrecognized arguments: --bogus"),
        ([SIM_CONFIG, "--timeout", "-1"], "--timeout must be > 0"),
        ([SIM_CONFIG, "--timeout", "soon"], "--timeout must be a number"),
        ([SIM_CONFIG, "--window", "0"], "--window must be > 0"),
        ([SIM_CONFIG, "--checks", "robots,lasers"], "unknown check group(s) ['lasers']"),
        ([SIM_CONFIG, "--robot", "x"], "invalid int value"),
    ],
)
def test_a_malformed_flag_exits_2_naming_the_flag(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        ([HETERO, "--robot", "5"], "--robot: no Franka rank 5"),
        ([HETERO, "--robot", "-1"], "--robot: must be >= 0"),
        ([HETERO, "--node-group", "frnka"], "did you mean 'franka'"),
        ([SIM_CONFIG, "--yes"], "--yes: confirms motion, which is off"),
        ([SIM_CONFIG, "--motion-cm", "10", "--checks", "nodes"], "--motion-cm: the test motion must be 0.2-3 cm"),
        ([str(ROOT / "configs" / "nope.yaml")], "not found"),
        ([SIM_CONFIG, "env.sim=lego"], "env.sim"),
    ],
)
def test_a_value_that_makes_no_sense_for_this_config_exits_2_with_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_robot_filter_keeps_that_arm_its_cameras_its_node_and_its_env_server():
    config = load_config(HETERO)
    t = select_targets(config, SmokeOptions(robot=1))
    assert [r.name for r in t.robots] == ["franka@10.10.10.2"]
    assert [c.serial for c in t.robots[0].cameras] == ["322142001232", "322142001233"]
    assert t.nodes == [17] and [e.node_rank for e in t.env_servers] == [17]


def test_node_group_filter_keeps_only_that_groups_nodes_and_hardware():
    config = load_config(HETERO)
    gpu = select_targets(config, SmokeOptions(node_group="a800"))
    assert gpu.nodes == list(range(8)) and gpu.robots == [] and gpu.env_servers == []
    arms = select_targets(config, SmokeOptions(node_group="franka"))
    assert [r.node_rank for r in arms.robots] == [16, 17] and arms.nodes == [16, 17]


def test_cameras_come_from_the_arms_camera_serials_with_the_realsense_stream_settings():
    t = select_targets(load_config(WORKSTATION), SmokeOptions())
    (robot,) = t.robots
    assert robot.driver == "franka" and [c.serial for c in robot.cameras] == ["000000000001", "000000000002"]
    assert all((c.width, c.height, c.fps, c.driver) == (640, 480, 30.0, "realsense") for c in robot.cameras)
    assert t.cameras == []  # the RealSense entries are the same cameras, not extra ones


def test_sim_mode_keeps_the_arms_placement_but_swaps_in_simulated_drivers():
    t = select_targets(load_config(WORKSTATION, ["env.sim=mujoco"]), SmokeOptions())
    (robot,) = t.robots
    assert robot.driver == "mujoco" and robot.simulated and robot.node_rank == 0
    assert [c.driver for c in robot.cameras] == ["mujoco", "mujoco"]


def test_options_refuse_a_nonsense_value_naming_the_flag():
    with pytest.raises(ConfigError) as e:
        SmokeOptions(window_s=120)
    assert e.value.path == "--window"


def test_the_rlhw_command_dispatches_smoke_test_and_returns_its_exit_status(capsys):
    from rlhw.cli.main import main as rlhw_main

    assert rlhw_main(["smoke-test", SIM_CONFIG, "--checks", "nodes", "--timeout", "20"]) == 0
    assert "node 0" in capsys.readouterr().out
    assert rlhw_main(["smoke-test", SIM_CONFIG, "--robot", "3"]) == 2


def test_local_node_runs_only_that_nodes_checks_here_without_ray():
    from tests.smoke.conftest import smoke

    report = smoke(HETERO, checks=("nodes",), local_node=16, timeout_s=20.0)
    assert report.mode == "local node 16"
    assert {r.target for r in report.results} == {"node 16"}
    assert {r.check: r.status for r in report.results} == {"python": "PASS", "env_vars": "SKIP", "accelerators": "PASS"}


def test_local_node_outside_the_cluster_exits_2(capsys):
    assert main([HETERO, "--local-node", "18"]) == 2
    assert "--local-node: node rank 18 is outside the cluster's 0-17" in capsys.readouterr().err
