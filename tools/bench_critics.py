"""Cost of one SAC update with plain SAC's critics and with RLPD's ensemble, on this machine's CPU.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_critics.py [--obs-dim 20] [--threads 1] [--updates 200]

Why: RLPD's defaults (10 LayerNorm critics) are only worth having on 2-core robot PCs if the batched ensemble
costs little more than SAC's two critics. Prints ms per update (median of 5 blocks) for each preset, and the
ratio to plain SAC measured in the same run. Network sizes are configs/sim_reach.yaml's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rlhw.config.train import SacConfig
from rlhw.rl.sac import SAC, ObsLayout

PRESETS = {
    "sac (N=2, M=2, no LayerNorm, actor on min)": dict(
        critic_ensemble=2, critic_subset=2, critic_layer_norm=False, actor_q="min"
    ),
    "sac + LayerNorm (N=2)": dict(critic_ensemble=2, critic_subset=2, critic_layer_norm=True, actor_q="min"),
    "rlpd (N=10, M=2, LayerNorm, actor on mean)": dict(
        critic_ensemble=10, critic_subset=2, critic_layer_norm=True, actor_q="mean"
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obs-dim", type=int, default=20)
    ap.add_argument("--act-dim", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--hidden", type=int, nargs="+", default=[128, 128])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--updates", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    layout = ObsLayout.from_shapes({"state": (args.obs_dim,)}, {"state": "float32"})
    n = args.batch
    batch = {
        "obs/state": rng.random((n, args.obs_dim), np.float32),
        "next_obs/state": rng.random((n, args.obs_dim), np.float32),
        "action": rng.uniform(-1, 1, (n, args.act_dim)).astype(np.float32),
        "reward": rng.random(n, np.float32),
        "terminated": np.zeros(n, np.float32),
    }
    print(f"{args.threads} thread(s), batch {n}, hidden {args.hidden}, obs {args.obs_dim}, action {args.act_dim}")
    agents = {}
    for name, critics in PRESETS.items():
        agents[name] = SAC(
            layout,
            -np.ones(args.act_dim),
            np.ones(args.act_dim),
            SacConfig(hidden_sizes=tuple(args.hidden), batch_size=n, **critics),
        )
        for _ in range(10):
            agents[name].update(batch)
    # Blocks of the presets in turn, so that a load change on a shared machine hits all of them alike.
    blocks: dict[str, list[float]] = {name: [] for name in PRESETS}
    per_block = max(args.updates // 10, 1)
    for _ in range(10):
        for name, sac in agents.items():
            t = time.perf_counter()
            for _ in range(per_block):
                sac.update(batch)
            blocks[name].append((time.perf_counter() - t) / per_block * 1e3)
    base = float(np.median(blocks[next(iter(PRESETS))]))
    for name, ms in blocks.items():
        med = float(np.median(ms))
        print(f"  {name:48s} {med:6.2f} ms/update  x{med / base:.2f}")


if __name__ == "__main__":
    main()
