"""The success classifier retrained during a run from the operator's verdicts (rlhw/rl/classifier_refresh.py).

When the classifier ends a train episode as a success, the operator is asked; a "no" marks the episode's frames as
negatives. After ``env.reward.retrain_after_rejections`` of them the env worker retrains the classifier in the
background and the env judges with the new one from the next episode. The env worker is driven without Ray (as
in test_pipeline_rehearsal); the retraining is injected where the test is about the worker, and real where it
is about what the new classifier is trained on. A served env (a placed arm, tests/placed_arm.py) gets the
operator's verdict over the wire and takes the new classifier as a new server child.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlhw.cli.main import main
from rlhw.config import load_config_dict
from rlhw.env.step_messages import StepReader, StepWriter
from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import ConfigError
from rlhw.rl.classifier_refresh import ClassifierRefresh, Retrained, rejected_files, retrain
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.pipeline.env_worker import EnvWorker
from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.step import NotesSource, Step, StepNotes, stack
from rlhw.vision.classifier import classifier_training
from tests.placed_arm import placed_arm
from tests.rl.test_pipeline_rehearsal import WireLane, rehearsal_config, worker_on_the_wire
from tests.vision.test_classifier_env import constant_classifier
from tests.vision.test_classifier_training import push_cube_episodes  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]

OPERATOR = ("env.teleop.device=scripted", "env.teleop.mode=intervene", "env.reward.terminate_on_success=true")


def fooled_worker(tmp_path, after: int):
    """An env worker whose classifier calls every step a success, with a scripted operator who sees none."""
    config = rehearsal_config(tmp_path, *OPERATOR, f"env.reward.retrain_after_rejections={after}")
    return worker_on_the_wire(config, tmp_path)


def done(value=None, error: Exception | None = None) -> Future:
    f: Future = Future()
    f.set_exception(error) if error else f.set_result(value)
    return f


def test_the_operator_rejects_a_success_the_classifier_called_and_the_episode_is_recorded_as_failed(tmp_path):
    w = fooled_worker(tmp_path, after=0)
    try:
        w.collect(1)
        w.run_episodes()  # the classifier ends the episode at its first step
        progress = w.poll()
    finally:
        w.env.close()
    (f,) = episode_files(tmp_path / "run" / "episodes", "train")
    episode = load_episode(f)
    assert episode.success[-1] and episode.meta["operator_success"] is False  # the classifier said yes, the operator no
    assert rejected_files([tmp_path / "run" / "episodes"]) == [f]
    assert progress.judge.verdicts.operator_rejections == 1
    assert w.refresh is None  # retrain_after_rejections=0: counted and recorded, never retrained


def test_after_enough_rejections_the_env_judges_with_a_retrained_classifier_from_the_next_episode(tmp_path):
    w = fooled_worker(tmp_path, after=2)
    launched = []
    w.refresh.launch = never_success_launch(tmp_path, launched)
    try:
        w.collect(20)
        w.run_episodes()
        w.run_episodes()  # the second rejection: the retraining starts as the episode ends
        assert len(launched) == 1 and launched[0][0].endswith("always.pt")
        assert launched[0][2].endswith("reward/env0/classifier-001.pt")  # each cell its own
        w.run_episodes()  # ends at once again (the old classifier); at its end the new one is taken
        notices = w.poll().notices
        w.run_episodes()  # the new classifier never calls a success: the episode runs to its step limit
    finally:
        w.env.close()
    lengths = [len(load_episode(f).reward) for f in episode_files(tmp_path / "run" / "episodes", "train")]
    assert lengths == [1, 1, 1, 5]
    assert any("retraining started" in n for n in notices) and any("classifier v1 in use" in n for n in notices)
    assert w.refresh.version == 1 and w.refresh.current.endswith("classifier-001.pt")


def test_a_served_env_sends_the_operators_rejections_and_takes_the_retrained_classifier_as_a_new_child(tmp_path):
    """A placed arm, simulated in MuJoCo and served from a `rlhw serve-env` child: the operator's verdicts reach
    the env worker over the wire (its episode files record the rejections), and the retrained classifier is taken
    by a new child started with it, between episodes, not counted as a restart."""
    raw = placed_arm(yaml.safe_load((ROOT / "configs/sim_reach.yaml").read_text()))
    raw["env"].update(images=True, sim_cameras=["front"], image_size=[32, 32], max_episode_steps=5)
    raw["env"]["reward"] = {"classifier": constant_classifier(tmp_path / "always.pt", 3.0)}
    overrides = [*OPERATOR, "env.reward.retrain_after_rejections=2", "train.progress=false"]
    w = EnvWorker.detached(load_config_dict(raw, overrides=overrides), str(tmp_path / "run"))
    w.attach_lane(WireLane(w.spec().action.shape))
    launched = []
    w.refresh.launch = never_success_launch(tmp_path, launched)
    try:
        assert w.transport.kind == "server"
        first_child = w.server_pid()
        w.collect(20)
        for _ in range(3):  # rejections 1 and 2 start the retraining; the third episode's end takes it
            w.run_episodes()
        assert w.server_pid() == first_child and len(launched) == 1
        w.run_episodes()  # the new child's classifier never calls a success: the episode runs to its step limit
        second_child, restarts = w.server_pid(), w.transport.restarts
    finally:
        w.transport.close()
    episodes = [load_episode(f) for f in episode_files(tmp_path / "run" / "episodes", "train")]
    assert [len(e.reward) for e in episodes] == [1, 1, 1, 5]
    assert [e.meta.get("operator_success") for e in episodes[:3]] == [False] * 3  # the verdicts crossed the wire
    assert second_child != first_child and restarts == 0
    assert w.transport.config.env.reward.classifier == launched[0][2]
    log = (tmp_path / "run" / "logs" / "env0-server.log").read_text()
    assert sum(line.startswith("listening on") for line in log.splitlines()) == 2


def never_success_launch(tmp_path, launched: list):
    """A retraining that writes a classifier which never calls a success, recording what it was asked."""
    never = constant_classifier(tmp_path / "never.pt", -3.0)

    def launch(current, dirs, out):
        launched.append((current, dirs, out))
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(never, out)
        return done(Retrained(out, 3, 2, 1.0, 1.0))

    return launch


def test_a_failed_retraining_keeps_the_classifier_in_use_and_says_why():
    used = []
    refresh = ClassifierRefresh(
        "always.pt", [], "out", 1, use=used.append, launch=lambda *a: done(error=OSError("gone"))
    )
    refresh.stepped(one_step(verdict=False), training=True)
    assert "retraining started" in refresh.between_episodes()
    assert "retraining failed (OSError: gone)" in refresh.between_episodes()
    assert used == [] and refresh.current.endswith("always.pt") and refresh.version == 0


def test_only_train_episodes_rejections_count():
    refresh = ClassifierRefresh("c.pt", [], "out", 1, use=print, launch=lambda *a: done())
    refresh.stepped(one_step(verdict=False), training=False)  # an eval episode: the operator is not asked to teach
    refresh.stepped(one_step(verdict=True), training=True)
    assert refresh.rejections == 0 and refresh.between_episodes() is None


def one_step(verdict: bool) -> Step:
    return Step.one(
        {},
        1.0,
        True,
        False,
        success=True,
        executed=np.zeros(4, np.float32),
        intervened=False,
        stamps={},
        timing={},
        notes=StepNotes(operator_verdict=verdict),
    )


SPEC = EnvSpec(
    {"joint_pos": TensorSpec("joint_pos", "float32", (7,))}, TensorSpec("action", "float32", (7,), -1.0, 1.0), 10.0
)


def verdict_step(verdict: bool | None, **notes) -> Step:
    """One instance's step whose notes hold ``verdict`` (and any other ``notes``, which stay off the wire)."""
    return Step.one(
        {"joint_pos": np.arange(7, dtype=np.float32)},
        1.0,
        verdict is not None,
        False,
        success=verdict is not None,
        executed=np.zeros(7, np.float32),
        intervened=False,
        stamps={"joint_pos": 1.7e9},
        timing={"env": 1e-3},
        notes=StepNotes(operator_verdict=verdict, **notes),
    )


