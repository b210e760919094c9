"""Training the success classifier: on MuJoCo push_cube and insert frames where the truth is known (the
task's own success), through `rlhw train-reward`, held out by episode; then the trained file judges the
env's steps. Bad input gives one line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlhw.cli.main import main
from rlhw.cli.train_reward import read_episodes
from rlhw.errors import ConfigError
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.vision.labels import EpisodeFrames, LabelRules, frame_labels, split_by_episode
from tools.reward_frames import InsertStager, PushCubeStager, record_episodes
from tools.reward_frames import main as record_main

CROP = ["0.5", "0.2", "0.9", "0.8"]  # the table area in front of the robot, in the front camera


def _train_and_check_held_out(episodes_dir, model, capsys, *extra: str) -> None:
    """`rlhw train-reward` with 60 epochs, then its report: >= 95 % held-out accuracy on >= 40 frames held
    out by episode, and a confusion matrix that adds up to the held-out frames."""
    code = main(
        [
            "train-reward",
            str(episodes_dir),
            "--out",
            str(model),
            "--epochs",
            "60",
            "--seed",
            "0",
            "--positive-last-k",
            "2",
            "--ambiguous-gap",
            "0",
            *extra,
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "accuracy" in printed and "confusion" in printed
    report = json.loads(model.with_suffix(".metrics.json").read_text())
    held = report["held_out"]
    assert held["accuracy"] >= 0.95, report
    assert held["frames"] >= 40 and report["frames"]["held_out"]["positive"] >= 10
    assert set(report["episodes"]["train"]).isdisjoint(report["episodes"]["held_out"])  # split by episode
    c = held["confusion"]
    assert c["true_positive"] + c["false_negative"] == report["frames"]["held_out"]["positive"]
    assert c["true_negative"] + c["false_positive"] == report["frames"]["held_out"]["negative"]


@pytest.fixture(scope="module")
def push_cube_episodes(tmp_path_factory):
    """72 MuJoCo episodes (3 frames each, 128 px front camera), half of them ending in success."""
    out = tmp_path_factory.mktemp("push_cube_frames")
    record_episodes("push_cube", out, 72, steps=2, hold=1, size=128, seed=7)
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_reward_reaches_95_percent_held_out_accuracy_on_push_cube_frames(push_cube_episodes, tmp_path, capsys):
    episodes = read_episodes([str(push_cube_episodes)])
    rules = LabelRules(positive_last_k=2, ambiguous_gap=0)
    for ep in episodes:  # the labels are the task's ground truth, frame by frame
        truth = np.r_[False, ep.success]
        assert np.array_equal(frame_labels(ep, rules) == 1, truth), ep.name
    model = tmp_path / "push_cube.pt"
    _train_and_check_held_out(push_cube_episodes, model, capsys, "--crop", *CROP)

    # The same file judges the env's steps, on the frames the env reads: success follows the truth.
    from rlhw.config import load_config
    from rlhw.robot import make_env

    cfg = load_config(
        "configs/sim_reach.yaml",
        [
            "env.sim=mujoco",
            "env.images=true",
            "env.image_size=[128,128]",
            "env.sim_cameras=[front]",
            *PushCubeStager.overrides,
            f"env.reward.classifier={model}",
            "env.reward.terminate_on_success=false",
        ],
    )
    env = make_env(cfg)
    try:
        agree = 0
        for i, succeed in enumerate((True, False)):
            env.reset(seed=999 + i)
            stager = PushCubeStager(env, np.random.default_rng(i), succeed, 2, 1)
            for t in range(2):
                *_, info = env.step(stager.before_step(t)).gym()
                agree += info["success"] == env.task.success(env.measured_state)
                assert 0 <= info["reward_classifier"]["p"] <= 1 and info["timing"]["classifier"] > 0
        assert agree >= 3  # 4 judged steps, the classifier's held-out error rate allows one miss at most
    finally:
        env.close()


@pytest.fixture(scope="module")
def insert_episodes(tmp_path_factory):
    """40 MuJoCo insert episodes (5 frames each, 64 px wrist camera, the arm drawn as its collision
    shapes), half of them ending in success, recorded through the tool's command line."""
    out = tmp_path_factory.mktemp("insert_frames")
    assert (
        record_main(
            [
                "--task",
                "insert",
                "--out",
                str(out),
                "--episodes",
                "40",
                "--steps",
                "4",
                "--hold",
                "1",
                "--size",
                "64",
                "--cameras",
                "wrist",
                "--seed",
                "7",
                "--set",
                "env.sim_camera_meshes=collision",
            ]
        )
        == 0
    )
    return out


