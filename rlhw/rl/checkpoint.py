"""A policy checkpoint as a contract: the env spec it was trained on travels with its weights.

Training writes ``checkpoints/latest.pt`` (rlhw.rl.rundir) with SAC's state; since `rlhw eval` and
``train.init_from`` run a checkpoint on another env (the MuJoCo arm's policy on a real cell), the checkpoint
also carries what the policy was built for (`policy_contract`): every observation's shape and dtype, the
action's shape and bounds, and ``train.sac`` (the network's widths and image encoder, so an eval config need
not repeat them). `check_spec` refuses an env whose spec differs, naming the keys; a checkpoint written before
it carried a spec is refused with the way to re-save it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlhw.config.root import Config
from rlhw.config.train import SacConfig
from rlhw.errors import ConfigError
from rlhw.rl.session import Counters
from rlhw.rl.spaces import action_bounds
from rlhw.robot.spec import EnvSpec

INIT_FROM = "train.init_from"
SPEC_KEY = "spec"
SAC_CONFIG_KEY = "sac_config"


def spec_record(spec: EnvSpec) -> dict:
    """What the policy's networks depend on, as plain data: observation shapes and dtypes, action shape and
    bounds (the policy network rescales to them), and the control rate it was trained at (informational)."""
    low, high = action_bounds(spec.action)
    return {
        "observations": {
            k: {"shape": [int(s) for s in v.shape], "dtype": str(np.dtype(v.dtype))}
            for k, v in sorted(spec.observations.items())
        },
        "action": {
            "shape": [int(s) for s in spec.action.shape],
            "dtype": str(np.dtype(spec.action.dtype)),
            "low": low.reshape(-1).tolist(),
            "high": high.reshape(-1).tolist(),
        },
        "control_hz": float(spec.control_hz),
    }


def policy_contract(spec: EnvSpec, sac_config: SacConfig) -> dict:
    """What a checkpoint carries besides the weights: the env spec and ``train.sac`` the policy was built with."""
    return {SPEC_KEY: spec_record(spec), SAC_CONFIG_KEY: sac_config.model_dump(mode="json")}


#: The run's counters a checkpoint carries besides ``updates`` (the agent's own).
COUNTERS = ("env_steps", "episodes", "best_success")


def checkpoint_state(agent, contract: dict, counters: Counters) -> dict:
    """A checkpoint's contents, one format for every writer (the local runner, learner rank 0, a test's policy):
    SAC's state, the observation layout, the `policy_contract`, and the run's `COUNTERS`; ``updates`` is the
    agent's own. `saved_counters` reads them back."""
    return {
        "sac": agent.state_dict(),
        "layout": agent.layout.to_dict(),
        **contract,
        **{k: getattr(counters, k) for k in COUNTERS},
        "updates": agent.updates,
    }


def saved_counters(state: dict) -> Counters:
    """The run's counters in a checkpoint that `checkpoint_state` wrote (one written before it carried
    ``episodes`` or ``best_success``: none yet)."""
    return Counters(
        env_steps=int(state.get("env_steps", 0)),
        updates=int(state.get("updates", 0)),
        episodes=int(state.get("episodes", 0)),
        best_success=float(state.get("best_success", math.nan)),
    )


def spec_differences(saved: dict, spec: EnvSpec) -> list[str]:
    """Each way the env's spec differs from the checkpoint's, one phrase per key (empty: they match)."""
    now = spec_record(spec)
    problems = []
    have, want = saved["observations"], now["observations"]
    if missing := sorted(set(have) - set(want)):
        problems.append(f"observation(s) {', '.join(missing)} the policy reads are missing from the env")
    if extra := sorted(set(want) - set(have)):
        problems.append(f"the env has observation(s) {', '.join(extra)} the policy was not trained on")
    for key in sorted(set(have) & set(want)):
        a, b = have[key], want[key]
        if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
            problems.append(
                f"observation {key}: checkpoint {a['dtype']}{tuple(a['shape'])}, env {b['dtype']}{tuple(b['shape'])}"
            )
    a, b = saved["action"], now["action"]
    if a["shape"] != b["shape"]:
        problems.append(
            f"action: checkpoint shape {tuple(a['shape'])}, env {tuple(b['shape'])} "
            "(env.action.gripper adds a 4th component)"
        )
    elif not (np.allclose(a["low"], b["low"]) and np.allclose(a["high"], b["high"])):
        problems.append(f"action bounds: checkpoint [{a['low']}, {a['high']}], env [{b['low']}, {b['high']}]")
    return problems


