"""rlhw.network: the one TCP reachability check that the driver, the inventory probe and the smoke test share."""

from __future__ import annotations

import socket

from rlhw.network import FCI_PORT, tcp_connect_problem


def test_the_fci_port_is_libfrankas_command_port():
    assert FCI_PORT == 1337


def test_a_listening_port_has_no_problem():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert tcp_connect_problem("127.0.0.1", srv.getsockname()[1], 1.0) is None


def test_a_closed_port_names_the_address_and_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        problem = tcp_connect_problem("127.0.0.1", port, 1.0)
    assert problem is not None
    assert problem.startswith(f"cannot connect to TCP 127.0.0.1:{port}: ") and "refused" in problem.lower()
