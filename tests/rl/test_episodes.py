"""`Episode`, the one schema of an episode file: what the recorder writes is what every reader gets, field by
field, and the files written before the type (and before the audit fields) still load."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlhw.errors import FaultKind
from rlhw.rl.episodes import FAULT_CHARS, Episode, EpisodeKind, EpisodeRecorder, episode_files, load_episode


def _obs(t: int) -> dict[str, np.ndarray]:
    return {"pos": np.full(3, t, np.float32), "image_front": np.full((4, 4, 3), t, np.uint8)}


def _legacy_arrays(steps: int = 3, audit: bool = True, meta: dict | None = None) -> dict[str, np.ndarray]:
    """The arrays of an episode as rlhw wrote them before `Episode` existed (a dict passed to ``np.savez``);
    ``audit=False``: as written before ``intervened``, ``policy_version`` and ``fault``, without ``meta``."""
    out = {f"obs/{k}": np.stack([_obs(t)[k] for t in range(steps + 1)]) for k in ("pos", "image_front")}
    out["action"] = np.stack([np.array([t, -t], np.float32) for t in range(1, steps + 1)])
    out["reward"] = np.arange(1, steps + 1, dtype=np.float32)
    out["terminated"] = np.array([t == steps for t in range(1, steps + 1)])
    out["truncated"] = np.zeros(steps, bool)
    out["success"] = out["terminated"].copy()
    out["time"] = 1000.0 + np.arange(steps, dtype=np.float64)
    if audit:
        out["intervened"] = np.array([t == 2 for t in range(1, steps + 1)])
        out["policy_version"] = np.array([3, -1, 4][:steps], np.int64)
        out["fault"] = np.array(["", "", FaultKind.REFLEX.value][:steps], f"<U{FAULT_CHARS}")
        out["meta"] = np.frombuffer(
            json.dumps(meta or {"seed": 7, "kind": "demo", "complete": True}).encode(), np.uint8
        )
    return out


def test_an_episode_file_written_before_the_type_loads_field_by_field(tmp_path):
    path = tmp_path / "demo-000000.npz"
    np.savez(path, **_legacy_arrays())
    ep = load_episode(path)
    assert isinstance(ep, Episode) and ep.length == 3
    assert ep.kind is EpisodeKind.DEMO and ep.complete and ep.meta["seed"] == 7
    assert set(ep.obs) == {"pos", "image_front"} and ep.obs["image_front"].dtype == np.uint8
    np.testing.assert_array_equal(ep.obs["pos"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(ep.action[:, 1], [-1, -2, -3])
    np.testing.assert_array_equal(ep.reward, [1, 2, 3])
    assert ep.terminated.tolist() == [False, False, True] and ep.intervened.tolist() == [False, True, False]
    assert ep.policy_version.tolist() == [3, -1, 4] and ep.fault.tolist() == ["", "", "reflex"]
    assert ep.judge_success is None


def test_an_episode_from_before_the_audit_fields_loads_with_no_operator_no_policy_version_and_no_fault(tmp_path):
    path = tmp_path / "train-000000.npz"
    np.savez(path, **_legacy_arrays(audit=False))
    ep = load_episode(path)
    assert ep.length == 3 and ep.meta == {} and ep.kind is None
    assert not ep.intervened.any() and (ep.policy_version == -1).all() and ep.fault.tolist() == [""] * 3


def test_what_the_recorder_writes_is_the_layout_files_have_always_had(tmp_path):
    """The same array names and dtypes as before the type: older rlhw versions and other tools still read it."""
    rec = EpisodeRecorder(tmp_path)
    rec.begin(_obs(0), kind=EpisodeKind.DEMO, meta={"seed": 7})
    for t in range(1, 4):
        rec.step(np.array([t, -t]), float(t), t == 3, False, _obs(t), t == 3, intervened=t == 2, judge_success=t == 3)
    path = rec.end()
    assert path.name == "demo-000000.npz"
    with np.load(path, allow_pickle=False) as z:
        written = {k: z[k] for k in z.files}
    legacy = _legacy_arrays()
    assert set(written) == set(legacy) | {"judge_success"}
    for key, value in legacy.items():
        assert written[key].dtype == value.dtype and written[key].shape[0] == value.shape[0], key
    assert json.loads(written["meta"].tobytes()) == {"seed": 7, "kind": "demo", "complete": True}
    assert written["judge_success"].tolist() == [False, False, True]
    ep = load_episode(path)
    assert ep.judge_success.tolist() == [False, False, True] and ep.intervened.tolist() == [False, True, False]


def test_an_interrupted_episode_reads_back_as_the_same_type_marked_incomplete(tmp_path):
    rec = EpisodeRecorder(tmp_path)
    rec.begin(_obs(0), kind="eval")
    rec.step(np.zeros(2), 1.0, False, False, _obs(1), fault=FaultKind.REFLEX)
    rec.close()
    (path,) = episode_files(tmp_path, EpisodeKind.EVAL)
    ep = load_episode(path)
    assert path.suffix == ".steps" and ep.kind is EpisodeKind.EVAL and not ep.complete
    assert ep.length == 1 and ep.fault.tolist() == ["reflex"] and ep.obs["pos"].shape == (2, 3)


def test_a_steps_file_cut_before_its_first_step_holds_no_episode(tmp_path):
    rec = EpisodeRecorder(tmp_path)
    rec.begin(_obs(0))
    rec.close()
    (path,) = episode_files(tmp_path)
    assert load_episode(path) is None


def test_an_episode_kind_keeps_its_string_on_disk_and_an_unknown_one_is_refused(tmp_path):
    assert [k.value for k in EpisodeKind] == ["train", "eval", "demo"]
    assert EpisodeKind("eval") == "eval" and f"{EpisodeKind.DEMO}-000001" == "demo-000001"
    with pytest.raises(ValueError, match="'rollout' is not a valid EpisodeKind"):
        EpisodeRecorder(tmp_path).begin(_obs(0), kind="rollout")


def test_a_field_with_another_length_than_the_actions_is_refused_naming_it():
    ep = Episode.from_arrays(_legacy_arrays())
    with pytest.raises(ValueError, match=r"Episode.reward has shape \(2,\), action has 3 steps"):
        dataclasses.replace(ep, reward=np.zeros(2))
    with pytest.raises(ValueError, match=r"Episode.obs\['pos'\] has shape \(3, 3\): an episode of 3 steps has 4"):
        dataclasses.replace(ep, obs={"pos": np.zeros((3, 3))})


def test_a_file_that_is_not_an_episode_is_refused_naming_the_file_and_what_it_lacks(tmp_path):
    path = tmp_path / "train-000000.npz"
    np.savez(path, weights=np.zeros(3))
    with pytest.raises(ValueError, match=r"train-000000.npz is not an rlhw episode: it has no 'action' array"):
        load_episode(path)


def test_an_episode_is_read_only():
    ep = Episode.from_arrays(_legacy_arrays())
    with pytest.raises(AttributeError):
        ep.reward = np.zeros(3)
    with pytest.raises(TypeError):
        ep.obs["pos"] = np.zeros((4, 3))


def test_the_commands_that_read_episodes_offer_every_kind_of_episode():
    """`rlhw export-dataset --kind` and the EPISODES argument spell the kinds out (the CLI stays light to import)."""
    from rlhw.cli.common import EPISODE_KINDS

    assert EPISODE_KINDS == tuple(k.value for k in EpisodeKind)
