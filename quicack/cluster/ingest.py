"""`quicack analyze --cluster`: files ingested by Dask workers into shards, shards combined.

Theory of operation: the client expands the paths as a local analyze does and cuts the files into
batches — consecutive small qlogs (up to :data:`BATCH_FILES` files and :data:`BATCH_BYTES`) share
one, a capture or a larger qlog has its own — and submits one task per batch
(:func:`ingest_shard`).  A task ingests its files, each in its own transaction as locally, into a
new store of its own in the run's shard folder, named ``NNNNNNN-<worker>-<token>.partial.duckdb``
while it is written and renamed to ``NNNNNNN-<worker>-<token>.duckdb`` only once the store is
closed; the task returns that name.  A worker killed mid-batch leaves a ``.partial`` store no one
names, and Dask runs the task again on another worker under a new token, so a half-written shard
is never combined.  The client appends the finished shards to ``--db`` in the order of the files
(:func:`quicack.store.merge.append`, keys renumbered), so a store made through the cluster numbers
its files and connections as ``quicack analyze --jobs 1`` of the same files does; each append is
one transaction, and the shard is deleted after it.  A file the store already holds (same SHA-256,
analysis version and key log) is unchanged, as locally: workers skip qlogs whose SHA-256 the store
held at the start, and the client checks every file of a shard before appending it
(:meth:`quicack.store.transaction.Ingest.held`), taking a held file's rows out of the shard.

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

#: Small qlogs per task at most, and their bytes: a task's fixed cost (a store opened, closed and
#: appended: ~0.2 s) is shared by its files.
BATCH_FILES = 16
BATCH_BYTES = 4 << 20

#: What a task returns: each file's (result, SHA-256), and the shard (None when nothing was stored).
Outcome = tuple[list[tuple[FileResult, str | None]], str | None]


def shard_folder(db: str | Path, shards: str | Path | None) -> Path:
    """This run's own folder under ``shards`` (default: ``<db>.shards`` beside the store)."""
    base = Path(shards) if shards else Path(f"{db}.shards")
    return (base / uuid.uuid4().hex[:12]).resolve()


def batches(files: list[tuple[int, Path]]) -> list[list[tuple[int, Path]]]:
    """Consecutive small qlogs grouped (:data:`BATCH_FILES`, :data:`BATCH_BYTES`); others alone."""
    from quicack.store.ingest import small_qlog
    out: list[list[tuple[int, Path]]] = []
    size, grouping = 0, False
    for i, path in files:
        n = path.stat().st_size if small_qlog(path) else None
        if n is not None and grouping and len(out[-1]) < BATCH_FILES and size + n <= BATCH_BYTES:
            out[-1].append((i, path))
            size += n
        else:
            out.append([(i, path)])
            size, grouping = n or 0, n is not None
    return out


def ingest_shard(batch: list[tuple[int, str]], folder: str, reanalyze: bool, keylog: str | None,
                 quic_ports: tuple[int, ...], known: frozenset[str], dissector: str = "native") -> Outcome:
    """On a worker: ingest the batch's files into a shard store of its own.  A qlog whose SHA-256
    is in ``known`` is unchanged without being read again."""
    from quicack.store.database import Store
    results: list[tuple[FileResult, str | None]] = []
    stem = f"{batch[0][0]:07d}-{_worker_name()}-{uuid.uuid4().hex[:8]}"
    partial = Path(folder) / f"{stem}.partial.duckdb"
    store = None
    try:
        for _, path in batch:
            digest = _digest(path, known, reanalyze)
            if digest in known:
                results.append((FileResult(path, "unchanged"), digest))
                continue
            if store is None:
                Path(folder).mkdir(parents=True, exist_ok=True)
                store = Store(partial)
            result = store.ingest(path, reanalyze=reanalyze, keylog=keylog, quic_ports=tuple(quic_ports),
                                  dissector=dissector, sha256=digest)  # (hashed once)
            digest = None if result.file_id is None else store.con.execute(
                "SELECT content_sha256 FROM files WHERE file_id = ?", [result.file_id]).fetchall()[0][0]
            results.append((result, digest))
    finally:
        if store is not None:
            store.close()
    if not any(r.status == "ingested" for r, _ in results):
        _remove(partial)
        return results, None
    final = partial.with_name(f"{stem}.duckdb")
    os.replace(partial, final)
    return results, str(final)


