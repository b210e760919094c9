"""The franky-sim launcher other tests and the smoke test rely on: free address, bounded start, no leaks."""

from __future__ import annotations

import socket

import pytest

from drivers.franky_sim import GRIPPER_PORT, FrankySim, free_loopback_host, port_free
from rlhw.errors import HardwareError
from rlhw.network import FCI_PORT


def test_free_loopback_host_skips_addresses_whose_robot_port_is_taken():
    taken = socket.socket()
    try:
        host = free_loopback_host()
        taken.bind((host, FCI_PORT))
        assert not port_free(host, FCI_PORT)
        assert free_loopback_host(exclude={host}) != host
        for _ in range(20):  # the scan starts at a random address; it must never return the taken one
            assert free_loopback_host() != host
    finally:
        taken.close()


def test_an_explicit_host_whose_ports_are_busy_is_refused_with_the_reason():
    taken = socket.socket()
    host = free_loopback_host()
    taken.bind((host, GRIPPER_PORT))
    try:
        with pytest.raises(HardwareError, match="already in use"):
            FrankySim(host=host).start()
    finally:
        taken.close()


@pytest.mark.timeout(120)
def test_simulator_serves_its_address_until_stopped_or_killed():
    with FrankySim(start_timeout_s=90) as a, FrankySim(start_timeout_s=90) as b:
        assert a.running and b.running and a.host != b.host
        assert not port_free(a.host, FCI_PORT) and not port_free(a.host, GRIPPER_PORT)
        pid = a.pid
        a.kill()
        assert not a.running
        with pytest.raises(ProcessLookupError):
            import os

            os.kill(pid, 0)
        assert port_free(a.host, FCI_PORT)
        b.stop()  # clean shutdown (SIGINT), bounded
        assert not b.running and port_free(b.host, FCI_PORT)
        b.stop()  # twice is harmless


def test_bad_start_timeout_is_refused():
    with pytest.raises(ValueError, match="start_timeout_s"):
        FrankySim(start_timeout_s=0)
