"""Python's cyclic garbage collector, tuned for stretches that make many short-lived objects.

Theory of operation: the collector runs its youngest generation every 700 container
allocations and, now and then, a full collection that walks every tracked object.  Probing
(hundreds of connections in flight) and ingest (a scan's batch file parsed whole: ~500k dicts
and lists a thousand probes) allocate far more than that, and almost nothing they make forms a
cycle: reference counting frees it.  :func:`tuned` freezes what exists when it starts (modules,
tables, a scan's state) out of the collector's reach and runs the youngest generation every
500,000 allocations instead — with the defaults, collections cost ~1 ms a probe while probing and
~10 % of an ingest.  (A probe makes ~200 tracked objects, and each collection walks the young
objects still alive — with 200 probes in flight ~12 ms at a time, whatever the threshold —
so every 50,000 it still cost 0.05 ms a probe; every 500,000, a scan of 2000 probes runs none.
A finished probe leaves no cycles, so nothing waits longer to be freed.)  Nested and concurrent uses (a scan's writer thread ingesting while the
main thread probes) share one tuning: the first to enter sets it up, the last to leave undoes it.
"""

from __future__ import annotations

import contextlib
import gc
import threading

THRESHOLDS = (500_000, 20, 100)

_lock = threading.Lock()
_users = 0
_previous: tuple[int, int, int] | None = None


@contextlib.contextmanager
def tuned(collect_first: bool = False):
    """Tune the collector for the ``with`` block.  ``collect_first``: collect once before
    freezing (for a long stretch: garbage that exists now is not frozen with the rest)."""
    global _users, _previous
    with _lock:
        if _users == 0:
            if collect_first:
                gc.collect()
            gc.freeze()
            _previous = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                gc.set_threshold(*_previous)
                gc.unfreeze()
