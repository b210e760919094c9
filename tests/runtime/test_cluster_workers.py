"""Workers on a real multi-node Ray cluster (ray.cluster_utils: several raylets on this machine).

One cluster for the whole module: node 0 (head, label rlhw.node_rank=0), node 1 (label rank 1,
two GPUs declared to Ray), node 2 (no label; its rank comes from RLHW_NODE_RANK in the raylet's
environment). Node 1 runs its workers with a second virtualenv's interpreter.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time

import numpy as np
import pytest
import ray

from rlhw.config import load_config_dict
from rlhw.errors import ConfigError, HardwareError, WorkerError
from rlhw.network import FCI_PORT
from rlhw.placement import plan
from rlhw.runtime.cluster import Cluster
from rlhw.runtime.worker import MAILBOX_MAXSIZE, Worker
from tests.ray_nodes import add_raylet, ray_cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

ROBOT_IP = "127.0.0.61"  # a TCP listener stands in for the arm's FCI port during the probe


def make_second_venv(path: str) -> str:
    """A virtualenv whose site-packages chain to this one's (so ray and rlhw import); ~1 s."""
    python = os.path.join(path, "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True, timeout=60)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    with open(os.path.join(site, "rlhw_parent_venv.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return python


def hetero_config(python: str, num_nodes: int = 3, robot_ip: str = ROBOT_IP) -> dict:
    return {
        "cluster": {
            "num_nodes": num_nodes,
            "component_placement": {
                "learner": {"node_group": "gpu", "placement": "0-1"},
                "env": {"node_group": "franka", "placement": "0"},
                "agent": {"node_group": "node", "placement": "0-2:0-2"},
            },
            "node_groups": [
                {
                    "label": "gpu",
                    "node_ranks": "1",
                    "accelerators_per_node": 2,
                    "env_configs": [
                        {
                            "node_ranks": "1",
                            "python_interpreter_path": python,
                            "env_vars": [{"RLHW_TEST_SITE": "gpu-node"}],
                        }
                    ],
                },
                {
                    "label": "franka",
                    "node_ranks": "2",
                    "env_configs": [{"node_ranks": "2", "env_vars": [{"RLHW_TEST_SITE": "robot-node"}]}],
                    "hardware": {"type": "Franka", "configs": [{"robot_ip": robot_ip, "node_rank": 2}]},
                },
            ],
        }
    }


@pytest.fixture(scope="module")
def fake_arm():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ROBOT_IP, FCI_PORT))
    srv.listen(16)
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield ROBOT_IP
    stop.set()
    t.join(2)
    srv.close()


@pytest.fixture(scope="module")
def ray_nodes(tmp_path_factory):
    with ray_cluster(
        {"num_cpus": 2, "labels": {"rlhw.node_rank": "0"}},
        {"num_cpus": 1, "num_gpus": 2, "labels": {"rlhw.node_rank": "1"}},
        {"num_cpus": 1, "env_vars": {"RLHW_NODE_RANK": "2"}},
    ) as rc:
        yield rc


@pytest.fixture(scope="module")
def python2(tmp_path_factory):
    return make_second_venv(str(tmp_path_factory.mktemp("venv2") / "venv"))


@pytest.fixture(scope="module")
def config(python2):
    return load_config_dict(hetero_config(python2))


@pytest.fixture(scope="module")
def cluster(ray_nodes, fake_arm, config):
    return Cluster(config, address=ray_nodes.address)


class Probe(Worker):
    """Reports where and how it runs; sleeps or fails on request; talks to peers."""

    def __init__(self, tag: str = ""):
        # Everything below must already be set when user code starts.
        self.seen_at_init = {k: os.environ.get(k) for k in ENV_NAMES}
        self.tag = tag

    def where(self) -> dict:
        import sys as _sys

        return {
            "init_env": self.seen_at_init,
            "python": _sys.executable,
            "tag": self.tag,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    def rank_times_ten(self) -> int:
        return self.rank * 10

    def sleep(self, seconds: float, started: str | None = None) -> float:
        """A long call (for tests that kill a worker mid-call); ``started``: a folder where the call
        creates a file named after its rank once it runs, so the test knows it is mid-call."""
        if started:
            open(os.path.join(started, str(self.rank)), "w").close()
        time.sleep(seconds)  # the long call itself
        return seconds

    def meet(self, folder: str, n: int, timeout_s: float) -> bool:
        """Mark this rank present in ``folder`` and wait for ``n`` ranks there: True once all are, False after
        ``timeout_s`` (calls run one after another would never all be present at once)."""
        open(os.path.join(folder, str(self.rank)), "w").close()
        deadline = time.monotonic() + timeout_s
        while len(os.listdir(folder)) < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def fail(self) -> None:
        raise ValueError(f"boom from rank {self.rank}")

    def send_to(self, obj, group: str, rank: int) -> bool:
        self.send(obj, group, rank)
        return True

    def send_range(self, n: int, group: str, rank: int, timeout_s: float = 60.0) -> int:
        for i in range(n):
            self.send(i, group, rank, timeout_s=timeout_s)
        return n

    def recv_from(self, group: str, rank: int, timeout_s: float = 30.0):
        return self.recv(group, rank, timeout_s=timeout_s)

    def recv_summary(self, group: str, rank: int, n: int) -> list:
        out = []
        for _ in range(n):
            x = self.recv(group, rank, timeout_s=30.0)
            out.append(_describe(x))
        return out


def _describe(x):
    import torch

    if isinstance(x, np.ndarray):
        return ("ndarray", x.shape, float(x.sum()), bool(x.flags.writeable))
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), float(x.sum()))
    return ("obj", x)


