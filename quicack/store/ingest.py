"""`quicack analyze` as a Python function: expand paths, ingest each file, collect a summary.

Theory of operation: folders are walked recursively for trace files (qlog, sqlog, their gzip
forms, NDJSON and JSON) and captures (pcap, pcapng, also gzipped); each file is handed to
:class:`quicack.store.transaction.Ingest`, which commits or rolls back that file alone — the small
qlogs first, several at a time (:meth:`~quicack.store.transaction.Ingest.many`), then the others
in order.
Progress is reported through a callback so the CLI can draw it.

Start-up counts for a capture (a user waits for it): tshark spends a few tenths of a second
loading its dissectors before it writes a row, so the first capture's tshark is started before
the store — and with it DuckDB and pyarrow — is loaded (:func:`early_dissection`, also called by
``quicack.__main__`` before the command line is parsed); this module imports nothing heavy.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from quicack.pcap import source, tshark
from quicack.model import FileResult, QuicackError, Summary
from quicack.pcap.source import CAPTURE_SUFFIXES

TRACE_SUFFIXES = (".qlog", ".sqlog", ".json", ".ndjson", ".jsonl", ".qlog.gz", ".sqlog.gz",
                  ".json.gz", ".ndjson.gz")


def is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES + CAPTURE_SUFFIXES)


def expand(paths: Iterable[str | Path], skipped: dict[str, int] | None = None) -> list[Path]:
    """Files named directly are taken as they are (one that is not a regular file is refused when
    its turn comes, :func:`analyze`); folders contribute their regular trace files, and what else
    they hold is counted in ``skipped`` by why."""
    files: list[Path] = []
    skipped = {} if skipped is None else skipped
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(_in_folder(path, skipped))
        elif path.exists():
            files.append(path)
        else:
            raise QuicackError("no such file or folder" + (" (a link to nothing)" if path.is_symlink() else ""),
                               str(path))
    return files


def _in_folder(folder: Path, skipped: dict[str, int]) -> list[Path]:
    """The regular trace files under ``folder``, in order; the rest counted in ``skipped``."""
    found = []
    for p in folder.rglob("*"):
        try:
            info = p.stat()
        except OSError as e:
            why = "links to nothing" if p.is_symlink() else f"unreadable ({e.strerror})"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        if stat.S_ISDIR(info.st_mode):
            continue
        why = None if stat.S_ISREG(info.st_mode) else "not regular files (FIFOs, devices, sockets)"
        if why is None and not is_trace_file(p):
            why = "not named as traces or captures"
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            found.append(p)
    return sorted(found)


def not_regular(path: Path) -> FileResult | None:
    """The refusal of a file named directly that is not a regular one (a FIFO, /dev/zero, a link to
    either): reading it would never end.  None for a regular file."""
    from quicack.store.transaction import kind_of
    try:
        info = path.stat()
    except OSError as e:
        return FileResult(str(path), "refused", error=str(QuicackError(f"cannot read: {e.strerror}", str(path))))
    if stat.S_ISREG(info.st_mode):
        return None
    return FileResult(str(path), "refused", error=str(QuicackError(f"not a regular file ({kind_of(info)})", str(path))))


#: qlog files up to this size are ingested ``jobs`` at a time (Store.ingest_many): their cost is
#: mostly fixed, per statement; larger ones, and captures, one after the other with all cores
PARALLEL_BYTES = 4 << 20


def analyze(paths: Iterable[str | Path], db: str | Path = "quicack.duckdb", reanalyze: bool = False,
            progress: Callable[[Path, int], None] | None = None, keylog: str | Path | None = None,
            quic_ports: Iterable[int] = (), dissection: tshark.Dissection | None = None,
            jobs: int | None = None, dissector: str = "native") -> Summary:
    """Ingest every trace under ``paths`` into the store ``db``; return what happened per file,
    in the order of the files.

    ``progress(path, n)`` is called as each file is read, ``n`` the bytes of that file done since
    the previous call (several times within a large qlog); per file the calls add up to its size.
    Captures are decrypted with ``keylog`` (else a key log beside each capture); ``quic_ports``
    are decoded as QUIC.  ``dissection``: tshark already started (quicack.__main__ starts it
    before the command line is parsed), taken over if it is the first file's, else stopped.  ``jobs``:
    small qlog files ingested at once (default: one per core), each in its own transaction;
    ``progress`` is then called from that many threads.  ``dissector``: what reads captures
    (quicack.pcap.staging.DISSECTORS).
    """
    summary = Summary()
    named = expand(paths, summary.skipped)
    special = {i: refused for i, path in enumerate(named) if (refused := not_regular(path)) is not None}
    files = [path for i, path in enumerate(named) if i not in special]
    jobs = max(1, jobs if jobs is not None else (os.cpu_count() or 1))
    quic_ports = tuple(quic_ports)
    if dissection is not None and not (files and dissection.matches(files[0], keylog, quic_ports)):
        dissection.close()
        dissection = None
    early = dissection or (early_dissection(files, keylog, quic_ports) if dissector == "tshark" else None)
    try:
        from quicack.store.database import Store  # DuckDB and pyarrow load while tshark starts

        with Store(db) as store:
            results: dict[int, object] = {}
            small = [i for i, path in enumerate(files) if small_qlog(path)] if jobs > 1 else []
            if len(small) > 1:
                results.update(zip(small, store.ingest_many([files[i] for i in small], jobs, reanalyze,
                                                            progress)))
            for i, path in enumerate(files):
                if i in results:
                    continue
                step = (lambda n, path=path: progress(path, n)) if progress else None
                dissection = early if early is not None and early.path == path else None
                results[i] = store.ingest(path, reanalyze=reanalyze, keylog=keylog, quic_ports=quic_ports,
                                          progress=step, dissection=dissection, dissector=dissector)
            ingested = iter(results[i] for i in range(len(files)))
            summary.files.extend(special[i] if i in special else next(ingested) for i in range(len(named)))
            if summary.file_ids:
                summary.handshake_classes = store.handshake_class_rows(summary.file_ids)
            summary.store_unused_bytes = store.unused_bytes()
    finally:
        if early is not None:
            early.close()  # if the store could not be opened; else a no-op
    return summary


def small_qlog(path: Path) -> bool:
    try:
        return not source.is_capture(path) and path.stat().st_size <= PARALLEL_BYTES
    except OSError:
        return False  # (ingest says why)


def early_dissection(files: list[Path], keylog, quic_ports: tuple[int, ...]) -> tshark.Dissection | None:
    """tshark already running on the first file if it is a capture (None if it is not, or if
    tshark cannot start: ingesting the file then says why)."""
    if not files or not source.is_capture(files[0]) or source.capture_format(files[0]) is None:
        return None
    try:
        return tshark.Dissection(files[0], keylog, quic_ports)
    except QuicackError:
        return None
