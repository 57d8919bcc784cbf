"""Reading qlog files, one bounded slice at a time: the I/O edge of the qlog path.

Theory of operation: a file is sniffed (gzip? JSON-SEQ record separator? one JSON document or
one record per line?) and its header parsed in Python (small).  Its events are then cut into
*slices* of about ``SLICE_BYTES`` of complete records, in file order, and each slice is staged
by the native core (:func:`quicack._native.stage`: parsed once, each event's columns taken out,
without Python's lock); the caller stores one slice's rows while the next is staged, so memory
stays bounded whatever the file size.

* JSON-SEQ and NDJSON: each slice is a range of whole lines, read by the stager straight from a
  plain file, or decompressed into a temporary file for gzip.  Every non-blank piece between
  line ends and 0x1E record separators is a record (RFC 7464).  A record cut off at the end of
  the file is left out with a warning.
* A JSON document: one pass finds each ``"events": [`` array and cuts it at top-level element
  boundaries (a candidate cut after ``},`` is checked by letting the native parser read the
  slice); the document without its events (a few KB) is parsed with orjson for the headers.  A
  document of one events array (one trace: what a long capture or transfer gives) is not cut up
  front: the array's end is found from the file's tail (the document with that array emptied
  must parse), and its slices are cut one at a time by the thread that stages them, while the
  previous slice is stored.  A document this pass cannot follow (cut short, gzip, odd layout)
  is parsed whole with orjson instead — correct, but memory grows with the file.

A staged slice (:class:`quicack._native.Staged`) holds events of one trace, or — in a JSON
document of many small traces, such as a scan's batch of probes — several whole traces alike in
everything their rows depend on (:func:`quicack.qlog.normalize.slice_key`), one after the other: a
dozen statements then store hundreds of traces instead of one.  Times are in milliseconds
(time units and delta times applied); names are as logged ('category:event' for array events).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import queue
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from quicack.core import native
from quicack.qlog import dialect as qlog
from quicack.model import QuicackError, TraceInfo
from quicack.qlog.normalize import slice_key

#: Bytes of records staged and normalized at a time (tests shrink it to force many slices).
#: 8 MB: measured on the 300 MB benchmark files, alternating, 4–5 runs each: peak RSS 0.87–0.92 ×
#: the aioquic JSON-SEQ file, where 12 MB slices took 0.90–1.00 ×, and no slower (4 MB: ~5 % slower).
SLICE_BYTES = 8 << 20
CHUNK_BYTES = 2 << 20
HEAD_BYTES = 1 << 20
#: the longest stretch of a JSON document searched for the end of one event before giving up
MAX_OBJECT_BYTES = 32 << 20
RS = b"\x1e"
#: Candidate cuts tried per slice of a JSON document before giving up on the streaming pass.
MAX_CUT_TRIES = 64
#: A JSON document up to this size (and two slices) is parsed whole with orjson (a few ms per MB,
#: memory a small multiple of this) rather than cut by the streaming pass, whose checks cost a
#: temporary file and a parse per events array (~1 ms per trace: a scan's batch of 2000 probes,
#: 12 MB, took 2.1–2.6 s cut and 0.8 s parsed whole).
WHOLE_JSON_BYTES = 16 << 20


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
    #: its events, when staging it was how its cut was checked (:func:`_lazy_cuts`)
    staged: object = None


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
    _slices: Iterator[Slice] | None = None
    _temps: list[str] = field(default_factory=list)
    _delta_sum: dict[int, float] = field(default_factory=dict)
    _diagnose: object = None
    unit: str = "byte"  # what positions in its messages count ('decompressed byte' for gzip)

    def slices(self) -> Iterator[Slice]:
        """Slices in file order; each temporary file is removed once the next one is asked for."""
        for part in self._slices:
            yield part
            if part.range is None:
                _unlink(part.path)

    def close(self) -> None:
        for tmp in self._temps:
            _unlink(tmp)
        if hasattr(self._slices, "close"):
            self._slices.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _temp(self, suffix: str) -> tuple[int, str]:
        fd, tmp = tempfile.mkstemp(suffix=suffix, prefix="quicack-")
        self._temps.append(tmp)
        return fd, tmp


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return (gzip.open(path, "rb"), True) if magic == b"\x1f\x8b" else (open(path, "rb"), False)


def _read(stream, n: int = -1) -> tuple[bytes, Exception | None]:
    """Up to ``n`` bytes of ``stream`` (all that is left for -1), and the error that ended it early.

    A gzip stream cut short (a writer killed mid-file) raises EOFError once nothing more can be
    decompressed; ``read`` of a buffered gzip stream would drop what it had decompressed of that
    request, so this reads with ``read1`` (at most one decompression step at a time) and keeps
    every byte obtained before the error."""
    parts: list[bytes] = []
    left = n
    try:
        while left:
            part = stream.read1(CHUNK_BYTES if left < 0 else min(left, CHUNK_BYTES))
            if not part:
                break
            parts.append(part)
            left = left - len(part) if left > 0 else left
    except (OSError, EOFError) as e:  # (gzip.BadGzipFile is an OSError)
        return b"".join(parts), e
    return b"".join(parts), None


def _ended_early(name: str, unit: str, at: int, error: Exception) -> str:
    return f"{name}: stream ends with an error at {unit} {at} ({error}); kept the complete records before it"


def open_source(path: Path) -> Source:
    """Sniff ``path`` and read its header; raise QuicackError if nothing is readable."""
    name = str(path)
    try:
        stream, compressed = _open(path)
        size = path.stat().st_size
    except OSError as e:
        raise QuicackError(f"cannot open: {e.strerror}", name) from None
    try:
        head, error = _read(stream, HEAD_BYTES)
        if error is not None and not head:
            raise QuicackError(f"cannot read: {error}", name, "byte 0") from None
        stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        if not stripped:
            raise QuicackError("empty file, no qlog header", name, "byte 0")
        if stripped[:1] == RS:
            return _open_lines(path, name, stream, head, "json-seq", compressed, size)
        if stripped[:1] != b"{":
            if head[:2] in (b"\xff\xfe", b"\xfe\xff"):  # (PowerShell's '>' writes UTF-16)
                raise QuicackError("UTF-16 text, not UTF-8 as JSON requires (RFC 8259 §8.1): convert it, "
                                   "e.g. iconv -f UTF-16 -t UTF-8", name, "byte 0")
            raise QuicackError(f"not a qlog file: starts with {stripped[:16]!r}", name,
                               f"byte {len(head) - len(stripped)}")
        first_line = stripped.split(b"\n", 1)[0]
        first = None
        # (a JSON document on one line longer than the head cannot parse: not tried)
        if len(first_line) < len(stripped) or len(head) < HEAD_BYTES:
            try:
                first = orjson.loads(first_line)
            except orjson.JSONDecodeError:
                pass
        if isinstance(first, dict) and _is_stream_header(first):
            return _open_lines(path, name, stream, head, "ndjson", compressed, size)
        if not compressed:
            stream.close()
            if size <= min(WHOLE_JSON_BYTES, 2 * SLICE_BYTES):  # (tests shrink SLICE_BYTES to cut)
                with open(path, "rb") as f:
                    data = f.read()
                try:
                    doc = orjson.loads(_without_bom(data))
                except orjson.JSONDecodeError:
                    doc = None  # cut short, or beyond orjson: the streaming pass, then salvage
                if doc is not None:
                    return _open_json_whole(name, data, size, doc)
            found = _open_json_streaming(path, name, size)
            if found is not None:
                return found
            with open(path, "rb") as f:
                return _open_json_whole(name, f.read(), size)
        want = WHOLE_JSON_BYTES + 1 - len(head)
        rest, error = (b"", error) if error is not None or want <= 0 else _read(stream, want)
        data = head + rest
        if len(data) > WHOLE_JSON_BYTES:
            return _open_json_gzip(name, stream, data, size, error)
        if error is None:
            rest, error = _read(stream)
            data += rest
        stream.close()
        early = [] if error is None else [_ended_early(name, "decompressed byte", len(data), error)]
        return _open_json_whole(name, data, size, unit="decompressed byte", warnings=early)
    except BaseException:
        stream.close()
        raise


def _open_json_gzip(name: str, stream, head: bytes, size: int, error: Exception | None) -> Source:
    """A gzip JSON document larger than WHOLE_JSON_BYTES decompressed: written to a temporary
    file and cut like a plain one (parsed whole, an 80 MB document took 12 × its gzip file's size
    … 970 MB … of memory).  Progress counts the gzip file's bytes, positions the decompressed ones."""
    fd, tmp = tempfile.mkstemp(suffix=".qlog", prefix="quicack-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(head)
            total = len(head)
            del head
            while error is None:
                part, error = _read(stream, SLICE_BYTES)
                if not part:
                    break
                out.write(part)
                total += len(part)
        stream.close()
        early = [] if error is None else [_ended_early(name, "decompressed byte", total, error)]
        # (a gzip stream that ends early mostly leaves a document cut short: read as one)
        found = _open_json_streaming(Path(tmp), name, total, unit="decompressed byte")
        if found is None:  # a layout the cutter does not follow: parsed whole
            with open(tmp, "rb") as f:
                return _open_json_whole(name, f.read(), size, unit="decompressed byte", warnings=early)
        found.warnings[:0] = early
        found._temps.append(tmp)
        tmp = None
        found._slices = _decompressed_slices(found._slices, total, size)
        return found
    except QuicackError as e:
        raise QuicackError(e.message, name, _decompressed(e.position)) from None
    finally:
        if tmp is not None:
            _unlink(tmp)


def _decompressed(position: str | None) -> str | None:
    return "decompressed " + position if position and position.startswith("byte ") else position


def _decompressed_slices(slices: Iterator[Slice], total: int, size: int) -> Iterator[Slice]:
    """Slices of a decompressed temporary file, their progress in the gzip file's bytes."""
    try:
        for part in slices:
            part.done_bytes = size if part.done_bytes >= total else part.done_bytes * size // total
            yield part
    finally:
        if hasattr(slices, "close"):
            slices.close()


def _is_stream_header(header: dict) -> bool:
    fmt = str(header.get("qlog_format") or header.get("serialization_format") or "").upper()
    if fmt in ("JSON-SEQ", "NDJSON", "JSON-TEXT-SEQ"):
        return True
    if "trace" in header and "traces" not in header:
        # a sequential file's header; a document on one line may hold its events there instead
        trace = header["trace"]
        return not (isinstance(trace, dict) and isinstance(trace.get("events"), list))
    traces = header.get("traces")
    return isinstance(traces, list) and all("events" not in t for t in traces if isinstance(t, dict))


# --- JSON-SEQ and NDJSON ----------------------------------------------------------------------

def _open_lines(path: Path, name: str, stream, head: bytes, fmt: str, compressed: bool, size: int) -> Source:
    unit = "decompressed byte" if compressed else "byte"
    text = head.replace(RS, b"\n")
    start = len(text) - len(text.lstrip(b" \t\r\n\xef\xbb\xbf"))
    end = text.find(b"\n", start)
    header_bytes = text[start:] if end < 0 else text[start:end]
    try:
        header = orjson.loads(header_bytes)
    except orjson.JSONDecodeError as e:
        raise QuicackError(f"unreadable qlog header: {e}", name, f"{unit} {start}") from None
    if not isinstance(header, dict):
        raise QuicackError("qlog header is not a JSON object", name, f"{unit} {start}")
    try:
        version = qlog.generation(header)
        trace_headers = qlog.traces_of(header)
    except QuicackError as e:
        raise QuicackError(e.message, name, f"{unit} {start}") from None
    body_offset = start + len(header_bytes)
    first_record = _first_record(text[body_offset:])
    traces = [qlog.describe_trace(header, trace_headers[0], 0, _first_time(first_record, trace_headers[0]))]
    source = Source(name, fmt, version, traces, size)
    if compressed:
        source._slices = _line_slices(source, stream, text, body_offset, compressed, fmt, unit)
    else:
        stream.close()
        source._slices = _file_slices(source, path, body_offset, fmt)
    source._diagnose = lambda e: _bad_record(path, name, unit, e)
    return source


def _line_slices(source: Source, stream, text: bytes, body_offset: int, compressed: bool, fmt: str,
                 unit: str) -> Iterator[Slice]:
    """Copy whole lines, record separators turned into newlines, into temporary files of about
    SLICE_BYTES each; ``text`` is what was read already (separators replaced)."""
    raw_file = stream.fileobj if compressed else stream
    chunk_bytes = max(1, min(CHUNK_BYTES, SLICE_BYTES))
    pending = text[body_offset:]
    total = len(text)  # bytes of the (decompressed) stream read so far, up to the end of ``pending``
    eof = False
    with stream:
        while pending or not eof:
            fd, tmp = source._temp(".ndjson")
            written = 0
            with os.fdopen(fd, "wb") as out:
                while True:
                    cut = pending.rfind(b"\n", 0, max(SLICE_BYTES - written, 0)) + 1
                    if not cut and not written:
                        cut = pending.find(b"\n") + 1  # a record longer than a slice
                    if cut:
                        out.write(memoryview(pending)[:cut])
                        written += cut
                        pending = pending[cut:]
                    if b"\n" in pending or eof:
                        break  # the slice is full, or the stream is done
                    raw, error = _read(stream, chunk_bytes)
                    if raw:
                        total += len(raw)
                        pending += raw.replace(RS, b"\n")
                    if error is not None:
                        source.warnings.append(_ended_early(source.name, unit, total, error))
                    eof = not raw or error is not None
                if eof and b"\n" not in pending:
                    if pending.strip():
                        if _incomplete_tail(pending):
                            record_start = total - len(pending) - (1 if fmt == "json-seq" else 0)  # at its RS
                            source.warnings.append(
                                f"{source.name}: last record cut short at {unit} {record_start} (file ends at "
                                f"{unit} {total}); kept every complete event before it")
                        else:
                            out.write(pending + b"\n")
                            written += len(pending)
                    pending = b""
            if written:
                done = raw_file.tell() if compressed else total - len(pending)
                yield Slice(0, tmp, "lines", source.size if eof and not pending else min(source.size, done))
            else:
                _unlink(tmp)


def _file_slices(source: Source, path: Path, offset: int, fmt: str) -> Iterator[Slice]:
    """Slices of an uncompressed stream: byte ranges of the file ending at a newline, read by the
    stager itself; a record cut off at the end of the file is left out with a warning."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        end_of_records = _last_newline(fd, size, offset) + 1 or offset
        tail = os.pread(fd, size - end_of_records, end_of_records) if size > end_of_records else b""
        if tail.strip(b" \t\r\n\x1e"):
            if _incomplete_tail(tail.replace(RS, b"\n")):
                start = end_of_records + (tail.find(RS) if fmt == "json-seq" and RS in tail else 0)
                source.warnings.append(f"{source.name}: last record cut short at byte {start} (file ends at "
                                       f"byte {size}); kept every complete event before it")
            else:
                end_of_records = size  # the last record lacks its newline only
        pos = offset
        while pos < end_of_records:
            end = end_of_records
            if pos + SLICE_BYTES < end_of_records:
                end = _last_newline(fd, pos + SLICE_BYTES, pos) + 1 or _next_newline(fd, pos + SLICE_BYTES) + 1
            yield Slice(0, str(path), "lines", end, range=(pos, end))
            pos = end


def _last_newline(fd: int, before: int, floor: int) -> int:
    """Position of the last newline in [floor, before), or -1."""
    block = 1 << 16
    end = before
    while end > floor:
        start = max(floor, end - block)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _next_newline(fd: int, at: int) -> int:
    """Position of the first newline at or after ``at`` (the file's last byte if none)."""
    block = 1 << 16
    while True:
        chunk = os.pread(fd, block, at)
        if not chunk:
            return at - 1
        found = chunk.find(b"\n")
        if found >= 0:
            return at + found
        at += len(chunk)


def _first_record(body: bytes):
    for line in body.split(b"\n", 20)[:20]:
        if line.strip():
            try:
                return orjson.loads(line)
            except orjson.JSONDecodeError:
                return None
    return None


def _incomplete_tail(tail: bytes) -> bool:
    """Whether the text after the last newline is a record cut short."""
    if not tail.strip():
        return False
    try:
        orjson.loads(tail)
        return False
    except orjson.JSONDecodeError:
        return True


def _first_time(record, trace: dict) -> float | None:
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


def _without_bom(data: bytes) -> bytes:
    """RFC 8259 §8.1: parsers "MAY ignore the presence of a byte order mark" (Windows tools write
    one); orjson refuses it."""
    return data[3:] if data[:3] == b"\xef\xbb\xbf" else data


def _first_line(e: Exception) -> str:
    return (str(e.args[0]) if e.args else str(e)).splitlines()[0][:300]


def _bad_record(path: Path, name: str, unit: str, e: Exception) -> QuicackError:
    """Name the first record that is not JSON (error path only: a Python scan is fine)."""
    offset = 0  # of the line being read
    record = 0
    carry = b""
    stream, _ = _open(path)
    with stream:
        while True:
            chunk, _ = _read(stream, CHUNK_BYTES)
            lines = (carry + chunk.replace(RS, b"\n")).split(b"\n")
            carry = lines.pop() if chunk else b""
            for line in lines:
                if line.strip():
                    record += 1
                    start = offset + len(line) - len(line.lstrip())
                    try:
                        orjson.loads(line)
                    except orjson.JSONDecodeError as err:
                        return QuicackError(f"malformed record {record}: {err.msg}", name, f"{unit} {start}")
                offset += len(line) + 1
            if not chunk:
                return QuicackError(f"malformed event records: {_first_line(e)}", name)


# --- whole JSON documents, streamed -----------------------------------------------------------

_EVENTS_KEY = re.compile(rb'"events"\s*:\s*\[')
_CUT = re.compile(rb'(?<=[}\]])\s*,')  # an element ends, another follows
_END = re.compile(rb'(?<=[}\]])\s*\]|^\s*\]')  # an element ends and so does the array (or it is empty)


class _Irregular(Exception):
    """The streaming pass cannot follow this document; parse it whole instead."""


def _open_json_streaming(path: Path, name: str, size: int, unit: str = "byte") -> Source | None:
    """Find the events arrays of a JSON document and cut them into slices, or None.  ``unit``:
    what the positions in messages count."""
    source = Source(name, "json", "", [], size, unit=unit)
    try:
        with open(path, "rb") as f:
            if _open_one_array(source, path, f):
                return source
            f.seek(max(0, size - 64))
            ends_open = not f.read().rstrip().endswith(b"}")  # a whole document ends with '}'
    except OSError:
        ends_open = False
    if ends_open:
        found = _open_cut_short(path, name, size, unit)
        if found is not None:
            return found
    try:
        with open(path, "rb") as f:
            skeleton, plan = _plan_json(source, f, size, cut_short=True)
        cut_short = bool(source.warnings)  # the file ended inside its last events array
        if (ends_open and not cut_short) or (cut_short and not any(parts for parts, _ in plan)):
            # cut short outside the last events array, or before any complete event: the
            # salvage of the whole document says what it can keep, or where it fails
            raise _Irregular("cut short")
        doc = _closed(skeleton) if cut_short else orjson.loads(_without_bom(skeleton))
        if doc is None:
            raise _Irregular("the document does not close")
        version = qlog.generation(doc)
        trace_docs = qlog.traces_of(doc)
    except (_Irregular, orjson.JSONDecodeError, QuicackError, OSError):
        source.close()
        return _open_cut_short(path, name, size, unit)
    with_events = [i for i, t in enumerate(trace_docs) if "events" in t]
    if len(with_events) != len(plan) or any(trace_docs[i]["events"] != [] for i in with_events):
        source.close()
        return None
    if not plan:
        source.close()
        raise QuicackError("qlog file holds no events", name, "byte 0")
    traces = []
    for index, trace in enumerate(trace_docs):
        slices_of = plan[with_events.index(index)] if index in with_events else ([], None)
        traces.append(qlog.describe_trace(doc, trace, index, _first_time(slices_of[1], trace)))
    if not any(parts for parts, _ in plan):
        source.close()
        raise QuicackError("qlog file holds no events", name, "byte 0")
    source.qlog_version = version
    source.traces = traces
    source._slices = _streamed_slices(source, [(with_events[k], parts) for k, (parts, _) in enumerate(plan)])
    return source


def _open_cut_short(path: Path, name: str, size: int, unit: str = "byte") -> Source | None:
    """A document of one events array that ends inside it (a writer killed mid-file: JSON qlog
    writers close the array and the document only when the connection ends), cut like a whole
    one up to its last complete event; None if it is not one (parsed whole, then salvaged)."""
    source = Source(name, "json", "", [], size, unit=unit)
    try:
        with open(path, "rb") as f:
            if _open_one_array(source, path, f, cut_short=True):
                return source
    except OSError:
        pass
    return None


#: how far from the end of a document the end of its one events array is looked for
TAIL_BYTES = 1 << 16
#: header bytes before the events array, at most, for a document read with :func:`_open_one_array`
HEADER_BYTES = 1 << 20


def _open_one_array(source: Source, path: Path, f, cut_short: bool = False) -> bool:
    """Set ``source`` up to be cut while staged if its document holds exactly one non-empty events
    array; False (``source`` untouched) otherwise.

    The array's elements begin after its ``[`` and end at the ``]``, among the last TAIL_BYTES,
    at which the document with the array emptied parses as JSON: a ``]`` inside the last event
    leaves that event's other brackets unmatched.  The elements in between are checked as they
    are cut (:func:`_lazy_cuts`)."""
    m = _search(f, _EVENTS_KEY, 0, min(source.size, HEADER_BYTES))
    if m is None:
        return False
    start = m[1]
    f.seek(0)
    head = f.read(start)
    tail_at = max(start, source.size - TAIL_BYTES)
    f.seek(tail_at)
    tail = f.read()
    doc = end = None
    bracket = len(tail)
    for _ in range(MAX_CUT_TRIES if tail else 0):
        bracket = tail.rfind(b"]", 0, bracket)
        if bracket < 0:
            break
        try:
            doc = orjson.loads(_without_bom(head) + tail[bracket:])
        except orjson.JSONDecodeError:
            continue
        end = tail_at + bracket
        break
    if cut_short and doc is not None:
        cut_short = False  # (the document closes after all: a gzip stream that lost its trailer)
    elif cut_short:
        # (the file does not end with '}', or no other cut followed it) the header closed after
        # the '[' gives the traces; the events are cut as they come, up to the last complete
        # one (:func:`_lazy_cuts`)
        doc, end = _closed(head), source.size
    if not isinstance(doc, dict):
        return False
    try:
        version = qlog.generation(doc)
        trace_docs = qlog.traces_of(doc)
    except QuicackError:
        return False
    with_events = [i for i, t in enumerate(trace_docs) if isinstance(t, dict) and "events" in t]
    if len(with_events) != 1 or trace_docs[with_events[0]]["events"] != []:
        return False  # several events arrays (or one elsewhere): cut up front
    if _search(f, _EVENTS_KEY, start, end) is not None:
        # another "events" key between the two ends: another trace's array (the emptied
        # document would not show it), or one inside an event; either way, cut up front
        return False
    first = _first_element_of(f, start, end)
    if first is None:
        return False  # empty, or a first event beyond a quick look: cut up front
    index = with_events[0]
    source.qlog_version = version
    source.traces = [qlog.describe_trace(doc, trace, i, _first_time(first, trace) if i == index else None)
                     for i, trace in enumerate(trace_docs)]
    source._slices = _lazy_cuts(source, path, index, start, end, cut_short)
    return True


def _closed(head: bytes):
    """The document ``head`` begins, every bracket it leaves open closed, or None."""
    stack: list[bytes] = []
    try:
        for _, stack in _tokens(head):
            pass
        return orjson.loads(_without_bom(head) + _closers(stack))
    except (_Irregular, orjson.JSONDecodeError):
        return None


def _tokens(data: bytes) -> Iterator[tuple[re.Match, list[bytes]]]:
    """Each token of ``data`` (a string, or a bracket) with the brackets still open after it;
    raises _Irregular at a closing bracket that nothing opened."""
    stack: list[bytes] = []
    for m in _TOKEN.finditer(data):
        tok = m.group()
        if tok in (b"[", b"{"):
            stack.append(tok)
        elif tok in (b"]", b"}"):
            if not stack:
                raise _Irregular("a bracket closes what was not opened")
            stack.pop()
        yield m, stack


def _closers(stack: list[bytes]) -> bytes:
    return b"".join(b"]" if t == b"[" else b"}" for t in reversed(stack))


def _complete_elements(window: bytes) -> tuple[int | None, bool]:
    """Where the last complete element of ``window`` ends (the window begins at an element; None
    if it holds none), and whether the array is closed after it: its brackets walked, strings
    skipped."""
    last = None
    try:
        for m, stack in _tokens(window):
            if not stack and m.group() in (b"]", b"}"):
                last = m.end()
    except _Irregular:  # the array's own ']'
        return last, True
    return last, False


def _first_element_of(f, start: int, end: int):
    """The first element of the array whose elements begin at ``start`` (found by letting orjson
    parse ever longer prefixes cut after ``},`` or ``],``), or None."""
    f.seek(start)
    window = f.read(min(end - start, CHUNK_BYTES))
    cuts = [m.end() - 1 for m in _CUT.finditer(window)][:MAX_CUT_TRIES]
    if end - start <= CHUNK_BYTES:
        cuts.append(len(window))  # the whole array may be one element
    for cut in cuts:
        try:
            return orjson.loads(b"[" + window[:cut] + b"]")[0]
        except (orjson.JSONDecodeError, IndexError):
            continue
    return None


def _lazy_cuts(source: Source, path: Path, index: int, start: int, end: int,
               cut_short: bool = False) -> Iterator[Slice]:
    """The slices of the events array from ``start`` to the ``]`` at ``end``, each cut only when
    asked for: by the thread staging slices.  A candidate cut is checked by staging the slice
    (:func:`_staged_cut`), so that each slice is parsed once, not once to check and once to stage.
    ``cut_short``: the file ends inside the array (``end`` is its size); the last slice ends with
    the last complete event, and a warning says where."""
    slice_bytes = SLICE_BYTES
    with open(path, "rb") as f:
        cur, want = start, slice_bytes
        while cur < end:
            final = cur + want >= end
            if final:
                f.seek(cur)
                window = f.read(end - cur)
            else:
                # (only the tail is looked at: the stager reads the slice from the file itself)
                tail_at = max(cur, cur + want - (1 << 16))
                f.seek(tail_at)
                window = f.read(cur + want - tail_at)
            if final and cut_short:
                # (the file ends inside the array, or after it closed but before the document
                # did: cut short either way)
                last, _ = _complete_elements(window)
                # (none in this window: the last one ends before the ',' this window follows)
                kept = cur + last if last is not None else _element_end(f, cur - 1) if cur > start else cur
                source.warnings.append(f"{source.name}: JSON cut short at {source.unit} {source.size}; kept every "
                                       f"complete event up to {source.unit} {kept}")
                if last is None:
                    return
                window = window[:last]
            if final and not window.strip():  # (a cut is made only where another element follows)
                raise QuicackError("malformed events array: a comma before its end", source.name, f"{source.unit} {cur}")
            if final:
                cuts = [len(window)]
            else:
                cuts = [tail_at - cur + m.end() - 1 for m in _CUT.finditer(window)]
            del window
            found = _staged_cut(source, path, cuts, index, cur, source.size if final else None)
            if found is None and final:
                raise QuicackError("malformed events array", source.name, f"{source.unit} {cur}")
            if found is None:
                if want >= 8 * slice_bytes and want > MAX_OBJECT_BYTES:
                    raise QuicackError(f"no event boundary within {want >> 20} MB", source.name, f"{source.unit} {cur}")
                want *= 2
                continue
            cut, part = found
            yield part
            if final:
                return
            cur += cut + 1
            want = slice_bytes


def _candidates(source: Source, window: bytes, cuts: list[int]) -> Iterator[tuple[int, str]]:
    """``[`` + the window closed with ``]`` at each cut, the last cut first (at most
    MAX_CUT_TRIES), in one temporary file: (cut, file) each; the file is removed once every
    candidate was refused.  The window is let go once written."""
    if not cuts:
        return
    fd, tmp = source._temp(".json")
    with os.fdopen(fd, "wb") as out:
        out.write(b"[")
        out.write(memoryview(window)[:cuts[-1]])
        del window
        for cut in reversed(cuts[-MAX_CUT_TRIES:]):
            out.truncate(1 + cut)
            out.seek(1 + cut)
            out.write(b"]")
            out.flush()
            yield cut, tmp
    _unlink(tmp)


def _staged_cut(source: Source, path: Path, cuts: list[int], index: int, start: int, done: int | None):
    """(cut, slice staged) for the last of ``cuts`` (offsets from ``start`` in ``path``, at most
    MAX_CUT_TRIES from the end) at which the elements from ``start`` stage; None if none does (a
    cut inside a string leaves it unterminated, a bad event does not parse at any).  ``done``:
    the slice's progress, else where it ends."""
    for cut in reversed(cuts[-MAX_CUT_TRIES:]):
        part = Slice(index, str(path), "elements", start + cut if done is None else done, range=(start, start + cut))
        try:
            part.staged = stage(source, part)
        except QuicackError:
            continue
        return cut, part
    return None


def _streamed_slices(source: Source, arrays: list[tuple[int, list]]) -> Iterator[Slice]:
    """The slices of the cut events arrays, [(trace_index, [(file, end offset, events)])]:
    consecutive traces of one small slice each share slices (:class:`_Batch`)."""
    batch = _Batch(source)
    for index, parts in arrays:
        key = slice_key(source.traces[index])
        if len(parts) == 1 and key is not None:
            tmp, done, n = parts[0]
            with open(tmp, "rb") as f:
                body = f.read()[1:-1]  # the elements, without the array's brackets
            _unlink(tmp)
            yield from batch.add(index, key, body, n, done)
            continue
        yield from batch.flush()
        for tmp, done, _ in parts:
            yield Slice(index, tmp, "array", done)
    yield from batch.flush()


class _Batch:
    """Whole traces gathered into one slice while they share a :func:`slice_key` and fit in
    SLICE_BYTES; a batch of one trace is an ordinary slice."""

    def __init__(self, source: Source):
        self.source = source
        self.key = None
        self.members: list[tuple[int, int]] = []
        self.bodies: list[bytes] = []
        self.size = 0
        self.done = 0

    def add(self, index: int, key, body: bytes, events: int, done: int) -> Iterator[Slice]:
        if self.members and (key != self.key or self.size + len(body) > SLICE_BYTES):
            yield from self.flush()
        self.key = key
        self.members.append((index, events))
        self.bodies.append(body)
        self.size += len(body) + 1
        self.done = max(self.done, done)

    def flush(self) -> Iterator[Slice]:
        if not self.members:
            return
        fd, tmp = self.source._temp(".json")
        with os.fdopen(fd, "wb") as out:
            out.write(b"[")
            out.write(b",".join(self.bodies))
            out.write(b"]")
        members = tuple(self.members) if len(self.members) > 1 else ()
        yield Slice(self.members[0][0], tmp, "array", self.done, traces=members)
        self.members, self.bodies, self.size, self.done = [], [], 0, 0


def _plan_json(source: Source, f, size: int, cut_short: bool = False) -> tuple[bytes, list]:
    """One pass over the document: the skeleton (document with empty events arrays) and, per
    events array, its slices as (temporary file, end offset) plus its first event.  ``cut_short``:
    the file may end inside its last events array (:func:`_cut_array`, which then warns); the
    skeleton then ends open."""
    skeleton: list[bytes] = []
    plan = []
    pos = 0
    kept = None  # where the last event of the arrays so far ends
    while True:
        m = _search(f, _EVENTS_KEY, pos, size)
        if m is None:
            f.seek(pos)
            skeleton.append(f.read())
            return b"".join(skeleton), plan
        start, end = m
        f.seek(pos)
        skeleton.append(f.read(end - pos))
        parts, first, close = _cut_array(source, f, end, size, cut_short, kept)
        plan.append((parts, first))
        if parts:
            kept = _element_end(f, parts[-1][1])
        pos = close  # the ']' closing the array goes into the skeleton


def _search(f, pattern: re.Pattern, pos: int, size: int) -> tuple[int, int] | None:
    """First match of ``pattern`` at or after ``pos`` (absolute start, end), reading in chunks."""
    overlap = 256
    while pos < size:
        f.seek(pos)
        chunk = f.read(CHUNK_BYTES)
        m = pattern.search(chunk)
        if m:
            return pos + m.start(), pos + m.end()
        if len(chunk) < CHUNK_BYTES:
            return None
        pos += len(chunk) - overlap
    return None


def _element_end(f, cut: int) -> int:
    """Where the element before the cut at ``cut`` (its ',' or ']') ends."""
    f.seek(max(0, cut - 256))
    before = f.read(cut - max(0, cut - 256))
    return cut - (len(before) - len(before.rstrip()))


def _cut_array(source: Source, f, start: int, size: int, cut_short: bool = False,
               kept: int | None = None):
    """Cut the events array whose elements begin at ``start`` into checked slices.

    Returns ([(temporary file, end offset, events)], first event or None, offset of the closing ']').
    ``cut_short``: if the file ends inside the array, its complete elements are kept, with a
    warning (as :func:`_lazy_cuts` does), and the end of the file stands for the ']'; ``kept``:
    where the last event of earlier arrays ends, for the warning when this one has none.
    """
    parts: list[tuple[str, int]] = []
    first = None
    cur = start
    bound = _search(f, _EVENTS_KEY, start, size)
    bound = bound[0] if bound else size
    want = slice_bytes = SLICE_BYTES
    while True:
        f.seek(cur)
        window = f.read(min(want, bound - cur))
        reaches_bound = cur + len(window) >= bound
        if reaches_bound:
            # The array usually ends just before the bound: look in the tail first.
            tail_at = max(0, len(window) - (1 << 16))
            found = _try_cuts(source, window, [m.end() - 1 for m in _END.finditer(window, tail_at)])
            if found is None and tail_at:
                found = _try_cuts(source, window, [m.end() - 1 for m in _END.finditer(window) if m.start() < tail_at])
            if found is None and bound < size:
                # The "events" key found next was inside an event: look up to the one after it.
                following = _search(f, _EVENTS_KEY, bound + 1, size)
                bound = following[0] if following else size
                continue
            ends_inside = False
            if found is None and cut_short:
                last, closed = _complete_elements(window)
                if not closed:
                    ends_inside = True
                    if last is None:
                        last_end = parts and _element_end(f, parts[-1][1]) or kept or cur
                    else:
                        last_end = cur + last
                    source.warnings.append(f"{source.name}: JSON cut short at {source.unit} {source.size}; kept every "
                                           f"complete event up to {source.unit} {last_end}")
                    if last is None:
                        return parts, first, size
                    found = _try_cuts(source, window, [last])
            if found is None:
                raise _Irregular("no end of the events array")
            cut, tmp, n, head = found
            if n:
                parts.append((tmp, cur + cut, n))
                first = first if first is not None else orjson.loads(head)
            else:
                _unlink(tmp)
            return parts, first, size if ends_inside else cur + cut
        tail = window[-(1 << 16):]
        base = len(window) - len(tail)
        found = _try_cuts(source, window, [base + m.end() - 1 for m in _CUT.finditer(tail)])
        if found is None:
            if want >= 8 * slice_bytes and want > MAX_OBJECT_BYTES:
                raise _Irregular("no element boundary found")
            want *= 2
            continue
        cut, tmp, n, head = found
        parts.append((tmp, cur + cut, n))
        first = first if first is not None else orjson.loads(head)
        cur += cut + 1
        want = slice_bytes


def _try_cuts(source: Source, window: bytes, cuts: list[int]) -> tuple[int, str, int, bytes | None] | None:
    """The last cut (from the end) at which ``[`` + window[:cut] + ``]`` is a JSON array: (cut,
    its temporary file, its elements, the first one's JSON text or None)."""
    with contextlib.closing(_candidates(source, window, cuts)) as candidates:
        for cut, tmp in candidates:
            try:
                n, head = native.array_elements(tmp)
            except native.StageError:
                continue
            return cut, tmp, n, head
    return None


# --- whole JSON documents, parsed at once (fallback) -------------------------------------------

def _open_json_whole(name: str, data: bytes, size: int, doc=None, unit: str = "byte",
                     warnings: list[str] | None = None) -> Source:
    """``doc``: the document, if the caller parsed ``data`` already; ``unit``: what the byte
    positions in messages count (decompressed bytes of a gzip file)."""
    warnings = list(warnings or ())
    size_read = len(data)
    data = _without_bom(data)
    bom = size_read - len(data)  # (positions in messages count it)
    try:
        if doc is None:
            doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        doc = _salvage(data)
        if doc is None:
            raise QuicackError(f"not valid JSON: {e.msg}", name, f"{unit} {bom + e.pos}") from None
        doc, kept_until = doc
        warnings.append(f"{name}: JSON cut short at {unit} {size_read}; kept every complete event "
                        f"up to {unit} {bom + kept_until}")
    del data
    if not isinstance(doc, dict):
        raise QuicackError("not a qlog file: top level is not a JSON object", name, "byte 0")
    try:
        version = qlog.generation(doc)
        trace_docs = qlog.traces_of(doc)
    except QuicackError as e:
        raise QuicackError(e.message, name, "byte 0") from None
    if not any(t.get("events") for t in trace_docs):
        raise QuicackError("qlog file holds no events", name, "byte 0")
    traces: list[TraceInfo] = []
    for index, trace in enumerate(trace_docs):
        events = trace.get("events") or []
        if not isinstance(events, list):
            raise QuicackError(f"trace {index}: events is not a list", name)
        if "error_description" in trace and not events:  # a TraceError: see qlog.traces_of
            warnings.append(f"{name}: trace {index} is an error entry: {str(trace['error_description'])[:200]!r}")
        traces.append(qlog.describe_trace(doc, trace, index, _first_time(events[0], trace) if events else None))
    source = Source(name, "json", version, traces, size, warnings)
    source._slices = _whole_slices(source, trace_docs)
    return source


def _whole_slices(source: Source, trace_docs: list[dict]) -> Iterator[Slice]:
    batch = _Batch(source)
    for index, trace in enumerate(trace_docs):
        events = trace.get("events") or []
        if not events:
            continue
        body = orjson.dumps(events)[1:-1]
        trace["events"] = None
        done = source.size if index == len(trace_docs) - 1 else 0
        key = slice_key(source.traces[index])
        yield from batch.add(index, key, body, len(events), done)
        if key is None:
            yield from batch.flush()
    yield from batch.flush()


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _salvage(data: bytes):
    """Keep the complete events of a JSON qlog that was never closed (a writer killed mid-file).

    Walks the brackets (skipping strings), remembers where the last complete element of the last
    ``events`` array ended, cuts there and closes every bracket still open.
    """
    starts = [m.end() for m in _EVENTS_KEY.finditer(data)]
    if not starts:
        return None
    events_depth = None
    cut = None
    cut_stack: list[bytes] = []
    next_events = 0
    try:
        for m, stack in _tokens(data):
            tok = m.group()
            while next_events < len(starts) and m.start() >= starts[next_events] - 1:
                if (m.start() == starts[next_events] - 1 and tok == b"["
                        and (events_depth is None or len(stack) <= events_depth)):
                    # (the array's '[' is open now; an "events" key inside an event, deeper in
                    # an events array, is the event's own)
                    events_depth = len(stack)
                next_events += 1
            if tok in (b"]", b"}") and events_depth is not None and len(stack) == events_depth:
                cut, cut_stack = m.end(), list(stack)
            elif tok == b"]" and events_depth is not None and len(stack) == events_depth - 1:
                events_depth = None  # the array closed: what follows at its depth is no event
    except _Irregular:
        return None
    if cut is None:
        return None
    try:
        return orjson.loads(data[:cut] + _closers(cut_stack)), cut
    except orjson.JSONDecodeError:
        return None


# --- staging slices -----------------------------------------------------------------------------

def staged_slices(source: Source, prepare: Callable[[Slice, native.Staged], object] | None = None
                  ) -> Iterator[tuple[Slice, object]]:
    """Each slice of ``source`` with its staged events (:func:`stage`), in file order — or with
    what ``prepare(slice, staged)`` makes of them, in the same thread (the rows the normalizer
    makes of them, :meth:`quicack.qlog.normalize.Normalizer.rows`).

    The next slices are cut, staged and prepared in a thread while the caller stores the current
    one: the native core and DuckDB release the GIL while they work, so the two overlap on two
    cores.  The thread stages one slice ahead of the one waiting for the caller (when it waited
    until the caller took each, each side idled while the other finished a slower slice: the 300
    MB aioquic file took ~7 % longer), so at most three slices are held at a time.
    """
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for part in source.slices():
                if stop.is_set():
                    break
                staged, part.staged = part.staged, None
                if staged is None:
                    staged = stage(source, part)
                handoff.put((part, staged if prepare is None else prepare(part, staged)))
        except BaseException as e:  # handed to the caller, raised there
            handoff.put(e)
            return
        handoff.put(None)

    worker = threading.Thread(target=produce, name="quicack-stage", daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # let a waiting thread finish its put
            try:
                handoff.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()


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
        if source._diagnose is not None:
            raise source._diagnose(e) from None
        what, _, record = e.args
        raise QuicackError(f"malformed events in trace {part.trace_index}: {what}"
                           + (f" (event {record} of a slice)" if record else ""), source.name) from None
    if delta and ev.delta_carry is not None:
        # Delta times (draft era) need a running sum, carried over to the next slice.
        source._delta_sum[part.trace_index] = ev.delta_carry
    source.events += ev.num_rows
    return ev
