"""Files into the store, each in one transaction: hashed, staged, normalized, analyzed, committed.

Theory of operation: :class:`Ingest` works on one DuckDB connection (a store's, or a cursor of
it).  Each input file is ingested in one transaction — staged by ``quicack.qlog.reader`` slice by
slice and normalized by ``quicack.qlog.normalize`` (a capture: by the ``quicack.pcap`` path),
classified and replayed by ``quicack.store.analysis``, recorded in ``files`` with its SHA-256
and the analysis version — so a file that fails leaves the store exactly as it was.  A file whose
hash was already ingested by this analysis version is skipped; ``reanalyze`` deletes its rows and
ingests it again.  The hash of a large file is computed in a thread while the file is read (an
unchanged file is noticed, and its work dropped, as soon as the hash is known).  Small qlogs can
be ingested several at a time (:meth:`Ingest.many`), each in its own transaction on its own
cursor, with file and connection ids handed out by one counter (:class:`_Ids`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import queue
import stat
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from quicack.core import gctuning
from quicack.model import FileResult, QuicackError
from quicack.pcap import source, staging, streaming, tshark
from quicack.pcap.staging import StagedCapture
from quicack.pcap.normalize import normalize as normalize_capture
from quicack.qlog import normalize, reader, slicing
from quicack.store import amplification, analysis, keywaits, scantables, settings
from quicack.store.schema import ANALYSIS_VERSION, CONNECTION_TABLES, FILE_TABLES

#: Captures with fewer frames than a DuckDB row group holds (122,880 rows) are normalized,
#: analyzed and committed on one thread (the caller's setting is restored afterwards).
ONE_THREAD_FRAMES = 122_880

#: Files up to this size are hashed before staging; larger ones while staging, in a thread.
SYNC_HASH_BYTES = 8 << 20

#: DuckDB settings while a qlog is ingested: the buffer pool is capped (a slice of
#: slicing.SLICE_BYTES needs far less; uncommitted rows beyond the cap are written to the database
#: file early), the allocator hands freed memory back sooner, and queries see the per-slice Arrow
#: tables of quicack.qlog.normalize by name.  The previous values are restored afterwards.
INGEST_SETTINGS = {"memory_limit": "80MB", "allocator_flush_threshold": "32MB",
                   "python_enable_replacements": "true", "python_scan_all_frames": "false"}


#: DuckDB's buffer pool while the native reader's batches are made into rows, analyzed and
#: committed: uncommitted rows beyond it are written to the database file early, so memory stays
#: flat whatever the capture (a capture whose analyses need more is read again without the cap).
STREAM_MEMORY = "160MB"

#: … and the other settings then: the allocator hands freed memory back sooner; the statements
#: read each batch's Arrow tables by their Python names (not registered: see quicack.pcap.streaming)
STREAM_SETTINGS = {"allocator_flush_threshold": "32MB", "python_enable_replacements": "true",
                   "python_scan_all_frames": "true"}


#: Room the store's disk keeps free beyond what a file needs.
SPARE_BYTES = 2 << 20


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 10e6 else f"{n / 1e6:.0f} MB"


def store_folder(con: duckdb.DuckDBPyConnection) -> str | None:
    """The folder of the database file behind ``con`` (None for a store in memory)."""
    try:
        found = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    except duckdb.Error:
        return None
    return os.path.dirname(os.path.abspath(found[0][0])) if found and found[0][0] else None


def free_space(folder: str | None) -> int | None:
    """Bytes free on the disk of ``folder``; None for none, or a disk that cannot say."""
    try:
        disk = os.statvfs(folder) if folder else None
    except OSError:
        return None
    return disk.f_bavail * disk.f_frsize if disk else None


def kind_of(info: os.stat_result) -> str:
    """What a file that is not a regular one is: 'a FIFO', 'a character device', …"""
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(info.st_mode):
            return what
    return "not a file"


def space_needed(path: Path, is_capture: bool) -> int:
    """About how much the store grows by a file's rows and the write-ahead log of its transaction:
    a qlog's rows take about its size (JSON is verbose, rows are not), a capture's a fraction of
    it (the packets' payloads are not stored), each written twice (log, then database)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    return (size // 2 if is_capture else 2 * size) + SPARE_BYTES


class Ingest:
    """Ingest of files into the store behind ``con``; ``name`` (the store's path) for messages.
    ``ids``: shared by the concurrent ingests of :meth:`many`, else read in each transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, ids: _Ids | None = None):
        self.con = con
        self._ids = ids
        #: a fatal error invalidated the database: the store must be opened again
        self.invalidated = False
        self._folder = store_folder(con)  # (asked now: an invalidated database answers nothing)

    def file(self, path: str | Path, reanalyze: bool = False, keylog: str | Path | None = None,
             quic_ports: tuple[int, ...] = (), progress: Callable[[int], None] | None = None,
             dissection: tshark.Dissection | None = None, dissector: str = "native",
             sha256: str | None = None) -> FileResult:
        """Ingest one file in one transaction (a refused file is a result, not an exception; ``sha256``:
        the file's, if the caller hashed it).  Captures are read by ``dissector`` (staging.DISSECTORS),
        decrypted with ``keylog`` (else a key log beside them), ``quic_ports`` decoded as QUIC;
        ``dissection`` is tshark already started on the capture, taken over and closed.

        ``progress(n)`` is called while the file is read, ``n`` the bytes of the file done since the
        previous call; by the time ingest returns the calls add up to the file size.
        """
        path = Path(path)
        name = str(path)
        reported = 0

        def report(done: int) -> None:
            nonlocal reported
            if progress and done > reported:
                progress(done - reported)
                reported = done

        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):  # (a FIFO or a device would be read forever)
                return FileResult(name, "refused", error=str(QuicackError(f"not a regular file ({kind_of(info)})", name)))
            size = info.st_size
            is_capture = source.is_capture(path)
            digest = _Digest(path, size > SYNC_HASH_BYTES and (not is_capture or dissector == "native"), sha256)
        except OSError as e:
            return FileResult(name, "refused", error=str(QuicackError(f"cannot read: {e.strerror}", name)))
        try:
            unchanged = digest.ready() and self._unchanged(path, digest.value(), reanalyze, keylog, is_capture)
            if unchanged:
                return unchanged
            full = self._disk_full(path, is_capture)
            if full:
                return FileResult(name, "refused", error=str(full))
            if is_capture:
                return self._capture_file(path, name, digest, reanalyze, report, keylog, quic_ports, dissection,
                                          dissector)
            values = dict(INGEST_SETTINGS)
            if size <= slicing.SLICE_BYTES:
                # A file of one slice is ingested with DuckDB on one thread: its statements over a
                # few thousand to a hundred thousand rows then cost less CPU and no more wall time.
                values["threads"] = 1
            if self._ids is not None:  # a worker of many(): settings and collector set around all
                return self._transaction(path, name, digest, reanalyze, report, keylog, quic_ports, is_capture)
            # (the collector tuned too: a scan's batch file makes hundreds of thousands of objects)
            with settings.changed(self.con, **values) as saved, gctuning.tuned():
                try:
                    return self._transaction(path, name, digest, reanalyze, report, keylog, quic_ports, is_capture)
                except duckdb.OutOfMemoryException:
                    pass  # (rolled back) a file whose records the cap cannot hold: an event of tens of MB
                # Read again with DuckDB's memory limit as it was: the cap keeps memory flat for files
                # of ordinary events, it must not refuse a valid file.
                settings.restore(self.con, "memory_limit", saved["memory_limit"])
                note = (f"DuckDB needed more memory than the {values['memory_limit']} it is given while a qlog is "
                        f"ingested (an event of several MB?): read again with its usual limit ({saved['memory_limit']})")
                return self._transaction(path, name, digest, reanalyze, report, keylog, quic_ports, is_capture,
                                         notes=(note,))
        except OSError as e:
            return FileResult(name, "refused", error=str(QuicackError(f"cannot read: {e.strerror}", name)))
        except duckdb.OutOfMemoryException as e:  # (rolled back) even with DuckDB's usual limit
            if self._ids is not None:
                raise  # (many() reads it again on its own, with the retry above)
            return FileResult(name, "refused", error=str(QuicackError(f"out of memory: {str(e).splitlines()[0]}",
                                                                      name)))
        except duckdb.Error as e:  # (setting or restoring a setting: the database invalidated)
            return FileResult(name, "refused", error=str(self._store_error(e, path, is_capture)))
        except Exception as e:  # (rolled back) a bug: this file is refused, the others are read
            return FileResult(name, "refused", error=str(QuicackError(
                f"internal error, a bug of quicack (please report it with the file): {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}", name)))
        finally:
            if dissection is not None:
                dissection.close()  # not taken over (a qlog, an unchanged capture) or done
            digest.join()
            report(size)

    def many(self, paths: list[Path], jobs: int, reanalyze: bool = False,
             progress: Callable[[Path, int], None] | None = None) -> list[FileResult]:
        """Ingest small qlog files ``jobs`` at a time, each in its own transaction on its own cursor;
        return their results in the order of ``paths``.

        A small file costs ~70 statements whose planning outweighs their work, each on one core:
        ``jobs`` files at once keep that many cores busy.  Each ingest takes its file and
        connection ids from one counter, inside its transaction: DuckDB shows a transaction only
        what was committed when it began, so rows it sees beyond its own first id are its own (and
        appends do not conflict).  The settings of
        :data:`INGEST_SETTINGS` (one DuckDB thread; the memory cap, once per job) and the
        collector's tuning are set once around all of them.  Read on their own afterwards, in
        order: a file whose content an earlier one of ``paths`` has (then unchanged, as in a
        row), and one that ran DuckDB out of memory (then with the usual limit, as :meth:`file`
        does).  ``progress(path, n)`` as for :func:`quicack.store.ingest.analyze`.
        """
        results: list[FileResult | None] = [None] * len(paths)
        todo, after = [], []
        size_of = [_size(path) for path in paths]
        sizes = collections.Counter(size_of)
        first_of: dict[str, int] = {}
        for i, path in enumerate(paths):
            if source.is_capture(path):
                after.append(i)  # (captures have their own settings: one at a time)
                continue
            if sizes[size_of[i]] > 1:  # (only files of one size can be copies: hashed here, and again by ingest)
                try:
                    digest = _Digest(path, background=False).value()
                except OSError:
                    digest = None  # (ingest says why)
                if digest in first_of:
                    after.append(i)
                    continue
                if digest is not None:
                    first_of[digest] = i
            todo.append(i)

        def step(i: int):
            return (lambda n, path=paths[i]: progress(path, n)) if progress else None
        ids = _Ids(self.con)
        pending: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in todo:
            pending.put(i)
        lock = threading.Lock()
        failures: list[BaseException] = []

        def work() -> None:
            view = Ingest(self.con.cursor(), ids)
            try:
                while not failures:
                    try:
                        i = pending.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        results[i] = view.file(paths[i], reanalyze=reanalyze, progress=step(i))
                    except duckdb.OutOfMemoryException:
                        with lock:
                            after.append(i)
                    if view.invalidated:
                        self.invalidated = True
            except BaseException as e:  # raised in the caller's thread
                failures.append(e)
            finally:
                view.con.close()

        cap = int(INGEST_SETTINGS["memory_limit"].removesuffix("MB")) * jobs
        with settings.changed(self.con, **dict(INGEST_SETTINGS, threads=1, memory_limit=f"{cap}MB")), \
                gctuning.tuned():
            workers = [threading.Thread(target=work, name=f"quicack-ingest-{k}", daemon=True)
                       for k in range(max(1, min(jobs, len(todo))))]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        if failures:
            raise failures[0]
        for i in sorted(after):
            results[i] = self.file(paths[i], reanalyze=reanalyze, progress=step(i))
        return results

    def held(self, path: str | Path, digest: str, reanalyze: bool = False, keylog=None) -> FileResult | None:
        """Before rows of ``path`` made elsewhere (a cluster worker's shard) are appended: the
        result of a file this store already holds (unchanged), else None once the rows of an
        earlier ingest of the same bytes are deleted (``reanalyze``, another analysis version)."""
        path = Path(path)
        held = self._unchanged(path, digest, reanalyze, keylog, source.is_capture(path))
        if held is None:
            self.delete_files([previous_id for previous_id, _ in self._previous(digest)])
        return held

    def delete_files(self, file_ids: list[int]) -> None:
        """Delete these files and every row of theirs, in one transaction."""
        if not file_ids:
            return
        self.con.execute("BEGIN")
        try:
            for file_id in file_ids:
                self._delete_file(file_id)
            self.con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _unchanged(self, path: Path, digest: str, reanalyze: bool, keylog, is_capture: bool) -> FileResult | None:
        """The result for a file this analysis version already holds, else None."""
        previous = self._previous(digest)
        if previous and not reanalyze and all(v == ANALYSIS_VERSION for _, v in previous):
            if not is_capture or self._same_secrets([f for f, _ in previous], path, keylog):
                return FileResult(str(path), "unchanged", file_id=previous[0][0])
        return None

    def _previous(self, digest: str) -> list[tuple[int, int]]:
        return self.con.execute(
            "SELECT file_id, analysis_version FROM files WHERE content_sha256 = ?", [digest]).fetchall()

    def _transaction(self, path: Path, name: str, digest: "_Digest", reanalyze: bool, report, keylog,
                     quic_ports: tuple[int, ...], is_capture: bool,
                     dissection: tshark.Dissection | None = None, threads: int = 1,
                     notes: tuple[str, ...] = (), dissector: str = "native", stream: bool = True,
                     cap: str | None = None) -> FileResult:
        """Ingest one file in one transaction; ``notes``: warnings to record with it.  A file that
        cannot be read is a refused result; DuckDB running out of memory is raised (rolled back).
        ``stream``: a capture the native reader reads is made into rows batch by batch
        (:mod:`quicack.pcap.streaming`), DuckDB's buffer pool ``cap`` if given; else staged whole
        (:class:`quicack.pcap.streaming.Unstreamable` is raised, rolled back, if it must be)."""
        self.con.execute("BEGIN")
        try:
            ids = self._ids or _Ids(self.con)  # (read inside the transaction: the store's largest + 1)
            file_id = ids.file_id()
            if is_capture:  # (never one of many()'s: its connections count up from the next id)
                first_connection = ids.connections(0)
                held: list[FileResult] = []

                def stop() -> bool:
                    if digest.ready() and not held:
                        held.append(self._unchanged(path, digest.value(), reanalyze, keylog, is_capture))
                    return bool(held and held[0])

                staged = self._capture(path, file_id, first_connection, keylog, quic_ports, dissection, dissector,
                                       stop, threads, stream, cap)
                if staged is None:
                    self._rollback()
                    return held[0]
            else:
                staged, first_connection, unchanged = self._stage_qlog(path, name, ids, file_id, notes, report,
                                                                       lambda: digest.ready() and self._unchanged(
                                                                           path, digest.value(), reanalyze, keylog,
                                                                           is_capture))
                if unchanged:
                    self._rollback()
                    return unchanged
            analysis.classify_and_replay(self.con, first_connection)
            amplification.analyze(self.con, first_connection)
            keywaits.analyze(self.con, first_connection)
            unchanged = self._unchanged(path, digest.value(), reanalyze, keylog, is_capture)
            if unchanged:
                self._rollback()
                return unchanged
            for previous_id, _ in self._previous(digest.value()):
                self._delete_file(previous_id)
            scantables.link_probes(self.con, file_id, digest.value())
            self.con.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                file_id, name, digest.value(), path.stat().st_size, staged.format, staged.qlog_version,
                ANALYSIS_VERSION, datetime.now(timezone.utc).replace(tzinfo=None), staged.events, staged.warnings])
            result = self._file_result(file_id, name, staged.warnings)
            self._commit(write_through=is_capture)
            return result
        except QuicackError as e:
            self._rollback()
            e.path = e.path or name  # (the normalizer knows positions, not the file)
            return FileResult(name, "refused", error=str(e))
        except duckdb.OutOfMemoryException:
            self._rollback()
            raise
        except duckdb.Error as e:
            self._rollback()
            return FileResult(name, "refused", error=str(self._store_error(e, path, is_capture)))
        except BaseException:
            self._rollback()
            raise

    def _capture_file(self, path: Path, name: str, digest: "_Digest", reanalyze: bool, report, keylog, quic_ports,
                      dissection, dissector: str) -> FileResult:
        """:meth:`file` for a capture: streamed with DuckDB's buffer pool capped (:meth:`_capture`),
        again with the usual limit if that ran out of memory, staged whole if it cannot stream;
        DuckDB's settings restored after it."""
        with settings.changed(self.con, threads=None, memory_limit=None, **dict.fromkeys(STREAM_SETTINGS)) as saved:
            attempt = functools.partial(self._transaction, path, name, digest, reanalyze, report, keylog, quic_ports,
                                        True, dissection, int(saved["threads"]), dissector=dissector)
            try:
                try:
                    return attempt(cap=STREAM_MEMORY)
                except duckdb.OutOfMemoryException:  # (rolled back) the capped buffer pool was too small
                    settings.restore(self.con, "memory_limit", saved["memory_limit"])
                    return attempt()
            except streaming.Unstreamable:  # (rolled back; rare) staged whole, with the usual limit
                settings.restore(self.con, "memory_limit", saved["memory_limit"])
                return attempt(stream=False)

    def _capture(self, path: Path, file_id: int, first_connection: int, keylog, quic_ports, dissection,
                 dissector: str, stop, threads: int, stream: bool, cap: str | None) -> StagedCapture | None:
        """Read a capture into the store tables (None if ``stop()`` said to stop): the native
        reader's batches made into rows as they come (``stream``; ``cap``: DuckDB's buffer pool
        then), else staged whole and then normalized."""
        if dissector == "native" and stream:
            if dissection is not None:
                dissection.close()
            # (set, not changed for a block: restoring a setting fails in a transaction DuckDB aborted;
            # _capture_file restores them, the buffer pool capped for the analyses and the commit too)
            capped = {"memory_limit": cap} if cap else {}
            for setting, value in dict(STREAM_SETTINGS, threads=1, **capped).items():
                self.con.execute(f"SET {setting} = '{value}'")
            staged = streaming.ingest(self.con, path, keylog, quic_ports, file_id, first_connection, stop)
            if staged is not None:
                self.con.execute(f"SET threads = {1 if staged.frames < ONE_THREAD_FRAMES else threads}")
            return staged
        staged = staging.stage(self.con, path, keylog, quic_ports, dissection, dissector, stop)
        if staged is not None:
            # DuckDB splits work by row group: a smaller capture is normalized, analyzed and
            # committed faster by one thread than by several that wait for one another.
            self.con.execute(f"SET threads = {1 if staged.frames < ONE_THREAD_FRAMES else threads}")
            normalize_capture(self.con, file_id, first_connection, staged)
        return staged

    def _stage_qlog(self, path: Path, name: str, ids: _Ids, file_id: int, notes: tuple[str, ...], report,
                    unchanged: Callable[[], FileResult | None]):
        """Stage and normalize a qlog file slice by slice (inside the caller's transaction):
        (source, first connection id, None), or (…, the unchanged result) as soon as the hash
        computed meanwhile shows the store already holds the file."""
        with reader.open_source(path) as staged:
            staged.warnings.extend(notes)
            normalizer = normalize.Normalizer(self.con, staged.traces, file_id, ids.connections)
            # (each slice's rows are made in the thread that stages the next one)
            parts = reader.staged_slices(
                staged, lambda part, events: normalizer.rows(part.trace_index, events, part.traces, part.offset,
                                                             staged.unit))
            with contextlib.closing(parts):
                for part, rows in parts:  # bounded slices, in file order
                    normalizer.insert(rows)
                    report(part.done_bytes)
                    done = unchanged()
                    if done:
                        return staged, None, done
            if not staged.events:
                raise QuicackError("qlog stream has a header but no events", name)
            if staged.out_of_range_warning():
                staged.warnings.append(staged.out_of_range_warning())
            normalizer.finish()
            return staged, normalizer.first_connection_id, None

    def _disk_full(self, path: Path, is_capture: bool) -> QuicackError | None:
        """A refusal when the store's disk has not room for the file's rows (:func:`space_needed`)."""
        free = free_space(self._folder)
        needed = space_needed(path, is_capture)
        if free is None or free >= needed:
            return None
        return QuicackError(f"not enough free disk space for the store: {_mb(free)} free in {self._folder}, about "
                            f"{_mb(needed)} needed for this file", str(path))

    def _rollback(self) -> None:
        """ROLLBACK, if a transaction is still open: a COMMIT that failed (the disk full) ended it
        already, and a database invalidated by a fatal error runs nothing (the store is opened
        again, :meth:`quicack.store.database.Store.ingest`)."""
        try:
            self.con.execute("ROLLBACK")
        except duckdb.FatalException:
            self.invalidated = True
        except duckdb.Error as e:
            if "no transaction is active" not in str(e):
                raise

    def _store_error(self, e: duckdb.Error, path: Path, is_capture: bool) -> QuicackError:
        """The one line for a statement of the store that failed: a full disk says how much room
        is left and about how much the file needs."""
        if isinstance(e, duckdb.FatalException):
            self.invalidated = True
        first = str(e).splitlines()[0]
        text = str(e)
        if "No space left on device" in text:
            free = free_space(self._folder)
            needed = space_needed(path, is_capture)
            return QuicackError(f"the store's disk is full (No space left on device): {_mb(free or 0)} free in "
                                f"{self._folder}, about {_mb(needed)} needed for this file; nothing of it was stored",
                                str(path))
        return QuicackError(f"cannot store: {first}", str(path))

    def _commit(self, write_through: bool) -> None:
        """COMMIT; ``write_through``: the rows go to the database file at once (a checkpoint)
        instead of to the write-ahead log and again to the file when the store closes, which a
        user of ``quicack analyze`` would wait for."""
        if not write_through:
            self.con.execute("COMMIT")
            return
        with settings.changed(self.con, checkpoint_threshold="0b"):
            self.con.execute("COMMIT")

    def _delete_file(self, file_id: int) -> None:
        ids = "(SELECT connection_id FROM connections WHERE file_id = ?)"
        for table in CONNECTION_TABLES:
            self.con.execute(f"DELETE FROM {table} WHERE connection_id IN {ids}", [file_id])
        self.con.execute("DELETE FROM connections WHERE file_id = ?", [file_id])
        for table in FILE_TABLES:
            self.con.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])
        self.con.execute("DELETE FROM files WHERE file_id = ?", [file_id])

    def _same_secrets(self, file_ids: list[int], path: Path, keylog: str | Path | None) -> bool:
        """Whether a capture was ingested with the key log it would be decrypted with now."""
        wanted = source.secrets_fingerprint(path, Path(keylog) if keylog else None)
        used = self.con.execute("SELECT keylog_sha256 FROM capture_files WHERE file_id IN "
                                f"({', '.join('?' * len(file_ids))})", file_ids).fetchall()
        return bool(used) and all(u == wanted for (u,) in used)

    def _file_result(self, file_id: int, name: str, warnings: list[str]) -> FileResult:
        ids = "(SELECT connection_id FROM connections WHERE file_id = $id)"
        connections, events = self.con.execute(
            "SELECT count(*), coalesce(sum(events), 0) FROM connections WHERE file_id = $id",
            {"id": file_id}).fetchall()[0]
        packets = self.con.execute(f"SELECT count(*) FROM packets WHERE connection_id IN {ids}",
                                   {"id": file_id}).fetchall()[0][0]
        skipped = dict(self.con.execute(
            f"SELECT event_name, count(*) FROM other_events WHERE connection_id IN {ids} "
            "GROUP BY event_name ORDER BY 2 DESC, 1", {"id": file_id}).fetchall())
        return FileResult(name, "ingested", connections, packets, int(events), skipped, list(warnings),
                          file_id=file_id)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


class _Ids:
    """File and connection ids counting up from the store's largest: handed out to one ingest, or
    to the concurrent ingests of :meth:`Ingest.many`."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._lock = threading.Lock()
        self._file, self._connection = con.execute(
            "SELECT (SELECT coalesce(max(file_id), 0) + 1 FROM files), "
            "(SELECT coalesce(max(connection_id), 0) + 1 FROM connections)").fetchall()[0]

    def file_id(self) -> int:
        with self._lock:
            self._file += 1
            return self._file - 1

    def connections(self, n: int) -> int:
        """The first of ``n`` connection ids."""
        with self._lock:
            self._connection += n
            return self._connection - n


class _Digest:
    """The SHA-256 of a file: given (``value``), computed now, or in a background thread (hashlib
    releases the GIL) — large qlogs, and captures the native reader reads, whose reading stops
    at its next batch once the hash shows the file stored (:meth:`Ingest._transaction`'s ``stop``)."""

    def __init__(self, path: Path, background: bool, value: str | None = None):
        self._path = path
        self._value: str | None = value
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True) if background and not value else None
        if self._thread:
            self._thread.start()
        elif not value:
            self._run()
            if self._error:
                raise self._error

    def _run(self) -> None:
        try:
            with open(self._path, "rb") as f:
                self._value = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as e:
            self._error = e

    def ready(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def join(self) -> None:
        if self._thread:
            self._thread.join()

    def value(self) -> str:
        self.join()
        if self._error:
            raise self._error
        return self._value
