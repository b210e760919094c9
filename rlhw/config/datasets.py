"""A `train.demos` entry that is a LeRobotDataset recorded elsewhere: where its features go in the env.

An rlhw episode directory, or a LeRobotDataset that ``rlhw export-dataset`` wrote, is a plain path: the
export says how its features map back. A LeRobotDataset recorded with other tools (LeRobot's own recorder,
a leader arm...) names its features its own way, so its entry says where each of the env's observations
and its action come from::

    train:
      demos:
        - demos/insert
        - path: datasets/so100_insert
          observations:                           # env observation -> dataset feature
            to_goal: observation.state[0:3]       # a slice [start:stop] of a vector feature
            gripper_width: observation.state[6:7]
            image_front: observation.images.top   # a video or image feature of the same H x W x 3
          action: action[0:3]

A feature reference is ``NAME`` or ``NAME[START:STOP]``; it is parsed here, once, into a `FeatureRef`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BeforeValidator, Discriminator, Field, PlainSerializer, Tag

from rlhw.config.base import StrictModel

_REF = re.compile(r"^\s*([^\[\]\s]+)\s*(?:\[\s*(\d+)\s*:\s*(\d+)\s*\])?\s*$")


@dataclass(frozen=True)
class FeatureRef:
    """A LeRobot feature, or the slice ``[start:stop]`` of its last axis."""

    name: str
    start: int | None = None
    stop: int | None = None

    @classmethod
    def parse(cls, text: str) -> FeatureRef:
        m = _REF.match(str(text))
        if not m:
            raise ValueError(
                f"{text!r} is not a feature reference: write NAME or NAME[START:STOP], e.g. observation.state[0:3]"
            )
        start, stop = (int(m.group(2)), int(m.group(3))) if m.group(2) is not None else (None, None)
        if start is not None and stop <= start:
            raise ValueError(f"{text!r}: the slice [{start}:{stop}] is empty; STOP must be greater than START")
        return cls(m.group(1), start, stop)

    def __str__(self) -> str:
        return self.name if self.start is None else f"{self.name}[{self.start}:{self.stop}]"


def _ref(value) -> FeatureRef:
    return value if isinstance(value, FeatureRef) else FeatureRef.parse(value)


#: A feature reference in a config: written as text, held as a `FeatureRef`, dumped back as text.
Feature = Annotated[FeatureRef, BeforeValidator(_ref), PlainSerializer(str, return_type=str)]


class LeRobotDemoConfig(StrictModel):
    """One LeRobotDataset directory loaded as demonstrations, with the map from its features to the env's."""

    path: str = Field(..., description="directory of a LeRobotDataset (v3.0: meta/info.json, data/, videos/)")
    observations: dict[str, Feature] = Field(
        default_factory=dict,
        description="env observation key -> dataset feature (NAME or NAME[START:STOP]); "
        "empty = the map an `rlhw export-dataset` export carries",
    )
    action: Feature | None = Field(
        None, description="the feature holding the executed action (default: the export's map, else `action`)"
    )
    reward: Feature = Field(FeatureRef("next.reward"), description="per-frame reward after the frame's action")
    done: Literal["episode_end"] | Feature = Field(
        FeatureRef("next.done"),
        union_mode="left_to_right",
        description="per-frame end-of-episode flag, or episode_end: the last frame of "
        "each episode ends it (for a dataset without one)",
    )


def _entry_kind(value) -> str:
    return "dataset" if isinstance(value, (dict, LeRobotDemoConfig)) else "path"


#: A `train.demos` entry: a directory (rlhw episodes, or an rlhw export), or a dataset with its feature map.
#: Told apart by their form, so that an error in a map is reported inside the map.
DemoEntry = Annotated[
    Annotated[str, Tag("path")] | Annotated[LeRobotDemoConfig, Tag("dataset")], Discriminator(_entry_kind)
]
