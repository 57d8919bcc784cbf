"""Slices: the bounded pieces a qlog file's events are staged and normalized in.

Theory of operation: a file's events are cut into *slices* of about ``SLICE_BYTES`` of complete
records, in file order (:mod:`quicack.qlog.reader` for lines and gzip, :mod:`quicack.qlog.document`
for a JSON document, :mod:`quicack.qlog.fallback` for one parsed whole), and each slice is
staged by the native core (:func:`stage`: parsed once, each event's columns taken out, without
Python's lock).  The caller stores one slice's rows while the next is staged, so memory stays
bounded whatever the file size.  A :class:`Source` is an opened file: its trace headers, and the
generator that cuts its slices as they are asked for.

A staged slice (:class:`quicack._native.Staged`) holds events of one trace, or — in a JSON
document of many small traces, such as a scan's batch of probes — several whole traces alike in
everything their rows depend on (:func:`quicack.qlog.normalize.slice_key`), one after the other
(:class:`Batch`): a dozen statements then store hundreds of traces instead of one.  Times are in
milliseconds (time units and delta times applied); names are as logged ('category:event' for
array events).

The sizes below are read as ``slicing.SLICE_BYTES`` (…) when a slice is cut, by every module
that cuts, so that one setting holds for every path (tests shrink them to force many slices).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from quicack.core import native
from quicack.model import QuicackError
from quicack.qlog import dialect as qlog
from quicack.qlog.dialect import TraceInfo
from quicack.qlog.normalize import slice_key

#: Bytes of records staged and normalized at a time (tests shrink it to force many slices): peak
#: memory grows with it, and smaller slices cost more per-slice overhead than they save.
SLICE_BYTES = 8 << 20
#: Bytes read from a stream at a time.
CHUNK_BYTES = 2 << 20
#: The most one record may hold — a JSON-SEQ or NDJSON line, an event of a JSON document, a
#: header — in every format alike: a longer one refuses the file as soon as it is seen, before
#: it is read into memory.  Storing one takes a multiple of its size (its tape here, DuckDB's
#: parse of it as JSON in other_events): a record of 48 MB of one-digit numbers peaks at ~1.2 GB.
MAX_RECORD_BYTES = 48 << 20
#: The most a header may hold (a JSON document without its events, a JSON-SEQ file's first
#: record): parsed in Python, not as rows, it costs less per byte (a 50 MB title peaks at ~0.6 GB).
MAX_HEADER_BYTES = 64 << 20


class Malformed(QuicackError):
    """A slice the native parser refused.  ``eof``: the slice ended inside a record (a cut in
    the wrong place, when a cut is being tried) rather than a token being wrong."""

    def __init__(self, message: str, path: str | None, position: str | None, eof: bool):
        super().__init__(message, path, position)
        self.eof = eof


def detail(what: str, token: int | None, field: str, unit: str = "byte") -> str:
    """A parser's refusal with the bad token's byte and the member it is in, when known."""
    where = ([f"{unit} {token}"] if token is not None else []) + ([f"field {field}"] if field else [])
    return what + (f" ({', '.join(where)})" if where else "")


@dataclass
class Slice:
    trace_index: int
    path: str  # the file holding the slice: a temporary one, or the source itself (``range``)
    #: 'lines': one record per line (or after each record separator); 'array': a JSON array of
    #: events; 'elements': the elements of one, without its brackets
    kind: str
    done_bytes: int  # position in the file (compressed bytes for gzip) reached after this slice
    #: the slice is bytes [start, end) of ``path``, the source file itself (not a temporary file)
    range: tuple[int, int] | None = None
    #: a slice of several whole traces: (trace_index, events) of each, in file order
    #: (``trace_index`` is then the first of them); empty for a slice of one trace
    traces: tuple[tuple[int, int], ...] = ()
    #: its events, when staging it was how its cut was checked (quicack.qlog.document)
    staged: object = None
    #: where in the file (decompressed, for gzip) byte 0 of a temporary slice was, when it is a
    #: copy of one stretch of it (for messages)
    base: int | None = None

    def offset(self, pos: int) -> int | None:
        """The file position of byte ``pos`` of the slice, when known."""
        if self.range is not None:
            return self.range[0] + pos
        return None if self.base is None else self.base + pos


@dataclass
class Source:
    """An opened qlog file: its headers, and its events as a stream of slices."""

    name: str
    format: str  # 'json', 'json-seq', 'ndjson'
    qlog_version: str
    traces: list[TraceInfo]
    size: int
    warnings: list[str] = field(default_factory=list)
    events: int = 0
    #: the generator that cuts its slices, in file order, as they are asked for
    cutter: Iterator[Slice] | None = None
    #: temporary files removed when the source is closed
    temps: list[str] = field(default_factory=list)
    #: the error to raise for a slice the stager refuses, made from the stager's (lines only)
    diagnose: Callable[[Exception, Slice], QuicackError] | None = None
    unit: str = "byte"  # what positions in its messages count ('decompressed byte' for gzip)
    #: the file to read when it is not ``path`` itself (a gzip document, read decompressed)
    opener: Callable[[], object] | None = None
    #: values read as NULL because no column holds them, per field (schemas/README.md)
    out_of_range: dict[str, int] = field(default_factory=dict)
    _delta_sum: dict[int, float] = field(default_factory=dict)

    def out_of_range_warning(self) -> str | None:
        """The warning naming the values read as NULL because no column holds them, if any."""
        if not self.out_of_range:
            return None
        counts = sorted(self.out_of_range.items(), key=lambda kv: (-kv[1], kv[0]))
        return (f"{self.name}: {sum(self.out_of_range.values())} values outside what their column holds read as NULL "
                "(" + ", ".join(f"{name} {n}" for name, n in counts) + ")")

    def slices(self) -> Iterator[Slice]:
        """Slices in file order; each temporary file is removed once the next one is asked for."""
        for part in self.cutter:
            yield part
            if part.range is None:
                unlink(part.path)

    def close(self) -> None:
        for tmp in self.temps:
            unlink(tmp)
        if hasattr(self.cutter, "close"):
            self.cutter.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self, path):
        """The file to read: ``path``, or what :attr:`opener` gives."""
        return self.opener() if self.opener is not None else open(path, "rb")

    def temp(self, suffix: str, size: int = SLICE_BYTES) -> tuple[int, str]:
        """A temporary file (descriptor, path) for about ``size`` bytes, removed when the source is
        closed (:func:`temp_file`)."""
        fd, tmp = temp_file(suffix, size)
        self.temps.append(tmp)
        return fd, tmp


#: Where this process's open descriptors are named (Linux): a temporary file is opened and
#: removed at once, and read through its descriptor's name, so that nothing is left behind when
#: the process is killed.
_PROC_FD = "/proc/self/fd"
#: descriptor names of removed temporary files → the descriptor keeping each alive, and the name
#: given out (a :class:`_Name`: a name is another file's as soon as its descriptor is closed, so a
#: second removal of an old name must not close the new file's descriptor)
_KEPT: dict[str, tuple[int, str]] = {}


class _Name(str):
    """A removed temporary file's descriptor name, told from a later file's equal name by identity."""
_KEPT_LOCK = threading.Lock()
#: free space left aside beyond what a temporary file needs
SPARE_BYTES = 16 << 20


def check_free_space(directory: str, needed: int, what: str) -> None:
    """Refuse at once, saying how much is needed, what will not fit in ``directory``."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return
    free = stat.f_bavail * stat.f_frsize
    if free < needed + SPARE_BYTES:
        raise QuicackError(f"not enough free disk space for {what} in {directory}: {_mb(free)} free, "
                           f"{_mb(needed + SPARE_BYTES)} needed (set TMPDIR to another place?)")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 10e6 else f"{n / 1e6:.0f} MB"


