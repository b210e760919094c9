"""Benchmark: the MuJoCo backend at 10 Hz control, side by side with a bare ``mj_step`` loop.

One run measures, interleaved block by block so machine noise hits every variant alike:

- ``bare mj_step``: the same model, the same physics substeps per control step (50 x 2 ms at
  10 Hz), replaying the exact joint targets the env run produced, so the physics work is identical;
- ``arm loop``: MujocoArm alone (state -> command_pose -> advance), i.e. the driver's overhead;
- ``RobotEnv proprio``: the full env (make_env with env.sim=mujoco, task reach): safety layer, task,
  observation dict, info;
- ``RobotEnv + 1 camera``: the same with one 128x128 offscreen-rendered camera;
- memory per simulated arm: RSS growth for N more connected arms sharing one model.

Times are CPU seconds of this process (``time.process_time``), so "steps/s per core" does not
depend on what else the machine runs; wall-clock figures are printed beside them. The overhead
ratio is env time / bare time - 1 (goal: <= 20% proprio-only).

    .venv/bin/python tools/bench_mujoco.py            # full run (about a minute on 2 busy cores)
    .venv/bin/python tools/bench_mujoco.py --quick    # a smoke run
"""

from __future__ import annotations

import os

# One BLAS thread: per-core figures, and no idle BLAS threads spinning on the CPU time we measure.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import drivers.mujoco  # noqa: E402,F401  (picks the GL backend before mujoco is imported)

# isort: split
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from drivers.mujoco import (  # noqa: E402
    MujocoArm,
    MujocoCamera,
    _gl,  # noqa: E402
)
from rlhw.config import load_config  # noqa: E402
from rlhw.robot import make_env  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "sim_reach.yaml")
ENDLESS = ["env.sim=mujoco", "env.max_episode_steps=1000000", "env.reach.terminate_on_success=false"]
RECORD_STEPS = 200  # env steps recorded by --bare-steps-only


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Clock:
    """CPU and wall time of one block."""

    def __enter__(self):
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.perf_counter() - self.wall0


