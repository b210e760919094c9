"""make_env: which drivers a config selects, sim-only replacement, and the errors for impossible combinations."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.errors import ConfigError
from rlhw.robot import make_batched_env, make_env, plan_env
from rlhw.robot.arm import ArmCapability
from rlhw.robot.task import Task
from tests.robot.conftest import FRANKA_CLUSTER, make_config


def test_franka_hardware_selects_franka_and_realsense_by_default():
    plan = plan_env(make_config({"sim": None, "images": True}, FRANKA_CLUSTER), 0)
    assert plan.arm_driver == "franka" and plan.camera_driver == "realsense"
    assert plan.camera_names == ("322142001230", "322142001231")
    assert plan.hardware.robot_ip == "127.0.0.1" and plan.robot == "franka@127.0.0.1"


def test_no_hardware_selects_mujoco_by_default():
    plan = plan_env(make_config({"sim": None, "images": True}), 0)
    assert plan.arm_driver == "mujoco" and plan.camera_driver == "mujoco" and plan.camera_names == ("front",)


def test_sim_mode_replaces_the_robot_and_names_cameras_by_serial():
    cfg = make_config({"sim": "mock", "images": True}, FRANKA_CLUSTER)
    plan = plan_env(cfg, 0)
    assert (plan.arm_driver, plan.camera_driver) == ("mock", "mock")
    env = make_env(cfg, robot_rank=0)
    try:
        assert env.spec.cameras == ("322142001230", "322142001231")
        assert "image_322142001230" in env.spec.observations
        first = env.reset(seed=0)
        assert first.obs["image_322142001231"].shape == (1, 128, 128, 3)
    finally:
        env.close()


def test_a_robot_without_serials_uses_the_sim_camera_names_in_sim():
    plan = plan_env(make_config({"sim": "mock", "images": True, "sim_cameras": ["top"]}, FRANKA_CLUSTER), 1)
    assert plan.camera_names == ("top",)


def test_robot_rank_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match=r"robot rank 2 is out of range.*ranks 0-1"):
        plan_env(make_config({"sim": None}, FRANKA_CLUSTER), 2)


def test_franka_driver_without_hardware_says_how_to_fix():
    with pytest.raises(ConfigError) as err:
        plan_env(make_config({"sim": None, "driver": "franka"}), 0)
    assert err.value.path == "env.driver" and "env.sim=mujoco" in str(err.value)


def test_images_on_a_real_robot_without_camera_serials_is_refused():
    with pytest.raises(ConfigError) as err:
        plan_env(make_config({"sim": None, "images": True}, FRANKA_CLUSTER), 1)
    assert err.value.path == "env.images" and "camera_serials" in str(err.value)


def test_sim_cameras_cannot_render_another_driver():
    with pytest.raises(ConfigError) as err:
        plan_env(make_config({"sim": None, "driver": "mock", "camera_driver": "mujoco", "images": True}), 0)
    assert err.value.path == "env.camera_driver"


def test_several_envs_on_one_real_arm_are_refused():
    with pytest.raises(ConfigError) as err:
        make_batched_env(make_config({"sim": None, "num_envs": 2}, FRANKA_CLUSTER), connect=False)
    assert err.value.path == "env.num_envs" and "one franka arm" in str(err.value)


def test_no_cameras_are_built_without_images():
    env = make_env(make_config({"images": False}, FRANKA_CLUSTER))
    try:
        assert env.cameras == {} and not any(k.startswith("image_") for k in env.spec.observations)
    finally:
        env.close()


def test_mock_faults_from_the_config_reach_the_mock_driver():
    env = make_env(make_config({"mock_faults": [{"kind": "reflex", "after": 0}]}))
    try:
        env.reset()
        assert env.step(np.zeros(3, np.float32)).gym()[-1]["fault"] == "reflex"
    finally:
        env.close()


def test_a_task_needing_a_simulator_hook_explains_itself_on_other_drivers(mock_env):
    env = mock_env()

    class NeedsCube(Task):
        name = "needs_cube"

        def observation_specs(self):
            return {}

        def action_spec(self):
            return None

        def reset(self, state, rng):
            self.require(ArmCapability.OBJECT_STATE)

        command = observe = reward = success = lambda *a: None

    task = NeedsCube(env.config)
    task.bind(env.arm)
    with pytest.raises(ConfigError) as err:
        task.reset(None, None)
    assert err.value.path == "env.task" and "object_pose" in str(err.value) and "env.sim=mujoco" in str(err.value)


def test_each_realsense_camera_builds_itself_from_the_hardware_entry_that_declares_it():
    from rlhw.config import load_config
    from rlhw.hardware.types.realsense import RealSenseConfig
    from rlhw.robot.factory import declared_entry

    cfg = load_config("configs/workstation_franka.yaml", ["env.images=true"])
    env = make_env(cfg, connect=False)
    try:
        for serial, cam in env.cameras.items():
            entry = declared_entry(cfg, serial)
            assert isinstance(entry, RealSenseConfig) and cam.options is entry  # the validated model, as it is
    finally:
        env.close()
    assert declared_entry(cfg, "999") is None


@pytest.mark.parametrize(
    "path, driver",
    [
        ("configs/sim_reach.yaml", "mujoco"),
        ("configs/franky_sim.yaml", "franka"),
        ("configs/workstation_franka.yaml", "franka"),
        ("configs/hetero_18node.yaml", "franka"),
    ],
)
def test_shipped_configs_plan_their_env(path, driver):
    from rlhw.config import load_config

    assert plan_env(load_config(path), 0).arm_driver == driver
    assert plan_env(load_config(path, ["env.sim=mock"]), 0).arm_driver == "mock"


def test_real_hardware_drivers_are_built_from_the_config_without_touching_the_robot():
    """make_env(connect=False) on the workstation config: FrankaArm + one RealSenseCamera per serial,
    configured from the hardware entries; nothing connects, nothing moves."""
    from rlhw.config import load_config

    env = make_env(load_config("configs/workstation_franka.yaml", ["env.images=true"]), connect=False)
    try:
        assert type(env.arm).__name__ == "FrankaArm" and env.realtime and not env.connected
        assert list(env.cameras) == ["000000000001", "000000000002"]
        cam = env.cameras["000000000001"]
        assert type(cam).__name__ == "RealSenseCamera" and cam.serial == "000000000001"
        assert env.spec.observations["image_000000000002"].shape == (128, 128, 3)
        assert env.spec.robot == "franka@172.16.0.2"
    finally:
        env.close()


def test_a_driver_argument_the_driver_does_not_take_is_an_error_naming_it_never_dropped():
    from rlhw.robot import task_registry
    from rlhw.robot.tasks.reach import Reach

    @task_registry.register_task("lava_scene")
    class LavaScene(Reach):
        sim_arm_options = {"lava": True}  # a scene option no simulator knows

    try:
        with pytest.raises(ConfigError) as err:
            make_env(make_config({"task": "lava_scene"}), connect=False)
    finally:
        del task_registry._TASKS["lava_scene"]
    assert err.value.path == "env.task"
    assert "'lava'" in err.value.message and "mock driver (MockArm)" in err.value.message
    assert "takes: name, seed" in err.value.message  # and what it does take


def test_the_franka_driver_receives_the_validated_controller_of_its_hardware_entry():
    cfg = make_config({"sim": None, "images": False, "driver_timeout_s": 4.0}, FRANKA_CLUSTER)
    env = make_env(cfg, robot_rank=1, connect=False)
    try:
        entry = cfg.cluster.node_groups[0].hardware.configs[1]
        assert env.arm.controller is entry.controller
        assert (env.arm.robot_ip, env.arm.has_gripper, env.arm.timeout_s) == ("127.0.0.2", True, 4.0)
    finally:
        env.close()
