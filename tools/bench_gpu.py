"""The GPU path, measured against the CPU in the same run: what a GPU node buys the learner and rollout groups.

    PYTHONPATH=$PWD python tools/bench_gpu.py --out gpu.json            # on a machine with a CUDA GPU
    PYTHONPATH=$PWD python tools/bench_gpu.py --only render --out cpu.json  # CPU rendering on a machine without

Sections (``--only`` picks some; each one's failure is recorded and the others still run):

- ``update``: one SAC update from camera images (one 64 px camera + 9 proprio, the cnn encoder, N=10 LayerNorm
  critics, DrQ shift), batch 128 and 256, on CUDA and on the CPU (1 thread, as a learner sharing a robot PC's
  cores, and every core). Milliseconds of wall clock per update, CUDA synchronised, median of blocks run in turn.
- ``act``: batched rollout inference (`SAC.sample_and_mean`, what a rollout worker runs) over 8 and 64
  observations of the same layout, CUDA against CPU: ms per batch.
- ``train``: ``rlhw train configs/sim_reach.yaml`` with the rollout and learner groups placed on GPU 0 (the
  config's cluster plus one ``gpu`` node group; nothing else changed) and ``train.device=cuda``, then the same
  with ``train.device=cpu``: wall clock and env steps to 0.9, and the learner's device as run.json records it.
- ``render``: MuJoCo's offscreen renderer on the FR3 scene's front camera at 64 and 128 px, frames per second,
  with each ``MUJOCO_GL`` backend that can make a context here (egl, osmesa), each in a child process since
  MuJoCo reads ``MUJOCO_GL`` once at import.
- ``nccl``: two learner ranks all-reducing over NCCL, when the machine has two or more GPUs (skipped with one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def image_agent(batch: int, device, size: int = 64):
    """SAC with train.sac's defaults and the cnn encoder, and one batch of random frames for it: the "cnn"
    preset of tools/bench_sac_vision.py, on ``device``."""
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_sac_vision import make

    return make({"kind": "cnn"}, size, batch, device)


def _timed(fn, device, blocks: int, per_block: int) -> float:
    """Median over blocks of wall-clock seconds per call, the device synchronised around each block."""
    fn()
    fn()  # warm-up: cuDNN autotune, allocator
    out = []
    for _ in range(blocks):
        _sync(device)
        t = time.perf_counter()
        for _ in range(per_block):
            fn()
        _sync(device)
        out.append((time.perf_counter() - t) / per_block)
    return statistics.median(out)


def _devices():
    import torch

    cpu_threads = os.cpu_count() or 1
    plans = [
        ("cpu, 1 thread", torch.device("cpu"), 1),
        (f"cpu, {cpu_threads} threads", torch.device("cpu"), cpu_threads),
    ]
    if torch.cuda.is_available():
        plans.insert(0, (f"cuda ({torch.cuda.get_device_name(0)})", torch.device("cuda"), cpu_threads))
    return plans


def bench_update() -> dict:
    import torch

    out = {}
    for batch in (128, 256):
        for name, device, threads in _devices():
            torch.set_num_threads(threads)
            sac, b = image_agent(batch, device)
            gpu = device.type == "cuda"
            s = _timed(lambda: sac.update(b), device, blocks=5 if gpu else 3, per_block=20 if gpu else 3)
            out[f"batch {batch}, {name}"] = round(s * 1e3, 2)
            print(f"update  batch {batch:3d}  {name:40s} {s * 1e3:8.2f} ms", flush=True)
    return out


def bench_act() -> dict:
    import torch

    out = {}
    for n in (8, 64):
        for name, device, threads in _devices():
            torch.set_num_threads(threads)
            sac, b = image_agent(128, device)
            obs = {"proprio": b["obs/proprio"][:n], "image_front": b["obs/image_front"][:n]}
            s = _timed(
                lambda: sac.sample_and_mean(obs), device, blocks=5, per_block=50 if device.type == "cuda" else 10
            )
            out[f"{n} observations, {name}"] = round(s * 1e3, 3)
            print(f"act     {n:3d} obs    {name:40s} {s * 1e3:8.3f} ms", flush=True)
    return out


def gpu_config(path: Path) -> Path:
    """sim_reach.yaml with its rollout and learner groups on GPU 0 of node 0; the env stays where it was."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "sim_reach.yaml").read_text())
    cfg["cluster"]["component_placement"] = {
        "env": {"node_group": "node", "placement": 0},
        "rollout,learner": {"node_group": "gpu", "placement": 0},
    }
    cfg["cluster"]["node_groups"] = [{"label": "gpu", "node_ranks": 0, "accelerators_per_node": 1}]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _train_once(config: Path, device: str, runs: Path, timeout_s: float) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "rlhw.cli.main", "train", str(config), f"train.device={device}"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=runs, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - t
    found = sorted(runs.glob("runs/*/run.json"), key=lambda p: p.stat().st_mtime)
    result: dict = {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_s": round(wall, 1)}
    if not found:
        result["tail"] = (proc.stdout + proc.stderr)[-3000:]
        return result
    status = json.loads(found[-1].read_text())
    found[-1].rename(found[-1].with_name(f"run.{device}.json"))
    result["run"] = {k: v for k, v in status.items() if k not in ("loop_health", "rollout_isolation")}
    metrics = found[-1].parent / "metrics.jsonl"
    if metrics.exists():
        evals = [json.loads(line) for line in metrics.read_text().splitlines() if "eval/success_rate" in line]
        result["evals"] = [(e.get("env_steps"), e.get("eval/success_rate")) for e in evals]
    if proc.returncode != 0:
        result["tail"] = (proc.stdout + proc.stderr)[-3000:]
    return result


def bench_train(timeout_s: float = 180.0) -> dict:
    import torch

    runs = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    config = gpu_config(runs / "sim_reach_gpu.yaml")
    out = {}
    for device in (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]:
        out[device] = _train_once(config, device, runs, timeout_s)
        print(f"train   device={device}: {json.dumps(out[device])[:1500]}", flush=True)
    return out


RENDER_CHILD = r"""
import json, sys, time
from drivers.mujoco import _gl
import mujoco
from drivers.mujoco.scene import SceneOptions, scene_model
model = scene_model(SceneOptions(cube=True))
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
out = {}
for size in (64, 128):
    r = mujoco.Renderer(model, size, size)
    for _ in range(5):
        r.update_scene(data, camera="front"); r.render()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < 2.0:
        data.qpos[0] += 1e-3; mujoco.mj_forward(model, data)
        r.update_scene(data, camera="front"); frame = r.render(); n += 1
    out[f"{size} px"] = round(n / (time.perf_counter() - t), 1)
    assert frame.std() > 0, "blank frame"
    r.close()
print(json.dumps(out))
"""


def bench_render() -> dict:
    out = {}
    for backend in ("egl", "osmesa"):
        env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", RENDER_CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
            )
        except subprocess.TimeoutExpired:
            out[backend] = "timed out after 120 s"
            continue
        if proc.returncode == 0:
            out[backend] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            out[backend] = "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        print(f"render  MUJOCO_GL={backend}: {out[backend]}", flush=True)
    return out