def snapshot(d: mujoco.MjData) -> dict:
    return {k: getattr(d, k).copy() for k in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart")} | {"time": d.time}


def restore(d: mujoco.MjData, snap: dict) -> None:
    for k, v in snap.items():
        if k == "time":
            d.time = v
        else:
            getattr(d, k)[:] = v


def env_block(env, steps: int, rng, record: list | None):
    """``steps`` env steps with random actions (the safety layer keeps them in the workspace)."""
    action_dim = env.spec.action.shape[0]
    actions = rng.uniform(-1, 1, size=(steps, action_dim)).astype(np.float32)
    timings = []
    data = env.arm.data
    per_step = []
    tick = time.thread_time_ns
    with Clock() as c:
        for a in actions:
            t0 = tick()
            step = env.step(a)
            per_step.append(tick() - t0)
            timings.append(step.timing)
            if record is not None:
                record.append(data.ctrl.copy())
    c.per_step = per_step
    return c, timings


def python_only_block(env, steps: int, rng):
    """Env steps with the physics skipped (simulated time still advances, faults still checked):
    the per-step Python cost of env + safety + task + driver, free of physics' cache disruption."""
    arm = env.arm

    def no_physics(dt: float) -> None:
        arm.data.time += dt
        arm._check_faults()

    arm.advance = no_physics
    try:
        return env_block(env, steps, rng, None)[0]
    finally:
        del arm.advance


def bare_block(model, start: dict, ctrls: list, nstep: int):
    d = mujoco.MjData(model)
    restore(d, start)
    mujoco.mj_forward(model, d)
    per_step = []
    tick = time.thread_time_ns
    with Clock() as c:
        for ctrl in ctrls:
            t0 = tick()
            d.ctrl[:] = ctrl
            mujoco.mj_step(model, d, nstep)
            per_step.append(tick() - t0)
    c.per_step = per_step
    return c


def arm_block(arm: MujocoArm, steps: int, rng, period: float, record: list):
    """The driver alone: read state, command a nearby pose, advance; joint targets recorded."""
    low, high = np.array([0.3, -0.25, 0.15]), np.array([0.65, 0.25, 0.55])
    noise = rng.uniform(-0.03, 0.03, size=(steps, 3))
    data = arm.data
    per_step = []
    tick = time.thread_time_ns
    with Clock() as c:
        for dx in noise:
            t0 = tick()
            st = arm.state()
            arm.command_pose(st.pose.with_position(np.clip(st.ee_position + dx, low, high)))
            arm.advance(period)
            per_step.append(tick() - t0)
            record.append(data.ctrl.copy())
    c.per_step = per_step
    return c


def memory_per_arm(n: int, n_cameras: int) -> dict[str, float]:
    """RSS growth (MiB) per simulated arm, per proprio RobotEnv and per 128x128 camera, model loaded once.

    Each new arm is stepped for a second of simulated time first, so its MjData pages are touched
    (a freshly allocated but unused arena would not show up in RSS).
    """
    first = MujocoArm(name="mem0")
    first.connect()
    first.advance(1.0)
    before = rss_bytes()
    arms = [MujocoArm(name=f"mem{i + 1}") for i in range(n)]
    for a in arms:
        a.connect()
        a.advance(1.0)
    per_arm = (rss_bytes() - before) / n
    cfg = load_config(CONFIG, ENDLESS)
    make_env(cfg, index=999).close()
    before = rss_bytes()
    envs = [make_env(cfg, index=i) for i in range(n)]
    for e in envs:
        e.reset()
        e.step(np.zeros(e.spec.action.shape, np.float32))
    per_env = (rss_bytes() - before) / n
    for e in envs:
        e.close()
    # Cameras of one model and image size share one GL context: the first costs the context, the
    # rest (one per other arm here) only their frames.
    before = rss_bytes()
    cams = [MujocoCamera("front", arms[i % len(arms)]) for i in range(n_cameras + 1)]
    cams[0].open()
    cams[0].latest()
    first_camera = rss_bytes() - before
    before = rss_bytes()
    for c in cams[1:]:
        c.open()
        c.latest()
    per_camera = (rss_bytes() - before) / max(n_cameras, 1)
    for c in cams:
        c.close()
    return {
        "arm": per_arm / 2**20,
        "env": per_env / 2**20,
        "first_camera": first_camera / 2**20,
        "camera": per_camera / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="control steps per block (default 300 = 30 s simulated)")
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions; medians are reported (default 5)")
    p.add_argument("--camera-steps", type=int, default=40, help="steps per block with one camera (default 40)")
    p.add_argument("--arms", type=int, default=16, help="arms (and envs) created for the memory figures (default 16)")
    p.add_argument("--cameras", type=int, default=3, help="cameras opened for the memory figure (default 3)")
    p.add_argument("--quick", action="store_true", help="tiny run to check the benchmark works")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument(
        "--env-steps-only",
        type=int,
        metavar="N",
        help="only build the proprio env, reset it and run N random steps (for instruction "
        "counts under valgrind; see docs/sim.md)",
    )
    p.add_argument(
        "--bare-steps-only",
        type=int,
        metavar="N",
        help=f"the bare counterpart: run that env for {RECORD_STEPS} steps (the same in every run), "
        "then replay the joint targets of its first N steps with bare mj_step (N <= "
        f"{RECORD_STEPS}); the difference of two runs counts bare steps only",
    )
    args = p.parse_args(argv)
    if args.env_steps_only is not None:
        env = make_env(load_config(CONFIG, ENDLESS))
        env.reset(seed=0)
        env_block(env, args.env_steps_only, np.random.default_rng(0), None)
        env.close()
        return 0
    if args.bare_steps_only is not None:
        if not 0 <= args.bare_steps_only <= RECORD_STEPS:
            p.error(f"--bare-steps-only: expected 0..{RECORD_STEPS}, got {args.bare_steps_only}")
        env = make_env(load_config(CONFIG, ENDLESS))
        env.reset(seed=0)
        start, ctrls = snapshot(env.arm.data), []
        env_block(env, RECORD_STEPS, np.random.default_rng(0), ctrls)
        nstep = int(round(env.period / env.arm.model.opt.timestep))
        bare_block(env.arm.model, start, ctrls[: args.bare_steps_only], nstep)
        env.close()
        return 0
    if args.quick:
        args.steps, args.reps, args.camera_steps, args.arms, args.cameras = 50, 2, 5, 4, 1

    # Memory first, on a fresh heap (later, freed blocks would be reused and hide the growth).
    mem = memory_per_arm(args.arms, args.cameras)
    rng = np.random.default_rng(0)
    cfg = load_config(CONFIG, ENDLESS)
    env = make_env(cfg)
    env.reset(seed=0)
    cam_env = make_env(
        load_config(CONFIG, ENDLESS + ["env.images=true", "env.image_size=[128,128]", "env.sim_cameras=[front]"])
    )
    cam_env.reset(seed=0)
    arm = MujocoArm(name="bench-arm")
    arm.connect()
    period = env.period
    nstep = int(round(period / env.arm.model.opt.timestep))

    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in ("bare", "bare_arm", "arm", "env", "python", "camera")}
    steps_ns: dict[str, list[int]] = {k: [] for k in ("bare", "bare_arm", "arm", "env")}
    env_timings: list[dict] = []
    # Warm up every path once (first renders upload meshes to the GL context).
    env_block(env, 10, rng, None)
    arm_block(arm, 10, rng, period, [])
    env_block(cam_env, 2, rng, None)
    for _ in range(args.reps):
        start = snapshot(env.arm.data)
        ctrls: list = []
        c_env, timings = env_block(env, args.steps, rng, ctrls)
        env_timings += timings
        c_bare = bare_block(env.arm.model, start, ctrls, nstep)
        arm_start, arm_ctrls = snapshot(arm.data), []
        c_arm = arm_block(arm, args.steps, rng, period, arm_ctrls)
        c_bare_arm = bare_block(arm.model, arm_start, arm_ctrls, nstep)
        rows["bare_arm"].append((c_bare_arm.cpu / args.steps, c_bare_arm.wall / args.steps))
        for key, clock in (("env", c_env), ("bare", c_bare), ("arm", c_arm), ("bare_arm", c_bare_arm)):
            steps_ns[key] += clock.per_step
        c_cam, _ = env_block(cam_env, args.camera_steps, rng, None)
        c_py = python_only_block(env, args.steps, rng)
        rows["python"].append((c_py.cpu / args.steps, c_py.wall / args.steps))
        rows["env"].append((c_env.cpu / args.steps, c_env.wall / args.steps))
        rows["bare"].append((c_bare.cpu / args.steps, c_bare.wall / args.steps))
        rows["arm"].append((c_arm.cpu / args.steps, c_arm.wall / args.steps))
        rows["camera"].append((c_cam.cpu / args.camera_steps, c_cam.wall / args.camera_steps))
    env.close()
    cam_env.close()

    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in rows.items()}
    ratios = {
        k: statistics.median(rc / rb for (rc, _), (rb, _) in zip(rows[k], rows["bare"])) - 1 for k in ("env", "camera")
    }
    # The driver-only loop runs its own trajectory: compare it with the replay of that trajectory.
    ratios["arm"] = statistics.median(ra / rb for (ra, _), (rb, _) in zip(rows["arm"], rows["bare_arm"])) - 1
    ratios["python"] = statistics.median(rp / rb for (rp, _), (rb, _) in zip(rows["python"], rows["bare"]))
    # Per-step quantiles: the lower ones are steps no other process disturbed (no preemption, warm
    # caches), i.e. what a quiet core would show. Each env step is compared with the replay of the
    # same step's physics.
    quiet = {q: {k: float(np.percentile(v, q)) for k, v in steps_ns.items()} for q in (10, 50)}
    quiet_ratio = {
        q: {"env": quiet[q]["env"] / quiet[q]["bare"] - 1, "arm": quiet[q]["arm"] / quiet[q]["bare_arm"] - 1}
        for q in quiet
    }
    # Best block of each: the least disturbed by other processes (caches, preemption).
    best = {k: min(c for c, _ in v) for k, v in rows.items()}
    phase = {k: statistics.median(t.get(k, 0.0) for t in env_timings) for k in ("command", "wait", "observe", "total")}

    labels = {
        "bare": "bare mj_step (same ctrl, 50 substeps)",
        "arm": "MujocoArm loop (state+command+advance)",
        "env": "RobotEnv reach, proprio-only",
        "camera": "RobotEnv reach + 1 camera 128x128",
        "python": "RobotEnv proprio, physics skipped",
    }
    print(
        f"MuJoCo backend at {1 / period:g} Hz control, {nstep} x {env.arm.model.opt.timestep * 1e3:g} ms substeps; "
        f"medians of {args.reps} interleaved blocks of {args.steps} steps ({args.camera_steps} with a camera)"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; mujoco {mujoco.__version__}; {_gl.CHOICE}"
    )
    print(
        f"{'variant':42s} {'ms/step CPU':>11s} {'steps/s/core':>12s} {'ms/step wall':>12s} {'overhead':>9s} {'best-block':>10s}"
    )
    for k in ("bare", "arm", "env", "camera", "python"):
        cpu, wall = med[k]
        over = "" if k == "bare" else f"{ratios[k] * 100:+.1f}%"
        base = best["bare_arm"] if k == "arm" else best["bare"]
        over_best = "" if k == "bare" else f"{(best[k] / base - (0 if k == 'python' else 1)) * 100:+.1f}%"
        print(f"{labels[k]:42s} {cpu * 1e3:11.3f} {1 / cpu:12.1f} {wall * 1e3:12.3f} {over:>9s} {over_best:>10s}")
    print(
        f"RobotEnv step phases (median wall ms): command {phase['command'] * 1e3:.3f}, "
        f"physics (wait) {phase['wait'] * 1e3:.3f}, observe {phase['observe'] * 1e3:.3f}, total {phase['total'] * 1e3:.3f}"
    )
    print(
        f"memory (RSS growth, model shared): {mem['arm']:.2f} MiB per MujocoArm, {mem['env']:.2f} MiB per proprio "
        f"RobotEnv (N={args.arms}); 128x128 cameras: {mem['first_camera']:.1f} MiB for the first (GL context), "
        f"{mem['camera']:.2f} MiB per further one (N={args.cameras}, shared context); "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    for q in (10, 50):
        print(
            f"per-step CPU p{q}: bare {quiet[q]['bare'] / 1e6:.3f} ms, RobotEnv {quiet[q]['env'] / 1e6:.3f} ms "
            f"({quiet_ratio[q]['env'] * 100:+.1f}%); driver loop {quiet[q]['arm'] / 1e6:.3f} ms vs its bare replay "
            f"{quiet[q]['bare_arm'] / 1e6:.3f} ms ({quiet_ratio[q]['arm'] * 100:+.1f}%)"
        )
    verdict = "meets" if ratios["env"] <= 0.20 else "misses"
    print(
        f"proprio-only env overhead {ratios['env'] * 100:.1f}% {verdict} the 20% goal "
        f"(driver alone: {ratios['arm'] * 100:.1f}%; Python work per step with warm caches, physics skipped: "
        f"{ratios['python'] * 100:.1f}% of a bare step)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "ms_per_step_cpu": {k: v[0] * 1e3 for k, v in med.items()},
                    "ms_per_step_wall": {k: v[1] * 1e3 for k, v in med.items()},
                    "overhead": ratios,
                    "phases_ms": {k: v * 1e3 for k, v in phase.items()},
                    "per_step_quantiles_ms": {f"p{q}": {k: v / 1e6 for k, v in quiet[q].items()} for q in quiet},
                    "per_step_overhead": {f"p{q}": quiet_ratio[q] for q in quiet},
                    "rss_mib": mem,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
