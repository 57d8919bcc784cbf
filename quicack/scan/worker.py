"""A probing worker process: an executor fed jobs through a pipe, its results sent back.

Theory of operation: with ``workers > 1`` the scan spawns child processes
(:class:`quicack.scan.pool.WorkerPool`) whose target is :func:`worker_main`; this is the module
such a child imports first, and what it imports — the executor, the probe, aioquic, the options —
never reaches DuckDB or the store, so a worker starts with aioquic only.  A worker dies with its
parent (``PR_SET_PDEATHSIG``, and the pipe closing), ignores SIGINT (the parent decides when to
stop), runs ``("jobs", [job, …])`` messages on an :class:`~quicack.scan.executor.Executor` with
its share of the rate and concurrency, and sends its finished probes back in
``("probes", [(row, trace_json, keylog), …])`` messages; ``"stop"`` stops starting probes,
``"finish"`` drains them, and the last message is ``("finished", worker, probing CPU s,
start-up CPU s)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time

from quicack.core import gctuning as collector
from quicack.scan.connection import quiet_aioquic
from quicack.scan.executor import Executor
from quicack.scan.options import ScanOptions

#: A worker sends its finished probes to the parent in messages of up to RESULT_BATCH probes, at
#: most RESULT_DELAY_S after the first of them finished; the parent sends jobs to a worker in one
#: message per event-loop iteration.  One pickle and a few syscalls per message instead of per
#: probe: with many workers the parent is what caps the scan's rate.
RESULT_BATCH = 64
RESULT_DELAY_S = 0.05


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def worker_main(conn, opts: ScanOptions, run_tag: int, worker: int, share: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    quiet_aioquic()
    with collector.tuned(collect_first=True):
        asyncio.run(_worker_loop(conn, opts, run_tag, worker, share))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown (and native extensions' leak reports)


async def _worker_loop(conn, opts: ScanOptions, run_tag: int, worker: int, share: int) -> None:
    loop = asyncio.get_running_loop()
    ready_cpu = time.process_time()  # start-up (interpreter, imports) is not probing
    closed = loop.create_future()

    pending: list[tuple] = []  # finished probes not sent yet
    flush_at: list = []  # the scheduled flush, if any

    def flush() -> None:
        flush_at.clear()
        if not pending:
            return
        try:
            conn.send(("probes", pending[:]))
        except (BrokenPipeError, EOFError, OSError):
            os._exit(1)  # the parent is gone
        pending.clear()

    def deliver(row, trace_json, keylog):
        pending.append((row, trace_json, keylog))
        if len(pending) >= RESULT_BATCH:
            if flush_at:
                flush_at[0].cancel()
            flush()
        elif not flush_at:
            flush_at.append(loop.call_later(RESULT_DELAY_S, flush))

    executor = Executor(opts, run_tag, deliver, worker, share)

    def readable():
        try:
            while conn.poll():
                message = conn.recv()
                if message == "stop":
                    executor.stopping = True
                elif message == "finish":
                    loop.remove_reader(conn.fileno())
                    if not closed.done():
                        closed.set_result(None)
                    return
                else:  # ("jobs", [job, …])
                    for job in message[1]:
                        executor.submit(job)
        except (EOFError, OSError):
            os._exit(1)

    loop.add_reader(conn.fileno(), readable)
    await closed
    await executor.drain()
    if flush_at:
        flush_at[0].cancel()
    flush()
    conn.send(("finished", worker, time.process_time() - ready_cpu, ready_cpu))
    conn.close()
