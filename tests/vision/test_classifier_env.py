"""The success classifier at the env: loaded once at construction, run at every step on the frames the
env just read; its probability, threshold and latency are in the step info and success follows it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rlhw.errors import ConfigError
from rlhw.rl.verdicts import VerdictTally
from rlhw.robot import make_env
from rlhw.robot.step import ClassifierScore, StepNotes
from rlhw.vision.classifier import ClassifierSpec, SuccessClassifier, load_classifier, save_classifier
from tests.robot.conftest import make_config

pytestmark = pytest.mark.timeout(60)


def constant_classifier(path, logit: float, cameras=("front",), threshold: float = 0.5):
    """A real classifier file whose last layer ignores the image: P(success) = sigmoid(logit)."""
    model = SuccessClassifier(ClassifierSpec(tuple(cameras), (32, 32), "cnn", 8, 8, threshold))
    with torch.no_grad():
        model.head[-1].weight.zero_()
        model.head[-1].bias.fill_(logit)
    return str(save_classifier(model, path, {"accuracy": 1.0}))


def env_with(path, **reward):
    return make_env(
        make_config(
            {"images": True, "image_size": [32, 32], "sim_cameras": ["front"], "reward": {"classifier": path, **reward}}
        )
    )


def test_a_confident_classifier_makes_the_step_a_success_and_ends_the_episode(tmp_path):
    env = env_with(constant_classifier(tmp_path / "yes.pt", 3.0))
    try:
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(np.zeros(3, np.float32)).gym()
        assert info["reward_classifier"]["p"] == pytest.approx(1 / (1 + np.exp(-3.0)), rel=1e-5)
        assert info["reward_classifier"]["threshold"] == 0.5
        assert info["success"] is True and terminated and not truncated
        assert 0 < info["timing"]["classifier"] <= info["timing"]["total"]
        assert reward < 0  # decides 'success' only: the task's dense reward is kept
    finally:
        env.close()


def test_below_the_threshold_the_step_is_no_success_and_the_config_threshold_overrides_the_file(tmp_path):
    path = constant_classifier(tmp_path / "p73.pt", 1.0)  # p = 0.731
    env = env_with(path)
    try:
        env.reset(seed=0)
        assert env.step(np.zeros(3, np.float32)).gym()[4]["success"] is True
    finally:
        env.close()
    env = env_with(path, threshold=0.9)
    try:
        env.reset(seed=0)
        _, _, terminated, _, info = env.step(np.zeros(3, np.float32)).gym()
        assert info["success"] is False and not terminated and info["reward_classifier"]["threshold"] == 0.9
    finally:
        env.close()


def test_deciding_the_reward_too_gives_the_sparse_reward(tmp_path):
    env = env_with(
        constant_classifier(tmp_path / "yes.pt", 3.0), decides="success_and_reward", terminate_on_success=False
    )
    try:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(np.zeros(3, np.float32)).gym()
        assert reward == 1.0 and info["success"] and not terminated
    finally:
        env.close()


def test_a_step_the_classifier_called_a_success_notes_its_score_and_the_operators_rejection_as_typed_fields(
    tmp_path,
):
    """A step's notes are one frozen `StepNotes`: the classifier's `ClassifierScore` and the operator's verdict are
    fields, read as attributes (here by the verdict tally), and Gymnasium's ``info`` dict is built from them at its
    edge only. The scripted operator sees the cube well off the tape and rejects the success the classifier called."""
    path = constant_classifier(tmp_path / "yes.pt", 3.0)
    config = {"sim": "mujoco", "task": "push_cube", "images": True, "image_size": [32, 32], "sim_cameras": ["front"]}
    config |= {"safety": {"workspace_low": [0.25, -0.3, 0.02]}, "reward": {"classifier": path}}
    env = make_env(make_config({**config, "teleop": {"device": "scripted", "mode": "intervene"}}))
    try:
        env.reset(seed=3)
        goal, cube = env.task.goal, env.arm.object_pose("cube")
        env.arm.set_object_pose("cube", cube.with_position([goal[0] + 0.06, goal[1], cube.position[2]]))
        step = env.step(np.zeros(3, np.float32))
        (notes,) = step.notes
        assert isinstance(notes, StepNotes) and bool(step.success[0])  # the classifier called it a success
        assert notes.reward_classifier == ClassifierScore(pytest.approx(1 / (1 + np.exp(-3.0)), rel=1e-5), 0.5)
        assert notes.operator_verdict is False  # the operator's word: the task is plainly not done
        assert notes.episode_step == 1 and notes.teleop_events == () and notes.operator_label is None
        assert set(notes.frame_index) == {"front"} and notes.fault_cause is None
        with pytest.raises(dataclasses.FrozenInstanceError):
            notes.operator_verdict = True
        tally = VerdictTally()
        tally.add_step(step)
        assert tally.steps == 1 and tally.false_positives == 1 and tally.operator_rejections == 1
        info = step.gym()[4]
        assert info["reward_classifier"] == {"p": notes.reward_classifier.probability, "threshold": 0.5}
        assert info["operator_verdict"] is False and info["episode_step"] == 1 and info["teleop_events"] == []
    finally:
        env.close()


def test_a_classifier_trained_on_other_cameras_is_refused_when_the_env_is_built(tmp_path):
    path = constant_classifier(tmp_path / "wrist.pt", 0.0, cameras=("wrist",))
    with pytest.raises(ConfigError) as err:
        env_with(path)
    assert err.value.path == "env.reward.classifier"
    assert "trained on cameras ['wrist']" in str(err.value) and "['front']" in str(err.value)


def test_a_missing_or_foreign_classifier_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; train one with `rlhw train-reward"):
        env_with(str(tmp_path / "none.pt"))
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="not a success classifier file"):
        load_classifier(tmp_path / "other.pt")


def test_a_classifier_needs_image_observations():
    with pytest.raises(ConfigError) as err:
        make_config({"reward": {"classifier": "model.pt"}})
    assert "env.images=true" in str(err.value) and err.value.path.endswith("reward.classifier")


def test_the_model_file_keeps_its_spec_and_metrics(tmp_path):
    path = constant_classifier(tmp_path / "m.pt", -2.0, cameras=("front", "wrist"), threshold=0.7)
    model, metrics = load_classifier(path)
    assert model.spec.cameras == ("front", "wrist") and model.spec.input_size == (32, 32)
    assert model.spec.threshold == 0.7 and metrics == {"accuracy": 1.0}
    frames = {c: np.zeros((3, 48, 64, 3), np.uint8) for c in ("front", "wrist")}  # any size: resized to 32x32
    assert model.probability(frames) == pytest.approx(np.full(3, 1 / (1 + np.exp(2.0))), rel=1e-5)


def test_with_each_camera_a_success_needs_every_cameras_own_classifier_to_agree(tmp_path):
    """`rlhw train-reward --each-camera`: one head per camera; a view that says no vetoes, so a policy that hides the
    cube from one camera (behind the hand) fools nothing. The choice survives the file."""
    spec = ClassifierSpec(("table", "wrist"), (32, 32), "cnn", 8, 8, 0.5, each_camera=True)
    frames = {c: np.zeros((1, 32, 32, 3), np.uint8) for c in spec.cameras}
    for table, wrist, success in ((4.0, -4.0, False), (-4.0, 4.0, False), (4.0, 3.0, True)):
        model = SuccessClassifier(spec)
        with torch.no_grad():
            for cam, logit in (("table", table), ("wrist", wrist)):
                model.heads[cam][-1].weight.zero_()
                model.heads[cam][-1].bias.fill_(logit)
        loaded, _ = load_classifier(save_classifier(model, tmp_path / "each.pt"))
        assert loaded.spec.each_camera
        assert (loaded.probability(frames)[0] >= 0.5) == success
        np.testing.assert_allclose(
            loaded.probability(frames)[0], torch.sigmoid(torch.tensor(min(table, wrist))), rtol=1e-5
        )
