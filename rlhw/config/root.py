"""The whole config: ``cluster`` plus the sections other layers own (each with defaults)."""

from __future__ import annotations

from pydantic import model_validator

from rlhw.config.base import StrictModel
from rlhw.config.cluster import ClusterConfig
from rlhw.config.env import EnvConfig
from rlhw.config.server import ServerConfig
from rlhw.config.train import TrainConfig
from rlhw.errors import ConfigError

#: what a step that asks for the operator's verdict needs beside the wait: its command and observation
VERDICT_STEP_MARGIN_S = 1.0


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
        # The operator's verdict is awaited inside the env's step, which an env server stops as hung after
        # server.step_deadline_s and a served env's client gives up on after train.step_timeout_s. Only where a
        # verdict can be asked: a device and a success classifier.
        teleop = self.env.teleop
        if teleop.device == "none" or not self.env.reward.classifier:
            return self
        bound, name = min(
            (self.server.step_deadline_s, "server.step_deadline_s"), (self.train.step_timeout_s, "train.step_timeout_s")
        )
        if teleop.verdict_timeout_s > bound - VERDICT_STEP_MARGIN_S:
            raise ConfigError(
                "env.teleop.verdict_timeout_s",
                f"is {teleop.verdict_timeout_s:g} s, but the step that asks for the verdict must return within {name} "
                f"({bound:g} s), {VERDICT_STEP_MARGIN_S:g} s of it for the step itself: lower it to at most "
                f"{bound - VERDICT_STEP_MARGIN_S:g}, or raise server.step_deadline_s and train.step_timeout_s to at "
                f"least {teleop.verdict_timeout_s + VERDICT_STEP_MARGIN_S:g}",
            )
        return self
