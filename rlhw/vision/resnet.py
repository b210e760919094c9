"""ResNet v1 with BasicBlocks (He et al. 2016), parameter names laid out as torchvision's ``ResNet``.

Why our own: the torchvision 0.28 wheel from PyPI is a CUDA build whose compiled ops fail to load
beside the CPU torch this project pins (``import torchvision`` raises "operator torchvision::nms does
not exist"), and the encoders need only the architecture. The module names (``conv1``, ``bn1``,
``layer1.0.conv1``, ``layer2.0.downsample.0`` ...) follow torchvision's, so a state_dict saved from a
torchvision ``resnet18()`` (or a ResNet-10 built as ``ResNet(BasicBlock, [1, 1, 1, 1])``) loads as is;
its ``fc.*`` classifier entries are not part of this trunk.

``resnet18`` = [2, 2, 2, 2] blocks, ``resnet10`` = [1, 1, 1, 1]. Output: global-average-pooled
512-wide features, for any input of at least 32x32 pixels.
"""

from __future__ import annotations

import torch
import torch.nn as nn

BLOCKS = {"resnet10": (1, 1, 1, 1), "resnet18": (2, 2, 2, 2)}
WIDTHS = (64, 128, 256, 512)


def _conv3x3(inp: int, out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inp, out, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, plus the identity (or a strided 1x1 projection) shortcut."""

    def __init__(self, inp: int, out: int, stride: int = 1):
        super().__init__()
        self.conv1 = _conv3x3(inp, out, stride)
        self.bn1 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(out, out)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inp, out, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + shortcut)


class ResNetTrunk(nn.Module):
    """Stem (7x7/2 conv, BN, ReLU, 3x3/2 max-pool), four stages, global average pool -> [B, 512]."""

    out_features = WIDTHS[-1]

    def __init__(self, blocks: tuple[int, int, int, int], in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inp = 64
        for stage, (n, width) in enumerate(zip(blocks, WIDTHS), start=1):
            layers = []
            for i in range(n):
                layers.append(BasicBlock(inp, width, stride=2 if (i == 0 and stage > 1) else 1))
                inp = width
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        for m in self.modules():  # torchvision's initialisation: He-normal convs, unit BatchNorm
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


def resnet_trunk(kind: str, in_channels: int = 3) -> ResNetTrunk:
    if kind not in BLOCKS:
        raise ValueError(f"unknown ResNet {kind!r}; known: {', '.join(BLOCKS)}")
    return ResNetTrunk(BLOCKS[kind], in_channels)