def over_the_wire(step: Step, spec: EnvSpec, in_session: bool) -> tuple[Step, bytes]:
    """``step`` as the server writes it and the client reads it (`RemoteEnv`), with its bytes."""
    action = np.zeros((spec.num_envs, 7) if spec.num_envs > 1 else 7, np.float32)
    data = StepWriter(spec).serialize(step, {"server": 1e-5}, action, in_session)
    reader = StepReader(spec)
    message, views = reader.parse(data, in_session)
    return reader.read(message.step if in_session else message, action, views), data


@pytest.mark.parametrize("in_session", [False, True])
def test_the_operators_verdict_crosses_the_wire_and_a_step_nobody_was_asked_of_sends_nothing_more(in_session):
    read = {v: over_the_wire(verdict_step(v, episode_step=3), SPEC, in_session) for v in (True, False, None)}
    wire = NotesSource.WIRE
    assert read[True][0].notes == (StepNotes(operator_verdict=True, source=wire),)  # the verdict alone stays here
    assert read[False][0].notes == (StepNotes(operator_verdict=False, source=wire),)
    assert read[False][0].gym()[4]["operator_verdict"] is False
    assert "episode_step" not in read[False][0].gym()[4]  # the server's step count never crossed: not reported as 0
    assert read[None][0].notes == ()  # not asked: no notes, as before
    unnoted = dataclasses.replace(verdict_step(None), notes=())
    assert read[None][1] == over_the_wire(unnoted, SPEC, in_session)[1]  # not a byte more than a step without notes
    assert len(read[False][1]) == len(read[None][1]) + 3  # a verdict: the field's tag, its length, one value


