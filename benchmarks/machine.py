"""This machine's speed right now, for reading benchmark figures across days.

The 2-core VM these benchmarks run on drifts: on some days everything took 1.8× longer.  Each
benchmark prints :func:`speed_line` first — the CPU time of a fixed pure-Python loop (the kind
of work most of quicack's per-probe CPU is) and of a fixed DuckDB query — so that figures from
different days can be set side by side.  Not a correction factor: a hint.

It also holds what the benchmarks' child processes share: :func:`peak_rss_mb` and
:func:`run_child`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


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


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (10^6 bytes): Linux's ``VmHWM``, the high-water
    mark of the memory of the program it runs.  Not ``ru_maxrss``: a child started by subprocess
    (vfork, then exec) carries in it the RSS its parent had at that moment, so a parent that
    built or recorded a large benchmark file would show as the child's peak."""
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return kib * 1024 / 1e6


def run_child(code: str, *args) -> dict:
    """Run ``code`` (which may ``import machine``) in a fresh Python with ``args``; the JSON object
    its last line of output holds."""
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(run.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(speed_line())
