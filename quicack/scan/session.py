"""The probing session: one run's probing phase, from the first target to the last stored row.

Theory of operation: a :class:`Session` wires the parts of a scan on one event loop — the
dispatcher (:func:`quicack.scan.dispatcher.dispatch`), the probes' executor (in this process,
:class:`quicack.scan.executor.Executor`, or in worker processes,
:class:`quicack.scan.pool.WorkerPool`) and the writer thread (:class:`quicack.scan.writer.Writer`)
— and keeps the count: every result, probed or refused, updates :class:`Progress` and goes to
the writer, and a target's jobs are open until all its repetitions came back (the dispatcher's
window).  SIGINT or SIGTERM stops dispatching and lets the probes in flight finish; a second one
cancels everything at once (those probes are lost, and probed again when the run resumes).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from quicack.model import QuicackError
from quicack.scan.dispatcher import dispatch
from quicack.scan.executor import Executor
from quicack.scan.options import Job, Progress, ScanOptions, worker_count
from quicack.scan.pool import WorkerPool
from quicack.scan.writer import Writer

if TYPE_CHECKING:
    from quicack.store.database import Store


class Session:
    """Probes every pending (target, repetition) of a run: :meth:`run`."""

    def __init__(self, opts: ScanOptions, store: Store, run_id: int, run_tag: int, out_dir: Path,
                 progress: Progress, on_progress: Callable[[Progress], None] | None):
        self.opts = opts
        self.store = store
        self.run_id = run_id
        self.run_tag = run_tag
        self.progress = progress
        self.on_progress = on_progress
        self.writer = Writer(store, run_id, out_dir, opts, progress)
        self.stop: asyncio.Event | None = None
        self.interrupted = False
        self.open_jobs: dict[int, int] = {}  # target index → repetitions still running
        self.pool: WorkerPool | None = None
        self.executor: Executor | None = None
        self.submit_job: Callable[[Job], object] | None = None

    async def run(self) -> bool:
        """Probe every pending pair; True if interrupted."""
        loop = asyncio.get_running_loop()
        self.writer.start()
        self.stop = asyncio.Event()
        reader_con = self.store.con.cursor()
        window = max(self.opts.concurrency * 2, 16)
        workers = worker_count(self.opts.workers)
        if workers > 1:
            self.pool = WorkerPool(self.opts, self.run_tag, self.deliver, workers)
            self.submit_job = self.pool.submit
        else:
            self.executor = Executor(self.opts, self.run_tag, self.deliver)
            self.submit_job = self.executor.submit
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self.on_signal)
            loop.add_signal_handler(signal.SIGTERM, self.on_signal)
        try:
            await dispatch(self.opts, self.run_id, reader_con, self.submit, self.write_refused,
                           self.writer, lambda: len(self.open_jobs), window, self.stop, self.check)
            await self._drain()
        except asyncio.CancelledError:
            self.interrupted = True
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
                loop.remove_signal_handler(signal.SIGTERM)
            if self.pool is not None:
                self.pool.kill()
            reader_con.close()
            await loop.run_in_executor(None, self.writer.finish)
        self.progress.failures = self.writer.failures
        return self.interrupted

    async def _drain(self) -> None:
        """Wait for the probes in flight; with workers, note the CPU they spent."""
        pool = self.pool
        if pool is None:
            await self.executor.drain()
            return
        await pool.drain()
        self.progress.worker_cpu_s_each = list(pool.cpu_s_each)
        self.progress.worker_cpu_s = sum(pool.cpu_s_each)
        self.progress.worker_startup_cpu_s = pool.startup_cpu_s

    def submit(self, job: Job) -> None:
        if self.pool is not None and self.pool.failure is not None:
            raise self.pool.failure
        self.open_jobs[job.target_index] = len(job.repetitions)
        self.submit_job(job)

    def check(self) -> None:
        if self.pool is not None and self.pool.failure is not None:
            raise self.pool.failure
        if self.writer.error is not None:
            raise QuicackError(f"writing the store failed: {self.writer.error}")

    def deliver(self, row: dict, trace_json: bytes | None, keylog: str) -> None:
        """A probe's result (from the executor, or a worker through the pool)."""
        self.progress.probed += 1
        left = self.open_jobs.get(row["target_index"], 1) - 1
        if left <= 0:
            self.open_jobs.pop(row["target_index"], None)
        else:
            self.open_jobs[row["target_index"]] = left
        self._count(row)
        self.writer.put(row, trace_json, keylog)

    def write_refused(self, row: dict) -> None:
        self._count(row)
        self.writer.put(row, None, "")

    def _count(self, row: dict) -> None:
        progress = self.progress
        progress.done += 1
        progress.outcomes[row["outcome"]] = progress.outcomes.get(row["outcome"], 0) + 1
        if self.on_progress:
            self.on_progress(progress)

    def on_signal(self) -> None:
        loop = asyncio.get_running_loop()
        if self.interrupted:  # a second Ctrl-C: stop now, in-flight probes are lost (and redone later)
            for task in asyncio.all_tasks(loop):
                if task is not asyncio.current_task(loop):
                    task.cancel()
            if self.pool is not None:
                self.pool.kill()
            return
        self.interrupted = True
        self.progress.stopping = True
        self.stop.set()
        if self.pool is not None:
            self.pool.stop()
        else:
            self.executor.stopping = True
        if self.on_progress:
            self.on_progress(self.progress)
