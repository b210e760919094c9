"""The Franka driver process classifies franky's exceptions by their type, never by their text."""

from __future__ import annotations

import franky
import pytest

from drivers.franka.child import _Fault, execute, fault_kind
from drivers.franka.replies import Reply
from rlhw.errors import FaultKind


@pytest.mark.parametrize(
    "exc_type, kind",
    [
        (franky.NetworkException, FaultKind.NETWORK),
        (franky.ProtocolException, FaultKind.NETWORK),
        (franky.RealtimeException, FaultKind.NOT_CONNECTED),
        (franky.IncompatibleVersionException, FaultKind.NOT_CONNECTED),
        (franky.ControlException, FaultKind.REFLEX),
        (franky.CommandException, FaultKind.REFLEX),
        (franky.GripperException, FaultKind.REFLEX),
        (franky.InvalidOperationException, FaultKind.REFLEX),
        (franky.InvalidMotionTypeException, FaultKind.REFLEX),
        (franky.Exception, FaultKind.REFLEX),
    ],
)
def test_each_franky_exception_type_maps_to_its_fault_kind(exc_type, kind):
    assert fault_kind(exc_type("libfranka: something")) is kind


def test_a_network_exception_is_network_whatever_its_text_says():
    assert fault_kind(franky.NetworkException("libfranka: UDP receive: Timeout")) is FaultKind.NETWORK
    assert fault_kind(franky.NetworkException("no telltale words here")) is FaultKind.NETWORK


def test_text_that_mentions_the_network_does_not_make_another_type_a_network_fault():
    assert fault_kind(franky.ControlException("TCP Net Exception UDP receive")) is FaultKind.REFLEX
    assert fault_kind(RuntimeError("TCP connection got interrupted")) is None  # a bug, not a fault


class _Server:
    robot = object()

    def op_state(self):
        raise franky.NetworkException("libfranka: UDP receive: Timeout")

    def op_ping(self):
        raise _Fault(FaultKind.TIMEOUT, "too slow")

    def op_info(self):
        raise KeyError("oops")


def test_replies_carry_the_fault_kind_itself_or_mark_a_bug():
    tag, kind, message = execute(_Server(), "state", {})
    assert (tag, kind) == (Reply.FAULT, FaultKind.NETWORK) and type(kind) is FaultKind
    assert "FCI" in message  # the hint for a network fault
    assert execute(_Server(), "ping", {}) == (Reply.FAULT, FaultKind.TIMEOUT, "too slow")
    tag, message = execute(_Server(), "info", {})
    assert tag == Reply.BUG and "KeyError" in message
