"""The cutter of JSON documents: each events array cut into slices in one pass, never parsed whole.

Theory of operation: a JSON document holds its events in ``"events": [`` arrays, one per trace.
:func:`open_streaming` finds each array and cuts it at top-level element boundaries: a
candidate cut after ``},`` (:data:`_CUT`) is checked by letting the native parser read the
slice it closes, since a ``},`` inside a string or a nested object is no boundary.  The
document without its events (a few KB, the *skeleton*) is parsed with orjson for the headers.

* A document of one events array (one trace: what a long capture or transfer gives) is not cut
  up front (:func:`_open_one_array`): the array's end is found from the file's tail (the
  document with that array emptied must parse), and its slices are cut one at a time by the
  thread that stages them, while the previous slice is stored (:func:`_lazy_cuts`); checking a
  cut is then staging its slice, so each slice is parsed once.
* A document of several arrays is cut up front (:func:`_plan_json`), each slice checked by the
  native parser and written to a temporary file; small traces alike share slices.
* A document cut short (a writer killed mid-file: JSON qlog writers close the array and the
  document only when the connection ends) is cut like a whole one up to its last complete
  event, with a warning saying where (the brackets walk of :mod:`quicack.qlog.brackets`), and
  gives the rows its salvage would (:func:`quicack.qlog.fallback.salvage`).

What this pass cannot follow (an odd layout, an array whose end or element boundaries it
cannot find) makes :func:`open_streaming` return None: the caller then parses the document
whole (:mod:`quicack.qlog.fallback`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import orjson

from quicack.core import native
from quicack.model import QuicackError
from quicack.qlog import dialect as qlog
from quicack.qlog import slicing
from quicack.qlog.brackets import EVENTS_KEY, Irregular, closed, complete_elements
from quicack.qlog.slicing import Batch, Slice, Source, first_time, unlink, without_bom

#: Candidate cuts tried per slice of a JSON document before giving up on the streaming pass.
MAX_CUT_TRIES = 64
#: how far from the end of a document the end of its one events array is looked for
TAIL_BYTES = 1 << 16
#: header bytes before the events array, at most, for a document read with :func:`_open_one_array`
HEADER_BYTES = 1 << 20

_CUT = re.compile(rb'(?<=[}\]])\s*,')  # an element ends, another follows
_END = re.compile(rb'(?<=[}\]])\s*\]|^\s*\]')  # an element ends and so does the array (or it is empty)


def open_streaming(path: Path, name: str, size: int, unit: str = "byte", opener=None) -> Source | None:
    """Find the events arrays of a JSON document and cut them into slices, or None.  ``unit``:
    what the positions in messages count; ``opener()``: the document as a file to read and seek
    when ``path`` is not it (a gzip file's :class:`quicack.qlog.gzipfile.GzipWindow`): its
    slices are then copied into temporary files, each one slice long."""
    source = Source(name, "json", "", [], size, unit=unit, opener=opener)
    try:
        with source.open(path) as f:
            if _open_one_array(source, path, f):
                return source
            f.seek(max(0, size - 64))
            ends_open = not f.read().rstrip().endswith(b"}")  # a whole document ends with '}'
    except OSError:
        ends_open = False
    if ends_open:
        found = _open_cut_short(path, name, size, unit, opener)
        if found is not None:
            return found
    try:
        with source.open(path) as f:
            skeleton, plan = _plan_json(source, f, size, cut_short=True)
        cut_short = bool(source.warnings)  # the file ended inside its last events array
        if (ends_open and not cut_short) or (cut_short and not any(parts for parts, _ in plan)):
            # cut short outside the last events array, or before any complete event: the
            # salvage of the whole document says what it can keep, or where it fails
            raise Irregular("cut short")
        doc = closed(skeleton) if cut_short else orjson.loads(without_bom(skeleton))
        if doc is None:
            raise Irregular("the document does not close")
        version = qlog.generation(doc)
        trace_docs = qlog.traces_of(doc)
    except (Irregular, orjson.JSONDecodeError, QuicackError, OSError) as e:
        source.close()
        if getattr(e, "final", False):
            raise
        return _open_cut_short(path, name, size, unit, opener)
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
        traces.append(qlog.describe_trace(doc, trace, index, first_time(slices_of[1], trace)))
    if not any(parts for parts, _ in plan):
        source.close()
        raise QuicackError("qlog file holds no events", name, "byte 0")
    source.qlog_version = version
    source.traces = traces
    source.cutter = _streamed_slices(source, [(with_events[k], parts) for k, (parts, _) in enumerate(plan)])
    return source


def _open_cut_short(path: Path, name: str, size: int, unit: str = "byte", opener=None) -> Source | None:
    """A document of one events array that ends inside it (a writer killed mid-file: JSON qlog
    writers close the array and the document only when the connection ends), cut like a whole
    one up to its last complete event; None if it is not one (parsed whole, then salvaged)."""
    source = Source(name, "json", "", [], size, unit=unit, opener=opener)
    try:
        with source.open(path) as f:
            if _open_one_array(source, path, f, cut_short=True):
                return source
    except OSError:
        pass
    return None


def _open_one_array(source: Source, path: Path, f, cut_short: bool = False) -> bool:
    """Set ``source`` up to be cut while staged if its document holds exactly one non-empty events
    array; False (``source`` untouched) otherwise.

    The array's elements begin after its ``[`` and end at the ``]``, among the last TAIL_BYTES,
    at which the document with the array emptied parses as JSON: a ``]`` inside the last event
    leaves that event's other brackets unmatched.  The elements in between are checked as they
    are cut (:func:`_lazy_cuts`)."""
    m = _search(f, EVENTS_KEY, 0, min(source.size, HEADER_BYTES))
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
            doc = orjson.loads(without_bom(head) + tail[bracket:])
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
        doc, end = closed(head), source.size
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
    if _search(f, EVENTS_KEY, start, end) is not None:
        # another "events" key between the two ends: another trace's array (the emptied
        # document would not show it), or one inside an event; either way, cut up front
        return False
    first = _first_element_of(f, start, end)
    if first is None:
        return False  # empty, or a first event beyond a quick look: cut up front
    index = with_events[0]
    source.qlog_version = version
    source.traces = [qlog.describe_trace(doc, trace, i, first_time(first, trace) if i == index else None)
                     for i, trace in enumerate(trace_docs)]
    source.cutter = _lazy_cuts(source, path, index, start, end, cut_short)
    return True


def _first_element_of(f, start: int, end: int):
    """The first element of the array whose elements begin at ``start`` (found by letting orjson
    parse ever longer prefixes cut after ``},`` or ``],``), or None."""
    f.seek(start)
    window = f.read(min(end - start, slicing.CHUNK_BYTES))
    cuts = [m.end() - 1 for m in _CUT.finditer(window)][:MAX_CUT_TRIES]
    if end - start <= slicing.CHUNK_BYTES:
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
    slice_bytes = slicing.SLICE_BYTES
    with source.open(path) as f:
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
                last, _ = complete_elements(window)
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
            found, refusal = _staged_cut(source, path, f, cuts, index, cur, source.size if final else None)
            if found is None and final:
                raise refusal or QuicackError("malformed events array", source.name, f"{source.unit} {cur}")
            if found is None:
                if want >= 8 * slice_bytes and want >= slicing.MAX_RECORD_BYTES:
                    raise _too_long(source, want, cur)
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
    fd, tmp = source.temp(".json")
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
    unlink(tmp)


def _too_long(source: Source, want: int, cur: int) -> QuicackError:
    e = QuicackError(f"no event boundary within {want >> 20} MB: an event longer than "
                     f"{slicing.MAX_RECORD_BYTES >> 20} MB, the most one may hold?", source.name, f"{source.unit} {cur}")
    e.final = True  # (no other way of reading the document is tried: it would hold all of it)
    return e


def _staged_cut(source: Source, path: Path, f, cuts: list[int], index: int, start: int, done: int | None):
    """((cut, slice staged), None) for the last of ``cuts`` (offsets from ``start`` in ``path``,
    at most MAX_CUT_TRIES from the end) at which the elements from ``start`` stage; (None, the
    last refusal) if none does: a cut inside an event leaves the slice ending inside it, and the
    next cut is tried.  A bad token before the cut is the file's, not the cut's: raised at once,
    naming its byte and field.  ``done``: the slice's progress, else where it ends."""
    refusal = None
    with contextlib.closing(_cut_slices(source, path, f, cuts, index, start, done)) as parts:
        for cut, part in parts:
            try:
                part.staged = slicing.stage(source, part)
            except QuicackError as e:
                if getattr(e, "final", False):
                    raise
                refusal = e
                continue
            return (cut, part), None
    return None, refusal


