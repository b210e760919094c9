"""SIGTERM becomes a KeyboardInterrupt (`Terminated`) within `sigterm_interrupts`, so every Ctrl-C path ends a
run on it too; a handler the caller chose survives ray.init-style replacement. The whole `rlhw train` path is
tested in tests/rl/test_cli_train.py (SIGTERM to a real run, local and pipeline)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from rlhw.runtime.stop_signals import Terminated, caller_sigterm_kept, interrupt_cause, sigterm_interrupts


def test_sigterm_within_raises_terminated_a_keyboard_interrupt_naming_the_signal():
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_interrupts():
        with pytest.raises(KeyboardInterrupt) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(10)  # the handler raises here, in the main thread
    assert isinstance(e.value, Terminated) and interrupt_cause(e.value) is signal.SIGTERM
    assert interrupt_cause(KeyboardInterrupt()) is signal.SIGINT  # Ctrl-C
    assert signal.getsignal(signal.SIGTERM) == before  # put back on the way out


def test_a_handler_the_caller_chose_survives_a_call_that_replaces_it():
    with sigterm_interrupts():
        ours = signal.getsignal(signal.SIGTERM)
        with caller_sigterm_kept():
            signal.signal(signal.SIGTERM, lambda *_: None)  # as ray.init does
        assert signal.getsignal(signal.SIGTERM) is ours


def test_the_os_default_is_left_to_the_call_that_replaces_it():
    def theirs(*_):
        return None

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with caller_sigterm_kept():
            signal.signal(signal.SIGTERM, theirs)
        assert signal.getsignal(signal.SIGTERM) is theirs  # nobody chose one before: Ray's stays
    finally:
        signal.signal(signal.SIGTERM, previous)
