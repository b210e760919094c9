"""Checks of one node: its Python runs rlhw, its env vars reach workers, its accelerators match.

"Applied" env vars: on a Ray cluster the node's checks run in a task started with the node's env
vars the way rlhw starts workers (a Ray runtime_env), so the check reads them back from its own
environment. Run locally, the check starts the node's interpreter with the vars applied and reads
them back from that child. Either way a ``*_SOCKET_IFNAME`` variable (GLOO, NCCL) must also name
a network interface this node has, since a typo there hangs collectives much later.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from rlhw.config.root import Config
from rlhw.smoke.bounded import Outcome, TargetRun, failed, passed, skipped
from rlhw.smoke.options import SmokeOptions

_PROBE = "import json, os, sys, rlhw; print(json.dumps({'rlhw': rlhw.__version__, 'python': sys.version.split()[0], 'env': {k: os.environ.get(k) for k in sys.argv[1:]}}))"


def _interfaces() -> set[str]:
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


def check_node(
    run: TargetRun, config: Config, node_rank: int, options: SmokeOptions, in_worker_env: bool = False
) -> None:
    cluster = config.cluster
    node_env = cluster.node_env(node_rank)
    timeout = options.timeout_s
    probe_result: dict = {}
    run.run("python", lambda: _interpreter_check(node_env, timeout, probe_result))
    run.run("env_vars", lambda: _env_vars_check(node_env, probe_result, in_worker_env), needs_ok=False)
    run.run("accelerators", lambda: _accelerators_check(cluster, node_rank, timeout), needs_ok=False)


def _interpreter_check(node_env, timeout: float, probe_result: dict) -> Outcome:
    """The node's interpreter imports rlhw with the node's env vars applied; what it read back from
    its environment is left in ``probe_result`` for the env vars check."""
    import json

    configured = node_env.python_interpreter_path
    python = configured or sys.executable
    if not os.path.exists(python):
        return failed(
            f"python_interpreter_path {python} does not exist on this node",
            "missing",
            hint="create the venv on this node or fix python_interpreter_path in env_configs",
        )
    if not os.access(python, os.X_OK):
        return failed(f"{python} is not executable", "not executable", hint=f"chmod +x {python}")
    env = dict(os.environ)
    env.update(node_env.env_vars)
    try:
        out = subprocess.run(
            [python, "-c", _PROBE, *node_env.env_vars],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return failed(f"`{python} -c 'import rlhw'` did not finish within {timeout:g} s", "timeout")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return failed(
            f"{python} cannot import rlhw: {last}",
            "no rlhw",
            hint=f"install rlhw into that interpreter: {python} -m pip install -e <rlhw checkout>",
        )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    probe_result.update(data)
    source = "python_interpreter_path" if configured else "no python_interpreter_path configured: this interpreter"
    return passed(f"rlhw {data['rlhw']}, Python {data['python']}", f"{python} ({source})", python=python)


def _env_vars_check(node_env, probe_result: dict, in_worker_env: bool) -> Outcome:
    wanted = dict(node_env.env_vars)
    if not wanted:
        return skipped("no env_vars configured for this node")
    seen = dict(os.environ) if in_worker_env else (probe_result.get("env") or {})
    where = (
        "in this worker's environment (Ray runtime_env)"
        if in_worker_env
        else "in the node's interpreter started with them"
    )
    wrong = {k: seen.get(k) for k, v in wanted.items() if seen.get(k) != v}
    if wrong:
        listed = ", ".join(f"{k}={v!r} (want {wanted[k]!r})" for k, v in wrong.items())
        return failed(
            f"not applied {where}: {listed}",
            f"{len(wrong)} wrong",
            hint="the launcher did not pass env_vars: check the runtime's runtime_env / how Ray was started on this node",
        )
    ifaces = _interfaces()
    bad = [
        f"{k}={v}"
        for k, v in wanted.items()
        if k.endswith("SOCKET_IFNAME") and ifaces and not set(v.split(",")) <= ifaces
    ]
    if bad:
        return failed(
            f"{', '.join(bad)}: no such network interface here (have: {', '.join(sorted(ifaces))})",
            "bad interface",
            hint="set the *_SOCKET_IFNAME variables to an interface `ip link` lists on this node",
        )
    return passed(f"{len(wanted)} applied", ", ".join(f"{k}={v}" for k, v in wanted.items()) + f" ({where})")


def _accelerators_check(cluster, node_rank: int, timeout: float) -> Outcome:
    from rlhw.hardware.types.accelerator import Accelerator

    found = Accelerator.detect(timeout_s=min(timeout, 5.0))
    declared = cluster.declared_accelerators().get(node_rank)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"{found} detected" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
    if declared is None:
        return passed(f"{found}", f"{seen}; no accelerators_per_node declared for this node", detected=found)
    if declared != found:
        return failed(
            f"accelerators_per_node: {declared} but {seen}",
            f"{found} / {declared}",
            hint="check nvidia-smi and CUDA_VISIBLE_DEVICES on this node, or fix accelerators_per_node",
            detected=found,
            declared=declared,
        )
    return passed(f"{found} / {declared}", f"{seen}, as declared", detected=found, declared=declared)