def _cut_slices(source: Source, path: Path, f, cuts: list[int], index: int, start: int, done: int | None
                ) -> Iterator[tuple[int, Slice]]:
    """(cut, its slice) for the last of ``cuts`` first: bytes of ``path`` read by the stager, or,
    when the document is not a plain file, of one temporary file cut shorter for each cut (removed
    unless a slice of it was taken)."""
    tries = list(reversed(cuts[-MAX_CUT_TRIES:]))
    if source.opener is None:
        for cut in tries:
            yield cut, Slice(index, str(path), "elements", start + cut if done is None else done,
                             range=(start, start + cut))
        return
    if not tries:
        return
    fd, tmp = source.temp(".json", tries[0])
    taken = False
    try:
        with os.fdopen(fd, "wb") as out:
            f.seek(start)
            left = tries[0]
            while left > 0:
                chunk = f.read(min(left, slicing.CHUNK_BYTES))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
            for cut in tries:
                out.truncate(cut)
                out.flush()
                taken = True
                yield cut, Slice(index, tmp, "elements", start + cut if done is None else done, base=start)
                taken = False
    finally:
        if not taken:
            unlink(tmp)


def _streamed_slices(source: Source, arrays: list[tuple[int, list]]) -> Iterator[Slice]:
    """The slices of the cut events arrays, [(trace_index, [(file, end offset, events)])]:
    consecutive traces of one small slice each share slices (:class:`Batch`)."""
    batch = Batch(source)
    for index, parts in arrays:
        if len(parts) == 1 and batch.shares(index):
            tmp, done, n = parts[0]
            with open(tmp, "rb") as f:
                body = f.read()[1:-1]  # the elements, without the array's brackets
            unlink(tmp)
            yield from batch.add(index, body, n, done)
            continue
        yield from batch.flush()
        for tmp, done, _ in parts:
            yield Slice(index, tmp, "array", done)
    yield from batch.flush()


