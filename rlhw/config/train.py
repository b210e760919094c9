"""The `train:` section of an rlhw config: SAC hyperparameters, the pipeline's shape and the run directory.

Defaults are tuned so that `rlhw train configs/sim_reach.yaml` learns reach on 2 CPU cores in minutes;
a real-robot config mostly changes `max_env_steps`, `mode` and the eval cadence.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlhw.config.base import StrictModel
from rlhw.config.datasets import DemoEntry
from rlhw.config.vision import ImageEncoderConfig
from rlhw.errors import ConfigError, FaultKind


class SacConfig(StrictModel):
    """Soft Actor-Critic hyperparameters (names follow CleanRL's sac_continuous_action)."""

    hidden_sizes: tuple[int, ...] = Field((128, 128), description="MLP widths of actor and each critic")
    gamma: float = Field(0.95, gt=0.0, le=1.0, description="discount; short (50-step) episodes like < 0.99")
    tau: float = Field(0.01, gt=0.0, le=1.0, description="Polyak factor of the target critics")
    actor_lr: float = Field(1e-3, gt=0.0)
    critic_lr: float = Field(1e-3, gt=0.0)
    alpha_lr: float = Field(1e-3, gt=0.0)
    init_alpha: float = Field(0.1, gt=0.0, description="initial entropy temperature (then tuned automatically)")
    target_entropy: float | None = Field(None, description="default: -action_dim")
    batch_size: int = Field(128, ge=1)
    image_encoder: ImageEncoderConfig = Field(
        ImageEncoderConfig(),
        description="the image encoder per camera (image observations only): kind, weights "
        "file, frozen, features, DrQ augment_pad; one encoder shared by the critics "
        "and the actor",
    )
    # The critics (RLPD's defaults; plain SAC is critic_ensemble=2, critic_subset=2, critic_layer_norm=false,
    # actor_q=min; see docs/history.md for the measured comparison).
    critic_ensemble: int = Field(10, ge=1, description="N: number of critics (one batched module)")
    critic_subset: int = Field(
        2, ge=1, description="M: the Bellman target is the minimum over a random subset of M of the N target critics"
    )
    critic_layer_norm: bool = Field(True, description="LayerNorm after each hidden layer of the critics")
    actor_q: Literal["mean", "min"] = Field(
        "mean", description="the actor maximises the mean (RLPD) or the minimum (SAC) of the N critics"
    )
    target_features: Literal["online", "target"] = Field(
        "online",
        description="what the target critics read next_obs through (images only): 'online' = the online "
        "encoder's features, computed once without gradient and shared with the next action "
        "(DrQ-v2: one encoder pass fewer per update); 'target' = their own Polyak-averaged "
        "copy of the encoder (DrQ, SERL)",
    )

    @model_validator(mode="before")
    @classmethod
    def _image_features_moved(cls, data):
        if isinstance(data, dict) and "image_features" in data:
            raise ValueError(
                "image_features was replaced by image_encoder.features (train.sac.image_encoder: kind, "
                "weights, frozen, features, augment_pad); rename the key"
            )
        return data

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(w <= 0 for w in v):
            raise ValueError(f"hidden_sizes must be a non-empty list of positive widths, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _subset_fits(self) -> SacConfig:
        if self.critic_subset > self.critic_ensemble:
            raise ValueError(
                f"critic_subset ({self.critic_subset}) exceeds critic_ensemble ({self.critic_ensemble}): the target "
                "takes the minimum over a subset of the critics; lower critic_subset or raise critic_ensemble"
            )
        return self


class FaultStore(str, Enum):
    """How the learner stores the step that a safety fault ended (rlhw/rl/fault_signal.py)."""

    TRUNCATE = "truncate"  # as the env reports it: not terminal, bootstrapped from the last good observation
    TERMINAL = "terminal"  # terminal, with the step's reward (minus the penalty)
    STAND_STILL = "stand_still"  # terminal, worth standing still where the arm stopped: reward / (1 - gamma)


# Faults the policy's own motion causes; a camera stall or a lost link is not the action's doing.
POLICY_FAULTS = (FaultKind.CONTACT, FaultKind.LIMIT, FaultKind.REFLEX)


class FaultSignalConfig(StrictModel):
    """What a safety fault teaches the critic (docs/learning.md, "Safety faults that teach").

    A fault stops the arm and ends the episode; the env reports the step as truncated, with the last good
    observation. Stored like that, the critic bootstraps from where the arm stopped and pressing on an obstacle
    looks like a pause. ``stand_still`` stores it as an end state worth what staying there forever would earn,
    ``reward / (1 - gamma)``: no scale to tune, and worse than any continuation that makes progress."""

    store: FaultStore = Field(
        FaultStore.STAND_STILL,
        description="truncate (the env's report, nothing learned), "
        "terminal (end state worth the step's reward) or stand_still (end state worth "
        "reward / (1 - gamma))",
    )
    penalty: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="subtracted from the stored reward of a fault step (in reward units)",
    )
    kinds: tuple[FaultKind, ...] = Field(
        POLICY_FAULTS,
        description="the fault kinds that teach; other faults (camera_stall, network, ...) are stored as truncated",
    )

    @field_validator("kinds")
    @classmethod
    def _no_lock(cls, v: tuple[FaultKind, ...]) -> tuple[FaultKind, ...]:
        if FaultKind.LOCKED in v:
            raise ValueError(
                "locked is not a fault of a step (it follows repeated faults, whose own kinds are "
                f"listed); use kinds from {[k.value for k in POLICY_FAULTS]} and the like"
            )
        return v


class TrainConfig(StrictModel):
    """How `rlhw train` runs.

    ``runner``: ``pipeline`` runs env, rollout and learner worker groups on Ray as the placement says (one code
    path for sim and real robots); ``local`` runs env, policy and learner in this process (the baseline the
    pipeline benchmark compares against, and a debugging aid).
    ``mode``: ``async`` keeps every robot stepping while the learners train, as long as the learner keeps up with
    ``utd_ratio`` (within ``utd_slack`` updates; beyond it a simulator waits before its next step, a real arm
    before its next episode);
    ``sync`` alternates: collect ``steps_per_iteration`` env steps, then do the matching number of updates.
    """

    seed: int = Field(
        0, description="base seed; each process seeds with it plus an offset of its role and its rank (rlhw.rl.seeds)"
    )
    runner: Literal["pipeline", "local"] = "pipeline"
    mode: Literal["async", "sync"] = "sync"
    max_env_steps: int = Field(20_000, ge=1, description="stop after this many collected env steps (all robots)")
    target_success: float = Field(0.9, ge=0.0, le=1.0, description="stop when eval success rate reaches this")
    learning_starts: int = Field(1_000, ge=0, description="uniform random actions before the first update")
    utd_ratio: float = Field(0.5, gt=0.0, description="gradient updates per collected env step (all robots)")
    steps_per_iteration: int = Field(50, ge=1, description="sync mode: env steps collected per round, all robots")
    utd_slack: int = Field(
        100,
        ge=1,
        description="async mode: the robots may run this many updates' worth of env "
        "steps ahead of the learner, then wait (a simulator before its next step, a real arm "
        "before its next episode) so that utd_ratio holds; the achieved ratio is logged as "
        "train/utd",
    )
    buffer_size: int = Field(300_000, ge=1)
    sac: SacConfig = SacConfig()
    demos: list[DemoEntry] = Field(
        default_factory=list,
        description="directories of recorded episodes (demo-*, train-*; searched recursively) "
        "or LeRobotDatasets (an `rlhw export-dataset` export as a path; another "
        "one as {path, observations, action}: rlhw.config.datasets) loaded into "
        "a demo buffer of their own; relative to the working directory",
    )
    init_from: str | None = Field(
        None,
        description="warm start: a checkpoint file (or run directory) of rlhw train whose actor, critics and "
        "encoder this run starts from (e.g. a policy trained in MuJoCo, fine-tuned on a real cell); "
        "its env spec must match this env's; ignored by --resume, which continues its own checkpoint",
    )
    demo_ratio: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="each batch draws round(demo_ratio * batch_size) "
        "samples from the demo buffer (demos + interventions), the rest from online replay",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when the process sees a GPU")
    fault_signal: FaultSignalConfig = Field(
        FaultSignalConfig(),
        description="how a step a safety fault ended is stored for the critic: store, penalty, kinds",
    )

    eval_every_steps: int = Field(1_000, ge=1, description="run evaluation episodes every this many env steps")
    eval_episodes: int = Field(10, ge=1)
    log_every_steps: int = Field(500, ge=1)
    checkpoint_every_steps: int = Field(5_000, ge=1)
    weights_every_updates: int = Field(50, ge=1, description="learner rank 0 publishes policy weights this often")

    record_episodes: bool = Field(True, description="write every transition to run_dir/episodes as it arrives")
    fsync_episodes: bool | Literal["auto"] = Field(
        "auto", description="fsync each finished episode; auto = only when the arm is real hardware"
    )
    env_start_timeout_s: float = Field(90.0, gt=0, description="wait this long for an env server to be healthy")
    step_timeout_s: float = Field(30.0, gt=0, description="a robot step or reset slower than this is a failure")
    policy_at: Literal["rollout", "env"] = Field(
        "rollout",
        description="where the policy acts: rollout = on the rollout workers (batched over env workers, "
        "GPU nodes); env = in each env worker, next to its arm (no hop between observation "
        "and action; for small policies or a robot node with a GPU); the rollout group is "
        "then not launched",
    )
    env_restarts: int = Field(1, ge=0, description="restart a dead env worker this many times, then stop cleanly")
    progress: bool = Field(True, description="show a progress bar")

    @model_validator(mode="before")
    @classmethod
    def _env_transport_derived(cls, data):
        if isinstance(data, dict) and "env_transport" in data:
            raise ConfigError(
                "env_transport",
                "is no longer a choice, it is derived from the placement (rlhw.rl.env_transport): an env placed "
                "on a node group whose hardware is a Franka, driven or simulated (env.sim=mujoco), runs behind a "
                "`rlhw serve-env` child; a simulator with no arm placed runs in the env worker's process; remove "
                "the key",
            )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.sac.batch_size > self.buffer_size:
            raise ValueError(
                f"train.sac.batch_size ({self.sac.batch_size}) exceeds train.buffer_size ({self.buffer_size}); "
                "raise buffer_size or lower batch_size"
            )
        if self.fault_signal.store is FaultStore.STAND_STILL and self.sac.gamma >= 1.0:
            raise ValueError(
                "train.fault_signal.store=stand_still is worth reward / (1 - gamma), which has no finite value with "
                "train.sac.gamma=1; lower gamma or use store=terminal with a penalty"
            )
        return self
