"""The success (reward) classifier: camera frames -> probability that the task has succeeded.

SERL and HIL-SERL judge success on a real cell with a binary classifier trained on a few hundred
frames, because a real arm has no simulator to ask where the peg is. Here:

- `SuccessClassifier`: one image encoder per camera (rlhw.vision.encoders) -> concatenated features ->
  a small MLP -> one logit; or, with ``each_camera``, one MLP per camera, each trained on the labels alone,
  and success only when every camera's says so (the lowest logit): a policy must then fool every view at
  once, where one joint head let it fool the view with the blind spot (a cube hidden behind the hand).
  Frames of any size are resized to the classifier's input size by `resize_images`, the same function in
  training and at the env, so both see the same pixels.
- the model file (`save_classifier` / `load_classifier`): the weights, the `ClassifierSpec` needed to
  rebuild and run it (cameras, input size, encoder kind, threshold) and the held-out metrics of its
  training, in one torch file read with ``weights_only=True`` (no pickled code is ever executed).
- `SuccessJudge`: what RobotEnv runs at every step (``env.reward``): loads once, checks the env's
  cameras at construction, and gives a `Verdict` (probability, threshold, success, seconds) per step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from rlhw.config.vision import ImageEncoderConfig, RewardConfig
from rlhw.errors import ConfigError
from rlhw.vision.encoders import ENCODER_KINDS, build_image_encoder

FILE_FORMAT = "rlhw.success_classifier"
FILE_VERSION = 1


@dataclass(frozen=True)
class ClassifierSpec:
    """Everything needed to rebuild and run a classifier, saved with its weights."""

    cameras: tuple[str, ...]
    input_size: tuple[int, int] = (64, 64)
    encoder: str = "cnn"
    features: int = 64
    hidden: int = 64
    threshold: float = 0.5
    #: region of interest (top, left, bottom, right) as fractions of every frame, cut before resizing:
    #: HIL-SERL crops its cameras to the work area, so a small object fills more of the input.
    crop: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)
    #: one classifier per camera, success only when all agree (see the module docstring)
    each_camera: bool = False

    def __post_init__(self):
        if not self.cameras:
            raise ValueError("a classifier needs at least one camera")
        if self.encoder not in ENCODER_KINDS:
            raise ValueError(f"encoder {self.encoder!r}: known kinds are {', '.join(ENCODER_KINDS)}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        top, left, bottom, right = self.crop
        if not (0.0 <= top < bottom <= 1.0 and 0.0 <= left < right <= 1.0):
            raise ValueError(
                f"crop (top, left, bottom, right) = {self.crop}: fractions with top < bottom, left < right, in [0, 1]"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cameras"], d["input_size"], d["crop"] = list(self.cameras), list(self.input_size), list(self.crop)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClassifierSpec:
        return cls(
            **{
                **d,
                "cameras": tuple(d["cameras"]),
                "input_size": tuple(int(s) for s in d["input_size"]),
                "crop": tuple(float(f) for f in d.get("crop", (0.0, 0.0, 1.0, 1.0))),
            }
        )


def crop_images(images: np.ndarray | torch.Tensor, crop: tuple[float, float, float, float]) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> the region ``crop`` = (top, left, bottom, right) in fractions (a view, no copy)."""
    x = torch.as_tensor(np.asarray(images)) if not torch.is_tensor(images) else images
    if x.dim() == 3:
        x = x.unsqueeze(0)
    if tuple(crop) == (0.0, 0.0, 1.0, 1.0):
        return x
    h, w = x.shape[1:3]
    top, left, bottom, right = crop
    return x[
        :,
        int(round(top * h)) : max(int(round(bottom * h)), int(round(top * h)) + 1),
        int(round(left * w)) : max(int(round(right * w)), int(round(left * w)) + 1),
    ]


