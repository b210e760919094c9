"""The whole config: ``cluster`` plus the sections other layers own (each with defaults)."""

from __future__ import annotations

from rlhw.config.base import StrictModel
from rlhw.config.cluster import ClusterConfig
from rlhw.config.env import EnvConfig
from rlhw.config.server import ServerConfig
from rlhw.config.train import TrainConfig


class Config(StrictModel):
    cluster: ClusterConfig
    env: EnvConfig = EnvConfig()
    server: ServerConfig = ServerConfig()
    train: TrainConfig = TrainConfig()