def temp_file(suffix: str, size: int = SLICE_BYTES) -> tuple[int, str]:
    """A new temporary file for about ``size`` bytes: (descriptor to write with, path to read it
    by); refused at once when the disk cannot hold it.  On Linux the file is removed as soon as
    it is made and read by its descriptor's name (``/proc/self/fd/N``), so a killed process
    leaves none behind; :func:`unlink` closes it."""
    directory = tempfile.gettempdir()
    check_free_space(directory, size, "a temporary file")
    fd, tmp = tempfile.mkstemp(suffix=suffix, prefix="quicack-", dir=directory)
    if not os.path.isdir(_PROC_FD):
        return fd, tmp
    try:
        keep = os.open(tmp, os.O_RDONLY)
    except OSError:
        return fd, tmp
    os.unlink(tmp)
    name = _Name(f"{_PROC_FD}/{keep}")
    with _KEPT_LOCK:
        _KEPT[name] = (keep, name)
    return fd, name


def unlink(path: str) -> None:
    """Remove a temporary file (close a removed one's descriptor, unless ``path`` was removed
    before and the name is now another file's: ingests on other threads make new ones)."""
    with _KEPT_LOCK:
        kept = _KEPT.get(path)
        if kept is not None and kept[1] is path:
            del _KEPT[path]
        else:
            kept = None
    if kept is not None:
        os.close(kept[0])
    if path.startswith(_PROC_FD + "/"):
        return  # (closed now, or before)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def without_bom(data: bytes) -> bytes:
    """RFC 8259 §8.1: parsers "MAY ignore the presence of a byte order mark" (Windows tools write
    one); orjson refuses it."""
    return data[3:] if data[:3] == b"\xef\xbb\xbf" else data


