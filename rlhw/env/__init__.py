"""The env service: gRPC step/reset in front of one arm, with Gymnasium and dm_env_rpc clients.

- `EnvServer` (rlhw.env.server) serves a RobotEnv over rlhw.env.v1 and dm_env_rpc on one port;
- `RemoteEnv` / `RemoteVectorEnv` (rlhw.env.remote_env, rlhw.env.remote_vector_env) are the Gymnasium clients;
- the wire protocol is proto/rlhw/env/v1/env.proto (generated code in rlhw/env/v1/).

Names are imported lazily so that importing rlhw.env does not load gRPC.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

_LAZY = {
    "EnvServer": "rlhw.env.server",
    "RemoteEnv": "rlhw.env.remote_env",
    "RemoteVectorEnv": "rlhw.env.remote_vector_env",
    "EnvServiceError": "rlhw.env.errors",
    "EnvServerUnavailable": "rlhw.env.errors",
    "EnvTimeout": "rlhw.env.errors",
    "InvalidAction": "rlhw.env.errors",
    "ControlConflictError": "rlhw.env.errors",
    "SafetyLocked": "rlhw.env.errors",
    "EpisodeEnded": "rlhw.env.errors",
    "Unauthenticated": "rlhw.env.errors",
    "RemoteRobotFault": "rlhw.env.errors",
    "probe_env_server": "rlhw.env.probe",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