ENV_NAMES = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RLHW_NODE_RANK",
    "RLHW_HARDWARE",
    "CUDA_VISIBLE_DEVICES",
    "RLHW_TEST_SITE",
]


@pytest.fixture(scope="module")
def groups(cluster):
    made = {}
    for component in ("learner", "env", "agent"):
        made[component] = Probe.create_group(tag=component).launch(cluster, component=component)
    yield made
    for g in made.values():
        g.shutdown()


def test_node_ranks_come_from_labels_and_from_the_raylet_environment(cluster, ray_nodes):
    assert sorted(cluster.nodes) == [0, 1, 2]
    assert len({n.node_id for n in cluster.nodes.values()}) == 3
    assert cluster.accelerators == {0: 0, 1: 2, 2: 0}


def test_every_worker_runs_where_the_plan_says_with_its_env_interpreter_and_devices(cluster, groups, config, python2):
    expected = plan(config.cluster, {0: 0, 1: 2, 2: 0})
    for component, group in groups.items():
        records = expected[component]
        assert group.world_size == len(records)
        reports = group.where().wait(60)
        for rec, rep in zip(records, reports):
            env = rep["init_env"]
            assert rep["node_id"] == cluster.node_id(rec.node_rank)
            assert env["RANK"] == str(rec.rank) and env["WORLD_SIZE"] == str(rec.world_size)
            assert env["LOCAL_RANK"] == str(rec.local_rank)
            assert env["LOCAL_WORLD_SIZE"] == str(rec.local_world_size)
            assert env["RLHW_NODE_RANK"] == str(rec.node_rank)
            assert env["MASTER_ADDR"] == cluster.node_ip(records[0].node_rank)
            assert int(env["MASTER_PORT"]) > 0
            assert env["CUDA_VISIBLE_DEVICES"] == ",".join(rec.visible_accelerators)
            hw = __import__("json").loads(env["RLHW_HARDWARE"])
            assert hw["type"] == rec.hardware_type and hw["ranks"] == list(rec.hardware_ranks)
            on_gpu_node = rec.node_rank == 1
            assert rep["python"] == (python2 if on_gpu_node else sys.executable)
            assert env["RLHW_TEST_SITE"] == {1: "gpu-node", 2: "robot-node"}.get(rec.node_rank)
    # the learner component owns one (fake) GPU each, on node 1
    assert [r["init_env"]["CUDA_VISIBLE_DEVICES"] for r in groups["learner"].where().wait(30)] == ["0", "1"]
    env_hw = __import__("json").loads(groups["env"].where().wait(30)[0]["init_env"]["RLHW_HARDWARE"])
    assert env_hw["devices"][0]["robot_ip"] == ROBOT_IP


def test_worker_info_names_address_node_and_accelerators(groups, cluster):
    infos = groups["learner"].info()
    assert [i["address"] for i in infos] == ["learner:0", "learner:1"]
    assert all(i["node_rank"] == 1 and i["node_id"] == cluster.node_id(1) for i in infos)
    assert [i["accelerators"] for i in infos] == [["0"], ["1"]]


def test_group_call_reaches_every_rank_and_execute_on_narrows_the_next_call(groups):
    agent = groups["agent"]
    assert agent.rank_times_ten().wait(30) == [0, 10, 20]
    assert agent.execute_on([2]).rank_times_ten().wait(30) == [20]
    assert agent.rank_times_ten().wait(30) == [0, 10, 20]  # narrowing was for one call only
    with pytest.raises(WorkerError, match="not in 0..2"):
        agent.execute_on([5])


def test_group_calls_run_in_parallel(groups, tmp_path):
    # Each rank's call waits inside for the other two to arrive: only calls running at once all meet.
    assert groups["agent"].meet(str(tmp_path), 3, 20.0).wait(60) == [True, True, True]


