"""The Session stream's deadline watcher: one thread that sleeps until the earliest armed deadline."""

from __future__ import annotations

import threading
import time

from rlhw.env.session_stream import DeadlineWatcher


class Stream:
    """Stands in for a SessionStream: the watcher only calls ``expire``."""

    def __init__(self):
        self.expired = threading.Event()

    def expire(self) -> None:
        self.expired.set()


def test_an_earlier_deadline_armed_while_the_watcher_sleeps_towards_a_later_one_is_kept():
    watcher = DeadlineWatcher()
    try:
        patient, hasty = Stream(), Stream()
        watcher.arm(patient, time.monotonic() + 60)  # the thread now sleeps towards this one
        watcher.arm(hasty, time.monotonic() + 0.05)
        assert hasty.expired.wait(10), "the earlier deadline was missed"
        assert not patient.expired.is_set()
        assert hasty not in watcher.deadlines and patient in watcher.deadlines
    finally:
        watcher.close()


def test_a_disarmed_stream_is_not_expired_and_a_rearmed_one_is_at_its_new_deadline():
    watcher = DeadlineWatcher()
    try:
        stream = Stream()
        watcher.arm(stream, time.monotonic() + 0.05)
        watcher.deadlines.pop(stream)  # answered in time: the reader disarms
        assert not stream.expired.wait(0.3)
        watcher.arm(stream, time.monotonic() + 0.05)  # the next step's answer is late
        assert stream.expired.wait(10)
    finally:
        watcher.close()