def _judge_insert_steps(model) -> tuple[int, int, int]:
    """(steps where the trained file agrees with the task's own success, steps judged, steps the task
    judged a success) on two fresh insert episodes, one staged to succeed and one not, run by an env
    that loads the file."""
    from rlhw.config import load_config
    from rlhw.robot import make_env

    cfg = load_config(
        InsertStager.config,
        [
            "env.images=true",
            "env.image_size=[64,64]",
            "env.sim_cameras=[wrist]",
            "env.sim_camera_meshes=collision",
            *InsertStager.overrides,
            f"env.reward.classifier={model}",
            "env.reward.terminate_on_success=false",
        ],
    )
    env = make_env(cfg)
    agree = judged = truths = 0
    try:
        for i, succeed in enumerate((True, False)):
            env.reset(seed=999 + i)
            stager = InsertStager(env, np.random.default_rng(i), succeed, 4, 1)
            for t in range(4):
                *_, info = env.step(stager.before_step(t)).gym()
                truth = env.task.success(env.measured_state)
                agree, judged, truths = agree + (info["success"] == truth), judged + 1, truths + truth
                assert 0 <= info["reward_classifier"]["p"] <= 1 and info["timing"]["classifier"] > 0
    finally:
        env.close()
    return agree, judged, truths


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_reward_reaches_95_percent_held_out_accuracy_on_insert_frames(insert_episodes, tmp_path, capsys):
    episodes = read_episodes([str(insert_episodes)])
    rules = LabelRules(positive_last_k=2, ambiguous_gap=0)
    assert len(episodes) == 40
    assert {ep.meta["staged_end"] for ep in episodes} == {"success", "above", "beside", "on_top"}
    for ep in episodes:  # the task's own success, where the stager meant it, held for the last 2 frames
        assert ep.success.any() == ep.meta["staged_success"], ep.name
        truth = np.r_[False, ep.success]
        assert np.array_equal(frame_labels(ep, rules) == 1, truth), ep.name
    model = tmp_path / "insert.pt"
    _train_and_check_held_out(insert_episodes, model, capsys)

    agree, judged, truths = _judge_insert_steps(model)  # the same file judges the env's own steps
    assert judged == 8 and truths == 2  # the last two steps of the successful episode
    assert agree >= 7  # the held-out error rate allows one miss at most


def test_the_insert_stager_needs_three_moving_steps_and_says_so():
    with pytest.raises(ValueError, match="steps: insert needs steps - hold >= 3"):
        InsertStager(None, np.random.default_rng(0), True, steps=3, hold=1)


def _write(directory, images: bool, successes):
    rec = EpisodeRecorder(directory)
    for succeed in successes:
        obs = {"ee_position": np.zeros(3, np.float32)}
        if images:
            obs["image_front"] = np.zeros((32, 32, 3), np.uint8)
        rec.begin(obs)
        for t in range(3):
            rec.step(np.zeros(3, np.float32), 0.0, False, False, obs, success=succeed and t == 2)
        rec.end()


@pytest.mark.parametrize(
    "case, expected",
    [
        ("nothing", "no episodes given"),
        ("no_images", "hold no camera images"),
        ("one_class", "all of one class"),
        ("missing", "does not exist"),
    ],
)
def test_bad_training_input_is_one_clear_line_and_exit_2(case, expected, tmp_path, capsys):
    args = []
    if case == "no_images":
        _write(tmp_path, images=False, successes=[True, False])
        args = [str(tmp_path)]
    elif case == "one_class":
        _write(tmp_path, images=True, successes=[False, False, False])
        args = [str(tmp_path)]
    elif case == "missing":
        args = [str(tmp_path / "nowhere")]
    code = main(["train-reward", *args, "--out", str(tmp_path / "m.pt")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0] and "EPISODES" in err[0]


def test_operator_marks_and_verdicts_override_the_recorded_success():
    ep = EpisodeFrames("e", {"front": np.zeros((8, 4, 4, 3), np.uint8)}, np.array([0, 0, 0, 0, 0, 0, 1], bool), {})
    rules = LabelRules(positive_last_k=2, ambiguous_gap=2)
    assert frame_labels(ep, rules).tolist() == [0, 0, 0, 0, -1, -1, 1, 1]
    ep.meta = {"operator_success": False}
    assert frame_labels(ep, rules).tolist() == [0] * 8
    ep.meta = {"operator_success": True, "operator_marks": [[0, 1], [7, 0]]}
    assert frame_labels(ep, rules).tolist() == [1, 0, 0, 0, -1, -1, 1, 0]


def test_the_split_is_by_episode_and_stratified():
    labels = [np.array([0, 1])] * 6 + [np.array([0, 0])] * 6
    train, held = split_by_episode(labels, 0.25, seed=0)
    assert set(train).isdisjoint(held) and sorted(train + held) == list(range(12))
    assert sum(i < 6 for i in held) >= 1 and sum(i >= 6 for i in held) >= 1


def test_a_runs_frames_given_as_judge_negatives_teach_only_not_done(tmp_path):
    """HIL-SERL's fix for a fooled classifier: a run's frames the judge saw not done become negatives; the frames
    it saw done are left out, so the judge's own boundary (3 cm) is never taught against the operator's (1.5 cm)."""
    _write_blank_episode(tmp_path, judge=[False, False, True, True, False])  # frame t+1 follows step t
    (episode,) = read_episodes([str(tmp_path)], "judge-negatives")
    assert frame_labels(episode).tolist() == [-1, 0, 0, -1, -1, 0]
    (plain,) = read_episodes([str(tmp_path)], "judge")  # the judge's verdicts as labels: its boundary taught
    assert frame_labels(plain, LabelRules(positive_last_k=1, ambiguous_gap=0)).tolist()[:5] == [0, 0, 0, 1, 1]


def _write_blank_episode(directory, judge: list[bool] | None = None, steps: int = 2) -> None:
    """A train episode of blank frames, with the judge's verdict on each step when ``judge`` is given."""
    rec = EpisodeRecorder(directory)
    frame = {"image_front": np.zeros((4, 4, 3), np.uint8)}
    rec.begin(frame)
    for verdict in judge if judge is not None else [None] * steps:
        rec.step(np.zeros(3, np.float32), 0.0, False, False, frame, judge_success=verdict)
    rec.end()


def test_judge_negatives_from_episodes_without_a_judge_are_refused_naming_the_flag(tmp_path):
    _write_blank_episode(tmp_path)
    with pytest.raises(ConfigError) as e:
        read_episodes([str(tmp_path)], "judge-negatives")
    assert e.value.path == "--judge-negatives" and "no judge verdict" in e.value.message
