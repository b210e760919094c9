"""rlhw: robotics-aware env servers and RL on real Franka arms and simulators, placed on Ray.

The runtime names are imported lazily so that `rlhw placement` does not pay for importing Ray.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

__version__ = "0.1.0"

_RUNTIME = {
    "Cluster": "rlhw.runtime.cluster",
    "Worker": "rlhw.runtime.worker",
    "WorkerGroup": "rlhw.runtime.group",
    "WorkerAddress": "rlhw.runtime.address",
    "WorkerInfo": "rlhw.runtime.worker",
    "Channel": "rlhw.runtime.channel",
}

__all__ = list(_RUNTIME)

__getattr__ = lazy_getattr(__name__, _RUNTIME)
