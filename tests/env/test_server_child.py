"""The one way to start `rlhw serve-env` as a child and learn its address: one JSON line on an inherited pipe.

Each way the child can fail to report has its own error class, so that the RL pipeline and the smoke test word
their messages without reading ours. The children are tiny Python scripts that take ``--address-fd FD`` like
serve-env does; the pipeline's wording is in tests/rl/test_env_server_child.py, the smoke test's and the real
server in tests/smoke/test_mock.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlhw.env import server_child

_FD = "fd = int(sys.argv[sys.argv.index('--address-fd') + 1])\n"


def _await(body: str, timeout_s: float = 60.0):
    proc, fd = server_child.spawn(
        [sys.executable, "-c", "import os, sys, time\n" + _FD + body], stdout=subprocess.DEVNULL
    )
    try:
        return proc, server_child.await_address(proc, fd, timeout_s)
    finally:
        os.close(fd)
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def test_the_address_is_the_one_json_line_on_the_pipe():
    _, address = _await('os.write(fd, b\'{"address": "127.0.0.1:5555"}\\n\')\n')
    assert address == "127.0.0.1:5555"


def test_a_child_that_closes_the_pipe_and_lives_on_is_told_apart_from_one_that_exits():
    with pytest.raises(server_child.AddressPipeClosed) as closed:
        _await("os.close(fd); time.sleep(60)\n")
    assert "closed its address pipe without reporting an address" in str(closed.value)
    with pytest.raises(server_child.ServerExited) as exited:
        _await("sys.exit(4)\n")
    assert exited.value.code == 4 and "exited with code 4" in str(exited.value)


def test_a_silent_child_times_out_and_an_empty_address_is_refused():
    with pytest.raises(server_child.AddressTimeout) as silent:
        _await("time.sleep(60)\n", timeout_s=0.3)
    assert silent.value.timeout_s == 0.3
    with pytest.raises(server_child.BadAddressReport, match="empty or non-text address ''"):
        _await('os.write(fd, b\'{"address": ""}\\n\'); time.sleep(60)\n')
