"""`quicack analyze` as a Python function: expand paths, ingest each file, collect a summary.

Theory of operation: folders are walked recursively for trace files (qlog, sqlog, their gzip
forms, NDJSON and JSON) and captures (pcap, pcapng, also gzipped); each file is handed to
:meth:`quicack.store.Store.ingest`, which commits or rolls back that file alone.  Progress is
reported through a callback so the CLI can draw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from .model import QuicackError, Summary
from .pcap import CAPTURE_SUFFIXES
from .store import Store

TRACE_SUFFIXES = (".qlog", ".sqlog", ".json", ".ndjson", ".jsonl", ".qlog.gz", ".sqlog.gz",
                  ".json.gz", ".ndjson.gz")


def is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES + CAPTURE_SUFFIXES)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly are taken as they are; folders contribute their trace files."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and is_trace_file(p)))
        elif path.exists():
            files.append(path)
        else:
            raise QuicackError("no such file or folder", str(path))
    return files


def analyze(paths: Iterable[str | Path], db: str | Path = "quicack.duckdb", reanalyze: bool = False,
            progress: Callable[[Path, int], None] | None = None, keylog: str | Path | None = None,
            quic_ports: Iterable[int] = ()) -> Summary:
    """Ingest every trace under ``paths`` into the store ``db``; return what happened per file.

    ``progress(path, size_bytes)`` is called after each file.  Captures are decrypted with
    ``keylog`` (else a key log beside each capture); ``quic_ports`` are decoded as QUIC.
    """
    files = expand(paths)
    summary = Summary()
    with Store(db) as store:
        for path in files:
            summary.files.append(store.ingest(path, reanalyze=reanalyze, keylog=keylog,
                                              quic_ports=tuple(quic_ports)))
            if progress:
                progress(path, path.stat().st_size)
    return summary
