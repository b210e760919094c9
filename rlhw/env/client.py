"""Clients of the env service. This module is the stable import path for them; each job has its module:

- `RemoteEnv` (rlhw.env.remote_env): a gymnasium.Env backed by one env server;
- `RemoteVectorEnv` (rlhw.env.remote_vector_env): one vector env over many servers;
- `probe_env_server` (rlhw.env.probe): a read-only check, for the smoke test and operators;
- the Session stream and its deadline watcher (rlhw.env.session_stream), the channel and its retry
  policy (rlhw.env.grpc_channel), spaces from a spec (rlhw.robot.gym.spaces_from_spec);
- the errors a call raises (rlhw.env.errors), chosen from the status code and the typed reason.

The clients are imported on first use (PEP 562): importing an error class does not import gymnasium.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr
from rlhw.env.errors import (  # noqa: F401 - re-exported: `from rlhw.env.client import ...`
    ControlConflictError,
    EnvServerUnavailable,
    EnvServiceError,
    EnvTimeout,
    EpisodeEnded,
    InvalidAction,
    RemoteRobotFault,
    SafetyLocked,
    Unauthenticated,
)

_CLIENTS = {
    "RemoteEnv": "rlhw.env.remote_env",
    "RemoteVectorEnv": "rlhw.env.remote_vector_env",
    "probe_env_server": "rlhw.env.probe",
    "spaces_from_spec": "rlhw.robot.gym",
}

__getattr__ = lazy_getattr(__name__, _CLIENTS)
