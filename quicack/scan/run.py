"""`quicack scan` as a Python function: targets → probes → qlog files → the store.

Theory of operation, one process (``workers = 1``; what ``'auto'`` gives on two cores) or several:

    list (streamed) ─► dispatcher ─► executor(s) ─► results ─► writer thread ─► DuckDB
      resolve, exclude,   (asyncio)   probes with          batch qlog file,     probes rows,
      refuse private,                 rate, concurrency,   key log lines        Store.ingest
      skip done pairs                 per-address limits

- The **dispatcher** (asyncio, main thread) streams the list, keeps the targets of this shard,
  resolves names (``--resolve``, hosts file, system resolver), applies the address policy and
  skips (target, repetition) pairs the run already holds, a thousand targets at a time (resume
  without holding the run in memory).  A target refused by the policy becomes rows with that
  outcome, so every (target, repetition) of a run ends with exactly one row.  At most
  ``window`` targets are in flight, and dispatching pauses while the writer is behind.
- An **executor** runs a target's repetitions (spaced, or cold then warm) under a token bucket
  (global rate), a concurrency limit and a per-address limit.  With ``workers > 1`` each
  executor is a child process (spawned; it dies with its parent: ``PR_SET_PDEATHSIG`` and the
  pipe closing), targets are assigned to workers by address so the per-address limit holds,
  and the rate is shared out.
- The **writer** (one thread, the only one touching the database) collects results into
  batches: it writes the batch's client traces as one qlog file (aioquic's JSON layout, one
  trace per probe), appends the TLS secrets to the run's key log and inserts the probe rows.
- When probing ends (or is interrupted) every qlog file of the run not yet ingested goes
  through :meth:`quicack.store.database.Store.ingest` — the path of ``quicack analyze``, classification
  and replay included — which links each probe to its connection; consecutive small files are
  merged first, up to a batch's size (:func:`merge_batches`).  (Ingest costs far more CPU
  than a probe; doing it during the scan would take cores from the probes and bend their timing.
  ``ingest_during`` does it batch by batch instead.)  A scan killed at any moment leaves either
  no row for a probe (it is probed again) or a row whose file is ingested when the run resumes;
  the key (run, target, repetition) makes duplicates impossible.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import itertools
import logging
import multiprocessing
import os
import platform
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from quicack.core import cidtag
from quicack.core import gctuning as collector
from quicack.pcap import dumpcap
from quicack.scan import probe
from quicack.scan import targets
from quicack.model import QuicackError

if TYPE_CHECKING:
    from quicack.store.database import Store

# The store (DuckDB, Arrow) is imported where it is used, not here: probing processes import
# this module (their options are a ScanOptions) and need aioquic only (~0.2 s less start-up).

RESUME_CHUNK = 1000
#: A worker sends its finished probes to the parent in messages of up to RESULT_BATCH probes, at
#: most RESULT_DELAY_S after the first of them finished; the parent sends jobs to a worker in one
#: message per event-loop iteration.  One pickle and a few syscalls per message instead of per
#: probe: with many workers the parent is what caps the scan's rate.
RESULT_BATCH = 64
RESULT_DELAY_S = 0.05
QLOG_HEADER = b'{"qlog_format":"JSON","qlog_version":"0.3","title":"quicack scan","traces":['


@dataclass
class ScanOptions:
    list_path: str
    db: str = "quicack.duckdb"
    run: str | None = None
    out_dir: str | None = None
    repetitions: int = 3
    spacing_s: float = 1.0
    schedule: str = "spaced"  # or 'cold-warm'
    cold_idle_s: float = 30.0
    concurrency: int = 100
    rate: float = 100.0
    per_address: int = 4
    first_response_timeout_s: float = 3.0
    handshake_timeout_s: float = 5.0
    response_timeout_s: float = 5.0
    path: str = "/"
    user_agent: str = probe.USER_AGENT
    split_clienthello: int = 1
    resolve: dict = field(default_factory=dict)
    hosts_file: str | None = None
    family: str = "any"  # '4', '6', 'any'
    exclude_file: str | None = None
    allow_private: bool = False
    shard: tuple[int, int] | None = None
    #: probing processes, or 'auto' (:func:`auto_workers`)
    workers: int | str = "auto"
    pcap: str | None = None
    pcap_interface: str | None = None
    #: probes per batch qlog file: ingesting a file costs ~0.3 s whatever its size plus ~0.7 ms
    #: a probe, so larger files amortize it; a batch also goes out once its first probe is
    #: ``batch_age_s`` old (a scan killed with SIGKILL probes the unwritten ones again), or
    #: once its qlogs reach ``batch_bytes``: a batch file stays below
    #: ``reader.WHOLE_JSON_BYTES`` (16 MB), so it is parsed whole (~0.1 ms a probe) and not by
    #: the streaming pass (~3 ms a trace), whatever size the probes' qlogs have (real servers'
    #: longer certificate chains and responses make them several times the local servers')
    batch_size: int = 2000
    batch_age_s: float = 10.0
    batch_bytes: int = 14 << 20
    #: ingest each batch's qlog file while probing (probes join connections as the scan goes);
    #: by default the files are ingested once probing ends, so that ingest (classification and
    #: replay included) does not take CPU from the probes and bend their timing
    ingest_during: bool = False

    def shard_text(self) -> str:
        return f"{self.shard[0]}/{self.shard[1]}" if self.shard else ""

    def record(self) -> dict:
        """The arguments as recorded in ``runs.arguments``."""
        out = asdict(self)
        out["shard"] = self.shard_text()
        out["resolve"] = {k: f"{a}:{p}" for k, (a, p) in self.resolve.items()}
        return out


@dataclass
class Progress:
    total: int = 0
    done: int = 0
    probed: int = 0
    ingested: int = 0
    outcomes: dict = field(default_factory=dict)
    stopping: bool = False
    phase: str = "probing"  # then 'ingesting'
    files_ingested: int = 0
    files_to_ingest: int = 0
    #: CPU seconds the writer thread spent on files, rows and ingest (the rest is probing)
    writer_cpu_s: float = 0.0
    #: with worker processes: CPU seconds they spent probing, and starting up
    worker_cpu_s: float = 0.0
    worker_startup_cpu_s: float = 0.0
    #: probing CPU of each worker process (with workers > 1)
    worker_cpu_s_each: list = field(default_factory=list)
    failures: list = field(default_factory=list)


@dataclass
class ScanSummary:
    run_id: int
    run: str
    resumed: bool
    out_dir: str
    probes: int
    outcomes: dict
    ingest_failures: list
    interrupted: bool
    pcap: str | None


@dataclass(frozen=True)
class Job:
    """One target and the repetitions it still needs."""

    target_index: int
    domain: str
    rank: int | None
    address: str
    port: int
    repetitions: tuple[int, ...]


# --- policy helpers ----------------------------------------------------------------------------

def parse_shard(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        raise QuicackError(f"--shard expects K/N with 1 ≤ K ≤ N, got {value!r}") from None
    return k, n


def auto_workers() -> int:
    """``--workers auto``: one probing process per core this process may use, less one for the
    parent (dispatch, the writer thread, DuckDB) — so on two cores the probes run in the parent
    itself.  Measured on two shared cores with the servers on the same host (benchmarks/scan.py):
    one process probes faster and at less CPU per probe than two workers, which add a pickle
    and a pipe per probe and compete with the servers and the parent."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def worker_count(workers: int | str) -> int:
    if workers == "auto":
        return auto_workers()
    try:
        count = int(workers)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise QuicackError(f"--workers expects a count ≥ 1 or 'auto', got {workers!r}")
    return count


