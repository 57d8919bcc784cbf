"""The writer thread: the one thread of a scan that writes the store.

Theory of operation: results (probe rows, serialized traces, key log lines) arrive on a queue
from the event loop.  The :class:`Writer` collects them into batches and flushes a batch once it
has ``batch_size`` probes, once its qlogs would pass ``batch_bytes``, or once its first probe is
``batch_age_s`` old: it writes the batch's client traces as one qlog file
(:func:`quicack.scan.batches.write_batch`), appends the TLS secrets to the run's key log (both
fsync'd) and then inserts the probe rows in one transaction, so a row never names a file that is
not on disk.  With ``ingest_during`` it also ingests each batch file as it goes.  ``backlog``
(probes received, not yet written) lets the dispatcher pause while the writer is behind.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from quicack.scan import batches
from quicack.scan.options import Progress, ScanOptions
from quicack.store import scantables

if TYPE_CHECKING:
    from quicack.store.database import Store


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

    def _write_resumed(self, rows: list[dict]) -> Path | None:
        """The resumed connections' traces of a batch (``scan --resumption``) as one file of their
        own, named in their rows; the file's path, or None without any."""
        from quicack.scan.resumption import RESUMED_TRACE

        traced = [(row, row.pop(RESUMED_TRACE)) for row in rows if row.get(RESUMED_TRACE) is not None]
        if not traced:
            return None
        folder = self.out_dir / "qlog" / "resumed"
        folder.mkdir(parents=True, exist_ok=True)
        path, digest = batches.write_batch(folder, [t for _, t in traced])
        for index, (row, _) in enumerate(traced):
            row.update(resumed_qlog_path=str(path), resumed_qlog_trace_index=index, resumed_qlog_sha256=digest)
        return path

    def _flush(self, batch: list) -> None:
        con = self.store.con
        traced = [(row, trace) for row, trace, _ in batch if trace is not None]
        resumed_path = self._write_resumed([row for row, _, _ in batch])
        qlog_path = None
        digest = None
        if traced:
            qlog_path, digest = batches.write_batch(self.out_dir / "qlog", [t for _, t in traced])
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
            row["vantage"] = self.opts.vantage
            if keylog:
                row["keylog_path"] = str(self.keylog_path)
            rows.append(row)
        con.execute("BEGIN")
        try:
            scantables.insert_probes(con, rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.backlog -= len(batch)
        for path in (qlog_path, resumed_path) if self.opts.ingest_during else ():
            result = self.store.ingest(path) if path is not None else None
            if result is not None and result.status == "refused":
                self.failures.append(result.error or str(path))
        self.progress.ingested += len(batch)
