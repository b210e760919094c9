"""`train(config, run_dir, resume)`: the one entry point behind `rlhw train`; picks the runner."""

from __future__ import annotations

import torch

from rlhw.rl.rundir import RunDir
from rlhw.rl.session import StopReason
from rlhw.runtime.stop_signals import sigterm_interrupts


def train(config, run_dir: RunDir, resume: bool = False) -> StopReason:
    # Small MLPs on a few shared cores: one intra-op thread per process avoids spin-wait contention
    # (measured: 2 threads were >10x slower per update than 1 on a busy 2-core machine).
    torch.set_num_threads(1)
    if not resume:
        run_dir.write_config(config)
    # SIGTERM (systemd, job schedulers) ends the run as Ctrl-C does: robots stopped, checkpoint, run.json.
    with sigterm_interrupts():
        if config.train.runner == "local":
            from rlhw.rl.local import train_local

            return train_local(config, run_dir, resume=resume)
        from rlhw.rl.pipeline.controller import train_pipeline

        return train_pipeline(config, run_dir, resume=resume)
