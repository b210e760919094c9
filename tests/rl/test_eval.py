"""`rlhw eval`: a checkpoint's deterministic action on the env a config names, with an honest success rate.

The checkpoints are made in the test (tests/rl/reach_policy.py: a SAC actor fitted to the reach controller and
saved in rlhw train's format), so every test here runs in seconds on the MuJoCo arm or the mock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rlhw.config import load_config
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.evaluate import EVAL_SEED_BASE, wilson_interval
from tests.placed_arm import placed_arm_file
from tests.rl.reach_policy import reach_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["train.sac.hidden_sizes=[64,64]"]


def rlhw_eval(*args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "rlhw.cli.main", "eval", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def eval_in_process(capsys, *args) -> tuple[int, str]:
    """`rlhw eval ARGS` through the CLI's entry point in this process: (exit status, stderr)."""
    from rlhw.cli.main import main

    try:
        code = main(["eval", *args])
    except SystemExit as e:  # argparse: usage errors
        code = e.code
    return code, capsys.readouterr().err


def make_checkpoint(path: Path, overrides=()) -> Path:
    """A reach checkpoint for the spec of sim_reach.yaml with ``overrides`` (built on the mock: only the spec
    matters, and the mock has the same spec as the MuJoCo arm)."""
    from rlhw.robot import make_env

    config = load_config(ROOT / "configs/sim_reach.yaml", [*SMALL, "env.sim=mock", *overrides])
    env = make_env(config)
    try:
        spec = env.spec
    finally:
        env.close()
    return reach_checkpoint(path, spec, config)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "latest.pt")


def test_the_wilson_interval_matches_its_textbook_values():
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no episode: nothing is known


def test_the_wilson_interval_contains_its_estimate_with_exact_bounds_at_0_and_n():
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 10)[0] == 0.0  # not 0.9999999999999999
    for n in range(1, 60):
        for successes in range(n + 1):
            low, high = wilson_interval(successes, n)
            assert 0.0 <= low <= successes / n <= high <= 1.0, (successes, n)


