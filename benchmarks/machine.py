"""This machine's speed right now, for reading benchmark figures across days.

The 2-core VM these benchmarks run on drifts: on some days everything took 1.8× longer.  Each
benchmark prints :func:`speed_line` first — the CPU time of a fixed pure-Python loop (the kind
of work most of quicack's per-probe CPU is) and of a fixed DuckDB query — so that figures from
different days can be set side by side.  Not a correction factor: a hint.
"""

from __future__ import annotations

import time


def python_loop_ms() -> float:
    """CPU ms of three million iterations of a small arithmetic loop (best of 3)."""
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        s = 0
        for i in range(3_000_000):
            s += i * i % 7
        best = min(best, time.process_time() - t)
    return best * 1000.0


def duckdb_query_ms() -> float:
    """CPU ms of a fixed single-threaded DuckDB aggregate (best of 3)."""
    import duckdb

    con = duckdb.connect(":memory:", config={"threads": 1})
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        con.execute("SELECT sum(hash(i) % 7) FROM range(20000000) r(i)").fetchall()
        best = min(best, time.process_time() - t)
    con.close()
    return best * 1000.0


def speed_line() -> str:
    return (f"machine speed now: Python loop {python_loop_ms():.0f} ms, DuckDB query "
            f"{duckdb_query_ms():.0f} ms (CPU; lower is faster; see benchmarks/machine.py)")


if __name__ == "__main__":
    print(speed_line())
