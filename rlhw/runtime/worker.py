"""Worker: the base class of every rlhw process, and its name and facts (WorkerAddress, WorkerInfo).

A subclass is an ordinary Python class. ``MyWorker.create_group(...).launch(cluster, component="learner")``
turns each Placement record into one Ray actor of it, pinned to its node. The launcher puts
everything the worker must know into its environment *before* the process starts (Ray's
runtime_env), so ``__init__`` already sees RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, RLHW_NODE_RANK, RLHW_HARDWARE, CUDA_VISIBLE_DEVICES and the node's
``env_configs`` variables, and torch.distributed can be initialised from the environment alone.

Point to point: ``send(obj, dst_group, dst_rank)`` / ``recv(src_group, src_rank)``. Each worker
has a mailbox per sender, served by a separate concurrency group of its actor, so a message can be
delivered while the worker's own methods are busy (including while it waits in ``recv``). A mailbox
holds at most ``MAILBOX_MAXSIZE`` unreceived messages; ``send`` to a full one waits. Large
payloads are ``ray.put`` once by the sender and only the handle goes to the mailbox; torch tensors
between members of the same collective group (see ``WorkerGroup.init_collective``) go over
torch.distributed (gloo on CPU, NCCL on GPU) with only a small header through the mailbox.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import ray

from rlhw.errors import WorkerError
from rlhw.runtime import payload
from rlhw.runtime.address import CONCURRENCY_GROUPS, WorkerAddress, actor_name
from rlhw.runtime.group import WorkerGroup
from rlhw.runtime.nodes import NAMESPACE

__all__ = ["CONCURRENCY_GROUPS", "MAILBOX_MAXSIZE", "Worker", "WorkerAddress", "WorkerInfo", "actor_name"]

#: Unreceived messages one sender may leave with one receiver. Why a bound: a receiver that stops
#: calling ``recv`` would otherwise pin every message sent to it, object-store payloads included.
MAILBOX_MAXSIZE = 64

_DEFAULT_SEND_TIMEOUT_S = 60.0
_DEFAULT_RECV_TIMEOUT_S = 300.0
_REPLY_MARGIN_S = 10.0


@dataclass(frozen=True)
class WorkerInfo:
    """Facts about one worker, known before its user code runs."""

    address: WorkerAddress
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    node_ip: str
    node_id: str
    hardware: dict = field(default_factory=dict)
    accelerators: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "address": str(self.address),
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "node_ip": self.node_ip,
            "node_id": self.node_id,
            "hardware": self.hardware,
            "accelerators": list(self.accelerators),
        }


class _TensorHeader:
    """Mailbox message announcing a tensor that follows over torch.distributed."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __reduce__(self):
        return (_TensorHeader, (self.shape, self.dtype))


