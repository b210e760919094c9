"""Benchmark: MuJoCo camera envs in process and behind `rlhw serve-env`, and what the render thread costs.

Every figure is measured in the same run as its baseline, in alternating repeats (median and range shown):

- ``steps/s``: configs/sim_insert.yaml with two 64 px cameras (wrist, front), random actions, steps of one
  episode after its reset (the reset not timed), stepped
  - ``in process``: `make_env` on this thread (the local runner's and the env worker's ``in_process``);
  - ``served``: a `rlhw serve-env` child (`EnvServerProcess`, as the pipeline serves an arm the placement
    gives, real or simulated) stepped by `RemoteEnv` from this process; ``served / in process`` is the ratio
    per repeat;
  and both again without cameras, so the cameras' share is visible;
- ``render``: ms per 64 px frame after the scene moved: ``direct``, a `mujoco.Renderer` used on the thread
  that made it (how cameras rendered before they had a render thread: correct only on that one thread), and
  ``render thread``, a `MujocoCamera` (drivers/mujoco/render.py: the context on its own thread, every frame
  handed to it). Their difference is the hand-off's cost.

The backend is ``MUJOCO_GL`` (egl or osmesa); ``--backends egl,osmesa`` runs the whole benchmark once per
backend, each in a fresh interpreter (MuJoCo reads MUJOCO_GL once, at import).

    PYTHONPATH=. nice -n 5 .venv/bin/python tools/bench_sim_cameras.py --backends egl,osmesa
    PYTHONPATH=. .venv/bin/python tools/bench_sim_cameras.py --quick     # a smoke run
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from drivers.mujoco import MujocoArm, MujocoCamera, _gl  # noqa: E402  (chooses the GL backend first)
from rlhw.config import load_config  # noqa: E402
from rlhw.env.client import RemoteEnv  # noqa: E402
from rlhw.env.server_process import EnvServerProcess  # noqa: E402
from rlhw.robot import make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/sim_insert.yaml"
TWO_CAMERAS = ["env.images=true", "env.sim_cameras=[wrist,front]", "env.image_size=[64,64]"]


def cpu_s(processes: list[psutil.Process]) -> float:
    """CPU seconds (user + system, every thread) the processes used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def step_rate(env, steps: int, seed: int, processes: list[psutil.Process]) -> tuple[float, float]:
    """(steps per second, CPU ms per step of ``processes``) over ``steps`` random steps after one reset (not
    timed); gym-style ``env``. CPU time does not depend on what else the machine runs; wall time does."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, (steps, *low.shape)).astype(np.float32)
    c0, t0 = cpu_s(processes), time.perf_counter()
    for a in actions:
        env.step(a)
    wall, cpu = time.perf_counter() - t0, cpu_s(processes) - c0
    return steps / wall, cpu / steps * 1e3


class InProcess:
    """`make_env` in this process, stepped on this thread (made once, as `Served`)."""

    def __init__(self, overrides: list[str]):
        from rlhw.robot.gym import GymRobotEnv

        self.env = GymRobotEnv(make_env(load_config(CONFIG, overrides)))
        self.processes = [psutil.Process()]

    def rate(self, steps: int, seed: int) -> tuple[float, float]:
        return step_rate(self.env, steps, seed, self.processes)

    def close(self) -> None:
        self.env.close()


class Served(InProcess):
    """One `rlhw serve-env` child and a `RemoteEnv` in this process on it; CPU time counts both processes."""

    def __init__(self, overrides: list[str], log: Path):
        # The client is silent while the in-process repeat runs (tens of seconds on a loaded machine): the
        # server's silence watchdog would stop the arm in between.
        config = load_config(CONFIG, [*overrides, "server.watchdog_s=600"])
        self.child = EnvServerProcess(config, 0, log_path=log)
        self.env = RemoteEnv(self.child.start(), reset_timeout_s=120.0, timeout_s=30.0)
        self.processes = [psutil.Process(), psutil.Process(self.child.proc.pid)]

    def close(self) -> None:
        self.env.close()
        self.child.stop()


def render_cost(rounds: int, size: int = 64, block: int = 10) -> dict[str, list[float]]:
    """Per 64 px frame after the scene moved: CPU ms (this process, all threads) and wall ms, for a
    `mujoco.Renderer` used directly on this thread and for a `MujocoCamera` (its render thread), in
    alternating blocks of ``block`` frames; and the bare hand-off, wall microseconds per empty job."""
    import mujoco

    arm = MujocoArm(name="bench", cube=True)
    arm.connect()
    camera = MujocoCamera("front", arm, width=size, height=size)
    camera.open()
    cam_id, option = arm.model.camera("front").id, mujoco.MjvOption()
    direct = mujoco.Renderer(arm.model, size, size)

    def draw_direct() -> None:
        direct.update_scene(arm.sync(cameras=True), camera=cam_id, scene_option=option)
        direct.render()

    me = [psutil.Process()]
    out: dict[str, list[float]] = {"direct cpu": [], "direct wall": [], "thread cpu": [], "thread wall": []}
    try:
        for _ in range(rounds):
            for name, draw in (("direct", draw_direct), ("thread", camera.latest)):
                c0, t0 = cpu_s(me), time.perf_counter()
                for _ in range(block):
                    arm.advance(0.02)  # the scene moves: the camera renders again (about 0.1 ms of physics)
                    draw()
                out[f"{name} wall"].append((time.perf_counter() - t0) / block * 1e3)
                out[f"{name} cpu"].append((cpu_s(me) - c0) / block * 1e3)
        jobs = camera._renderer.thread
        hand_off = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                jobs.call(lambda renderer: None)
            hand_off.append((time.perf_counter() - t0) / 1000 * 1e6)
        out["hand-off us"] = hand_off
    finally:
        direct.close()
        camera.close()
        arm.close()
    return out


def spread(values: list[float], digits: int = 1) -> str:
    return f"{np.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run(repeats: int, steps: int, rounds: int) -> None:
    os.chdir(ROOT)  # the config's goal pose file is relative to the repository
    print(f"backend: {_gl.CHOICE}; {repeats} repeats of {steps} steps; load average {os.getloadavg()[0]:.2f}")
    cost = render_cost(rounds)
    print(f"render, 64 px, per frame: median (range) of {rounds} blocks of 10 frames")
    for name in ("direct", "thread"):
        what = "direct, on the thread that made it" if name == "direct" else "MujocoCamera, its render thread"
        print(f"  {what:36s} {spread(cost[name + ' cpu'])} CPU ms   {spread(cost[name + ' wall'])} wall ms")
    print(f"  hand-off alone (an empty job to the render thread and back): {spread(cost['hand-off us'])} us")
    with tempfile.TemporaryDirectory() as tmp:
        for label, overrides in (("two 64 px cameras", TWO_CAMERAS), ("no cameras", [])):
            local, served = InProcess(overrides), Served(overrides, Path(tmp) / f"serve-{len(overrides)}.log")
            rows: dict[str, list[tuple[float, float]]] = {"in process": [], "served": []}
            try:
                for k in range(repeats):
                    rows["in process"].append(local.rate(steps, seed=k))
                    rows["served"].append(served.rate(steps, seed=k))
            finally:
                served.close()
                local.close()
            print(f"{label}: median (range) of {repeats} repeats")
            for name, values in rows.items():
                rates, cpu = [v[0] for v in values], [v[1] for v in values]
                print(f"  {name:10s} {spread(rates)} steps/s   {spread(cpu)} CPU ms per step (all processes)")
            ratio = [s[0] / w[0] for s, w in zip(rows["served"], rows["in process"])]
            print(f"  served / in process, steps/s: {spread(ratio, 2)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per repeat (an episode has 50)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks of 10 frames per renderer")
    parser.add_argument("--backends", default="", help="e.g. egl,osmesa: one fresh interpreter per backend")
    parser.add_argument("--quick", action="store_true", help="2 repeats of 10 steps, 2 blocks of frames")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps, args.rounds = 2, 10, 2
    if args.backends:
        for backend in args.backends.split(","):
            env = {**os.environ, "MUJOCO_GL": backend, "PYTHONPATH": str(ROOT)}
            env.pop("PYOPENGL_PLATFORM", None)  # set by this process's own backend
            argv = [f"--repeats={args.repeats}", f"--steps={args.steps}", f"--rounds={args.rounds}"]
            code = subprocess.run([sys.executable, __file__, *argv], env=env).returncode
            if code:
                return code
        return 0
    run(args.repeats, args.steps, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