@pytest.mark.timeout(300)
def test_eval_on_mujoco_prints_each_episode_writes_json_and_records_the_episodes(checkpoint, tmp_path):
    out, run = tmp_path / "eval.json", tmp_path / "run"
    r = rlhw_eval(
        "configs/sim_reach.yaml",
        "--checkpoint",
        str(checkpoint),
        "--episodes",
        "4",
        "--json",
        str(out),
        "--run-dir",
        str(run),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    episodes = result["episodes"]
    assert [e["seed"] for e in episodes] == [EVAL_SEED_BASE + k for k in range(4)]  # disjoint from training's
    assert set(episodes[0]) >= {"seed", "success", "steps", "return", "fault", "intervened"}
    assert result["success_rate"] == 1.0, episodes  # the fitted controller reaches every target
    assert result["ci95"] == pytest.approx(list(wilson_interval(4, 4)))
    assert all(e["fault"] is None and not e["intervened"] for e in episodes)
    health = result["loop_health"]
    assert health["steps"] == sum(e["steps"] for e in episodes) and health["latency_p50_ms"] > 0
    assert "95% Wilson interval" in r.stdout and len([line for line in r.stdout.splitlines() if "yes" in line]) == 4
    # recorded like training's eval episodes, actions from the checkpoint's policy version
    files = episode_files(run / "episodes", "eval")
    assert len(files) == 4 and all(f.suffix == ".npz" for f in files)
    ep = load_episode(files[0])
    assert ep.length == episodes[0]["steps"] and bool(ep.success[-1])
    assert json.loads((run / "eval.json").read_text())["success_rate"] == 1.0


@pytest.mark.timeout(120)
def test_the_same_checkpoint_and_seed_give_the_same_episode(checkpoint, tmp_path):
    """Deterministic actions and seeded resets: an eval is repeatable on a simulator."""
    from rlhw.rl.checkpoint import PolicyCheckpoint
    from rlhw.rl.evaluate import evaluate
    from rlhw.rl.rundir import RunDir

    config = load_config(ROOT / "configs/sim_reach.yaml", SMALL)
    ckpt = PolicyCheckpoint.load(checkpoint, "--checkpoint")
    a = evaluate(config, ckpt, 2, RunDir(tmp_path / "a"))
    b = evaluate(config, ckpt, 2, RunDir(tmp_path / "b"))
    assert [(e.steps, round(e.ret, 6)) for e in a.episodes] == [(e.steps, round(e.ret, 6)) for e in b.episodes]


@pytest.mark.timeout(300)  # the first test pays for the module's checkpoint
def test_a_checkpoint_for_another_action_is_refused_naming_the_action(checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, err = eval_in_process(
        capsys,
        "configs/sim_reach.yaml",
        "--checkpoint",
        str(checkpoint),
        "env.sim=mock",
        "env.action.gripper=true",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert code == 2 and "--checkpoint" in err and "action: checkpoint shape (3,), env (4,)" in err
    assert not episode_files(tmp_path / "run" / "episodes", "eval")  # refused before any step


@pytest.mark.timeout(120)
def test_a_checkpoint_missing_an_observation_is_refused_naming_the_observation(
    checkpoint, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(ROOT)
    code, err = eval_in_process(
        capsys,
        "configs/sim_reach.yaml",
        "--checkpoint",
        str(checkpoint),
        "env.sim=mock",
        "env.images=true",
        "env.camera_driver=mock",
        "env.image_size=[16,16]",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert code == 2 and "image_front" in err and "not trained on" in err


def test_a_checkpoint_without_its_spec_is_refused_with_the_way_to_resave_it(checkpoint, tmp_path):
    from rlhw.errors import ConfigError
    from rlhw.rl.checkpoint import PolicyCheckpoint

    old = torch.load(checkpoint, weights_only=False)
    del old["spec"], old["sac_config"]
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(ConfigError, match="--resume") as e:
        PolicyCheckpoint.load(tmp_path / "old.pt", "--checkpoint")
    assert e.value.path == "--checkpoint" and "env spec" in e.value.message


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args, field",
    [
        (["--checkpoint", "no/such/file.pt"], "--checkpoint"),
        (["--checkpoint", "{ckpt}", "--episodes", "0"], "--episodes"),
        (["--checkpoint", "{ckpt}", "--json", "{tmp}"], "--json"),
        (["--checkpoint", "{ckpt}", "env.control_hz=-1"], "env.control_hz"),
    ],
)
def test_bad_flags_are_one_line_errors_naming_the_flag(checkpoint, tmp_path, capsys, monkeypatch, args, field):
    monkeypatch.chdir(ROOT)
    args = [a.format(ckpt=checkpoint, tmp=tmp_path) for a in args]
    code, err = eval_in_process(capsys, "configs/sim_reach.yaml", *args)
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1, err


def test_eval_without_a_checkpoint_flag_prints_the_usage(capsys):
    code, err = eval_in_process(capsys, "configs/sim_reach.yaml")
    assert code == 2 and "--checkpoint" in err and "required" in err


LOOP_NICE = max(3, os.nice(0))  # a loop priority any user may set: a realtime one, or a raise, may be refused


def loop_at_nice(path: Path, nice: int) -> Path:
    """The config at ``path`` with its arm's node's robot loop at ``nice``."""
    raw = yaml.safe_load(path.read_text())
    raw["cluster"]["node_groups"][0]["env_configs"] = [{"node_ranks": 0, "loop_priority": {"nice": nice}}]
    path.write_text(yaml.safe_dump(raw))
    return path


def thread_nices(pid: int) -> list[tuple[str, int]]:
    """(name, nice) of each thread of process ``pid``, from /proc (field 19 of a task's stat is its nice)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        out.append((name, int(rest[16])))
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_during_eval_stops_the_arm_and_keeps_the_episodes(checkpoint, tmp_path, signum):
    """Through the env server child (a placed arm's transport; here a simulated stand-in): SIGTERM ends the eval
    as Ctrl-C does; the server stops the arm before it exits, the finished episodes and the running one's steps
    stay on disk."""
    import psutil

    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlhw.cli.main",
            "eval",
            str(loop_at_nice(placed_arm_file(ROOT / "configs/sim_reach.yaml", tmp_path), LOOP_NICE)),
            "--checkpoint",
            str(checkpoint),
            "--episodes",
            "1000",
            "--run-dir",
            str(run),
            "--json",
            str(tmp_path / "eval.json"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        # as from a terminal: a shell's background job would start it with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        rows = 0
        for line in proc.stdout:  # the event: two finished episodes printed
            rows += line.split()[:1] and line.split()[0].isdigit()
            if rows == 2:
                break
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the env server child should be running"
        grpc_nice = {nice for name, nice in thread_nices(proc.pid) if name.startswith("grpc")}
        assert grpc_nice == {LOOP_NICE}, "grpc's threads carry every step: made under the loop's isolation"
        proc.send_signal(signum)
        try:
            rest, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, err = proc.communicate()
            pytest.fail(f"rlhw eval did not end within 60 s of signal {signum}: {err[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err[-3000:]  # 143 after SIGTERM, 130 after Ctrl-C, as a shell says
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["status"] == "interrupted" and result["signal"] == signum and len(result["episodes"]) >= 2
    finished = [f for f in episode_files(run / "episodes", "eval") if f.suffix == ".npz"]
    assert len(finished) == len(result["episodes"])
    log = (run / "logs" / "env0-server.log").read_text()
    assert "stopping the arm first" in log and log.rstrip().endswith("stopped")
    psutil.wait_procs(children, timeout=10)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)


@pytest.mark.timeout(60)
def test_an_operator_takeover_counts_as_a_failure(checkpoint, tmp_path):
    """The scripted operator drives every step (``always_active``): the env may report success, the policy's
    success is still False, and the episode is marked."""
    from rlhw.rl.checkpoint import PolicyCheckpoint
    from rlhw.rl.evaluate import evaluate
    from rlhw.rl.rundir import RunDir

    config = load_config(
        ROOT / "configs/sim_reach.yaml",
        [
            *SMALL,
            "env.sim=mock",
            "env.teleop.device=scripted",
            "env.teleop.always_active=true",
            "env.teleop.hesitation=0",
        ],
    )
    report = evaluate(config, PolicyCheckpoint.load(checkpoint, "--checkpoint"), 2, RunDir(tmp_path / "run"))
    assert all(e.intervened and not e.success for e in report.episodes)
    assert any(e.env_success for e in report.episodes)  # the operator reached it; the policy gets no credit
    assert report.success_rate == 0.0
    ep = load_episode(episode_files(tmp_path / "run" / "episodes", "eval")[0])
    assert np.all(ep.intervened) and np.all(ep.policy_version == -1)


def test_another_control_rate_is_allowed_with_a_warning(checkpoint):
    """The spec matches, so the checkpoint runs; but each action lasts another time, which the user is told."""
    from rlhw.rl.checkpoint import PolicyCheckpoint
    from rlhw.robot import make_env

    ckpt = PolicyCheckpoint.load(checkpoint, "--checkpoint")
    env = make_env(load_config(ROOT / "configs/sim_reach.yaml", ["env.sim=mock", "env.control_hz=30"]))
    try:
        ckpt.check_spec(env.spec, "--checkpoint")
        assert "trained at 10 Hz and this env steps at 30 Hz" in ckpt.rate_note(env.spec)
    finally:
        env.close()


def test_rlhw_help_lists_eval(capsys):
    from rlhw.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "eval" in capsys.readouterr().out