def _plan_json(source: Source, f, size: int, cut_short: bool = False) -> tuple[bytes, list]:
    """One pass over the document: the skeleton (document with empty events arrays) and, per
    events array, its slices as (temporary file, end offset) plus its first event.  ``cut_short``:
    the file may end inside its last events array (:func:`_cut_array`, which then warns); the
    skeleton then ends open."""
    skeleton: list[bytes] = []
    plan = []
    pos = 0
    kept = None  # where the last event of the arrays so far ends
    held = 0  # bytes of the skeleton
    while True:
        m = _search(f, EVENTS_KEY, pos, size)
        end = size if m is None else m[1]
        held += end - pos
        if held > slicing.MAX_HEADER_BYTES:  # (refused before it is read: parsing it takes a multiple)
            e = QuicackError(f"qlog header (the document without its events) longer than "
                             f"{slicing.MAX_HEADER_BYTES >> 20} MB, the most a header may hold", source.name,
                             f"{source.unit} 0")
            e.final = True
            raise e
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
        chunk = f.read(slicing.CHUNK_BYTES)
        m = pattern.search(chunk)
        if m:
            return pos + m.start(), pos + m.end()
        if len(chunk) < slicing.CHUNK_BYTES:
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
    bound = _search(f, EVENTS_KEY, start, size)
    bound = bound[0] if bound else size
    want = slice_bytes = slicing.SLICE_BYTES
    while True:
        f.seek(cur)
        window = f.read(min(want, bound - cur))
        reaches_bound = cur + len(window) >= bound
        if reaches_bound:
            # The array usually ends just before the bound: look in the tail first.
            tail_at = max(0, len(window) - (1 << 16))
            found = _try_cuts(source, window, [m.end() - 1 for m in _END.finditer(window, tail_at)], cur)
            if found is None and tail_at:
                found = _try_cuts(source, window, [m.end() - 1 for m in _END.finditer(window) if m.start() < tail_at],
                                  cur)
            if found is None and bound < size:
                # The "events" key found next was inside an event: look up to the one after it.
                following = _search(f, EVENTS_KEY, bound + 1, size)
                bound = following[0] if following else size
                continue
            ends_inside = False
            if found is None and cut_short:
                last, array_closed = complete_elements(window)
                if not array_closed:
                    ends_inside = True
                    if last is None:
                        last_end = parts and _element_end(f, parts[-1][1]) or kept or cur
                    else:
                        last_end = cur + last
                    source.warnings.append(f"{source.name}: JSON cut short at {source.unit} {source.size}; kept every "
                                           f"complete event up to {source.unit} {last_end}")
                    if last is None:
                        return parts, first, size
                    found = _try_cuts(source, window, [last], cur)
            if found is None:
                raise Irregular("no end of the events array")
            cut, tmp, n, head = found
            if n:
                parts.append((tmp, cur + cut, n))
                first = first if first is not None else orjson.loads(head)
            else:
                unlink(tmp)
            return parts, first, size if ends_inside else cur + cut
        tail = window[-(1 << 16):]
        base = len(window) - len(tail)
        found = _try_cuts(source, window, [base + m.end() - 1 for m in _CUT.finditer(tail)], cur)
        if found is None:
            if want >= 8 * slice_bytes and want >= slicing.MAX_RECORD_BYTES:
                raise _too_long(source, want, cur)
            want *= 2
            continue
        cut, tmp, n, head = found
        parts.append((tmp, cur + cut, n))
        first = first if first is not None else orjson.loads(head)
        cur += cut + 1
        want = slice_bytes


def _try_cuts(source: Source, window: bytes, cuts: list[int], start: int | None = None
              ) -> tuple[int, str, int, bytes | None] | None:
    """The last cut (from the end) at which ``[`` + window[:cut] + ``]`` is a JSON array: (cut,
    its temporary file, its elements, the first one's JSON text or None).  ``start``: where the
    window begins in the file; a bad token before a cut is then refused at once, naming its byte."""
    with contextlib.closing(_candidates(source, window, cuts)) as candidates:
        for cut, tmp in candidates:
            try:
                n, head = native.array_elements(tmp)
            except native.StageError as e:
                what, pos, _, field, eof, _ = e.args
                # (before the cut, a bad token is the file's; the ']' after it, and what follows the
                # array when the cut is beyond its end, are the cut's)
                if not eof and start is not None and pos <= cut and what != "characters after the array":
                    raise slicing.Malformed("malformed events array: " + slicing.detail(what, None, field),
                                            source.name, f"{source.unit} {start + pos - 1}", eof=False) from None
                continue
            return cut, tmp, n, head
    return None

