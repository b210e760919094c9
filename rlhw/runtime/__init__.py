"""Layer 2: the Ray runtime. Cluster (nodes, ranks, hardware, placement), Worker / WorkerGroup
(one pinned actor per Placement record), send/recv, collective groups, and named Channels.

Names are imported lazily so that importing one module does not import them all.
"""

from __future__ import annotations

_EXPORTS = {
    "Cluster": "rlhw.runtime.cluster",
    "Worker": "rlhw.runtime.worker",
    "WorkerAddress": "rlhw.runtime.worker",
    "WorkerInfo": "rlhw.runtime.worker",
    "WorkerGroup": "rlhw.runtime.group",
    "GroupCall": "rlhw.runtime.group",
    "Channel": "rlhw.runtime.channel",
    "ChannelError": "rlhw.runtime.channel",
    "ChannelTimeout": "rlhw.runtime.channel",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlhw.runtime' has no attribute {name!r}")
