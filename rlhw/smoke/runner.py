"""Run a smoke test: each check on the node that owns the hardware.

One-machine configs (``num_nodes: 1``) run every check in this process, without Ray. Larger
clusters connect to the running Ray cluster (``--ray-address``, default ``auto``), find each rlhw
node by its ``rlhw.node_rank`` label (rlhw.runtime.nodes), and run that node's checks in one Ray
task pinned to it (node affinity, not soft) and started with the node's env vars, the way workers
are. A node that is missing, or whose task does not answer within its time budget, shows FAIL
rows for every one of its checks; nothing waits forever.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from rlhw.config.root import Config
from rlhw.smoke.bounded import TargetRun, failed, skipped
from rlhw.smoke.options import SmokeOptions
from rlhw.smoke.results import CheckResult, SmokeReport
from rlhw.smoke.targets import RobotTarget, Targets, _with_images, select_targets


def run_smoke_test(config: Config, options: SmokeOptions, config_name: str = "") -> SmokeReport:
    """Select the targets of ``config`` and check them; returns the report (never raises for a
    failed check, only for a config/usage error)."""
    t0 = time.perf_counter()
    targets = select_targets(config, options)
    report = SmokeReport(config=config_name or (options.config_path or "<config>"))
    remote = config.cluster.num_nodes > 1 or options.ray_address is not None
    if options.local_node is not None:
        n = options.local_node
        if n >= config.cluster.num_nodes:
            from rlhw.errors import ConfigError

            raise ConfigError(
                "--local-node", f"node rank {n} is outside the cluster's 0-{config.cluster.num_nodes - 1}"
            )
        report.mode = f"local node {n}"
        report.notes.append(f"--local-node {n}: only node {n}'s checks, run here without Ray")
        targets = targets.on_node(n)
        remote = False
        if targets.empty():
            report.notes.append("nothing to check on this node with these filters")
        else:
            report.extend(run_node(config, n, targets, options))
    elif targets.empty():
        report.notes.append("nothing to check with these filters")
    elif not remote:
        report.mode = "local"
        report.extend(run_node(config, 0, targets.on_node(0), options))
        others = [n for n in targets.node_ranks() if n != 0]
        for n in others:  # a one-node config has none; kept for configs edited by hand
            report.extend(_unreached(targets.on_node(n), n, "node rank outside this one-machine setup"))
    else:
        report.mode = "ray"
        report.extend(_run_on_ray(config, targets, options, report))
    report.duration_s = time.perf_counter() - t0
    return report


# -- one node ------------------------------------------------------------------------------------


def run_node(
    config: Config, node_rank: int, targets: Targets, options: SmokeOptions, in_worker_env: bool = False
) -> list[CheckResult]:
    """Every check of one node, in this process (locally, or inside the Ray task pinned to it)."""
    from rlhw.smoke.node_checks import check_node

    host = socket.gethostname()
    rows: list[CheckResult] = []
    timeout = options.timeout_s
    for n in targets.nodes:
        run = TargetRun(n, f"node {n}", timeout)
        check_node(run, config, n, options, in_worker_env=in_worker_env)
        run.close()
        rows += run.rows
    for robot in targets.robots:
        rows += _check_robot(config, robot, options)
    for cam in targets.cameras:
        rows += _check_standalone_camera(config, cam, options)
    for server in targets.env_servers:
        from rlhw.smoke.env_server import check_env_server

        run = TargetRun(server.node_rank, server.name, timeout)
        check_env_server(run, server, options, config)
        run.close()
        rows += run.rows
    for r in rows:
        r.measured.setdefault("host", host)
    return rows


def _check_robot(config: Config, robot: RobotTarget, options: SmokeOptions) -> list[CheckResult]:
    if robot.simulated:
        return _check_simulated_robot(config, robot, options)
    rows: list[CheckResult] = []
    if options.wants("robots"):
        rows += _check_real_arm(config, robot, options)
    for cam in robot.cameras:
        rows += _check_standalone_camera(config, cam, options)
    return rows


def _check_simulated_robot(config: Config, robot: RobotTarget, options: SmokeOptions) -> list[CheckResult]:
    """The simulated arm, then its cameras, which render that arm's scene (so it stays connected
    for them, even when only cameras were asked for)."""
    from rlhw.robot.factory import make_env
    from rlhw.smoke.arm_checks import check_arm, close_arm
    from rlhw.smoke.camera_checks import check_camera

    timeout = options.timeout_s
    run = TargetRun(robot.node_rank, robot.name, timeout)
    rows: list[CheckResult] = []
    # make_env builds the simulated arm and the cameras that render it (mock faults included)
    built: dict[str, Any] = {}

    def arm_factory():
        env = make_env(_with_images(config), robot.rank, connect=False)
        built["env"] = env
        return env.arm

    arm = None
    if options.wants("robots"):
        arm = check_arm(run, arm_factory, robot, options, config.env, keep_open=bool(robot.cameras))
        rows += run.rows
    else:  # cameras only: the simulated arm is still needed, as the scene they render
        arm = _connect_scene_arm(run, arm_factory, timeout)
    try:
        env = built.get("env")
        for cam in robot.cameras:
            crun = TargetRun(cam.node_rank, cam.name, timeout)
            if arm is None or env is None:
                crun.note(
                    "open",
                    skipped(f"skipped: {run.blocked or run.hung or 'its simulated arm did not connect'}"),
                    required=True,
                )
            else:
                check_camera(crun, lambda c=cam: env.cameras[c.serial], cam, options, config.env, advance=arm.advance)
            rows += crun.rows
    finally:
        close_arm(arm, timeout)
        run.close()
    return rows


def _connect_scene_arm(run: TargetRun, arm_factory, timeout: float):
    """Connect the simulated arm without checking it (bounded, on the target's thread); None, with
    ``run.blocked`` saying why, when it does not connect."""
    from rlhw.smoke.arm_checks import MotionGuard

    def connect():
        guard = MotionGuard(arm_factory())
        guard.connect(timeout_s=timeout)
        return guard

    try:
        return run.call(connect, timeout + 3.0)
    except Exception as e:
        run.blocked = f"its simulated arm did not connect: {' '.join(str(e).split())[:200]}"
        return None


def _check_real_arm(config: Config, robot: RobotTarget, options: SmokeOptions) -> list[CheckResult]:
    from rlhw.robot.registry import arm_class
    from rlhw.smoke.arm_checks import check_arm

    run = TargetRun(robot.node_rank, robot.name, options.timeout_s)
    entry = robot.entry

    def arm_factory():
        cls = arm_class(robot.driver)
        # each driver call is bounded by the env's driver timeout, stretched towards --timeout so
        # that a slow (loaded) host is not mistaken for a dead arm; the check's own bound stays --timeout
        call_s = max(1.5, config.env.driver_timeout_s, min(options.timeout_s / 2, 5.0))
        return cls(robot_ip=entry.robot_ip, gripper=entry.gripper, controller=entry.controller, timeout_s=call_s)

    check_arm(run, arm_factory, robot, options, config.env)
    run.close()
    return run.rows


def _check_standalone_camera(config: Config, cam, options: SmokeOptions) -> list[CheckResult]:
    from rlhw.robot.factory import SIMULATORS
    from rlhw.robot.registry import camera_class
    from rlhw.smoke.camera_checks import check_camera

    run = TargetRun(cam.node_rank, cam.name, options.timeout_s)

    def factory():
        from rlhw.robot.build import CameraBuild

        build = CameraBuild(
            driver=cam.driver,
            name=cam.serial,
            index=0,
            seed=config.env.seed,
            env=config.env,
            hardware=cam.hardware,
            playback_file=cam.playback_file,
        )
        return camera_class(cam.driver).from_plan(build)

    if cam.driver in SIMULATORS:
        run.note("open", skipped("a simulated camera renders its arm; it is checked with its robot"), required=False)
    else:
        check_camera(run, factory, cam, options, config.env)
    return run.rows


# -- Ray -----------------------------------------------------------------------------------------


def _unreached(targets: Targets, node_rank: int, why: str, hint: str = "") -> list[CheckResult]:
    """FAIL rows standing in for every check a node could not run."""
    rows = []
    names = [f"node {n}" for n in targets.nodes] + [r.name for r in targets.robots]
    names += [c.name for r in targets.robots for c in r.cameras] + [c.name for c in targets.cameras]
    names += [e.name for e in targets.env_servers]
    for name in names:
        out = failed(why, "unreached", hint=hint or None)
        rows.append(CheckResult(node_rank, name, "reached", out.status, out.value, out.detail, out.hint, True))
    return rows


def _node_budget(targets: Targets, options: SmokeOptions) -> float:
    """Upper bound of one node's checks (each bounded by its own timeout) plus slack."""
    per_robot = 8 * options.timeout_s + options.window_s + (6 * options.timeout_s if options.motion_allowed else 0)
    per_camera = 6 * options.timeout_s + options.window_s
    per_server = options.server_start_s + 10 * options.timeout_s + 30
    n_cams = sum(len(r.cameras) for r in targets.robots) + len(targets.cameras)
    return (
        30
        + 3 * options.timeout_s * len(targets.nodes)
        + per_robot * len(targets.robots)
        + per_camera * n_cams
        + per_server * len(targets.env_servers)
    )


def _node_job(config: Config, node_rank: int, targets: Targets, options: SmokeOptions) -> list[dict]:
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    rows = run_node(config, node_rank, targets, options, in_worker_env=True)
    for r in rows:
        r.measured.setdefault("ray_node_id", node_id)
    return [r.to_json() for r in rows]


def _run_on_ray(config: Config, targets: Targets, options: SmokeOptions, report: SmokeReport) -> list[CheckResult]:
    hint = (
        "start Ray on every node with its rank: `ray start --head --labels rlhw.node_rank=0` on the head, "
        "`ray start --address HEAD:6379 --labels rlhw.node_rank=N` on node N"
    )
    try:
        by_rank = _ray_nodes(config, options, report)
    except Exception as e:  # no cluster: every node's checks are unreached
        text = " ".join(str(e).split()) or type(e).__name__
        why = f"no Ray cluster at {options.ray_address or 'auto'}: {text[:300]}"
        return [row for n in targets.node_ranks() for row in _unreached(targets.on_node(n), n, why, hint)]
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    report.notes.append("ray nodes: " + ", ".join(f"rank {r} = {ip}" for r, (_, ip) in sorted(by_rank.items())))
    remote = ray.remote(num_cpus=0, max_retries=0)(_node_job)
    pending: dict[Any, tuple[int, Targets, float]] = {}
    rows: list[CheckResult] = []
    start = time.monotonic()
    for n in targets.node_ranks():
        sub = targets.on_node(n)
        node = by_rank.get(n)
        if node is None:
            rows += _unreached(sub, n, f"no alive Ray node is labelled rlhw.node_rank={n}", hint)
            continue
        env_vars = dict(config.cluster.node_env(n).env_vars)
        ref = remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node[0], soft=False),
            runtime_env={"env_vars": env_vars} if env_vars else None,
        ).remote(config, n, sub, options)
        pending[ref] = (n, sub, start + _node_budget(sub, options))
    while pending:
        deadline = min(d for _, _, d in pending.values())
        done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        for ref in done:
            n, sub, _ = pending.pop(ref)
            try:
                rows += [CheckResult.from_json(d) for d in ray.get(ref, timeout=10)]
            except Exception as e:
                rows += _unreached(sub, n, f"the checks on node {n} failed: {str(e).splitlines()[0]}")
        now = time.monotonic()
        for ref, (n, sub, d) in list(pending.items()):
            if now >= d and ref not in done:
                pending.pop(ref)
                ray.cancel(ref, force=True)
                rows += _unreached(sub, n, f"node {n} did not finish its checks within {d - start:.0f} s; cancelled")
    return rows


def _ray_nodes(config: Config, options: SmokeOptions, report: SmokeReport) -> dict[int, tuple[str, str]]:
    """node rank -> (Ray node id, ip), through the runtime's rank discovery (labels, or
    RLHW_NODE_RANK). When the cluster does not match the config (a node missing), the runtime
    refuses it as a whole; the smoke test still checks the nodes that are there, by label."""
    from rlhw.errors import ConfigError
    from rlhw.runtime.cluster import Cluster
    from rlhw.runtime.nodes import alive_nodes

    ray_init = {"log_to_driver": False, "logging_level": "ERROR"}
    try:
        cluster = Cluster(
            config,
            address=options.ray_address or "auto",
            probe_hardware=False,
            attach_timeout_s=max(30.0, 3 * options.timeout_s),
            ray_init=ray_init,
        )
    except ConfigError as e:
        report.notes.append(" ".join(str(e).split()))
        return {n.node_rank: (n.node_id, n.ip) for n in alive_nodes() if n.node_rank is not None}
    return {r: (cluster.node_id(r), cluster.node_ip(r)) for r in cluster.nodes}
