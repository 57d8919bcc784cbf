"""Reading qlog files, one bounded slice at a time: the I/O edge of the qlog path.

Theory of operation: a file is sniffed (gzip? JSON-SEQ record separator? one JSON document or
one record per line?) and its header parsed in Python (small) by :func:`open_source`.  Its
events are then cut into slices of complete records, in file order
(:mod:`quicack.qlog.slicing`), and :func:`staged_slices` stages each in a thread while the
caller stores the rows of the one before.

* JSON-SEQ and NDJSON (here): each slice is a range of whole lines, read by the stager straight
  from a plain file, or decompressed into a temporary file for gzip.  Every non-blank piece
  between line ends and 0x1E record separators is a record (RFC 7464).  A record cut off at the
  end of the file is left out with a warning.
* A JSON document: cut by :mod:`quicack.qlog.document` without ever being parsed whole; a gzip
  one larger than ``WHOLE_JSON_BYTES`` is first decompressed into a temporary file.  A document
  up to ``WHOLE_JSON_BYTES``, or one the cutter cannot follow, is parsed whole instead
  (:mod:`quicack.qlog.fallback`) — correct, but memory grows with the file.
"""

from __future__ import annotations

import gzip
import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from quicack.core import native
from quicack.model import QuicackError
from quicack.qlog import dialect as qlog
from quicack.qlog import document, fallback, slicing
from quicack.qlog.gzipfile import GzipWindow
from quicack.qlog.slicing import Slice, Source, first_time, unlink, without_bom

HEAD_BYTES = 1 << 20
RS = b"\x1e"
#: A JSON document up to this size (and two slices) is parsed whole with orjson (a few ms per MB,
#: memory a small multiple of this) rather than cut by the streaming pass, whose checks cost a
#: temporary file and a parse per events array: for a scan's batch of many small traces,
#: parsing whole is the faster of the two.
WHOLE_JSON_BYTES = 16 << 20


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
            part = stream.read1(slicing.CHUNK_BYTES if left < 0 else min(left, slicing.CHUNK_BYTES))
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
            if size <= min(WHOLE_JSON_BYTES, 2 * slicing.SLICE_BYTES):  # (tests shrink SLICE_BYTES to cut)
                with open(path, "rb") as f:
                    data = f.read()
                try:
                    doc = orjson.loads(without_bom(data))
                except orjson.JSONDecodeError:
                    doc = None  # cut short, or beyond orjson: the streaming pass, then salvage
                if doc is not None:
                    return fallback.open_whole(name, data, size, doc)
            found = document.open_streaming(path, name, size)
            if found is not None:
                return found
            fallback.check_whole(name, size)
            with open(path, "rb") as f:
                return fallback.open_whole(name, f.read(), size)
        want = WHOLE_JSON_BYTES + 1 - len(head)
        rest, error = (b"", error) if error is not None or want <= 0 else _read(stream, want)
        data = head + rest
        if len(data) > WHOLE_JSON_BYTES:
            stream.close()
            return _open_json_gzip(path, name, size)
        if error is None:
            rest, error = _read(stream)
            data += rest
        stream.close()
        early = [] if error is None else [_ended_early(name, "decompressed byte", len(data), error)]
        return fallback.open_whole(name, data, size, unit="decompressed byte", warnings=early)
    except BaseException:
        stream.close()
        raise


