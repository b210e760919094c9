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
    def _rehearsal_has_its_judge(self) -> Config:
        # A rehearsal's eval/success_rate is the simulator judge's verdict (Step.judge_success), which only a
        # single simulator stepped in the env worker's own process reports: a batch reports none.
        if self.env.sim_state == "hidden" and self.env.num_envs > 1:
            raise ConfigError(
                "env.num_envs",
                f"is {self.env.num_envs}, but env.sim_state=hidden (a rehearsal) judges eval episodes by the "
                "simulator's judge, which a batch of simulators does not report; set env.num_envs=1, as on a cell",
            )
        return self

    @model_validator(mode="after")
    def _verdict_fits_a_step(self) -> Config:
        # The operator's verdict is awaited inside the env's step: a served env's client gives a step
        # train.step_timeout_s, so a longer wait would turn a slow answer into a step timeout.
        teleop = self.env.teleop
        if (
            teleop.device != "none"
            and self.env.reward.classifier
            and teleop.verdict_timeout_s >= self.train.step_timeout_s
        ):
            raise ConfigError(
                "env.teleop.verdict_timeout_s",
                f"is {teleop.verdict_timeout_s:g} s, not below train.step_timeout_s ({self.train.step_timeout_s:g} s), "
                "within which the step that asks for the verdict must return: lower it, or raise train.step_timeout_s",
            )
        return self
