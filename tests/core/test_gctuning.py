"""The collector tuning shared by probing and ingest."""

from __future__ import annotations

import gc
import threading

from quicack.core import gctuning as collector


def test_tuning_is_undone_by_the_last_user_to_leave():
    before = gc.get_threshold()
    with collector.tuned():
        assert gc.get_threshold() == collector.THRESHOLDS
        frozen = gc.get_freeze_count()
        assert frozen > 0  # what existed is out of the collector's reach
        with collector.tuned():  # e.g. an ingest inside a scan
            assert gc.get_threshold() == collector.THRESHOLDS
        assert gc.get_threshold() == collector.THRESHOLDS  # the outer user still needs it
        assert gc.get_freeze_count() >= frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_thread_leaving_first_does_not_undo_another_threads_tuning():
    before = gc.get_threshold()
    inside, leave = threading.Event(), threading.Event()

    def writer():
        with collector.tuned():
            inside.set()
            leave.wait(5)

    with collector.tuned():
        t = threading.Thread(target=writer)
        t.start()
        inside.wait(5)
    # the main thread left; the writer thread is still inside
    assert gc.get_threshold() == collector.THRESHOLDS
    leave.set()
    t.join()
    assert gc.get_threshold() == before