def _open_json_gzip(path: Path, name: str, size: int) -> Source:
    """A gzip JSON document larger than WHOLE_JSON_BYTES decompressed: cut like a plain one (parsed
    whole, it would take many times its gzip file's size of memory), read from the gzip file itself
    as the cutter goes (:class:`quicack.qlog.gzipfile.GzipWindow`): no temporary file but each
    slice's.  Progress counts the gzip file's bytes, positions the decompressed ones."""
    with GzipWindow(path) as probe:  # (one pass: the size, and checkpoints the cutter seeks back to)
        total = probe.size()
        error = probe.error
    early = [] if error is None else [_ended_early(name, "decompressed byte", total, error)]
    try:
        # (a gzip stream that ends early mostly leaves a document cut short: read as one)
        found = document.open_streaming(path, name, total, unit="decompressed byte",
                                        opener=lambda: GzipWindow(path, share=probe))
        if found is None:  # a layout the cutter does not follow: parsed whole
            fallback.check_whole(name, total, "decompressed ")
            with GzipWindow(path, share=probe) as f:
                return fallback.open_whole(name, f.read(), size, unit="decompressed byte", warnings=early)
        found.warnings[:0] = early
        found.cutter = _decompressed_slices(found.cutter, total, size)
        return found
    except QuicackError as e:
        raise QuicackError(e.message, name, _decompressed(e.position)) from None


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
    while end < 0 and len(text) >= HEAD_BYTES:  # a header longer than the head: read on to its end
        if len(text) - start > slicing.MAX_HEADER_BYTES:
            raise QuicackError(f"qlog header longer than {slicing.MAX_HEADER_BYTES >> 20} MB, the most a header "
                               "may hold", name, f"{unit} {start}")
        more, error = _read(stream, slicing.CHUNK_BYTES)
        if not more:
            break
        end = more.replace(RS, b"\n").find(b"\n")
        end = end if end < 0 else len(text) + end
        text += more.replace(RS, b"\n")
        if error is not None:
            break
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
    traces = [qlog.describe_trace(header, trace_headers[0], 0, first_time(first_record, trace_headers[0]))]
    source = Source(name, fmt, version, traces, size, unit=unit)
    if compressed:
        source.cutter = _line_slices(source, stream, text, body_offset, compressed, fmt, unit)
    else:
        stream.close()
        source.cutter = _file_slices(source, path, body_offset, fmt)
    source.diagnose = lambda e, part: _bad_record(path, name, unit, e, part)
    return source


def _line_slices(source: Source, stream, text: bytes, body_offset: int, compressed: bool, fmt: str,
                 unit: str) -> Iterator[Slice]:
    """Copy whole lines, record separators turned into newlines, into temporary files of about
    SLICE_BYTES each; ``text`` is what was read already (separators replaced).  Linear in the
    stream's size however long its lines: a record longer than MAX_RECORD_BYTES refuses the file
    once that much of it is read, and a run of blanks is dropped as it comes."""
    raw_file = stream.fileobj if compressed else stream
    chunk_bytes = max(1, min(slicing.CHUNK_BYTES, slicing.SLICE_BYTES))
    pending = bytearray(text[body_offset:])
    start = body_offset  # the stream's offset of pending[0]
    total = len(text)  # bytes of the (decompressed) stream read so far, up to the end of ``pending``
    last_end = pending.rfind(b"\n")  # the last line end in ``pending``, or -1
    eof = False
    with stream:
        while pending or not eof:
            fd, tmp = source.temp(".ndjson")
            written, base = 0, start
            with os.fdopen(fd, "wb") as out:
                while True:
                    cut = 0
                    if last_end >= 0:
                        budget = max(slicing.SLICE_BYTES - written, 0)
                        cut = last_end + 1 if last_end < budget else pending.rfind(b"\n", 0, budget) + 1
                        if not cut and not written:
                            cut = pending.find(b"\n") + 1  # a record longer than a slice
                    if cut:
                        out.write(memoryview(pending)[:cut])
                        written += cut
                        del pending[:cut]
                        start += cut
                        last_end = last_end - cut if last_end >= cut else -1
                    if last_end >= 0 or eof:
                        break  # the slice is full, or the stream is done
                    raw, error = _read(stream, chunk_bytes)
                    got = len(raw)
                    if raw:
                        total += len(raw)
                        raw = raw.replace(RS, b"\n")
                        found = raw.rfind(b"\n")
                        if found >= 0:
                            last_end = len(pending) + found
                        elif not raw.strip() and not pending.strip():
                            start += len(pending) + len(raw)  # blanks: no record, nothing to keep
                            pending.clear()
                            raw = b""
                        pending += raw
                        if last_end < 0 and len(pending) > slicing.MAX_RECORD_BYTES:
                            blanks = len(pending) - len(pending.lstrip())
                            raise QuicackError(f"a record longer than {slicing.MAX_RECORD_BYTES >> 20} MB, the most "
                                               "one may hold", source.name, f"{unit} {start + blanks}")
                    if error is not None:
                        source.warnings.append(_ended_early(source.name, unit, total, error))
                    eof = not got or error is not None
                if eof and last_end < 0:
                    if pending.strip():
                        if _incomplete_tail(bytes(pending)):
                            record_start = total - len(pending) - (1 if fmt == "json-seq" else 0)  # at its RS
                            source.warnings.append(
                                f"{source.name}: last record cut short at {unit} {record_start} (file ends at "
                                f"{unit} {total}); kept every complete event before it")
                        else:
                            out.write(pending + b"\n")
                            written += len(pending)
                    start += len(pending)
                    pending.clear()
            if written:
                done = raw_file.tell() if compressed else total - len(pending)
                yield Slice(0, tmp, "lines", source.size if eof and not pending else min(source.size, done), base=base)
            else:
                unlink(tmp)