class _State:
    """Per-process runtime state of a worker, created on first use (subclasses need not call
    ``super().__init__``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mailboxes: dict[str, queue.Queue] = {}
        self.peers: dict[str, Any] = {}
        self.collective_group: str | None = None  # the group whose ranks form our torch.distributed world

    def mailbox(self, src: str) -> queue.Queue:
        with self.lock:
            box = self.mailboxes.get(src)
            if box is None:
                box = self.mailboxes[src] = queue.Queue(maxsize=MAILBOX_MAXSIZE)
            return box


_STATE_LOCK = threading.Lock()


class Worker:
    """Base class of rlhw workers. Subclass it; start many with ``create_group(...).launch(...)``."""

    # ------------------------------------------------------------------ group creation
    @classmethod
    def create_group(cls, *args: Any, **kwargs: Any) -> WorkerGroup:
        """A not-yet-launched group of ``cls``; the args go to every worker's ``__init__``."""
        return WorkerGroup(cls, args, kwargs)

    # ------------------------------------------------------------------ identity
    @property
    def _rlhw(self) -> _State:
        state = self.__dict__.get("_rlhw_state")
        if state is None:
            with _STATE_LOCK:
                state = self.__dict__.get("_rlhw_state")
                if state is None:
                    state = self.__dict__["_rlhw_state"] = _State()
        return state

    @property
    def address(self) -> WorkerAddress:
        return WorkerAddress.parse(os.environ.get("RLHW_WORKER_ADDRESS", "driver"))

    @property
    def group_name(self) -> str:
        return self.address.group

    @property
    def rank(self) -> int:
        return int(os.environ.get("RANK", "0"))

    @property
    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def info(self) -> WorkerInfo:
        hw = json.loads(os.environ.get("RLHW_HARDWARE", "{}"))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ctx = ray.get_runtime_context() if ray.is_initialized() else None
        return WorkerInfo(
            address=self.address,
            rank=self.rank,
            world_size=self.world_size,
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            node_rank=int(os.environ.get("RLHW_NODE_RANK", "0")),
            node_ip=ray.util.get_node_ip_address() if ctx else "",
            node_id=ctx.get_node_id() if ctx else "",
            hardware=hw,
            accelerators=tuple(x for x in visible.split(",") if x),
        )

    # ------------------------------------------------------------------ point to point
    def send(self, obj: Any, dst_group: str, dst_rank: int, timeout_s: float = _DEFAULT_SEND_TIMEOUT_S) -> None:
        """Deliver ``obj`` to worker ``dst_group:dst_rank``'s mailbox for this sender; returns once it
        is there (for a tensor over torch.distributed: once the receiver has taken it). Waits up to
        ``timeout_s`` while that mailbox is full (``MAILBOX_MAXSIZE`` unreceived messages)."""
        dst = str(WorkerAddress(dst_group, (dst_rank,)))
        peer = self._peer(dst, timeout_s)
        tensor_path = self._collective_peer(dst_group) and _is_tensor(obj)
        message = _TensorHeader(obj.shape, obj.dtype) if tensor_path else payload.wrap(obj)
        # The receiver decides whether the mailbox had room in time, so a refused message is never
        # delivered later; the reply margin only lets a wedged or unreachable receiver surface.
        ref = peer._rlhw_deliver.remote(str(self.address), message, timeout_s)
        try:
            accepted = ray.get(ref, timeout=timeout_s + _REPLY_MARGIN_S)
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(
                dst,
                f"did not answer a delivery from {self.address} within "
                f"{timeout_s + _REPLY_MARGIN_S:g}s (wedged, or all its delivery threads "
                "wait on full mailboxes); the message may still arrive",
            ) from None
        except ray.exceptions.RayActorError as e:
            raise WorkerError(dst, f"is dead; cannot send to it ({_first_line(e)})") from None
        if not accepted:
            raise WorkerError(
                dst,
                f"its mailbox for {self.address} stayed full ({MAILBOX_MAXSIZE} unreceived "
                f"messages) for {timeout_s:g}s; the receiver must recv from {self.address} to make room",
            )
        if tensor_path:
            import torch.distributed as dist

            dist.send(obj.contiguous(), dst=dst_rank)

    def recv(self, src_group: str, src_rank: int, timeout_s: float = _DEFAULT_RECV_TIMEOUT_S) -> Any:
        """The next object ``src_group:src_rank`` sent to this worker (in send order)."""
        src = str(WorkerAddress(src_group, (src_rank,)))
        try:
            message = self._rlhw.mailbox(src).get(timeout=timeout_s)
        except queue.Empty:
            raise WorkerError(str(self.address), f"received nothing from {src} within {timeout_s:g}s") from None
        if isinstance(message, _TensorHeader):
            import torch
            import torch.distributed as dist

            out = torch.empty(message.shape, dtype=message.dtype)
            dist.recv(out, src=src_rank)
            return out
        try:
            return payload.unwrap_many([message], timeout=timeout_s)[0]
        except (ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError) as e:
            raise WorkerError(
                src,
                f"its message to {self.address} was lost ({type(e).__name__}); the sender "
                "owns large payloads and probably died before they were received",
            ) from None
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(src, f"its message's payload could not be fetched within {timeout_s:g}s") from None

    def _peer(self, dst: str, timeout_s: float):
        peer = self._rlhw.peers.get(dst)
        if peer is None:
            try:
                peer = ray.get_actor(actor_name(dst), namespace=NAMESPACE)
            except ValueError:
                raise WorkerError(dst, "no such worker (is its group launched, and the name/rank right?)") from None
            self._rlhw.peers[dst] = peer
        return peer

    def _collective_peer(self, dst_group: str) -> bool:
        return self._rlhw.collective_group is not None and self._rlhw.collective_group == dst_group

    # ------------------------------------------------------------------ channels
    def create_channel(self, name: str, maxsize: int = 0, node: int | str | None = None):
        """A new named :class:`rlhw.runtime.channel.Channel` living as long as this worker."""
        from rlhw.runtime.channel import Channel

        return Channel.create(name, maxsize=maxsize, node=node)

    def connect_channel(self, name: str, timeout_s: float = 30.0):
        """The channel ``name`` created by any worker or the controller process (Ray's "driver"); waits up to
        ``timeout_s``."""
        from rlhw.runtime.channel import Channel

        return Channel.connect(name, timeout_s=timeout_s)

    # ------------------------------------------------------------------ actor-side plumbing
    @ray.method(concurrency_group="rlhw_mailbox")
    def _rlhw_deliver(self, src: str, message: Any, timeout_s: float) -> bool:
        try:
            self._rlhw.mailbox(src).put(message, timeout=timeout_s)
        except queue.Full:
            return False
        return True

    @ray.method(concurrency_group="rlhw_control")
    def _rlhw_info(self) -> dict:
        import sys

        d = self.info.to_json()
        d["pid"] = os.getpid()
        d["python"] = sys.executable
        return d

    @ray.method(concurrency_group="rlhw_control")
    def _rlhw_env(self, names: list[str]) -> dict:
        return {n: os.environ.get(n) for n in names}

    def _rlhw_init_collective(self, backend: str, timeout_s: float) -> str:
        """Join the torch.distributed world of this worker's group (runs in the default group)."""
        from datetime import timedelta

        import torch.distributed as dist

        if dist.is_initialized():
            return dist.get_backend()
        if backend == "auto":
            backend = "nccl" if os.environ.get("CUDA_VISIBLE_DEVICES") and _cuda_available() else "gloo"
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self._rlhw.collective_group = self.group_name
        return backend


def _is_tensor(obj: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, torch.Tensor)


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
