"""`rlhw view`: recorded episodes become a Rerun recording that rerun itself reads back."""

from __future__ import annotations

import numpy as np

from rlhw.cli.main import main
from rlhw.rl.episodes import EpisodeRecorder


def write_episode(directory, steps=4, image=True):
    rec = EpisodeRecorder(directory)

    def obs(t):
        return {
            "ee_position": np.full(3, 0.1 * t, np.float32),
            **({"image_front": np.full((8, 8, 3), t, np.uint8)} if image else {}),
        }

    rec.begin(obs(0), kind="demo", meta={"seed": 0})
    for t in range(1, steps + 1):
        rec.step(
            np.array([0.5, 0.0, -0.5], np.float32),
            -1.0 / t,
            t == steps,
            False,
            obs(t),
            t == steps,
            intervened=t % 2 == 0,
        )
    return rec.end()


def read_back(path):
    from rerun.chunk import RrdReader

    rows: dict[str, int] = {}
    for chunk in RrdReader(path).stream():
        if not chunk.is_static:
            rows[chunk.entity_path] = rows.get(chunk.entity_path, 0) + chunk.num_rows
    return rows


def test_view_writes_an_rrd_that_rerun_reads_back_with_cameras_state_actions_rewards_and_interventions(
    tmp_path, capsys
):
    episode = write_episode(tmp_path / "demos")
    out = tmp_path / "view.rrd"
    assert main(["view", str(episode), "--out", str(out)]) == 0
    assert "1 episode(s), 4 step(s)" in capsys.readouterr().out
    rows = read_back(out)
    assert rows["/demo-000000/camera/front"] == 5  # the reset frame and one per step
    assert rows["/demo-000000/obs/ee_position"] == 5
    for entity in ("action", "reward", "success", "intervened"):
        assert rows[f"/demo-000000/{entity}"] == 4, entity


def test_view_takes_directories_of_episodes(tmp_path, capsys):
    write_episode(tmp_path / "demos", image=False)
    write_episode(tmp_path / "demos", steps=2, image=False)
    out = tmp_path / "all.rrd"
    assert main(["view", str(tmp_path / "demos"), "--out", str(out)]) == 0
    rows = read_back(out)
    assert rows["/demo-000000/action"] == 4 and rows["/demo-000001/action"] == 2


def test_view_of_nothing_is_a_one_line_error(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing"), "--out", str(tmp_path / "x.rrd")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "no episode files" in capsys.readouterr().err