def test_group_call_can_be_awaited(groups):
    import asyncio

    async def main():
        return await groups["agent"].rank_times_ten()

    assert asyncio.run(main()) == [0, 10, 20]


def test_worker_exception_reaches_caller_with_address_and_remote_traceback(groups):
    with pytest.raises(WorkerError) as info:
        groups["agent"].execute_on([1]).fail().wait(30)
    err = info.value
    assert err.address == "agent:1"
    assert "ValueError: boom from rank 1" in str(err)
    assert "def fail" in (err.remote_traceback or "") or "in fail" in (err.remote_traceback or "")


def test_exception_in_init_fails_launch_naming_the_worker(cluster):
    class Broken(Worker):
        def __init__(self):
            if self.rank == 1:
                raise RuntimeError("no robot here")

    with pytest.raises(WorkerError, match=r"worker broken:1: .*no robot here"):
        Broken.create_group().launch(cluster, component="agent", name="broken", ready_timeout_s=60)


def test_group_call_timeout_names_the_slow_workers(groups):
    with pytest.raises(WorkerError, match=r"agent:0.*sleep\(\) did not finish within 0.5s"):
        groups["agent"].execute_on([0]).sleep(3.0).wait(0.5)
    groups["agent"].execute_on([0]).rank_times_ten().wait(30)  # it drains and stays usable


def test_send_recv_objects_arrays_and_tensors_between_groups(groups):
    import torch

    big = np.arange(1_000_000, dtype=np.float32)  # 4 MB: travels as an object-store ref
    items = [{"step": 1}, big, torch.ones(3, 4)]
    # agent:0 (node 0) -> learner:1 (node 1, other interpreter)
    receiving = groups["learner"].execute_on([1]).recv_summary("agent", 0, len(items))
    for x in items:
        groups["agent"].execute_on([0]).send_to(x, "learner", 1).wait(30)
    got = receiving.wait(60)[0]
    assert got[0] == ("obj", {"step": 1})
    assert got[1][:3] == ("ndarray", (1_000_000,), float(big.sum()))
    assert got[2] == ("tensor", (3, 4), 12.0)


def test_messages_from_one_sender_arrive_in_send_order(groups):
    n = 30
    receiving = groups["agent"].execute_on([2]).recv_summary("agent", 1, n)
    for i in range(n):
        groups["agent"].execute_on([1]).send_to(i, "agent", 2)
    assert [x[1] for x in receiving.wait(60)[0]] == list(range(n))


def test_send_to_a_full_mailbox_fails_after_its_timeout_naming_both_workers(groups):
    sender, receiver = groups["agent"].execute_on, groups["agent"].execute_on
    assert sender([2]).send_range(MAILBOX_MAXSIZE, "agent", 0).wait(60) == [MAILBOX_MAXSIZE]
    t = time.monotonic()
    with pytest.raises(
        WorkerError,
        match=rf"agent:0: its mailbox for agent:2 stayed full \({MAILBOX_MAXSIZE} "
        r"unreceived messages\) for 0.5s; the receiver must recv from agent:2",
    ):
        sender([2]).send_range(1, "agent", 0, 0.5).wait(30)
    assert time.monotonic() - t < 10
    # Nothing was lost or reordered, and the refused message was never delivered.
    assert [x[1] for x in receiver([0]).recv_summary("agent", 2, MAILBOX_MAXSIZE).wait(60)[0]] == list(
        range(MAILBOX_MAXSIZE)
    )
    with pytest.raises(WorkerError, match="received nothing from agent:2"):
        receiver([0]).recv_from("agent", 2, 0.3).wait(30)


def test_send_to_a_full_mailbox_waits_until_the_receiver_makes_room(groups):
    on = groups["agent"].execute_on
    assert on([2]).send_range(MAILBOX_MAXSIZE, "agent", 1).wait(60) == [MAILBOX_MAXSIZE]
    blocked = on([2]).send_range(1, "agent", 1, 30.0)  # message 0 again, behind a full mailbox
    assert ray.wait(blocked.refs, timeout=1.0)[0] == []  # still waiting for room
    assert on([1]).recv_from("agent", 2).wait(30) == [0]
    assert blocked.wait(30) == [1]
    got = on([1]).recv_summary("agent", 2, MAILBOX_MAXSIZE).wait(60)[0]
    assert [x[1] for x in got] == list(range(1, MAILBOX_MAXSIZE)) + [0]


def test_recv_times_out_naming_the_silent_sender(groups):
    with pytest.raises(WorkerError, match=r"agent:0: received nothing from env:0 within 0.3s"):
        groups["agent"].execute_on([0]).recv_from("env", 0, 0.3).wait(30)


def test_send_to_unknown_worker_is_a_clear_error(groups):
    with pytest.raises(WorkerError, match=r"nosuch:0: no such worker"):
        groups["agent"].execute_on([0]).send_to(1, "nosuch", 0).wait(30)


