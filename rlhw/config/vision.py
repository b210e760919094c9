"""Vision settings: the image encoder an agent or a classifier uses, and the env's learned reward.

- `ImageEncoderConfig`: which encoder turns a camera image into features (rlhw.vision.encoders), where
  its weights come from (a local file: nothing is downloaded at run time), whether it is frozen, and the
  random-shift augmentation applied to training batches (DrQ).
- `RewardConfig` (``env.reward``): a success classifier file (``rlhw train-reward``) that the env runs
  on the frames it just read, at every step, and what its verdict decides.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlhw.config.base import StrictModel

EncoderKind = Literal["cnn", "resnet10", "resnet18"]


def _file_path(value: str | None) -> str | None:
    if value is not None and not str(value).strip():
        raise ValueError("must be a file path, or null for none")
    return value


class ImageEncoderConfig(StrictModel):
    """One image encoder: uint8 HxWx3 camera image -> LayerNorm'd feature vector."""

    kind: EncoderKind = Field(
        "cnn", description="'cnn' (small 3-layer CNN), 'resnet10' or 'resnet18' (ResNet v1 with BasicBlocks)"
    )
    weights: str | None = Field(
        None,
        description="local file with a saved state_dict (the whole encoder, or a torchvision-layout ResNet backbone); null = random init",
    )
    frozen: bool = Field(
        False,
        description="freeze the convolutional backbone (no gradient, BatchNorm statistics fixed); the projection head still learns",
    )
    features: int = Field(
        64, ge=1, le=4096, description="width of the encoder's output (after Linear + LayerNorm + tanh)"
    )
    augment_pad: int = Field(
        4,
        ge=0,
        le=32,
        description="random-shift augmentation of training batches: pad by this many pixels (edge replicated), crop back; 0 = off",
    )

    _weights = field_validator("weights")(classmethod(lambda cls, v: _file_path(v)))


class RewardConfig(StrictModel):
    """``env.reward``: an optional learned success classifier, run by the env at the step rate."""

    classifier: str | None = Field(
        None, description="a model file written by `rlhw train-reward`; null = the task's own success and reward"
    )
    threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="success when the classifier's probability is >= this; null = the threshold saved in the model file",
    )
    decides: Literal["success", "success_and_reward"] = Field(
        "success",
        description="'success': the classifier replaces the task's success flag; 'success_and_reward': also the reward (1 on success, else 0: sparse)",
    )
    terminate_on_success: bool = Field(
        True,
        description="a success judged by the classifier ends the episode (the task's own termination rules still apply)",
    )
    retrain_after_rejections: int = Field(
        5,
        ge=0,
        description="train: after this many train episodes that the classifier ended as a success and the operator "
        "said were not (env.teleop's verdict), retrain the classifier in the background with their frames as "
        "negatives and use it from the next episode (rlhw/rl/classifier_refresh.py); 0 = never",
    )

    _classifier = field_validator("classifier")(classmethod(lambda cls, v: _file_path(v)))