NCCL_CHILD = r"""
import os, sys, torch, torch.distributed as dist, numpy as np
rank = int(sys.argv[1]); os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
dist.init_process_group("nccl", rank=rank, world_size=2)
torch.cuda.set_device(rank)
sys.path.insert(0, "tools"); from bench_gpu import image_agent
sac, b = image_agent(128, torch.device("cuda", rank))
sac.broadcast_weights(0); sac.update(b); torch.cuda.synchronize()
print("DIGEST", rank, sac.weights_digest(), flush=True)
dist.destroy_process_group()
"""


def bench_nccl() -> dict:
    import torch

    if torch.cuda.device_count() < 2:
        return {"skipped": f"{torch.cuda.device_count()} GPU(s): two learner ranks need two"}
    procs = [
        subprocess.Popen([sys.executable, "-c", NCCL_CHILD, str(r)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    digests = [p.communicate(timeout=180)[0] for p in procs]
    found = [line.split()[2] for d in digests for line in d.splitlines() if line.startswith("DIGEST")]
    return {"digests": found, "equal": len(found) == 2 and found[0] == found[1]}


SECTIONS = {"update": bench_update, "act": bench_act, "render": bench_render, "train": bench_train, "nccl": bench_nccl}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    import torch

    report: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(report), flush=True)
    for name in args.only:
        t = time.perf_counter()
        try:
            report[name] = SECTIONS[name]()
        except Exception as e:  # noqa: BLE001 - one failed section must not hide the others' figures
            report[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
            print(f"{name} FAILED: {report[name]['trace']}", flush=True)
        report.setdefault("section_s", {})[name] = round(time.perf_counter() - t, 1)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
