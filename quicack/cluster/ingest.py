"""`quicack analyze --cluster`: each file ingested by a Dask worker into a shard, shards combined.

Theory of operation: the client expands the paths as a local analyze does and submits one task
per file (:func:`ingest_shard`).  A task ingests its file into a new store of its own in the run's
shard folder, named ``NNNNNNN-<worker>-<token>.partial.duckdb`` while it is written and renamed
to ``NNNNNNN-<worker>-<token>.duckdb`` only once the store is closed; the task returns that name.  A worker
killed mid-file leaves a ``.partial`` store no one names, and Dask runs the task again on
another worker under a new token, so a half-written shard is never combined.  The client appends
the finished shards to ``--db`` in the order of the files (:func:`quicack.store.merge.append`,
keys renumbered), so a store made through the cluster numbers its files and connections as a
local ingest of the same files does; each append is one transaction, and the shard is deleted
after it.  A file the store already holds (same SHA-256, analysis version and key log) is
unchanged, as locally: workers skip qlogs whose SHA-256 the store held at the start, and the
client checks every shard before appending it (:meth:`quicack.store.transaction.Ingest.held`).

Input files and the shard folder must be visible to the workers and to the client under the same
paths (one machine, or a shared file system); the combine step runs where ``--db`` is.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from quicack.cluster import connection
from quicack.model import FileResult, QuicackError, Summary


def shard_folder(db: str | Path, shards: str | Path | None) -> Path:
    """This run's own folder under ``shards`` (default: ``<db>.shards`` beside the store)."""
    base = Path(shards) if shards else Path(f"{db}.shards")
    return (base / uuid.uuid4().hex[:12]).resolve()


def ingest_shard(path: str, folder: str, index: int, reanalyze: bool, keylog: str | None,
                 quic_ports: tuple[int, ...], known: frozenset[str]) -> tuple[FileResult, str | None, str | None]:
    """On a worker: ingest ``path`` into a shard store of its own; (result, shard, SHA-256).  The
    shard is None when nothing was stored (refused, or a qlog whose SHA-256 is in ``known``)."""
    from quicack.pcap import source
    from quicack.store.database import Store
    if known and not reanalyze and not source.is_capture(Path(path)):
        try:
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            digest = None  # (the ingest says why)
        if digest in known:
            return FileResult(path, "unchanged"), None, digest
    Path(folder).mkdir(parents=True, exist_ok=True)
    stem = f"{index:07d}-{_worker_name()}-{uuid.uuid4().hex[:8]}"
    partial = Path(folder) / f"{stem}.partial.duckdb"
    with Store(partial) as store:
        result = store.ingest(path, reanalyze=reanalyze, keylog=keylog, quic_ports=tuple(quic_ports))
        digest = None
        if result.file_id is not None:
            digest = store.con.execute("SELECT content_sha256 FROM files WHERE file_id = ?",
                                       [result.file_id]).fetchall()[0][0]
    if result.status != "ingested":
        _remove(partial)
        return result, None, digest
    final = partial.with_name(f"{stem}.duckdb")
    os.replace(partial, final)
    return result, str(final), digest


def _worker_name() -> str:
    """The Dask worker running this task, as a file name's part (which worker wrote a shard)."""
    from distributed import get_worker
    try:
        name = str(get_worker().name)
    except ValueError:  # (not on a worker)
        name = "client"
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name)[:40]


def _remove(store: Path) -> None:
    for p in (store, Path(f"{store}.wal")):
        p.unlink(missing_ok=True)


