"""Training in a rehearsal (``env.sim_state: hidden``): the classifier decides the reward, the simulator's judge
decides ``eval/success_rate``, their disagreements per eval period land in metrics.jsonl, and a run's episodes,
labelled by the judge, give `rlhw train-reward` the frames that fooled the classifier as negatives."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rlhw.cli.train_reward import read_episodes
from rlhw.config import load_config
from rlhw.rl.local import train_local
from rlhw.rl.rundir import RunDir
from rlhw.rl.verdicts import VerdictTally
from rlhw.vision.labels import frame_labels
from tests.vision.test_classifier_env import constant_classifier

pytestmark = pytest.mark.timeout(180)

PIXELS = str(Path(__file__).resolve().parents[2] / "configs" / "sim_push_cube_pixels.yaml")
TINY = [
    "env.image_size=[32,32]",
    "env.sim_cameras=[front]",
    "train.max_env_steps=12",
    "train.learning_starts=1000",
    "train.eval_every_steps=6",
    "train.eval_episodes=2",
    "train.progress=false",
    "train.log_every_steps=6",
    "train.sac.batch_size=4",
    "train.runner=local",  # the in-process runner's tally (the pipeline's: test_pipeline_rehearsal.py)
    "cluster.node_groups[0].env_configs[0].loop_priority=null",  # one thread also learns: not at SCHED_FIFO here
]


def test_a_classifier_the_policy_fools_pays_the_reward_but_the_judge_decides_eval_success(tmp_path):
    """A classifier that always says success: every train step is paid 1 and ends its episode, yet no cube is
    in the goal. eval/success_rate is the judge's 0, and the tally counts every step a false positive."""
    fooled = constant_classifier(tmp_path / "always.pt", 3.0)
    config = load_config(PIXELS, [*TINY, f"env.reward.classifier={fooled}"])
    run = RunDir(tmp_path / "run")
    train_local(config, run)
    evals = [r for r in run.metrics() if r.get("eval/success_rate") is not None]
    assert evals and all(r["eval/success_rate"] == 0.0 for r in evals)
    assert all(r["reward/classifier_steps"] == r["reward/classifier_false_positives"] > 0 for r in evals)
    assert all(r["reward/classifier_false_negatives"] == 0 and r["reward/classifier_fp_rate"] == 1.0 for r in evals)
    assert all(r["reward/classifier_false_success_episodes"] == r["reward/classifier_steps"] for r in evals)

    recorded = read_episodes([str(run.episodes)])
    judged = read_episodes([str(run.episodes)], labels="judge")
    assert recorded and len(recorded) == len(judged)
    # the cell's record says success (the classifier's verdict); the judge's labels make the same frames negatives
    assert all(frame_labels(e)[-1] == 1 for e in recorded)
    assert all((frame_labels(e) == 0).all() for e in judged)


def test_the_tally_rates_are_over_the_judges_negatives_and_positives():
    tally = VerdictTally()
    for classifier, judge in [(True, False), (False, False), (False, False), (False, True), (True, True)]:
        tally.add(classifier, judge, ended=classifier)
    row = tally.row()
    assert (
        row["reward/classifier_steps"],
        row["reward/classifier_false_positives"],
        row["reward/classifier_false_negatives"],
    ) == (5, 1, 1)
    assert row["reward/classifier_fp_rate"] == pytest.approx(1 / 3) and row["reward/classifier_fn_rate"] == 0.5
    assert row["reward/classifier_false_success_episodes"] == 1
    assert math.isnan(VerdictTally().row()["reward/classifier_fn_rate"])


def test_judge_labels_of_episodes_recorded_without_a_judge_are_refused(tmp_path):
    from rlhw.errors import ConfigError
    from rlhw.rl.episodes import EpisodeRecorder

    rec = EpisodeRecorder(tmp_path)
    obs = {"image_front": np.zeros((8, 8, 3), np.uint8)}
    rec.begin(obs, kind="demo")
    rec.step(np.zeros(3, np.float32), 0.0, False, True, obs, False)
    rec.end()
    with pytest.raises(ConfigError) as e:
        read_episodes([str(tmp_path)], labels="judge")
    assert e.value.path == "--labels"
