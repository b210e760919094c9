"""Layer 2: the Ray runtime. Cluster (nodes, ranks, hardware, placement), Worker / WorkerGroup
(one pinned actor per Placement record), send/recv, collective groups, and named Channels.

Names are imported lazily so that importing one module does not import them all.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

_EXPORTS = {
    "Cluster": "rlhw.runtime.cluster",
    "Worker": "rlhw.runtime.worker",
    "WorkerAddress": "rlhw.runtime.address",
    "WorkerInfo": "rlhw.runtime.worker",
    "WorkerGroup": "rlhw.runtime.group",
    "GroupCall": "rlhw.runtime.group",
    "Channel": "rlhw.runtime.channel",
    "ChannelError": "rlhw.runtime.channel",
    "ChannelTimeout": "rlhw.runtime.channel",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
