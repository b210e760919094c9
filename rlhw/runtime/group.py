"""WorkerGroup: one Ray actor per Placement record, called together like a single object.

``group.method(*args)`` calls ``method`` on every worker (or on the ranks chosen with
``group.execute_on(ranks)``) in parallel and returns a :class:`GroupCall`; ``.wait(timeout)``
returns the results in rank order, ``await call`` does the same from asyncio. A worker that raises
surfaces as :class:`rlhw.errors.WorkerError` with its address and the remote traceback; a worker
that dies surfaces the same way as soon as Ray notices (seconds), never as a silent hang.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlhw.errors import ConfigError, WorkerError
from rlhw.runtime.address import CONCURRENCY_GROUPS, WorkerAddress, actor_name
from rlhw.runtime.nodes import NAMESPACE

if TYPE_CHECKING:
    from rlhw.placement import Placement
    from rlhw.runtime.cluster import Cluster


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_for(address: str, exc: BaseException) -> WorkerError:
    """Turn a Ray exception into WorkerError naming the worker."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc).splitlines()[0]
        tb = getattr(exc, "traceback_str", None) or str(exc)
        return WorkerError(address, f"raised {what}", tb)
    if isinstance(exc, ray.exceptions.RayActorError):
        text = _ANSI.sub("", str(exc)).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if getattr(exc, "actor_init_failed", False):
            return WorkerError(address, f"failed in __init__: {lines[-1] if lines else text}", text)
        why = lines[-1] if lines else type(exc).__name__
        return WorkerError(address, f"died ({why})")
    if isinstance(exc, ray.exceptions.GetTimeoutError):
        return WorkerError(address, "did not answer in time")
    return WorkerError(address, f"{type(exc).__name__}: {exc}")


