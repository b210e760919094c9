"""Replay ring and the on-disk episode format, including a writer killed mid-episode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rlhw.rl.episodes import (
    EpisodeKind,
    EpisodeRecorder,
    episode_files,
    episode_transitions,
    iter_recorded_transitions,
    load_episode,
)
from rlhw.rl.replay import ReplayBuffer


def _t(n, start=0):
    x = np.arange(start, start + n, dtype=np.float32)
    return {
        "obs/x": x[:, None],
        "next_obs/x": x[:, None] + 1,
        "action": np.zeros((n, 2), np.float32),
        "reward": x,
        "terminated": np.zeros(n, np.float32),
    }


def test_replay_ring_overwrites_the_oldest_and_samples_stored_transitions():
    rb = ReplayBuffer(5, seed=0)
    rb.add_batch(_t(3))
    rb.add_batch(_t(4, start=3))
    assert len(rb) == 5 and rb.total_added == 7
    assert sorted(rb.data["reward"].tolist()) == [2, 3, 4, 5, 6]
    s = rb.sample(16)
    assert s["obs/x"].shape == (16, 1) and set(s["reward"].tolist()) <= {2, 3, 4, 5, 6}
    np.testing.assert_array_equal(s["next_obs/x"][:, 0], s["obs/x"][:, 0] + 1)


def test_replay_refuses_a_batch_missing_fields():
    rb = ReplayBuffer(5)
    rb.add_batch(_t(2))
    bad = _t(2)
    del bad["terminated"]
    with pytest.raises(KeyError, match="terminated"):
        rb.add_batch(bad)


def _obs(i):
    return {"pos": np.full(3, i, np.float32), "image": np.full((4, 4, 3), i, np.uint8)}


def test_a_finished_episode_becomes_one_npz_with_consistent_transitions(tmp_path):
    rec = EpisodeRecorder(tmp_path)
    rec.begin(_obs(0))
    for i in range(1, 4):
        rec.step(
            np.array([i, -i], np.float32),
            reward=float(i),
            terminated=i == 3,
            truncated=False,
            next_obs=_obs(i),
            success=i == 3,
        )
    path = rec.end()
    assert path.name == "train-000000.npz" and not list(tmp_path.glob("*.steps"))
    ep = load_episode(path)
    assert ep.obs["pos"].shape == (4, 3) and ep.obs["image"].dtype == np.uint8
    assert ep.complete and ep.kind is EpisodeKind.TRAIN
    tr = episode_transitions(ep)
    np.testing.assert_array_equal(tr["obs/pos"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(tr["next_obs/pos"][:, 0], [1, 2, 3])
    np.testing.assert_array_equal(tr["reward"], [1, 2, 3])
    np.testing.assert_array_equal(tr["terminated"], [0, 0, 1])


def test_episode_numbering_continues_after_existing_files(tmp_path):
    for _ in range(2):
        rec = EpisodeRecorder(tmp_path)
        rec.begin(_obs(0))
        rec.step(np.zeros(2, np.float32), 0.0, False, True, _obs(1))
        rec.end()
    assert [p.name for p in episode_files(tmp_path)] == ["train-000000.npz", "train-000001.npz"]


WRITER = textwrap.dedent("""
    import sys, time, numpy as np
    from rlhw.rl.episodes import EpisodeRecorder
    rec = EpisodeRecorder(sys.argv[1])
    obs = lambda i: {"pos": np.full(3, i, np.float32), "image": np.full((64, 64, 3), i % 256, np.uint8)}
    rec.begin(obs(0))
    for i in range(1, 10_000):
        rec.step(np.array([i, i], np.float32), float(i), False, False, obs(i))
        print(i, flush=True)
        time.sleep(0.001)  # a writer slow enough that the test's kill lands mid-episode
""")


@pytest.mark.timeout(60)
def test_a_writer_killed_mid_episode_loses_no_written_step(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    last = 0
    for line in proc.stdout:  # each printed number is a step already written and flushed
        last = int(line)
        if last >= 40:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    (partial,) = episode_files(tmp_path)
    assert partial.suffix == ".steps"
    ep = load_episode(partial)
    assert ep.complete is False
    n = ep.length
    assert n >= last, f"{last} steps were reported written but only {n} were read back"
    np.testing.assert_array_equal(ep.reward, np.arange(1, n + 1))
    batches = list(iter_recorded_transitions(tmp_path))
    assert sum(len(b["reward"]) for b in batches) == n


def test_a_torn_last_record_is_dropped_and_the_rest_kept(tmp_path):
    rec = EpisodeRecorder(tmp_path)
    rec.begin(_obs(0))
    for i in range(1, 6):
        rec.step(np.zeros(2, np.float32), float(i), False, False, _obs(i))
    rec.close()
    (path,) = episode_files(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-50])  # cut into the last record
    ep = load_episode(path)
    np.testing.assert_array_equal(ep.reward, [1, 2, 3, 4])
