"""How an env worker learns where its env server child listens: one JSON line on an inherited pipe.

The children here are tiny Python scripts that behave like `rlhw serve-env` at start-up (the real one runs in
test_pipeline.py): they take ``--address-fd FD`` and report, die, stay silent or report garbage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlhw.env.server_process import EnvServerError, EnvServerProcess

ROOT = Path(__file__).resolve().parents[2]

_FD = "fd = int(sys.argv[sys.argv.index('--address-fd') + 1])\n"


def _child(body: str) -> list[str]:
    return [sys.executable, "-c", "import os, sys, time\n" + _FD + body]


def _launch(tmp_path, body: str, timeout_s: float = 60.0) -> tuple[EnvServerProcess, str]:
    server = EnvServerProcess(None, 3, tmp_path / "server.log", start_timeout_s=timeout_s)
    try:
        return server, server.launch(_child(body), dict(os.environ, PYTHONUNBUFFERED="1"))
    except BaseException:
        server.stop()
        raise


def test_the_address_comes_from_the_pipe_and_the_childs_output_goes_to_the_log_file(tmp_path):
    server, address = _launch(
        tmp_path,
        "print('listening on 9.9.9.9:1 (a log line, not the contract)')\n"
        'os.write(fd, b\'{"address": "127.0.0.1:5555"}\\n\'); os.close(fd)\n'
        "time.sleep(60)\n",
    )
    try:
        assert address == "127.0.0.1:5555" and server.address == address
        assert server.alive()
    finally:
        server.stop()
    assert not server.alive()
    assert "listening on 9.9.9.9:1" in (tmp_path / "server.log").read_text()


def test_the_childs_lines_for_the_operator_reach_this_processs_console_and_the_log(tmp_path, capfd):
    """A served cell's operator is asked on the console of the process that started the child (an env worker's
    stderr is the `rlhw train` console), not only in a log file nobody reads while the arm runs."""
    server, _ = _launch(
        tmp_path,
        "from rlhw.robot.teleop import send_operator_lines_to, tell_operator\n"
        "send_operator_lines_to(os.fdopen(int(sys.argv[sys.argv.index('--operator-fd') + 1]), 'w', buffering=1))\n"
        "print('a log line')\n"
        "tell_operator('[spacemouse] Is it done?')\n"
        'os.write(fd, b\'{"address": "127.0.0.1:5555"}\\n\'); os.close(fd)\n'
        "time.sleep(60)\n",
    )
    server.stop()  # the child's end of the pipe closes: every line it wrote has been echoed
    err = capfd.readouterr().err
    assert "env 3 operator: [spacemouse] Is it done?" in err and "a log line" not in err
    assert "env 3 operator: [spacemouse] Is it done?" in (tmp_path / "server.log").read_text()


def test_a_child_that_dies_before_reporting_fails_at_once_with_its_exit_code_and_last_output(tmp_path):
    with pytest.raises(EnvServerError) as e:
        _launch(tmp_path, "print('no arm at 172.16.0.2'); sys.exit(3)\n", timeout_s=60.0)
    # The exit is seen when it happens: the error is not the 60 s start timeout.
    assert "env server for robot 3 exited with code 3 before serving" in str(e.value)
    assert "no arm at 172.16.0.2" in str(e.value)


def test_a_child_that_never_reports_is_stopped_after_the_start_timeout_naming_the_setting(tmp_path):
    server = EnvServerProcess(None, 0, tmp_path / "server.log", start_timeout_s=0.5)
    with pytest.raises(EnvServerError) as e:
        server.launch(_child("print('connecting to the arm...')\ntime.sleep(60)\n"), dict(os.environ))
    assert "did not report its address within 0.5s (train.env_start_timeout_s)" in str(e.value)
    assert "last output:" in str(e.value)  # what it printed by then (Python may not have started yet)
    assert not server.alive()  # stopped, not left running


def test_a_report_that_is_not_the_json_line_is_refused_saying_what_was_expected_and_the_child_is_stopped(tmp_path):
    server = EnvServerProcess(None, 0, tmp_path / "server.log", start_timeout_s=60.0)
    with pytest.raises(EnvServerError) as e:
        server.launch(_child("os.write(fd, b'listening on 127.0.0.1:5555\\n'); time.sleep(60)\n"), dict(os.environ))
    assert "expected one JSON line" in str(e.value) and "listening on 127.0.0.1:5555" in str(e.value)
    assert not server.alive()


def test_serve_env_reports_its_address_as_one_json_line_and_closes_the_pipe():
    from rlhw.cli.serve_env import report_address

    read_fd, write_fd = os.pipe()
    report_address(write_fd, "127.0.0.1:4242")
    with os.fdopen(read_fd, "rb") as r:
        assert r.read() == b'{"address": "127.0.0.1:4242"}\n'  # EOF after the line: the write end is closed


def test_serve_env_refuses_an_address_fd_that_is_not_open_before_touching_hardware():
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    os.close(write_fd)
    proc = subprocess.run(
        [sys.executable, "-m", "rlhw.cli.serve_env", "configs/sim_reach.yaml", "--address-fd", str(write_fd)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert proc.returncode == 2, proc.stderr
    assert "--address-fd" in proc.stderr and "not an open file descriptor" in proc.stderr


def test_a_closed_address_fd_is_a_config_error_naming_the_option_before_any_env_starts(capsys):
    from rlhw.cli.serve_env import main

    closed = os.sysconf("SC_OPEN_MAX") - 1  # descriptors are handed out lowest first: the top one is not open
    config = str(ROOT / "configs" / "sim_reach.yaml")
    assert main([config, "--address-fd", str(closed), "--env", "no.such.module:factory"]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and "--address-fd" in err and "no.such.module" not in err


def test_a_closed_operator_fd_is_a_config_error_naming_the_option_before_any_env_starts(capsys):
    from rlhw.cli.serve_env import main

    closed = os.sysconf("SC_OPEN_MAX") - 1
    config = str(ROOT / "configs" / "sim_reach.yaml")
    assert main([config, "--operator-fd", str(closed), "--env", "no.such.module:factory"]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and "--operator-fd" in err and "no.such.module" not in err


def test_the_real_env_server_takes_its_nodes_robot_loop_isolation_and_reports_what_took_effect(tmp_path, monkeypatch):
    from rlhw.config import load_config_dict

    cpu = max(os.sched_getaffinity(0))
    config = load_config_dict(
        {
            "cluster": {
                "num_nodes": 1,
                "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
                "node_groups": [
                    {
                        "label": "robot",
                        "node_ranks": 0,
                        "env_configs": [{"node_ranks": 0, "loop_cpus": str(cpu), "loop_priority": {"nice": 4}}],
                    }
                ],
            },
            "env": {"sim": "mock"},
        }
    )
    monkeypatch.setenv("RLHW_NODE_RANK", "0")
    server = EnvServerProcess(config, 0, tmp_path / "server.log", start_timeout_s=90.0)
    try:
        server.start()
        assert server.loop_isolation == {"affinity": [cpu], "policy": "SCHED_OTHER", "nice": 4}
        pid = server.proc.pid
        assert os.sched_getaffinity(pid) == {cpu}  # read back from the child process itself, not its report
        assert int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16]) == 4  # its nice value
    finally:
        server.stop()


@pytest.mark.parametrize("node", ["1", "-1"])
def test_serve_env_refuses_an_isolate_node_the_cluster_does_not_have_naming_the_flag_and_the_range(node):
    # a subprocess: isolation is applied to the calling thread, and pytest's own must stay as it is
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = os.path.join(root, "configs/sim_reach.yaml")
    out = subprocess.run(
        [sys.executable, "-m", "rlhw.cli.main", "serve-env", config, "--port", "0", "--isolate-node", node],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert out.returncode != 0
    assert "--isolate-node" in out.stderr and "must be a node rank of the cluster (0..0)" in out.stderr
    assert f"got {node}" in out.stderr