def in_shard(index: int, shard: tuple[int, int] | None) -> bool:
    return shard is None or index % shard[1] == shard[0] - 1


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def versions() -> dict:
    import aioquic
    try:
        mine = metadata.version("quicack")
    except metadata.PackageNotFoundError:
        mine = "unknown"
    return {"quicack": mine, "aioquic": aioquic.__version__, "tshark": dumpcap.tshark_version(),
            "python": platform.python_version()}


class TokenBucket:
    """A global probe rate: ``rate`` tokens a second, bursts of ``burst``."""

    def __init__(self, rate: float, burst: float | None = None):
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate / 10)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self) -> None:
        if self.rate <= 0:
            return
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


# --- the executor: runs jobs' probes ----------------------------------------------------------

class Executor:
    """Runs jobs on the current event loop; ``deliver(row, trace_json, keylog)`` per probe."""

    def __init__(self, opts: ScanOptions, run_tag: int, deliver: Callable, worker: int = 0,
                 share: int = 1):
        self.opts = opts
        self.run_tag = run_tag
        self.deliver = deliver
        self.worker = worker
        self.bucket = TokenBucket(opts.rate / share if opts.rate > 0 else 0)
        self.slots = asyncio.Semaphore(max(1, opts.concurrency // share))
        self.per_address: dict[str, list] = {}  # address → [semaphore, users]
        self.last_probe: dict[str, float] = {}  # address → monotonic time of the last probe end
        self.tasks: set[asyncio.Task] = set()
        self.stopping = False

    def submit(self, job: Job) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self.run_job(job))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    @contextlib.asynccontextmanager
    async def _address_slot(self, address: str):
        entry = self.per_address.setdefault(address, [asyncio.Semaphore(self.opts.per_address), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self.per_address[address]

    async def run_job(self, job: Job) -> None:
        opts = self.opts
        previous_start: float | None = None
        for position, rep in enumerate(job.repetitions):
            if self.stopping:
                return
            schedule = "spaced"
            if opts.schedule == "cold-warm":
                schedule = "cold" if rep == 0 else "warm"
                if schedule == "cold":
                    await self._wait_idle(job.address)
            elif previous_start is not None:
                wait = previous_start + opts.spacing_s - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.stopping:
                return
            async with self._address_slot(job.address), self.slots:
                await self.bucket.take()
                if self.stopping:
                    return
                previous_start = time.monotonic()
                cid, odcid = cidtag.pair(self.run_tag, job.target_index, rep)
                spec = probe.ProbeSpec(
                    job.target_index, rep, job.domain, job.address, job.port, cid, odcid,
                    path=opts.path, user_agent=opts.user_agent,
                    split_clienthello=opts.split_clienthello,
                    first_response_timeout_s=opts.first_response_timeout_s,
                    handshake_timeout_s=opts.handshake_timeout_s,
                    response_timeout_s=opts.response_timeout_s)
                result = await probe.run(spec)
                self.last_probe[job.address] = time.monotonic()
            trace_json = orjson.dumps(result.trace) if result.trace is not None else None
            result.trace = None
            self.deliver(probe_row(result, job, schedule, opts.split_clienthello, self.worker),
                         trace_json, result.keylog)
        if len(self.last_probe) > 100_000:  # bounded: forget addresses idle for long
            cutoff = time.monotonic() - opts.cold_idle_s
            self.last_probe = {a: t for a, t in self.last_probe.items() if t > cutoff}

    async def _wait_idle(self, address: str) -> None:
        last = self.last_probe.get(address)
        if last is not None:
            wait = last + self.opts.cold_idle_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)

    async def drain(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


def probe_row(result: probe.ProbeResult, job: Job, schedule: str, split: int, worker: int) -> dict:
    row = {k: v for k, v in vars(result).items() if k not in ("trace", "keylog")}
    row.update(rank=job.rank, schedule=schedule, split_clienthello=split, worker=worker)
    return row


def refused_row(job: Job, rep: int, outcome: str, reason: str, split: int) -> dict:
    return {"target_index": job.target_index, "repetition": rep, "domain": job.domain,
            "rank": job.rank, "address": job.address or None, "port": job.port or None,
            "schedule": "none", "outcome": outcome, "error_reason": reason,
            "split_clienthello": split, "datagrams_sent": 0, "datagrams_received": 0}


# --- worker processes ---------------------------------------------------------------------------

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


@contextlib.contextmanager
def _main_hidden():
    """While a worker is spawned, the parent's ``__main__`` looks like an interactive session's,
    so multiprocessing does not make the child import it: for the ``quicack`` command (or a
    benchmark script) that is the CLI with DuckDB, polars and rich, ~0.3 s of CPU per worker,
    while a worker needs this module and aioquic only (``worker_main`` and its arguments
    live here)."""
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


# --- the writer thread --------------------------------------------------------------------------

class Writer(threading.Thread):
    """The one thread that writes the store: batches → qlog file → rows → ingest."""

    def __init__(self, store: Store, run_id: int, out_dir: Path, opts: ScanOptions, progress: Progress):
        super().__init__(name="quicack-writer", daemon=True)
        self.store = store
        self.run_id = run_id
        self.out_dir = out_dir
        self.opts = opts
        self.progress = progress
        self.inbox: queue.Queue = queue.Queue()
        self.backlog = 0  # probes received but not yet written
        self.failures: list[str] = []
        self.error: BaseException | None = None
        self.cpu_s = 0.0  # CPU time this thread spent writing and ingesting
        self.keylog_path = out_dir / "sslkeylog.txt"
        (out_dir / "qlog").mkdir(parents=True, exist_ok=True)

    def put(self, row: dict, trace_json: bytes | None, keylog: str) -> None:
        self.backlog += 1
        self.inbox.put((row, trace_json, keylog))

    def finish(self) -> None:
        self.inbox.put(None)
        self.join()
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        try:
            batch: list = []
            started = None
            size = 0  # bytes of the batch's qlogs
            while True:
                timeout = None if not batch else max(0.0, started + self.opts.batch_age_s - time.monotonic())
                try:
                    item = self.inbox.get(timeout=timeout)
                except queue.Empty:
                    item = "flush"
                if item is None:
                    self.flush(batch)
                    return
                if item != "flush":
                    if not batch:
                        started = time.monotonic()
                    trace = item[1]
                    if batch and trace is not None and size + len(trace) > self.opts.batch_bytes:
                        self.flush(batch)  # this probe would take the file past batch_bytes
                        batch, size, started = [], 0, time.monotonic()
                    batch.append(item)
                    size += len(trace) if trace is not None else 0
                if item == "flush" or len(batch) >= self.opts.batch_size:
                    self.flush(batch)
                    batch, size = [], 0
        except BaseException as e:  # reported by finish()
            self.error = e

    def flush(self, batch: list) -> None:
        if not batch:
            return
        started = time.thread_time()
        try:
            self._flush(batch)
        finally:
            self.cpu_s += time.thread_time() - started
            self.progress.writer_cpu_s = self.cpu_s

    def _flush(self, batch: list) -> None:
        con = self.store.con
        traced = [(row, trace) for row, trace, _ in batch if trace is not None]
        qlog_path = None
        digest = None
        if traced:
            qlog_path, digest = write_batch(self.out_dir / "qlog", [t for _, t in traced])
            for index, (row, _) in enumerate(traced):
                row.update(qlog_path=str(qlog_path), qlog_trace_index=index, qlog_sha256=digest)
        keylines = "".join(k for _, _, k in batch if k)
        if keylines:
            with open(self.keylog_path, "a") as f:
                f.write(keylines)
                f.flush()
                os.fsync(f.fileno())
        rows = []
        for row, _, keylog in batch:
            row["run_id"] = self.run_id
            if keylog:
                row["keylog_path"] = str(self.keylog_path)
            rows.append(row)
        from quicack.store import scantables as scanstore
        con.execute("BEGIN")
        try:
            scanstore.insert_probes(con, rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.backlog -= len(batch)
        if qlog_path is not None and self.opts.ingest_during:
            result = self.store.ingest(qlog_path)
            if result.status == "refused":
                self.failures.append(result.error or str(qlog_path))
        self.progress.ingested += len(batch)


def write_batch(directory: Path, traces: list[bytes]) -> tuple[Path, str]:
    """A batch qlog file in ``directory``: one JSON document whose traces are ``traces`` (each
    a serialized trace), on disk (fsync) before this returns; its path and SHA-256."""
    path = directory / f"probes-{time.time_ns()}-{os.getpid()}.qlog"
    body = QLOG_HEADER + b",".join(traces) + b"]}"
    with open(path, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    return path, hashlib.sha256(body).hexdigest()


def _batch_traces(path: str, sha256: str) -> bytes | None:
    """The traces of a batch file as written by :func:`write_batch` (comma-joined), or None if
    the file is not one, or no longer has the content its probes recorded."""
    try:
        with open(path, "rb") as f:
            body = f.read()
    except OSError:
        return None
    if (not body.startswith(QLOG_HEADER) or not body.endswith(b"]}")
            or hashlib.sha256(body).hexdigest() != sha256):
        return None
    return body[len(QLOG_HEADER):-2]


def merge_batches(store: Store, paths: list[str], opts: ScanOptions) -> list[str]:
    """The pending batch files ``paths`` (in order), consecutive ones merged into files of at
    most ``opts.batch_size`` probes and ``opts.batch_bytes``; the files to ingest.

    Ingesting a file costs ~0.3 s of CPU whatever its size, and a scan writes a file whenever a
    batch is ``batch_age_s`` old: a rate-limited scan writes many small files, and any scan ends
    with one.  A merged file is written (fsync) before its probes are pointed at it in one
    transaction, and the files it replaces are deleted after that: killed at any moment, every
    probe names a file that holds its trace (at worst a merged file nobody names is left)."""
    from quicack.store import scantables as scanstore
    if len(paths) < 2:
        return paths
    batches = scanstore.pending_batches(store.con, paths)
    # Groups planned from probe counts and file sizes: a file that fills a batch on its own (a
    # long scan's are all full) is ingested as it is, never read here.
    groups: list[list[str]] = []
    current: list[str] | None = None  # the group a following file may join
    probes = size = 0
    for path in paths:
        n, sha = batches.get(path, (0, None))
        try:
            file_bytes = os.path.getsize(path) if sha is not None else None
        except OSError:
            file_bytes = None
        if file_bytes is None:  # not a batch file as written: ingested (or refused) as it is
            groups.append([path])
            current = None
            continue
        if current is None or probes + n > opts.batch_size or size + file_bytes > opts.batch_bytes:
            current, probes, size = [], 0, 0
            groups.append(current)
        current.append(path)
        probes, size = probes + n, size + file_bytes
    out: list[str] = []
    for group in groups:
        run: list[tuple[str, bytes]] = []  # consecutive files read and checked
        for path in group if len(group) > 1 else ():
            traces = _batch_traces(path, batches[path][1])
            if traces is None:  # changed since it was written: left alone
                out += _merged(store, batches, run)
                out.append(path)
                run = []
            else:
                run.append((path, traces))
        out += _merged(store, batches, run) if len(group) > 1 else group
    return out


def _merged(store: Store, batches: dict, run: list[tuple[str, bytes]]) -> list[str]:
    """The files of ``run`` (path, traces), as one file if there are several."""
    from quicack.store import scantables as scanstore
    if len(run) < 2:
        return [path for path, _ in run]
    merged, digest = write_batch(Path(run[0][0]).parent, [traces for _, traces in run])
    offsets = itertools.accumulate((batches[path][0] for path, _ in run[:-1]), initial=0)
    scanstore.repoint_probes(store.con, list(zip((path for path, _ in run), offsets)), str(merged), digest)
    for path, _ in run:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return [str(merged)]


# --- the dispatcher -------------------------------------------------------------------------------

class Resolver:
    def __init__(self, opts: ScanOptions):
        self.opts = opts
        self.overrides = dict(targets.read_hosts(opts.hosts_file)) if opts.hosts_file else {}
        self.overrides.update(opts.resolve)
        self.family = {"4": socket.AF_INET, "6": socket.AF_INET6}.get(opts.family, socket.AF_UNSPEC)
        self.limit = asyncio.Semaphore(64)

    async def resolve(self, name: str) -> tuple[str, int] | str:
        """(address, port), or an error text."""
        if name in self.overrides:
            return self.overrides[name]
        literal = targets.literal(name)
        if literal is not None:
            return literal, targets.DEFAULT_PORT
        loop = asyncio.get_running_loop()
        async with self.limit:
            try:
                infos = await asyncio.wait_for(loop.getaddrinfo(
                    name, targets.DEFAULT_PORT, family=self.family, type=socket.SOCK_DGRAM), 10)
            except (OSError, asyncio.TimeoutError) as e:
                return f"cannot resolve {name}: {getattr(e, 'strerror', None) or 'timeout'}"
        if not infos:
            return f"cannot resolve {name}: no address"
        return infos[0][4][0], targets.DEFAULT_PORT


def quiet_aioquic() -> None:
    """aioquic logs warnings (e.g. a failed version negotiation) that are probe outcomes here."""
    logging.getLogger("quic").setLevel(logging.CRITICAL)


def default_out_dir(db: str, run: str, shard: str) -> Path:
    db_path = Path(db)
    suffix = f"-shard{shard.replace('/', 'of')}" if shard else ""
    return db_path.parent / f"{db_path.stem}-scans" / f"{run}{suffix}"


async def _dispatch(opts: ScanOptions, run_id: int, reader_con, submit: Callable,
                    write_refused: Callable, writer: Writer, inflight: Callable[[], int],
                    window: int, stop: asyncio.Event, check: Callable[[], None]) -> None:
    from quicack.store import scantables as scanstore
    policy = targets.Policy(targets.Exclusions.read(opts.exclude_file) if opts.exclude_file
                            else targets.Exclusions(), opts.allow_private)
    resolver = Resolver(opts)
    reps = range(opts.repetitions)
    done: set = set()
    chunk_end = -1
    resolving: set[asyncio.Task] = set()

    async def prepare(target: targets.Target, pending: tuple[int, ...]) -> None:
        job = Job(target.index, target.domain, target.rank, "", 0, pending)
        refusal = policy.refuse_name(target.domain)
        if refusal is None:
            found = await resolver.resolve(target.domain)
            if isinstance(found, str):
                refusal = ("resolve_failed", found)
            else:
                job = Job(target.index, target.domain, target.rank, found[0], found[1], pending)
                refusal = policy.refuse_address(found[0])
        if refusal is not None:
            for rep in pending:
                write_refused(refused_row(job, rep, refusal[0], refusal[1], opts.split_clienthello))
            return
        submit(job)

    for target in targets.read_list(opts.list_path):
        if stop.is_set():
            break
        if not in_shard(target.index, opts.shard):
            continue
        if target.index > chunk_end:
            chunk_end = target.index + RESUME_CHUNK - 1
            done = scanstore.done_between(reader_con, run_id, target.index, chunk_end)
        pending = tuple(r for r in reps if (target.index, r) not in done)
        if not pending:
            continue
        while (inflight() + len(resolving) >= window or writer.backlog > 4 * opts.batch_size
               + window) and not stop.is_set():
            await asyncio.sleep(0.01)
            check()
        if stop.is_set():
            break
        task = asyncio.get_running_loop().create_task(prepare(target, pending))
        resolving.add(task)
        task.add_done_callback(resolving.discard)
    if resolving:
        await asyncio.gather(*list(resolving))


async def _scan(opts: ScanOptions, store: Store, run_id: int, run_tag: int, out_dir: Path,
                progress: Progress, on_progress: Callable[[Progress], None] | None) -> bool:
    """Probe every pending pair; True if interrupted."""
    loop = asyncio.get_running_loop()
    writer = Writer(store, run_id, out_dir, opts, progress)
    writer.start()
    stop = asyncio.Event()
    interrupted = False
    open_jobs: dict[int, int] = {}  # target index → repetitions still running

    def deliver(row: dict, trace_json: bytes | None, keylog: str) -> None:
        progress.probed += 1
        left = open_jobs.get(row["target_index"], 1) - 1
        if left <= 0:
            open_jobs.pop(row["target_index"], None)
        else:
            open_jobs[row["target_index"]] = left
        count_result(row)
        writer.put(row, trace_json, keylog)

    def count_result(row: dict) -> None:
        progress.done += 1
        progress.outcomes[row["outcome"]] = progress.outcomes.get(row["outcome"], 0) + 1
        if on_progress:
            on_progress(progress)

    def write_refused(row: dict) -> None:
        count_result(row)
        writer.put(row, None, "")

    def on_signal() -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: stop now, in-flight probes are lost (and redone later)
            for task in asyncio.all_tasks(loop):
                if task is not asyncio.current_task(loop):
                    task.cancel()
            if pool is not None:
                pool.kill()
            return
        interrupted = True
        progress.stopping = True
        stop.set()
        if pool is not None:
            pool.stop()
        else:
            executor.stopping = True
        if on_progress:
            on_progress(progress)

    reader_con = store.con.cursor()
    pool = None
    executor = None
    window = max(opts.concurrency * 2, 16)
    workers = worker_count(opts.workers)
    if workers > 1:
        pool = WorkerPool(opts, run_tag, deliver, workers)
        submit_job = pool.submit
    else:
        executor = Executor(opts, run_tag, deliver)
        submit_job = executor.submit

    def submit(job: Job) -> None:
        if pool is not None and pool.failure is not None:
            raise pool.failure
        open_jobs[job.target_index] = len(job.repetitions)
        submit_job(job)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_signal)
        loop.add_signal_handler(signal.SIGTERM, on_signal)
    try:
        def check() -> None:
            if pool is not None and pool.failure is not None:
                raise pool.failure
            if writer.error is not None:
                raise QuicackError(f"writing the store failed: {writer.error}")

        await _dispatch(opts, run_id, reader_con, submit, write_refused, writer,
                        lambda: len(open_jobs), window, stop, check)
        if pool is not None:
            await pool.drain()
            progress.worker_cpu_s_each = list(pool.cpu_s_each)
            progress.worker_cpu_s = sum(pool.cpu_s_each)
            progress.worker_startup_cpu_s = pool.startup_cpu_s
        else:
            await executor.drain()
    except asyncio.CancelledError:
        interrupted = True
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
        if pool is not None:
            pool.kill()
        reader_con.close()
        await loop.run_in_executor(None, writer.finish)
    progress.failures = writer.failures
    return interrupted


def scan(opts: ScanOptions, on_progress: Callable[[Progress], None] | None = None,
         on_start: Callable[[dict], None] | None = None) -> ScanSummary:
    """Run (or resume) a scan; return what happened.  Raises QuicackError for bad input."""
    from quicack.store import scantables as scanstore
    from quicack.store.database import Store
    quiet_aioquic()
    list_path = Path(opts.list_path)
    total_targets = sum(1 for t in targets.read_list(list_path) if in_shard(t.index, opts.shard))
    list_sha = file_sha256(list_path)
    run_name = opts.run or list_path.stem
    shard = opts.shard_text()
    worker_count(opts.workers)  # errors before anything is written
    if opts.hosts_file:
        targets.read_hosts(opts.hosts_file)
    if opts.exclude_file:
        targets.Exclusions.read(opts.exclude_file)
    out_dir = (Path(opts.out_dir) if opts.out_dir else default_out_dir(opts.db, run_name, shard)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)  # absolute: probes name their files from anywhere
    pcap_path = Path(opts.pcap) if opts.pcap else None
    run_tag = cidtag.run_tag(run_name, shard)
    with Store(opts.db) as store:
        run_id, resumed = scanstore.open_run(
            store.con, name=run_name, shard=shard, cid_run_tag=run_tag,
            list_path=str(list_path), list_sha256=list_sha, targets=total_targets,
            repetitions=opts.repetitions, arguments=opts.record(), host=socket.gethostname(),
            versions=versions(), output_dir=str(out_dir),
            pcap_path=str(pcap_path) if pcap_path else None)
        stored = store.con.execute("SELECT count(*) FROM probes WHERE run_id = ?",
                                   [run_id]).fetchall()[0][0]
        progress = Progress(total=total_targets * opts.repetitions, done=stored)
        if on_start:
            on_start({"run": run_name, "run_id": run_id, "resumed": resumed, "stored": stored,
                      "total": progress.total, "out_dir": str(out_dir)})
        cap = None
        if pcap_path is not None:
            ports = {targets.DEFAULT_PORT} | {p for _, p in opts.resolve.values()}
            interface = opts.pcap_interface or ("lo" if opts.resolve and all(
                targets.is_special(a) for a, _ in opts.resolve.values()) else "any")
            cap = dumpcap.start(pcap_path, ports, interface)
        try:
            with collector.tuned(collect_first=True):
                interrupted = asyncio.run(_scan(opts, store, run_id, run_tag, out_dir, progress,
                                                on_progress))
        finally:
            if cap is not None:
                cap.stop()
        failures = list(progress.failures) + _ingest_pending(store, run_id, opts, progress, on_progress)
        if not interrupted:
            scanstore.finish_run(store.con, run_id)
        outcomes = scanstore.outcome_counts(store.con, run_id)
    return ScanSummary(run_id, run_name, resumed, str(out_dir), sum(outcomes.values()), outcomes,
                       failures, interrupted, str(pcap_path) if pcap_path else None)


def _ingest_pending(store: Store, run_id: int, opts: ScanOptions, progress: Progress,
                    on_progress: Callable[[Progress], None] | None) -> list[str]:
    """Ingest every qlog file of the run whose probes are not linked yet (this scan's, or those
    of a scan killed before it got there), small ones merged first; return the errors of
    refused files."""
    from quicack.store import scantables as scanstore
    pending = merge_batches(store, scanstore.unlinked_files(store.con, run_id), opts)
    progress.phase, progress.files_to_ingest, progress.files_ingested = "ingesting", len(pending), 0
    failures = []
    for path in pending:
        if on_progress:
            on_progress(progress)
        result = store.ingest(path)
        if result.status == "refused":
            failures.append(result.error or path)
        progress.files_ingested += 1
    if on_progress:
        on_progress(progress)
    return failures