@dataclass(frozen=True)
class PolicyCheckpoint:
    """A loaded checkpoint: SAC's state, the spec it was trained on, its ``train.sac`` and its update count."""

    path: Path
    state: dict
    spec: dict
    sac_config: dict | None

    @property
    def updates(self) -> int:
        return int(self.state["sac"].get("updates", self.state.get("updates", 0)))

    @classmethod
    def load(cls, path: str | Path, field: str) -> PolicyCheckpoint:
        """The checkpoint at ``path`` (a .pt file, or a run directory: its checkpoints/latest.pt). Errors name
        ``field`` (the flag or config key that gave the path)."""
        path = Path(path)
        if path.is_dir():
            path = path / "checkpoints" / "latest.pt" if (path / "checkpoints").is_dir() else path / "latest.pt"
        if not path.is_file():
            raise ConfigError(
                field,
                f"checkpoint {path} not found; give a checkpoint file (runs/<run>/checkpoints/"
                "latest.pt) or the run directory of rlhw train",
            )
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 - a torn or foreign file: say which
            raise ConfigError(field, f"{path} is not a readable checkpoint ({type(e).__name__}: {e})") from None
        if not isinstance(state, dict) or "sac" not in state:
            raise ConfigError(field, f"{path} is not a checkpoint of rlhw train (no 'sac' entry)")
        if SPEC_KEY not in state:
            raise ConfigError(
                field,
                f"{path} was written before checkpoints carried the env spec they were trained "
                "on, so it cannot be checked against this env; re-save it by resuming its run "
                "for a moment (rlhw train --resume --run-dir RUN train.max_env_steps=<its env "
                "steps + 1>), which writes a checkpoint with its spec",
            )
        return cls(path, state, state[SPEC_KEY], state.get(SAC_CONFIG_KEY))

    def check_spec(self, spec: EnvSpec, field: str) -> None:
        """Refuse an env whose observations or action differ from the ones this policy was trained on."""
        problems = spec_differences(self.spec, spec)
        if problems:
            raise ConfigError(
                field,
                f"{self.path} does not fit this env: {'; '.join(problems)}. Run it on an env "
                "configured like the one it was trained on (task, env.images, "
                "env.action.gripper, cameras)",
            )

    def rate_note(self, spec: EnvSpec) -> str | None:
        """A warning when the env steps at another rate than the policy was trained at (allowed: the spec
        matches, but each action then moves the hand for a different time)."""
        trained, now = self.spec.get("control_hz"), float(spec.control_hz)
        if trained and abs(trained - now) > 1e-6:
            return (
                f"the policy was trained at {trained:g} Hz and this env steps at {now:g} Hz (env.control_hz): "
                "each action lasts a different time, expect it to behave differently"
            )
        return None

    def sac(self, fallback):
        """The ``train.sac`` the policy was built with (its widths and encoder), else ``fallback``."""
        if self.sac_config is None:
            return fallback
        from rlhw.config.train import SacConfig

        return SacConfig.model_validate(self.sac_config)

    def policy_state(self) -> dict:
        """The actor's weights (with the encoder it reads): what an `ActingPolicy` loads."""
        return {k: v.detach().cpu().numpy() for k, v in self.state["sac"]["actor"].items()}


def checked_init_from(config: Config, spec: EnvSpec) -> PolicyCheckpoint:
    """``train.init_from``'s checkpoint, loaded and checked against the env it will train on."""
    checkpoint = PolicyCheckpoint.load(config.train.init_from, INIT_FROM)
    checkpoint.check_spec(spec, INIT_FROM)
    return checkpoint


def warm_start(agent, checkpoint: PolicyCheckpoint, field: str = INIT_FROM) -> None:
    """Load the checkpoint's actor, critics, target critics and their shared encoder into ``agent`` (a `SAC`).
    The temperature, optimizers and counters start fresh: a warm start is a new run, not a resumed one."""
    sac = checkpoint.state["sac"]
    for name in ("actor", "critic", "critic_target"):
        try:
            getattr(agent, name).load_state_dict(sac[name])
        except (RuntimeError, KeyError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(
                field,
                f"the {name} of {checkpoint.path} does not fit this run's networks ({first}); "
                "set train.sac (hidden_sizes, critic_ensemble, critic_layer_norm, "
                "image_encoder) as the checkpoint's run had them",
            ) from None