class Trainer(Worker):
    def collective(self, backend: str = "auto") -> str:
        return ""

    def allreduce(self) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return float(t.item())

    def exchange(self) -> list:
        import torch

        if self.rank == 0:
            self.send(torch.arange(6.0).reshape(2, 3), self.group_name, 1)
            return []
        t = self.recv(self.group_name, 0, timeout_s=30)
        return t.tolist()


def test_collective_group_forms_from_env_and_tensors_go_over_torch_distributed(cluster):
    group = Trainer.create_group().launch(cluster, component="agent", name="trainer")
    try:
        assert group.init_collective("auto", timeout_s=60) == "gloo"
        assert group.allreduce().wait(60) == [6.0, 6.0, 6.0]
        out = group.execute_on([0, 1]).exchange().wait(60)
        assert out[1] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    finally:
        group.shutdown()


def test_killed_worker_mid_call_is_reported_within_seconds(cluster, tmp_path):
    group = Probe.create_group().launch(cluster, component="agent", name="victim")
    try:
        pid = group.execute_on([1]).where().wait(30)[0]["pid"]
        call = group.sleep(60.0, str(tmp_path))  # the workers run on this machine (a local test cluster)
        assert wait_until((tmp_path / "1").exists, timeout_s=30), "the call never started on rank 1"
        os.kill(pid, signal.SIGKILL)
        t = time.monotonic()
        with pytest.raises(WorkerError) as info:
            call.wait(timeout=30)
        assert time.monotonic() - t < 15
        assert info.value.address == "victim:1"
        assert "died" in str(info.value)
        with pytest.raises(WorkerError, match="victim:1"):
            group.execute_on([1]).rank_times_ten().wait(30)
    finally:
        group.shutdown()


def test_unusable_interpreter_is_a_config_error_naming_node_and_path(ray_nodes, fake_arm):
    cfg = load_config_dict(hetero_config("/nonexistent/venv/bin/python"))
    cluster = Cluster(cfg, address=ray_nodes.address)
    t = time.monotonic()
    with pytest.raises(ConfigError, match=r"on node 1 \(.*\): /nonexistent/venv/bin/python does not exist"):
        Probe.create_group().launch(cluster, component="learner", name="badpython")
    assert time.monotonic() - t < 30


def test_missing_robot_is_a_hardware_error_before_any_worker_starts(ray_nodes, python2):
    cfg = load_config_dict(hetero_config(python2, robot_ip="127.0.0.62"))
    with pytest.raises(HardwareError, match=r"node 2 .*Franka 127\.0\.0\.62"):
        Cluster(cfg, address=ray_nodes.address, probe_timeout_s=1.0)


def test_more_gpus_declared_than_ray_sees_is_a_hardware_error(ray_nodes, fake_arm, python2):
    raw = hetero_config(python2)
    raw["cluster"]["node_groups"][0]["accelerators_per_node"] = 4
    raw["cluster"]["component_placement"]["learner"]["placement"] = "0-3"
    with pytest.raises(HardwareError, match=r"accelerators_per_node: 4 but 2"):
        Cluster(load_config_dict(raw), address=ray_nodes.address)


def test_config_with_fewer_nodes_than_ray_names_the_out_of_range_node(ray_nodes):
    cfg = load_config_dict(
        {"cluster": {"num_nodes": 2, "component_placement": {"a": {"node_group": "node", "placement": "0"}}}}
    )
    with pytest.raises(
        ConfigError, match=r"node \d+\.\d+\.\d+\.\d+ \(Ray node id \w+\) has node rank 2, outside 0\.\.1"
    ):
        Cluster(cfg, address=ray_nodes.address, probe_hardware=False)


def test_config_with_more_nodes_than_ray_names_the_missing_ranks(ray_nodes):
    cfg = load_config_dict(
        {"cluster": {"num_nodes": 4, "component_placement": {"a": {"node_group": "node", "placement": "0"}}}}
    )
    with pytest.raises(ConfigError, match=r"node rank\(s\) \[3\] not present"):
        Cluster(cfg, address=ray_nodes.address, probe_hardware=False)


def test_duplicate_node_rank_names_both_nodes(ray_nodes):
    extra = add_raylet(ray_nodes, num_cpus=1, labels={"rlhw.node_rank": "1"})
    try:
        cfg = load_config_dict(
            {"cluster": {"num_nodes": 3, "component_placement": {"a": {"node_group": "node", "placement": "0"}}}}
        )
        with pytest.raises(ConfigError, match=r"node .* and node .* both have node rank 1"):
            Cluster(cfg, address=ray_nodes.address, probe_hardware=False)
    finally:
        ray_nodes.remove_node(extra)
