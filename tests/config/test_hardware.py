"""The hardware registry and live-node probing (real sockets on loopback, real pyrealsense2)."""

from __future__ import annotations

import socket
import threading
from typing import ClassVar

import pytest

from rlhw.config import load_config_dict
from rlhw.errors import HardwareError
from rlhw.hardware import Inventory, check_inventory, declarable_types, hardware_types, probe_local
from rlhw.hardware.registry import _REGISTRY, HardwareEntry, HardwareType, register_hardware
from rlhw.network import FCI_PORT
from rlhw.placement import plan


def test_builtin_types_are_found_without_being_listed_anywhere():
    assert {"Accelerator", "Franka", "RealSense"} <= set(hardware_types())
    assert declarable_types() == sorted(set(declarable_types()) - {"Accelerator"})


def test_a_new_robot_type_is_one_decorated_class():
    class UR5Config(HardwareEntry):
        robot_ip: str
        payload_kg: float = 5.0
        identity_field: ClassVar[str] = "robot_ip"

    @register_hardware
    class UR5(HardwareType):
        name: ClassVar[str] = "UR5"
        entry_model = UR5Config

        @classmethod
        def probe(cls, entries, timeout_s):
            return {e.identity(): None for e in entries}

    try:
        cfg = load_config_dict(
            {
                "cluster": {
                    "num_nodes": 2,
                    "node_groups": [
                        {
                            "label": "ur",
                            "node_ranks": "0-1",
                            "hardware": {
                                "type": "UR5",
                                "configs": [
                                    {"robot_ip": "10.0.0.9", "node_rank": 1},
                                    {"robot_ip": "10.0.0.8", "node_rank": 0},
                                ],
                            },
                        }
                    ],
                    "component_placement": {"env": {"node_group": "ur", "placement": "all"}},
                }
            }
        )
        recs = plan(cfg.cluster)["env"]
        assert [(r.hardware_type, r.node_rank) for r in recs] == [("UR5", 1), ("UR5", 0)]
        assert cfg.cluster.node_groups[0].hardware.configs[0].payload_kg == 5.0
    finally:
        _REGISTRY.pop("UR5", None)


def test_registering_a_type_without_a_schema_is_a_programming_error():
    class Broken(HardwareType):
        name: ClassVar[str] = "Broken"

    with pytest.raises(TypeError, match="entry_model"):
        register_hardware(Broken)
    assert "Broken" not in hardware_types()


def _cluster(robot_ips=(), cameras=(), accelerators=None, num_nodes=1):
    groups = []
    if robot_ips:
        groups.append(
            {
                "label": "arm",
                "node_ranks": 0,
                "hardware": {"type": "Franka", "configs": [{"robot_ip": ip, "node_rank": 0} for ip in robot_ips]},
            }
        )
    if cameras:
        groups.append(
            {
                "label": "cam",
                "node_ranks": 0,
                "hardware": {"type": "RealSense", "configs": [{"serial": s, "node_rank": 0} for s in cameras]},
            }
        )
    if accelerators is not None:
        groups.append({"label": "gpu", "node_ranks": f"0-{num_nodes - 1}", "accelerators_per_node": accelerators})
    return load_config_dict({"cluster": {"num_nodes": num_nodes, "node_groups": groups}}).cluster


@pytest.fixture
def fci_listener():
    """A TCP listener on the FCI port of a spare loopback address, standing in for a control box."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for last in range(50, 80):
        try:
            srv.bind((f"127.0.3.{last}", FCI_PORT))
            break
        except OSError:
            continue
    else:
        pytest.fail("no free loopback address for the fake control box")
    srv.listen(4)
    srv.settimeout(0.1)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[0]
    stop.set()
    srv.close()
    t.join(timeout=2)


@pytest.mark.timeout(30)
def test_probe_finds_a_reachable_arm_and_reports_an_unreachable_one(fci_listener):
    dead = "127.0.4.1"  # nothing listens there: connection refused
    cluster = _cluster(robot_ips=(fci_listener, dead))
    inv = probe_local(0, cluster, timeout_s=1.0)
    assert inv.devices["Franka"][fci_listener] is None
    assert "cannot connect to TCP 127.0.4.1:1337" in inv.devices["Franka"][dead]
    with pytest.raises(HardwareError) as e:
        check_inventory(cluster, [inv])
    text = str(e.value)
    assert "Franka 127.0.4.1 (rank 1 of group 'arm')" in text and fci_listener not in text


@pytest.mark.timeout(30)
def test_probe_reports_a_camera_that_is_not_connected():
    cluster = _cluster(cameras=("000111222333",))
    inv = probe_local(0, cluster, timeout_s=3.0)
    problem = inv.devices["RealSense"]["000111222333"]
    assert problem is not None and ("not connected" in problem or "pyrealsense2" in problem)
    with pytest.raises(HardwareError, match="RealSense 000111222333"):
        check_inventory(cluster, [inv])


@pytest.mark.timeout(30)
def test_probe_counts_accelerators_and_honours_cuda_visible_devices(monkeypatch):
    from rlhw.hardware.types.accelerator import Accelerator

    detected = Accelerator.detect()
    assert detected >= 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert Accelerator.detect() == 0
    inv = probe_local(0, _cluster(), timeout_s=1.0)
    assert inv.accelerators == 0 and inv.devices == {}
    check_inventory(_cluster(), [inv])  # nothing declared, nothing missing


def test_declared_gpu_count_that_differs_from_detection_is_reported():
    cluster = _cluster(accelerators=8, num_nodes=2)
    invs = {0: Inventory(0, "gpu0", 8), 1: Inventory(1, "gpu1", 7)}
    with pytest.raises(HardwareError, match=r"node 1 \(gpu1\): config says accelerators_per_node: 8 but 7 are visible"):
        check_inventory(cluster, invs)
    check_inventory(cluster, {0: Inventory(0, "gpu0", 8), 1: Inventory(1, "gpu1", 8)})


def test_nodes_that_did_not_report_are_named():
    cluster = _cluster(accelerators=8, num_nodes=4)
    with pytest.raises(HardwareError, match="node ranks 1-2 did not report"):
        check_inventory(cluster, [Inventory(0, "a", 8), Inventory(3, "d", 8)])


def test_all_problems_are_listed_in_one_error():
    cluster = _cluster(robot_ips=("10.0.0.1",), accelerators=2, num_nodes=1)
    inv = Inventory(0, "box", 1, {"Franka": {"10.0.0.1": "no answer"}})
    with pytest.raises(HardwareError) as e:
        check_inventory(cluster, [inv])
    assert "accelerators_per_node: 2 but 1 is visible" in str(e.value) and "no answer" in str(e.value)


def test_probe_refuses_a_node_rank_outside_the_cluster():
    with pytest.raises(HardwareError, match="outside"):
        probe_local(3, _cluster(), timeout_s=0.5)


def test_inventory_is_json_friendly():
    inv = Inventory(0, "box", 1, {"Franka": {"10.0.0.1": None}})
    assert inv.to_json() == {
        "node_rank": 0,
        "hostname": "box",
        "accelerators": 1,
        "devices": {"Franka": {"10.0.0.1": None}},
    }
    assert inv.missing() == []
