"""Start `rlhw serve-env` as a child process and learn where it listens from a dedicated pipe.

The child is given ``--address-fd FD`` (the write end of a pipe it inherits) and writes one JSON line
``{"address": "HOST:PORT"}`` there once it listens; where to connect never depends on its log text. The
wait is bounded, and each way the child can fail to report raises its own error class, so that callers
(the RL pipeline's env worker, the smoke test) word their messages without reading ours:

- `ServerExited`: the child exited first (``code``);
- `AddressPipeClosed`: the child closed the pipe without reporting, and lives on;
- `AddressTimeout`: the child stayed silent until the deadline;
- `BadAddressReport`: the child wrote something that is not the report.

Each caller keeps its own policy: where the output goes, the timeout, a die-with-parent hook, how to stop.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from dataclasses import dataclass

from rlhw.errors import RlhwError


class AddressNotReported(RlhwError):
    """The child did not report an address; ``str()`` is a phrase to follow the child's name."""


class ServerExited(AddressNotReported):
    def __init__(self, code: int):
        super().__init__(f"exited with code {code} before reporting its address")
        self.code = code


class AddressPipeClosed(AddressNotReported):
    def __init__(self):
        super().__init__("closed its address pipe without reporting an address")


class AddressTimeout(AddressNotReported):
    def __init__(self, timeout_s: float):
        super().__init__(f"did not report its address within {timeout_s:g}s")
        self.timeout_s = timeout_s


class BadAddressReport(AddressNotReported):
    """The report is not one JSON line with a non-empty text ``address``."""


def spawn(cmd: list[str], pass_fds: tuple[int, ...] = (), **popen_kwargs) -> tuple[subprocess.Popen, int]:
    """Start ``cmd --address-fd FD`` with ``popen_kwargs`` (``pass_fds``: other descriptors ``cmd`` names); (the
    child, the read end of its address pipe).

    The caller owns the read end (close it after `await_address`)."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen([*cmd, "--address-fd", str(write_fd)], pass_fds=(write_fd, *pass_fds), **popen_kwargs)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)  # the child holds the only write end: EOF here means it closed it, or died
    return proc, read_fd


@dataclass(frozen=True)
class ServerReport:
    """What the child reports once it serves: where it listens, and the robot-loop isolation that took effect
    in it (``--isolate-node``; None when it was not asked to isolate itself)."""

    address: str
    loop_isolation: dict | None = None


def await_address(proc: subprocess.Popen, fd: int, timeout_s: float) -> str:
    """The address the child reports on ``fd`` within ``timeout_s``; an `AddressNotReported` otherwise."""
    return await_report(proc, fd, timeout_s).address


def await_report(proc: subprocess.Popen, fd: int, timeout_s: float) -> ServerReport:
    """The child's report on ``fd`` within ``timeout_s``; an `AddressNotReported` otherwise.

    Leaves the child running in every case: stopping it is the caller's policy."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AddressTimeout(timeout_s)
        # Wake up at least twice a second: a grandchild holding the pipe open would hide the child's death.
        readable, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        chunk = os.read(fd, 4096) if readable else None
        if chunk == b"" or (chunk is None and proc.poll() is not None):
            raise _silent_end(proc) from None
        data += chunk or b""
    return parse_report(data.split(b"\n", 1)[0])


def _silent_end(proc: subprocess.Popen) -> AddressNotReported:
    """Why the pipe ended without a report: the child's exit (given 2 s to show), or a closed pipe."""
    try:
        return ServerExited(proc.wait(2.0))
    except subprocess.TimeoutExpired:
        return AddressPipeClosed()


def parse_report(line: bytes) -> ServerReport:
    """The child's one-line JSON report."""
    try:
        report = json.loads(line)
        address, isolation = report["address"], report.get("loop_isolation")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BadAddressReport(
            f'reported {line[:200]!r} on its address pipe; expected one JSON line {{"address": "HOST:PORT"}}'
        ) from None
    if not isinstance(address, str) or not address:
        raise BadAddressReport(f"reported an empty or non-text address {address!r}")
    if isolation is not None and not isinstance(isolation, dict):
        raise BadAddressReport(f"reported a loop_isolation that is not a record: {isolation!r}")
    return ServerReport(address, isolation)
