"""The worker pool: the parent's side of the probing processes.

Theory of operation: with ``workers > 1`` a :class:`WorkerPool` spawns that many child processes
running :func:`quicack.scan.worker.worker_main`, each given its share of the rate and
concurrency.  Jobs go to workers by address: an address stays with one worker while it has
probes in flight, so the per-address limit holds; a new address goes to the least loaded
worker.  The jobs submitted during one event-loop iteration go out as one message per worker,
and results come back through the pipes to the event loop, which hands each probe to
``deliver``.  A worker that dies makes the pool fail (:attr:`WorkerPool.failure`), so the scan
stops and can be resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import sys
from collections.abc import Callable

from quicack.model import QuicackError
from quicack.scan.options import Job, ScanOptions
from quicack.scan.worker import worker_main


@contextlib.contextmanager
def _main_hidden():
    """While a worker is spawned, the parent's ``__main__`` looks like an interactive session's,
    so multiprocessing does not make the child import it: for the ``quicack`` command (or a
    benchmark script) that is the CLI with DuckDB, polars and rich, ~0.3 s of CPU per worker,
    while a worker needs :mod:`quicack.scan.worker` (where ``worker_main`` lives) and aioquic
    only."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class WorkerPool:
    """Child processes running executors; results come back through pipes to the loop."""

    def __init__(self, opts: ScanOptions, run_tag: int, deliver: Callable, count: int):
        ctx = multiprocessing.get_context("spawn")
        self.deliver = deliver
        self.conns = []
        self.processes = []
        self.load = [0] * count  # probes in flight per worker
        self.outbox: list[list[Job]] = [[] for _ in range(count)]  # jobs not sent yet
        self.addresses: dict[str, list] = {}  # address → [worker, probes in flight]
        self.finished = asyncio.get_running_loop().create_future()
        self.failure: QuicackError | None = None
        self.open = count
        self.startup_cpu_s = 0.0
        self.cpu_s_each = [0.0] * count  # CPU each worker spent probing (its start-up excluded)
        for worker in range(count):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=worker_main, args=(child, opts, run_tag, worker, count),
                                  daemon=True, name=f"quicack-scan-{worker}")
            with _main_hidden():
                process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)
            asyncio.get_running_loop().add_reader(parent.fileno(), self._readable, worker)

    def _readable(self, worker: int) -> None:
        conn = self.conns[worker]
        try:
            while conn.poll():
                message = conn.recv()
                if message[0] == "finished":
                    _, _, probing_cpu_s, startup_cpu_s = message
                    self.cpu_s_each[worker] = probing_cpu_s
                    self.startup_cpu_s += startup_cpu_s
                    self._closed(worker, finished=True)
                    return
                for row, trace_json, keylog in message[1]:  # ("probes", [...])
                    self.completed(row)
                    self.deliver(row, trace_json, keylog)
        except (EOFError, OSError):
            self._closed(worker)

    def _closed(self, worker: int, finished: bool = False) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            loop.remove_reader(self.conns[worker].fileno())
        self.open -= 1
        if not finished and self.failure is None:
            process = self.processes[worker]
            process.join(timeout=1)
            self.failure = QuicackError(f"scan worker {worker} died (exit code {process.exitcode}); "
                                        "re-run the same command to resume")
            if not self.finished.done():
                self.finished.set_exception(self.failure)
        if self.open == 0 and not self.finished.done():
            self.finished.set_result(None)

    def submit(self, job: Job) -> None:
        """An address stays with one worker while it has probes in flight (so the per-address
        limit holds); a new address goes to the least loaded worker."""
        entry = self.addresses.get(job.address)
        if entry is None:
            worker = min(range(len(self.conns)), key=self.load.__getitem__)
            entry = self.addresses[job.address] = [worker, 0]
        entry[1] += len(job.repetitions)
        self.load[entry[0]] += len(job.repetitions)
        if not any(self.outbox):
            asyncio.get_running_loop().call_soon(self._send_jobs)
        self.outbox[entry[0]].append(job)

    def _send_jobs(self) -> None:
        """The jobs submitted during one event-loop iteration, one message per worker."""
        for worker, jobs in enumerate(self.outbox):
            if jobs:
                self.outbox[worker] = []
                with contextlib.suppress(OSError):  # a dead worker is noticed by _readable
                    self.conns[worker].send(("jobs", jobs))

    def completed(self, row: dict) -> None:
        entry = self.addresses.get(row["address"])
        if entry is not None:
            entry[1] -= 1
            self.load[entry[0]] -= 1
            if entry[1] <= 0:
                del self.addresses[row["address"]]

    def stop(self) -> None:
        self._send_jobs()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("stop")

    async def drain(self) -> None:
        self._send_jobs()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("finish")
        await self.finished
        for process in self.processes:
            process.join(timeout=10)

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