def analyze(paths: Iterable[str | Path], db: str | Path, cluster: str, reanalyze: bool = False,
            progress: Callable[[Path, int], None] | None = None, keylog: str | Path | None = None,
            quic_ports: Iterable[int] = (), shards: str | Path | None = None,
            timeout_s: float = connection.WORKER_TIMEOUT_S) -> Summary:
    """:func:`quicack.store.ingest.analyze` with the files ingested by the workers of ``cluster``
    (a scheduler's address or ``local:N``); ``shards``: the folder for the workers' stores."""
    from quicack.store import ingest
    summary = Summary()
    named = ingest.expand(paths, summary.skipped)
    special = {i: r for i, p in enumerate(named) if (r := ingest.not_regular(p)) is not None}
    files = [(i, p) for i, p in enumerate(named) if i not in special]
    dask = connection.distributed()  # (before anything is written)
    folder = shard_folder(db, shards)
    from quicack.store.database import Store
    try:
        with Store(db) as store, connection.client(cluster, timeout_s=timeout_s) as client:
            known = _known_digests(store, reanalyze)
            shared = client.scatter(known, broadcast=True) if known else frozenset()
            futures = {client.submit(ingest_shard, str(p.absolute()), str(folder), i, reanalyze,
                                     str(keylog) if keylog else None, tuple(quic_ports), shared,
                                     key=f"quicack-ingest-{folder.name}-{i}", pure=False): (i, p)
                       for i, p in files}
            results = _combine(store, dask, client, futures, [i for i, _ in files], reanalyze, keylog, progress)
            summary.files.extend(special.get(i) or results[i] for i in range(len(named)))
            if summary.file_ids:
                summary.handshake_classes = store.handshake_class_rows(summary.file_ids)
            summary.store_unused_bytes = store.unused_bytes()
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # (with the .partial stores of killed workers)
        with_parent = folder.parent
        if with_parent.is_dir() and not any(with_parent.iterdir()):
            with_parent.rmdir()
    return summary


def _known_digests(store, reanalyze: bool) -> frozenset[str]:
    """SHA-256 of every file this analysis version stored (nothing with ``reanalyze``)."""
    from quicack.store.schema import ANALYSIS_VERSION
    if reanalyze:
        return frozenset()
    return frozenset(d for (d,) in store.con.execute(
        "SELECT content_sha256 FROM files WHERE analysis_version = ?", [ANALYSIS_VERSION]).fetchall())


def _combine(store, dask, client, futures: dict, order: list[int], reanalyze: bool, keylog,
             progress: Callable[[Path, int], None] | None) -> dict[int, FileResult]:
    """Append the shards to ``store`` in file order as their tasks finish; results by index."""
    from quicack.store.merge import append
    from quicack.store.transaction import Ingest
    path_of = {i: p for i, p in futures.values()}
    done: dict[int, tuple] = {}
    results: dict[int, FileResult] = {}
    position = 0
    for future in dask.as_completed(list(futures), loop=client.loop):
        index, path = futures[future]
        done[index] = _outcome(future, path)
        while position < len(order) and order[position] in done:
            i = order[position]
            result, shard, digest = done.pop(i)
            if shard is not None:
                held = Ingest(store.con).held(result.path, digest, reanalyze, keylog)
                if held is None:
                    append(store, shard)
                    result.file_id = store.con.execute(
                        "SELECT max(file_id) FROM files WHERE content_sha256 = ?", [digest]).fetchall()[0][0]
                else:
                    result = held
                _remove(Path(shard))
            elif result.status == "unchanged":
                result.file_id = store.con.execute(
                    "SELECT min(file_id) FROM files WHERE content_sha256 = ?", [digest]).fetchall()[0][0]
            result.path = str(path_of[i])  # (as given; the workers read the absolute path)
            results[i] = result
            position += 1
            if progress:
                progress(path_of[i], _size(path_of[i]))
    return results


def _outcome(future, path: Path) -> tuple[FileResult, str | None, str | None]:
    """A task's (result, shard, SHA-256); a task that raised (a bug, or a file that killed its
    workers again and again) refuses its file."""
    try:
        return future.result()
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else ""
        return FileResult(str(path), "refused", error=str(QuicackError(
            f"the cluster could not ingest it: {type(e).__name__}: {text}", str(path)))), None, None


def _size(path: Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
