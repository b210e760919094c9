"""The whole config: ``cluster`` plus the sections other layers own (each with defaults)."""

from __future__ import annotations

from pydantic import model_validator

from rlhw.config.base import StrictModel
from rlhw.config.cluster import ClusterConfig
from rlhw.config.env import EnvConfig
from rlhw.config.server import ServerConfig
from rlhw.config.train import TrainConfig
from rlhw.errors import ConfigError


class Config(StrictModel):
    cluster: ClusterConfig
    env: EnvConfig = EnvConfig()
    server: ServerConfig = ServerConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="after")
    def _runner_drives_the_instances(self) -> Config:
        # The in-process runner is one env, one loop; quietly training on 1 of N instances would mislead.
        if self.train.runner == "local" and self.env.num_envs > 1:
            raise ValueError(
                f"env.num_envs is {self.env.num_envs}, but train.runner=local steps one env instance in one loop: "
                "set env.num_envs=1, or train.runner=pipeline to step several instances per env worker"
            )
        return self

    @model_validator(mode="after")
    def _rehearsal_runs_locally(self) -> Config:
        # The judge's verdict (eval/success_rate in a rehearsal) travels in the step info of the in-process
        # runner; the pipeline's wire carries one success flag, the measured one, so its eval figure would be
        # the classifier's opinion presented as the truth.
        if self.env.sim_state == "hidden" and self.train.runner != "local":
            raise ConfigError(
                "train.runner",
                "env.sim_state=hidden (a rehearsal) logs the simulator judge's eval verdict from the in-process runner "
                "only; set train.runner=local (the pipeline's wire carries the measured success alone)",
            )
        return self
