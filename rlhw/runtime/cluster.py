"""Cluster: the Ray cluster rlhw runs on, its node ranks, its hardware, and the placement plan.

Start every node with its node rank as a Ray node label (preferred) or environment variable::

    # head (node rank 0)
    ray start --head --port 6379 --labels rlhw.node_rank=0
    # every other node, with its own rank
    ray start --address <head-ip>:6379 --labels rlhw.node_rank=1
    # equivalent, via the environment of `ray start`
    RLHW_NODE_RANK=1 ray start --address <head-ip>:6379

then ``Cluster(config, address="auto")`` in the driver. Without an address (and without a Ray
already initialised in this process) it starts an embedded single-node Ray: node rank 0.

On attach it checks, before any worker starts, that every node has a rank, that ranks are unique
and exactly 0..num_nodes-1 (errors name the node's IP), then probes each node's hardware with a
task pinned to it (``rlhw.hardware.probe_local``) and checks the result against the config
(``check_inventory``): a missing robot, camera or GPU is a HardwareError naming node and device.
The GPU count of a node is Ray's view of it (auto-detected, or ``ray start --num-gpus``).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlhw.errors import ConfigError, HardwareError, RlhwError
from rlhw.runtime.nodes import NAMESPACE, NODE_RANK_ENV, NODE_RANK_LABEL, RayNode, alive_nodes
from rlhw.runtime.stop_signals import caller_sigterm_kept

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rlhw.config import ClusterConfig, Config
    from rlhw.placement import PlacementPlan


START_HINT = (
    f"start each node with its rank, e.g. `ray start --address <head>:6379 --labels {NODE_RANK_LABEL}=<rank>` "
    "(or RLHW_NODE_RANK=<rank> ray start ...)"
)


@ray.remote(num_cpus=0, max_retries=0)
def _node_facts(cluster_config: Any, label_rank: int | None, probe: bool, timeout_s: float) -> dict:
    """Runs on one node: its rank from the environment, and its hardware inventory."""
    import os

    env_rank = os.environ.get(NODE_RANK_ENV)
    rank = label_rank
    if rank is None and env_rank is not None:
        try:
            rank = int(env_rank)
        except ValueError:
            return {"rank": None, "bad_env": env_rank}
    out: dict = {"rank": rank, "hostname": socket.gethostname()}
    if probe and rank is not None and 0 <= rank < cluster_config.num_nodes:
        from rlhw.hardware import probe_local

        out["inventory"] = probe_local(rank, cluster_config, timeout_s=timeout_s)
    return out


@ray.remote(num_cpus=0, max_retries=0)
def _interpreter_problem(path: str, timeout_s: float) -> str | None:
    """Runs on the node: None when ``path`` can start and import ray and rlhw, else what is wrong."""
    import os
    import subprocess

    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"{path} does not exist or is not executable"
    try:
        r = subprocess.run([path, "-c", "import ray, rlhw"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"{path} -c 'import ray, rlhw' took more than {timeout_s:g}s"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        return f"{path} cannot import ray and rlhw ({last}); install them into that environment"
    return None


@ray.remote(num_cpus=0, max_retries=0)
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Cluster:
    """Attach to (``address="auto"`` or ``"host:port"``) or start (default) a Ray cluster for ``config``.

    ``probe_hardware=False`` skips the hardware probe (e.g. a sim-only run on a dev box); node
    ranks are still checked. ``ray_init`` passes extra arguments to ``ray.init`` when this object
    starts or attaches Ray.
    """

    def __init__(
        self,
        config: Config,
        address: str | None = None,
        *,
        probe_hardware: bool = True,
        probe_timeout_s: float = 5.0,
        attach_timeout_s: float = 120.0,
        ray_init: dict | None = None,
    ):
        self.cluster_config: ClusterConfig = config.cluster
        self.config = config
        self._started_ray = False
        self._plan: PlacementPlan | None = None
        self._good_interpreters: set[tuple[int, str]] = set()
        self._attach(address, ray_init or {})
        self.nodes: dict[int, RayNode] = {}
        self.inventories: dict[int, Any] = {}
        self._discover(probe_hardware, probe_timeout_s, attach_timeout_s)

    # ------------------------------------------------------------------ attach
    def _attach(self, address: str | None, ray_init: dict) -> None:
        if ray.is_initialized():
            return
        with caller_sigterm_kept():  # ray.init replaces it with sys.exit (rlhw.runtime.stop_signals)
            self._init_ray(address, ray_init)

    def _init_ray(self, address: str | None, ray_init: dict) -> None:
        kwargs = {"namespace": NAMESPACE, "include_dashboard": False, "log_to_driver": True}
        kwargs.update(ray_init)
        if address is None:
            if self.cluster_config.num_nodes != 1:
                raise ConfigError(
                    "cluster.num_nodes",
                    f"is {self.cluster_config.num_nodes} but no Ray address was given, and the embedded Ray "
                    f"is one node; {START_HINT}, then use Cluster(config, address='auto')",
                )
            _start_embedded_ray(kwargs)
            self._started_ray = True
        else:
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as e:
                raise RlhwError(f"cannot attach to Ray at {address!r}: {e}; is `ray start --head` running?") from None

    # ------------------------------------------------------------------ ranks and hardware
    def _discover(self, probe: bool, probe_timeout_s: float, timeout_s: float) -> None:
        cfg = self.cluster_config
        nodes = alive_nodes()
        if len(nodes) == 1 and nodes[0].node_rank is None and cfg.num_nodes == 1:
            nodes = [dataclasses.replace(nodes[0], node_rank=0)]  # a lone unlabelled node is rank 0
        refs = [
            _node_facts.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)).remote(
                cfg, n.node_rank, probe, probe_timeout_s
            )
            for n in nodes
        ]
        try:
            facts = ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise HardwareError(f"node probes did not finish within {timeout_s:g}s") from None
        problems: list[str] = []
        by_rank: dict[int, RayNode] = {}
        for node, fact in zip(nodes, facts):
            if "bad_env" in fact:
                problems.append(f"{node.describe()}: {NODE_RANK_ENV}={fact['bad_env']!r} is not an integer")
                continue
            rank = fact["rank"]
            if rank is None:
                problems.append(f"{node.describe()} has no node rank; {START_HINT}")
                continue
            if not 0 <= rank < cfg.num_nodes:
                problems.append(
                    f"{node.describe()} has node rank {rank}, outside 0..{cfg.num_nodes - 1} (cluster.num_nodes)"
                )
                continue
            if rank in by_rank:
                problems.append(f"{node.describe()} and {by_rank[rank].describe()} both have node rank {rank}")
                continue
            by_rank[rank] = dataclasses.replace(node, node_rank=rank)
            if "inventory" in fact:
                inv = fact["inventory"]
                # GPUs as Ray will schedule them on that node.
                self.inventories[rank] = dataclasses.replace(inv, accelerators=node.num_gpus)
        missing = [r for r in range(cfg.num_nodes) if r not in by_rank]
        if missing:
            problems.append(
                f"node rank(s) {missing} not present: the config has num_nodes={cfg.num_nodes} but Ray has "
                f"{len(nodes)} alive node(s); {START_HINT}"
            )
        if problems:
            raise ConfigError("cluster.num_nodes", "Ray cluster does not match the config:\n  " + "\n  ".join(problems))
        self.nodes = by_rank
        if probe:
            from rlhw.hardware import check_inventory

            check_inventory(cfg, self.inventories)

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def accelerators(self) -> dict[int, int]:
        """GPUs per node rank, as Ray sees them."""
        return {r: n.num_gpus for r, n in self.nodes.items()}

    @property
    def placements(self) -> PlacementPlan:
        """``plan(config.cluster, detected accelerators)``: component -> Placement records by rank."""
        if self._plan is None:
            from rlhw.placement import plan

            self._plan = plan(self.cluster_config, self.accelerators)
        return self._plan

    def node_id(self, node_rank: int) -> str:
        return self._node(node_rank).node_id

    def node_ip(self, node_rank: int) -> str:
        return self._node(node_rank).ip

    def _node(self, node_rank: int) -> RayNode:
        try:
            return self.nodes[node_rank]
        except KeyError:
            raise ConfigError("node_rank", f"no node with rank {node_rank} (ranks: {sorted(self.nodes)})") from None

    def free_port(self, node_rank: int, timeout_s: float = 30.0) -> int:
        """A TCP port that was free on that node a moment ago (for MASTER_PORT)."""
        ref = _free_port.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id(node_rank), soft=False)
        ).remote()
        return ray.get(ref, timeout=timeout_s)

    def check_interpreter(self, node_rank: int, path: str, timeout_s: float = 60.0) -> None:
        """Raise ConfigError unless ``path`` on that node runs and imports ray and rlhw. Ray itself
        would keep retrying a worker whose interpreter cannot start, so this is checked up front."""
        key = (node_rank, path)
        if key in self._good_interpreters:
            return
        ref = _interpreter_problem.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id(node_rank), soft=False)
        ).remote(path, timeout_s)
        problem = ray.get(ref, timeout=timeout_s + 30)
        if problem:
            raise ConfigError(
                "cluster.node_groups[].env_configs[].python_interpreter_path",
                f"on node {node_rank} ({self.node_ip(node_rank)}): {problem}",
            )
        self._good_interpreters.add(key)

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        """Stop Ray if this object started it (an attached cluster keeps running)."""
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _start_embedded_ray(kwargs: dict) -> None:
    """Start a fresh one-node Ray in this process (address="local": never join one found on the machine).

    Ray gives its new raylet a fixed 30 s to register with the GCS and raises a bare Exception when a
    busy machine misses that window; the run would die before it began, so Ray is started once more.
    Bad arguments (TypeError, ValueError) are not retried.
    """
    try:
        ray.init(address="local", labels={NODE_RANK_LABEL: "0"}, **kwargs)
    except (TypeError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 - Ray's start-up timeout has no type of its own
        log.warning("starting the embedded Ray failed (%s); starting it once more", e)
        ray.shutdown()
        ray.init(address="local", labels={NODE_RANK_LABEL: "0"}, **kwargs)
