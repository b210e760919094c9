"""DrQ random shift: pad each image by ``pad`` pixels (edge replicated), crop a random window back.

Why: an image-based critic overfits to exact pixel positions; shifting every sample by a few pixels
(Kostrikov et al., DrQ: 4 px on 84-128 px images) regularises it at almost no cost, and it is the
augmentation SERL uses for real-arm vision RL.

How: the batch is padded once (two concatenations of edge views), then each sample's window is one
contiguous slice copy. On CPU that measured faster than any single advanced-indexing gather of the
whole batch (tools/bench_vision.py; uint8 gathers with a trailing channel axis are slow in torch), so
the loop over the batch is deliberate there: it only issues B memcpy-like copies. On a GPU the same loop is B
kernel launches per call, the learner's largest host cost on an H200 (docs/benchmarks.md, "The GPU path"), so
a batch on a GPU is cropped by one gather instead. Both forms take the same offsets from the same generator and
give the same pixels (tests/vision/test_augment.py). dtype is kept (uint8).
"""

from __future__ import annotations

import torch


def replicate_pad(images: torch.Tensor, pad: int) -> torch.Tensor:
    """[B, H, W, C] -> [B, H + 2 pad, W + 2 pad, C], border pixels repeated (any dtype, uint8 included)."""
    b, h, w, c = images.shape
    x = torch.cat([images[:, :1].expand(b, pad, w, c), images, images[:, -1:].expand(b, pad, w, c)], dim=1)
    side = (b, h + 2 * pad, pad, c)
    return torch.cat([x[:, :, :1].expand(side), x, x[:, :, -1:].expand(side)], dim=2)


def random_shift(images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None) -> torch.Tensor:
    """``images`` [B, H, W, C] (uint8 or any dtype) -> a new tensor of the same shape and dtype, each sample
    shifted by its own random offset in [-pad, pad] on each axis, border pixels repeated. ``pad=0``
    returns the input itself. Offsets come from ``generator`` (a CPU torch.Generator) when given."""
    if images.dim() != 4:
        raise ValueError(f"random_shift expects [B, H, W, C] images, got shape {tuple(images.shape)}")
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got {pad}")
    if pad == 0 or images.shape[0] == 0:
        return images
    b, h, w, _ = images.shape
    padded = replicate_pad(images, pad)
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator)
    if images.is_cuda:
        return crop_by_gather(padded, offsets.to(images.device), h, w)
    out = torch.empty_like(images)
    for i, (dy, dx) in enumerate(offsets.tolist()):
        out[i] = padded[i, dy : dy + h, dx : dx + w]
    return out


def crop_by_gather(padded: torch.Tensor, offsets: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Each sample's ``h`` x ``w`` window at its (dy, dx) in ``offsets`` [B, 2], as one advanced-indexing gather."""
    b = padded.shape[0]
    rows = offsets[:, :1] + torch.arange(h, device=padded.device)  # [B, h]
    cols = offsets[:, 1:] + torch.arange(w, device=padded.device)  # [B, w]
    batch = torch.arange(b, device=padded.device)[:, None, None]
    return padded[batch, rows[:, :, None], cols[:, None, :]]


class RandomShift:
    """`random_shift` with its own seeded generator: the same seed gives the same shifts."""

    def __init__(self, pad: int = 4, seed: int = 0):
        if pad < 0:
            raise ValueError(f"pad must be >= 0, got {pad}")
        self.pad = pad
        self.generator = torch.Generator().manual_seed(int(seed))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return random_shift(images, self.pad, self.generator)