def resize_images(images: np.ndarray | torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """uint8 [B, H, W, 3] (or one [H, W, 3] frame) -> uint8 tensor [B, h, w, 3]; antialiased bilinear,
    returned unchanged when it already has the size."""
    x = torch.as_tensor(np.asarray(images)) if not torch.is_tensor(images) else images
    if x.dim() == 3:
        x = x.unsqueeze(0)
    if tuple(x.shape[1:3]) == tuple(size):
        return x
    y = F.interpolate(
        x.permute(0, 3, 1, 2).float(), size=tuple(size), mode="bilinear", antialias=True, align_corners=False
    )
    return y.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


class SuccessClassifier(nn.Module):
    """Per-camera encoders + MLP head -> one success logit per sample."""

    def __init__(self, spec: ClassifierSpec, encoder: ImageEncoderConfig | None = None):
        super().__init__()
        self.spec = spec
        enc = encoder or ImageEncoderConfig(kind=spec.encoder, features=spec.features)
        h, w = spec.input_size
        self.encoders = nn.ModuleDict(
            {cam: build_image_encoder(enc, (h, w, 3), spec.features, field="encoder") for cam in spec.cameras}
        )
        if spec.each_camera:
            self.heads = nn.ModuleDict({cam: _head(spec.features, spec.hidden) for cam in spec.cameras})
        else:
            self.head = _head(spec.features * len(spec.cameras), spec.hidden)

    def forward(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``images``: camera -> uint8 [B, h, w, 3] at the input size; returns logits [B]."""
        if self.spec.each_camera:
            return self.camera_logits(images).min(dim=-1).values
        feats = [self.encoders[cam](images[cam]) for cam in self.spec.cameras]
        return self.head(torch.cat(feats, dim=-1)).squeeze(-1)

    def camera_logits(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Each camera's own logit, [B, cameras] (``each_camera`` only): what training fits, one view at a time."""
        return torch.cat([self.heads[cam](self.encoders[cam](images[cam])) for cam in self.spec.cameras], dim=-1)

    def prepare(self, images: Mapping[str, np.ndarray | torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            cam: resize_images(crop_images(images[cam], self.spec.crop), self.spec.input_size)
            for cam in self.spec.cameras
        }

    @torch.no_grad()
    def probability(self, images: Mapping[str, np.ndarray | torch.Tensor], batch_size: int = 256) -> np.ndarray:
        """P(success) per frame for frames of any size (camera -> [B, H, W, 3] or one [H, W, 3])."""
        was_training = self.training
        self.eval()
        prepared = self.prepare(images)
        n = len(next(iter(prepared.values())))
        out = [
            torch.sigmoid(self({c: v[i : i + batch_size] for c, v in prepared.items()}))
            for i in range(0, n, batch_size)
        ]
        self.train(was_training)
        return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def _head(features: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))


# --------------------------------------------------------------------------------------------- the file
def save_classifier(
    classifier: SuccessClassifier,
    path: str | os.PathLike,
    metrics: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
) -> Path:
    """Weights + spec + held-out metrics (+ how it was trained) in one file, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "spec": classifier.spec.to_dict(),
            "state_dict": {k: v.detach().cpu() for k, v in classifier.state_dict().items()},
            "metrics": dict(metrics or {}),
            "training": dict(training or {}),
        },
        tmp,
    )
    os.replace(tmp, path)
    return path


def classifier_training(path: str | os.PathLike) -> dict[str, Any]:
    """How the classifier in ``path`` was trained (its episodes, frames and options), as `save_classifier` wrote it."""
    blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    return dict(blob.get("training", {}))


def load_classifier(path: str | os.PathLike, field: str = "env.reward.classifier") -> tuple[SuccessClassifier, dict]:
    """(classifier in eval mode, the file's held-out metrics); a ConfigError naming ``field`` when the file
    is missing, unreadable, not a classifier file, or its weights do not fit its spec."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            field,
            f"classifier file {str(path)!r} does not exist; train one with `rlhw train-reward EPISODES... --out FILE`",
        )
    try:
        blob = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(field, f"cannot read classifier file {str(path)!r}: {type(e).__name__}: {e}") from None
    if not isinstance(blob, dict) or blob.get("format") != FILE_FORMAT:
        raise ConfigError(field, f"{str(path)!r} is not a success classifier file (written by `rlhw train-reward`)")
    if blob.get("version") != FILE_VERSION:
        raise ConfigError(
            field,
            f"{str(path)!r} has format version {blob.get('version')}; this rlhw reads version {FILE_VERSION}: retrain it",
        )
    try:
        spec = ClassifierSpec.from_dict(blob["spec"])
        model = SuccessClassifier(spec)
        model.load_state_dict(blob["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(field, f"classifier file {str(path)!r} is damaged or inconsistent: {e}") from None
    model.eval()
    return model, dict(blob.get("metrics", {}))


# --------------------------------------------------------------------------------------------- at the env
@dataclass(frozen=True)
class Verdict:
    probability: float
    threshold: float
    success: bool
    seconds: float


class SuccessJudge:
    """The classifier as the env runs it: one frame per camera in, one `Verdict` out, every step."""

    def __init__(self, classifier: SuccessClassifier, threshold: float | None = None):
        self.classifier = classifier.eval()
        self.cameras = classifier.spec.cameras
        self.threshold = float(classifier.spec.threshold if threshold is None else threshold)

    @classmethod
    def from_config(
        cls,
        reward: RewardConfig,
        env_cameras: Sequence[str],
        field: str = "env.reward.classifier",
        path: str | os.PathLike | None = None,
    ) -> SuccessJudge:
        """Load ``reward.classifier`` (or ``path``, a retrained one) and check that the env has every camera it was
        trained on."""
        path = reward.classifier if path is None else str(path)
        classifier, _ = load_classifier(path, field)
        missing = [c for c in classifier.spec.cameras if c not in env_cameras]
        if missing:
            raise ConfigError(
                field,
                f"{path!r} was trained on cameras {list(classifier.spec.cameras)} but this env "
                f"has {list(env_cameras)} (missing {missing}); use the same camera names "
                "(env.sim_cameras or the arm's camera_serials) or retrain with --cameras",
            )
        return cls(classifier, reward.threshold)

    def judge(self, frames: Mapping[str, np.ndarray]) -> Verdict:
        """``frames``: camera -> the uint8 HxWx3 image the env just observed."""
        t0 = time.perf_counter()
        p = float(self.classifier.probability({c: frames[c] for c in self.cameras})[0])
        return Verdict(p, self.threshold, p >= self.threshold, time.perf_counter() - t0)