def test_a_batchs_verdicts_cross_the_wire_per_instance_and_an_unknown_one_is_refused():
    spec = EnvSpec(SPEC.observations, SPEC.action, 10.0, 3)
    steps = [verdict_step(None), verdict_step(False), verdict_step(None)]
    batch = stack(steps, [s.obs for s in steps], {})
    read, _ = over_the_wire(batch, spec, in_session=False)
    assert [n.operator_verdict for n in read.notes] == [None, False, None]
    newer = pb.StepResponse(reward=[0.0] * 3, operator_verdict=[pb.OPERATOR_VERDICT_NO, 7, 0])
    with pytest.raises(ValueError, match="StepResponse.operator_verdict"):
        StepReader(spec).read(newer, np.zeros((3, 7), np.float32))


def test_retraining_adds_the_rejected_episodes_as_negatives_and_keeps_the_options(
    tmp_path,
    push_cube_episodes,  # noqa: F811
    capsys,
):
    """A classifier trained by `rlhw train-reward`, retrained with three of its failed episodes copied into a run
    as operator-rejected: trained on its own episodes plus those three, with the options it was trained with."""
    first = tmp_path / "push.pt"
    assert main(["train-reward", str(push_cube_episodes), "--out", str(first), "--epochs", "5", "--seed", "3"]) == 0
    capsys.readouterr()
    run = tmp_path / "run" / "episodes" / "env0"
    run.mkdir(parents=True)
    failed = [f for f in sorted(push_cube_episodes.glob("*.npz")) if not load_episode(f).success.any()][:3]
    for i, f in enumerate(failed):
        arrays = dict(np.load(f))
        meta = {**json.loads(bytes(arrays["meta"]).decode()), "operator_success": False}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        np.savez(run / f"train-{i:06d}.npz", **arrays)

    result = retrain(str(first), [str(tmp_path / "run" / "episodes")], str(tmp_path / "classifier-001.pt"))

    before, after = classifier_training(first), classifier_training(tmp_path / "classifier-001.pt")
    names = [*after["episodes"]["train"], *after["episodes"]["held_out"]]
    assert result.rejected == 3 and result.episodes == len(names) and result.path.endswith("classifier-001.pt")
    assert len(names) == len(before["episodes"]["train"]) + len(before["episodes"]["held_out"]) + 3
    assert sum(str(run) in n for n in names) == 3
    assert after["options"] == before["options"]


def test_train_reward_says_what_its_held_out_frames_cover_and_what_they_do_not(tmp_path, push_cube_episodes, capsys):  # noqa: F811
    assert main(["train-reward", str(push_cube_episodes), "--out", str(tmp_path / "c.pt"), "--epochs", "2"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "c.metrics.json").read_text())
    sources = classifier_training(tmp_path / "c.pt")["sources"]["held_out"]
    held = report["frames"]["held_out"]
    assert sources["success"] == held["positive"]
    assert sum(sources[k] for k in ("before_success", "failed", "operator_rejected", "given")) == held["negative"]
    assert f"{sources['success']} success frames" in printed
    assert "they do not cover: frames a policy will seek while it learns on this reward" in printed


def test_a_resumed_run_judges_with_the_last_classifier_it_retrained_and_numbers_the_next_after_it(tmp_path):
    out = tmp_path / "run" / "reward"
    out.mkdir(parents=True)
    for name in ("classifier-001.pt", "classifier-002.pt"):
        (out / name).write_bytes(b"")
    used, launched = [], []
    refresh = ClassifierRefresh(
        "start.pt", [], out, 1, use=used.append, launch=lambda *a: launched.append(a) or Future()
    )
    assert used == [str((out / "classifier-002.pt").resolve())] and refresh.version == 2
    refresh.stepped(one_step(verdict=False), training=True)
    refresh.between_episodes()
    assert launched[0][0] == used[0] and launched[0][2].endswith("classifier-003.pt")


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_bad_retrain_after_rejections_is_a_clear_error_naming_the_field(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"env\.reward\.retrain_after_rejections"):
        rehearsal_config(tmp_path, f"env.reward.retrain_after_rejections={bad}")