def _digest(path: str, known: frozenset[str], reanalyze: bool) -> str | None:
    """The qlog's SHA-256 when it may be in ``known`` (None: not needed, or unreadable)."""
    from quicack.pcap import source
    if not known or reanalyze or source.is_capture(Path(path)):
        return None
    try:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None  # (the ingest says why)
    return digest


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
            timeout_s: float = connection.WORKER_TIMEOUT_S, dissector: str = "native") -> Summary:
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
            futures = {client.submit(ingest_shard, [(i, str(p.absolute())) for i, p in batch], str(folder),
                                     reanalyze, str(keylog) if keylog else None, tuple(quic_ports), shared, dissector,
                                     key=f"quicack-ingest-{folder.name}-{batch[0][0]}", pure=False): batch
                       for batch in batches(files)}
            results = _combine(store, dask.as_completed(list(futures), loop=client.loop), futures, reanalyze,
                               keylog, progress)
            summary.files.extend(special.get(i) or results[i] for i in range(len(named)))
            if summary.file_ids:
                summary.handshake_classes = store.handshake_class_rows(summary.file_ids)
            summary.store_unused_bytes = store.unused_bytes()
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # (with the .partial stores of killed workers)
        if folder.parent.is_dir() and not any(folder.parent.iterdir()):
            folder.parent.rmdir()
    return summary


def _known_digests(store, reanalyze: bool) -> frozenset[str]:
    """SHA-256 of every file this analysis version stored (nothing with ``reanalyze``)."""
    from quicack.store.schema import ANALYSIS_VERSION
    if reanalyze:
        return frozenset()
    return frozenset(d for (d,) in store.con.execute(
        "SELECT content_sha256 FROM files WHERE analysis_version = ?", [ANALYSIS_VERSION]).fetchall())


def _combine(store, completed, futures: dict, reanalyze: bool, keylog,
             progress: Callable[[Path, int], None] | None) -> dict[int, FileResult]:
    """Append the shards to ``store`` in file order as their tasks finish; results by index."""
    order = sorted(futures, key=lambda f: futures[f][0][0])
    done: dict[object, Outcome] = {}
    results: dict[int, FileResult] = {}
    position = 0
    for future in completed:
        done[future] = _outcome(future, futures[future])
        while position < len(order) and order[position] in done:
            batch = futures[order[position]]
            outcome = done.pop(order[position])
            for (i, path), result in zip(batch, _append_shard(store, outcome, reanalyze, keylog)):
                result.path = str(path)  # (as given; the workers read the absolute path)
                results[i] = result
                if progress:
                    progress(path, _size(path))
            position += 1
    return results


def _append_shard(store, outcome: Outcome, reanalyze: bool, keylog) -> list[FileResult]:
    """Append one task's shard (less the files ``store`` holds already); its files' results with
    their ``file_id`` in ``store``."""
    import duckdb

    from quicack.store.merge import append
    from quicack.store.transaction import Ingest
    pairs, shard = outcome
    if shard is not None:
        held = {}
        for k, (result, digest) in enumerate(pairs):
            if result.status == "ingested":
                found = Ingest(store.con).held(result.path, digest, reanalyze, keylog)
                if found is not None:
                    held[k] = found
        if held:  # (the same bytes twice among the files, or ingested meanwhile)
            con = duckdb.connect(shard)
            try:
                Ingest(con).delete_files([pairs[k][0].file_id for k in held])
            finally:
                con.close()
        append(store, shard)
        _remove(Path(shard))
        pairs = [(held.get(k, result), digest) for k, (result, digest) in enumerate(pairs)]
    for result, digest in pairs:
        if digest is not None:
            result.file_id = store.con.execute("SELECT max(file_id) FROM files WHERE content_sha256 = ?",
                                               [digest]).fetchall()[0][0]
    return [result for result, _ in pairs]


def _outcome(future, batch: list[tuple[int, Path]]) -> Outcome:
    """A task's outcome; a task that raised (a bug, or files that killed their workers again and
    again) refuses its files."""
    try:
        return future.result()
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else ""
        return [(FileResult(str(path), "refused", error=str(QuicackError(
            f"the cluster could not ingest it: {type(e).__name__}: {text}", str(path)))), None)
            for _, path in batch], None


def _size(path: Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