def _file_slices(source: Source, path: Path, offset: int, fmt: str) -> Iterator[Slice]:
    """Slices of an uncompressed stream: byte ranges of the file ending at a newline, read by the
    stager itself; a record cut off at the end of the file is left out with a warning."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        end_of_records = _last_newline(fd, size, offset) + 1 or offset
        if size - end_of_records > slicing.MAX_RECORD_BYTES:
            _too_long(source, fd, end_of_records)
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
            if pos + slicing.SLICE_BYTES < end_of_records:
                at = pos + slicing.SLICE_BYTES
                end = _last_newline(fd, at, pos) + 1 or _next_newline(fd, at, pos + slicing.MAX_RECORD_BYTES + 1) + 1
            if end - pos > slicing.MAX_RECORD_BYTES:
                _too_long(source, fd, pos)
            yield Slice(0, str(path), "lines", end, range=(pos, end))
            pos = end


def _too_long(source: Source, fd: int, pos: int):
    """Refuse a record longer than MAX_RECORD_BYTES, at its first byte (never read whole)."""
    head = os.pread(fd, 1 << 16, pos)
    blanks = len(head) - len(head.lstrip(b" \t\r\n\x1e"))
    raise QuicackError(f"a record longer than {slicing.MAX_RECORD_BYTES >> 20} MB, the most one may hold",
                       source.name, f"byte {pos + blanks}")


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


def _next_newline(fd: int, at: int, limit: int) -> int:
    """Position of the first newline at or after ``at`` (the file's last byte if none; ``limit``
    if there is none before it)."""
    block = 1 << 16
    while at < limit:
        chunk = os.pread(fd, block, at)
        if not chunk:
            return at - 1
        found = chunk.find(b"\n")
        if found >= 0:
            return at + found
        at += len(chunk)
    return limit


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



def _first_line(e: Exception) -> str:
    return (str(e.args[0]) if e.args else str(e)).splitlines()[0][:300]


def _bad_record(path: Path, name: str, unit: str, e: Exception, part: Slice) -> QuicackError:
    """Name the record the stager refused: its number in the file, where it starts, the bad
    token's byte and the member it is in (error path only: a Python scan is fine)."""
    what, pos, _, field, _, at = e.args
    start, token = part.offset(at), part.offset(pos)
    if start is not None:
        return QuicackError(f"malformed record {_record_number(path, start)}: "
                            + slicing.detail(what, token if token != start else None, field, unit), name, f"{unit} {start}")
    offset = 0  # of the line being read
    record = 0
    carry = b""
    stream, _ = _open(path)
    with stream:
        while True:
            chunk, _ = _read(stream, slicing.CHUNK_BYTES)
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


def _record_number(path: Path, start: int) -> int:
    """The number (from 1, the header's) of the record that starts at ``start``: the non-blank
    pieces between line ends and record separators before it, plus one."""
    count, blank = 0, True  # records before; whether the piece being read is blank so far
    stream, _ = _open(path)
    left = start
    with stream:
        while left > 0:
            chunk, _ = _read(stream, min(slicing.CHUNK_BYTES, left))
            if not chunk:
                break
            left -= len(chunk)
            pieces = chunk.replace(RS, b"\n").split(b"\n")
            for i, piece in enumerate(pieces):
                blank = blank and not piece.strip()
                if i < len(pieces) - 1:
                    count += not blank
                    blank = True
    return count + 1


# --- staging slices -----------------------------------------------------------------------------

def staged_slices(source: Source, prepare: Callable[[Slice, native.Staged], object] | None = None
                  ) -> Iterator[tuple[Slice, object]]:
    """Each slice of ``source`` with its staged events (:func:`quicack.qlog.slicing.stage`), in file order — or with
    what ``prepare(slice, staged)`` makes of them, in the same thread (the rows the normalizer
    makes of them, :meth:`quicack.qlog.normalize.Normalizer.rows`).

    The next slices are cut, staged and prepared in a thread while the caller stores the current
    one: the native core and DuckDB release the GIL while they work, so the two overlap on two
    cores.  The thread stages one slice ahead of the one waiting for the caller (were it to wait
    until the caller took each, each side would idle while the other finished a slower slice), so
    at most three slices are held at a time.
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
                    staged = slicing.stage(source, part)
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

