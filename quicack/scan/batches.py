"""Batch qlog files: many probes' client traces in one file, written, checked and merged.

Theory of operation: the writer thread (:mod:`quicack.scan.writer`) writes each batch of probes
as one qlog file in aioquic's JSON layout, one trace per probe (:func:`write_batch`), on disk
before the probes' rows name it with its SHA-256 and each probe's trace index.  Ingesting a file
costs far more per file than per probe, so before the run's pending files are ingested,
consecutive small ones are merged (:func:`merge_batches`): a file is read back only if it still
has the content its probes recorded (:func:`_batch_traces`), the merged file is written before
the probes are pointed at it, and the files it replaces are deleted last.  This module is on the
DuckDB side of the scan (it repoints probe rows, :mod:`quicack.store.scantables`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from quicack.scan.options import ScanOptions
from quicack.store import scantables

if TYPE_CHECKING:
    from quicack.store.database import Store

QLOG_HEADER = b'{"qlog_format":"JSON","qlog_version":"0.3","title":"quicack scan","traces":['


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
    if len(paths) < 2:
        return paths
    batches = scantables.pending_batches(store.con, paths)
    out: list[str] = []
    for group in _groups(paths, batches, opts):
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


def _groups(paths: list[str], batches: dict, opts: ScanOptions) -> list[list[str]]:
    """``paths`` in groups that may become one file, planned from probe counts and file sizes:
    a file that fills a batch on its own (a long scan's are all full) is a group of its own,
    never read."""
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
    return groups


def _merged(store: Store, batches: dict, run: list[tuple[str, bytes]]) -> list[str]:
    """The files of ``run`` (path, traces), as one file if there are several."""
    if len(run) < 2:
        return [path for path, _ in run]
    merged, digest = write_batch(Path(run[0][0]).parent, [traces for _, traces in run])
    offsets = itertools.accumulate((batches[path][0] for path, _ in run[:-1]), initial=0)
    scantables.repoint_probes(store.con, list(zip((path for path, _ in run), offsets)), str(merged), digest)
    for path, _ in run:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return [str(merged)]