def first_time(record, trace: dict) -> float | None:
    """The raw time of a trace's first event (an object, or an array laid out by the trace's
    event_fields), or None."""
    if isinstance(record, dict):
        value = record.get("time")
    elif isinstance(record, list):
        logged = qlog.event_fields(trace)
        fields = [str(f).lower() for f in logged] if isinstance(logged, list) else []
        key = next((k for k in ("relative_time", "time", "delta_time") if k in fields), None)
        value = record[fields.index(key)] if key and fields.index(key) < len(record) else None
    else:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class Batch:
    """Whole traces gathered into one slice while they share a :func:`slice_key` and fit in
    SLICE_BYTES; a batch of one trace is an ordinary slice."""

    def __init__(self, source: Source):
        self.source = source
        self.key = None
        self.members: list[tuple[int, int]] = []
        self.bodies: list[bytes] = []
        self.size = 0
        self.done = 0

    def shares(self, index: int) -> bool:
        """Whether trace ``index`` may share a slice with others."""
        return slice_key(self.source.traces[index]) is not None

    def add(self, index: int, body: bytes, events: int, done: int) -> Iterator[Slice]:
        """Add trace ``index``, ``body`` its events without the array's brackets; a trace that
        shares no slice goes out alone at once."""
        key = slice_key(self.source.traces[index])
        if self.members and (key != self.key or self.size + len(body) > SLICE_BYTES):
            yield from self.flush()
        self.key = key
        self.members.append((index, events))
        self.bodies.append(body)
        self.size += len(body) + 1
        self.done = max(self.done, done)
        if key is None:
            yield from self.flush()

    def flush(self) -> Iterator[Slice]:
        if not self.members:
            return
        fd, tmp = self.source.temp(".json")
        with os.fdopen(fd, "wb") as out:
            out.write(b"[")
            out.write(b",".join(self.bodies))
            out.write(b"]")
        members = tuple(self.members) if len(self.members) > 1 else ()
        yield Slice(self.members[0][0], tmp, "array", self.done, traces=members)
        self.members, self.bodies, self.size, self.done = [], [], 0, 0


def stage(source: Source, part: Slice) -> native.Staged:
    """The events of one slice, parsed and their columns taken out by the native core
    (:func:`quicack._native.stage`, without Python's lock), in file order."""
    info = source.traces[part.trace_index]
    delta = info.time_format == "delta"
    try:
        ev = native.stage(part.path, part.kind, None if info.layout == ("object",) else tuple(info.layout),
                          delta, info.time_scale_ms, source._delta_sum.get(part.trace_index),
                          list(part.traces), part.trace_index, qlog.canonical_event, part.range)
    except native.StageError as e:
        if source.diagnose is not None:
            raise source.diagnose(e, part) from None
        what, pos, record, where, eof, at = e.args
        start, token = part.offset(at), part.offset(pos)
        if start is not None:
            raise Malformed("malformed events array: " + detail(what, token if token != start else None, where,
                                                                source.unit),
                            source.name, f"{source.unit} {start}", eof) from None
        raise Malformed(f"malformed events in trace {part.trace_index}: {detail(what, None, where)}"
                        + (f" (event {record} of a slice)" if record else ""), source.name, None, eof) from None
    for name, n in ev.out_of_range:
        source.out_of_range[name] = source.out_of_range.get(name, 0) + n
    if delta and ev.delta_carry is not None:
        # Delta times (draft era) need a running sum, carried over to the next slice.
        source._delta_sum[part.trace_index] = ev.delta_carry
    source.events += ev.num_rows
    return ev