class GroupCall:
    """Pending results of one method call on several workers."""

    def __init__(self, method: str, addresses: list[str], refs: list[ray.ObjectRef]):
        self.method = method
        self.addresses = addresses
        self.refs = refs

    def wait(self, timeout: float | None = None) -> list:
        """Results in rank order. Raises WorkerError for the first worker that fails or dies (without
        waiting for slower ones), or for every worker still running after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        index = {ref: i for i, ref in enumerate(self.refs)}
        results: list = [None] * len(self.refs)
        pending = list(self.refs)
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=remaining)
            if not ready:
                late = ", ".join(self.addresses[index[r]] for r in pending)
                raise WorkerError(late, f"{self.method}() did not finish within {timeout:g}s")
            for ref in ready:
                i = index[ref]
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - every Ray failure becomes a WorkerError
                    raise _error_for(self.addresses[i], e) from None
        return results

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> list:
        tasks = [asyncio.ensure_future(self._one(i, ref)) for i, ref in enumerate(self.refs)]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for t in tasks:
                t.cancel()

    async def _one(self, i: int, ref):
        try:
            return await ref
        except Exception as e:  # noqa: BLE001
            raise _error_for(self.addresses[i], e) from None


class _Selection:
    """``group.execute_on(ranks)``: the next method call goes to these ranks only."""

    def __init__(self, group: WorkerGroup, ranks: list[int]):
        self._group = group
        self._ranks = ranks

    def __getattr__(self, name: str):
        return self._group._method(name, self._ranks)


class WorkerGroup:
    """Workers of one class, one per Placement record of a component. Build with
    ``MyWorker.create_group(*args, **kwargs)``, then :meth:`launch`."""

    def __init__(self, cls: type, args: tuple = (), kwargs: dict | None = None):
        self.worker_cls = cls
        self._args = args
        self._kwargs = kwargs or {}
        self.name: str | None = None
        self.placements: list[Placement] = []
        self.actors: list = []
        self.addresses: list[str] = []

    def __repr__(self) -> str:
        return f"WorkerGroup({self.worker_cls.__name__}, name={self.name!r}, world_size={len(self.actors)})"

    @property
    def world_size(self) -> int:
        return len(self.actors)

    # ------------------------------------------------------------------ launch
    def launch(
        self,
        cluster: Cluster,
        component: str,
        name: str | None = None,
        *,
        num_cpus: float = 0,
        ready_timeout_s: float = 120.0,
    ) -> WorkerGroup:
        """Start one Ray actor per placement record of ``component`` (e.g. "env", "rollout", "learner"), each pinned
        (hard node affinity) to its node, with its environment set before ``__init__`` runs; wait until all are up.

        ``name`` (default: the component name) is the group part of the workers' addresses.
        ``num_cpus`` is what each actor reserves in Ray (0: placement is rlhw's, not Ray's, job).
        """
        if self.actors:
            raise WorkerError(self.name or "?", "this group is already launched")
        records = list(cluster.placements[component])
        self.name = name or component
        WorkerAddress(self.name)  # validates the name
        if not records:
            raise ConfigError(f"cluster.component_placement.{component}", "places no process")
        master_addr = cluster.node_ip(records[0].node_rank)
        master_port = cluster.free_port(records[0].node_rank)
        remote_cls = ray.remote(concurrency_groups=CONCURRENCY_GROUPS, max_restarts=0)(self.worker_cls)
        gpu_share = gpu_shares(records, [r for recs in cluster.placements.values() for r in recs])
        for rec in records:
            python = cluster.cluster_config.node_env(rec.node_rank).python_interpreter_path
            if python:
                cluster.check_interpreter(rec.node_rank, python)
        for rec in records:
            address = str(WorkerAddress(self.name, (rec.rank,)))
            env = self._env_for(cluster, rec, address, master_addr, master_port)
            runtime_env: dict = {"env_vars": env}
            python = cluster.cluster_config.node_env(rec.node_rank).python_interpreter_path
            if python:
                runtime_env["py_executable"] = python
            opts = dict(
                name=actor_name(address),
                namespace=NAMESPACE,
                num_cpus=num_cpus,
                num_gpus=gpu_share[rec.rank],
                runtime_env=runtime_env,
                scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.node_id(rec.node_rank), soft=False),
            )
            try:
                actor = remote_cls.options(**opts).remote(*self._args, **self._kwargs)
            except ValueError as e:
                self.shutdown()
                raise WorkerError(address, f"cannot be created: {e}") from None
            self.actors.append(actor)
            self.addresses.append(address)
            self.placements.append(rec)
        # Wait until every constructor has run, so errors in __init__ surface here, by address.
        try:
            GroupCall("__init__", self.addresses, [a._rlhw_env.remote([]) for a in self.actors]).wait(ready_timeout_s)
        except WorkerError:
            self.shutdown()
            raise
        return self

    def _env_for(self, cluster: Cluster, rec: Placement, address: str, master_addr: str, master_port: int) -> dict:
        env = dict(cluster.cluster_config.node_env(rec.node_rank).env_vars)
        env.update(
            {
                "RANK": str(rec.rank),
                "WORLD_SIZE": str(rec.world_size),
                "LOCAL_RANK": str(rec.local_rank),
                "LOCAL_WORLD_SIZE": str(rec.local_world_size),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RLHW_NODE_RANK": str(rec.node_rank),
                "RLHW_WORKER_ADDRESS": address,
                "RLHW_HARDWARE": json.dumps(_hardware_json(cluster, rec)),
                # rlhw, not Ray, decides which accelerators a worker sees (the placement's choice).
                "CUDA_VISIBLE_DEVICES": ",".join(rec.visible_accelerators),
                "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
            }
        )
        return env

    # ------------------------------------------------------------------ calls
    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("worker_cls", "actors", "addresses", "placements", "name"):
            raise AttributeError(name)
        return self._method(name, None)

    def execute_on(self, ranks: int | Iterable[int]) -> _Selection:
        """``group.execute_on([0]).save()`` calls ``save`` on rank 0 only."""
        ranks = [ranks] if isinstance(ranks, int) else list(ranks)
        bad = [r for r in ranks if not isinstance(r, int) or not 0 <= r < len(self.actors)]
        if bad or not ranks:
            raise WorkerError(
                self.name or "?", f"execute_on: ranks {bad or ranks} are not in 0..{len(self.actors) - 1}"
            )
        return _Selection(self, ranks)

    def _method(self, name: str, ranks: Sequence[int] | None):
        if not callable(getattr(self.worker_cls, name, None)):
            raise AttributeError(f"{self.worker_cls.__name__} has no method {name!r}")
        if not self.actors:
            raise WorkerError(
                self.name or self.worker_cls.__name__, "group is not launched; call .launch(cluster, component=...)"
            )
        chosen = list(range(len(self.actors))) if ranks is None else list(ranks)

        def call(*args: Any, **kwargs: Any) -> GroupCall:
            refs, addrs = [], []
            for r in chosen:
                try:
                    refs.append(getattr(self.actors[r], name).remote(*args, **kwargs))
                except Exception as e:  # noqa: BLE001 - e.g. a killed handle
                    raise _error_for(self.addresses[r], e) from None
                addrs.append(self.addresses[r])
            return GroupCall(name, addrs, refs)

        call.__name__ = name
        return call

    def info(self, timeout: float = 30.0) -> list[dict]:
        """WorkerInfo (as dicts, plus pid and interpreter) of every worker, in rank order."""
        return GroupCall("info", self.addresses, [a._rlhw_info.remote() for a in self.actors]).wait(timeout)

    def init_collective(self, backend: str = "auto", timeout_s: float = 120.0) -> str:
        """Form one torch.distributed world of all workers (rank = group rank) from MASTER_ADDR /
        MASTER_PORT; ``auto`` picks NCCL when the workers see GPUs, else gloo. Returns the backend."""
        if backend not in ("auto", "gloo", "nccl"):
            raise ConfigError("backend", f"unknown backend {backend!r}; use auto, gloo or nccl")
        refs = [a._rlhw_init_collective.remote(backend, timeout_s) for a in self.actors]
        return GroupCall("init_collective", self.addresses, refs).wait(timeout_s + 30)[0]

    # ------------------------------------------------------------------ lifecycle
    def kill(self, rank: int) -> None:
        ray.kill(self.actors[rank], no_restart=True)

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors, self.addresses, self.placements = [], [], []


def gpu_shares(records: list[Placement], plan_records: list[Placement]) -> dict[int, float]:
    """Ray GPU request per record: 1/k of each accelerator shared by k processes of the whole plan.

    Counted over every component, not just this launch: rollout and actor sharing the one GPU of a
    workstation must each ask Ray for half of it, or the second group waits for a GPU forever.
    """
    users: dict[tuple[int, str], int] = {}
    for rec in plan_records:
        for acc in rec.visible_accelerators:
            users[(rec.node_rank, acc)] = users.get((rec.node_rank, acc), 0) + 1
    out = {}
    for rec in records:
        share = sum(1.0 / users[(rec.node_rank, acc)] for acc in rec.visible_accelerators)
        # Ray takes fractions below 1 or whole numbers only.
        out[rec.rank] = share if share <= 1 else float(round(share))
    return out


def _hardware_json(cluster: Cluster, rec: Placement) -> dict:
    out: dict = {
        "type": rec.hardware_type,
        "node_group": rec.node_group,
        "ranks": list(rec.hardware_ranks),
        "local_ranks": list(rec.local_hardware_ranks),
    }
    try:
        group = cluster.cluster_config.group(rec.node_group)
    except Exception:  # noqa: BLE001 - reserved groups ('node', 'cluster') have no section
        group = None
    hw = group.hardware if group is not None else None
    if hw is not None and hw.type == rec.hardware_type:
        out["devices"] = [hw.configs[r].model_dump(mode="json") for r in rec.hardware_ranks if 0 <= r < len(hw.configs)]
    return out
