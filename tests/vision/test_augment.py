"""DrQ random shift: changes the pixels, never the shape or dtype; reproducible from a seed."""

from __future__ import annotations

import torch

from rlhw.vision.augment import RandomShift, crop_by_gather, random_shift, replicate_pad


def _images(b=16, h=64, w=64, seed=0) -> torch.Tensor:
    return torch.randint(0, 256, (b, h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_random_shift_changes_the_images_but_keeps_shape_and_dtype():
    x = _images()
    y = random_shift(x, 4, torch.Generator().manual_seed(1))
    assert y.shape == x.shape and y.dtype == torch.uint8
    changed = [not torch.equal(a, b) for a, b in zip(x, y)]
    assert sum(changed) >= 12  # a zero shift (1/81 per sample) leaves a sample as it was


def test_each_sample_is_the_padded_image_cropped_at_its_own_offset():
    x = _images(b=8, h=32, w=40)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    y = random_shift(x, 4, g1)
    offsets = torch.randint(0, 9, (8, 2), generator=g2)
    padded = torch.nn.functional.pad(x.permute(0, 3, 1, 2).float(), (4, 4, 4, 4), mode="replicate")
    padded = padded.permute(0, 2, 3, 1).to(torch.uint8)
    for i, (dy, dx) in enumerate(offsets.tolist()):
        assert torch.equal(y[i], padded[i, dy : dy + 32, dx : dx + 40])
    assert len({tuple(o) for o in offsets.tolist()}) > 1  # offsets differ between samples


def test_the_gather_a_gpu_batch_takes_gives_the_loop_s_pixels():
    # A batch on a GPU is cropped by one gather instead of one copy per sample; same offsets, same pixels.
    x = _images(b=32, h=24, w=20)
    looped = random_shift(x, 4, torch.Generator().manual_seed(9))
    offsets = torch.randint(0, 9, (32, 2), generator=torch.Generator().manual_seed(9))
    gathered = crop_by_gather(replicate_pad(x, 4), offsets, 24, 20)
    assert gathered.dtype == torch.uint8 and torch.equal(gathered, looped)


def test_the_same_seed_gives_the_same_shifts_and_another_seed_others():
    x = _images()
    assert torch.equal(RandomShift(4, seed=3)(x), RandomShift(4, seed=3)(x))
    assert not torch.equal(RandomShift(4, seed=3)(x), RandomShift(4, seed=4)(x))


def test_zero_padding_is_the_identity_and_replicate_pad_repeats_the_border():
    x = _images(b=2, h=8, w=8)
    assert random_shift(x, 0) is x
    p = replicate_pad(x, 2)
    assert p.shape == (2, 12, 12, 3)
    assert torch.equal(p[:, 0, 2:10], x[:, 0]) and torch.equal(p[:, 5, 0], x[:, 3, 0])
