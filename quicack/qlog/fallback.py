"""The fallback for JSON documents: parsed whole with orjson, and salvaged when cut short.

Theory of operation: a small JSON document (:data:`quicack.qlog.reader.WHOLE_JSON_BYTES`), or
one the streaming cutter (:mod:`quicack.qlog.document`) cannot follow — an odd layout, an
"events" key where the cutter does not expect one — is parsed at once with orjson: correct,
but memory grows with the file.  Each trace's events are then written back as the elements of
one slice (small traces alike share one, :class:`quicack.qlog.slicing.Batch`).  A document
that does not parse because its writer was killed mid-file is salvaged (:func:`salvage`): cut
after the last complete event of its last events array and closed, with a warning saying up to
where events were kept.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from quicack.model import QuicackError
from quicack.qlog import dialect as qlog
from quicack.qlog.brackets import EVENTS_KEY, Irregular, closers, field_at, tokens
from quicack.qlog.dialect import TraceInfo
from quicack.qlog.slicing import Batch, Slice, Source, detail, first_time, without_bom


#: The largest JSON document parsed whole (what the streaming cutter cannot follow): parsed,
#: one takes several times its size in memory.
MAX_WHOLE_BYTES = 192 << 20


def check_whole(name: str, size: int, what: str = "") -> None:
    """Refuse a document the cutter cannot follow that is too large to parse whole."""
    if size > MAX_WHOLE_BYTES:
        raise QuicackError(f"a JSON document of {size / 1e6:.0f} MB {what}laid out so that it cannot be read in "
                           f"slices, and parsing it whole takes more memory than {MAX_WHOLE_BYTES >> 20} MB of it may "
                           "(JSON-SEQ is read in slices whatever its size)", name)


def open_whole(name: str, data: bytes, size: int, doc=None, unit: str = "byte",
               warnings: list[str] | None = None) -> Source:
    """A source of the JSON document ``data``.  ``doc``: the document, if the caller parsed
    ``data`` already; ``unit``: what the byte positions in messages count (decompressed bytes of
    a gzip file)."""
    warnings = list(warnings or ())
    size_read = len(data)
    data = without_bom(data)
    bom = size_read - len(data)  # (positions in messages count it)
    try:
        if doc is None:
            doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        doc = salvage(data)
        if doc is None:
            field = field_at(data, e.pos) if e.pos < len(data) else ""
            raise QuicackError("not valid JSON: " + detail(e.msg, None, field), name, f"{unit} {bom + e.pos}") from None
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
        traces.append(qlog.describe_trace(doc, trace, index, first_time(events[0], trace) if events else None))
    source = Source(name, "json", version, traces, size, warnings)
    source.cutter = _whole_slices(source, trace_docs)
    return source


def _whole_slices(source: Source, trace_docs: list[dict]) -> Iterator[Slice]:
    batch = Batch(source)
    for index, trace in enumerate(trace_docs):
        events = trace.get("events") or []
        if not events:
            continue
        body = orjson.dumps(events)[1:-1]
        trace["events"] = None
        done = source.size if index == len(trace_docs) - 1 else 0
        yield from batch.add(index, body, len(events), done)
    yield from batch.flush()


def salvage(data: bytes):
    """Keep the complete events of a JSON qlog that was never closed (a writer killed mid-file):
    (the document, where the kept text ends), or None.

    Walks the brackets (skipping strings), remembers where the last complete element of the last
    ``events`` array ended, cuts there and closes every bracket still open.
    """
    starts = [m.end() for m in EVENTS_KEY.finditer(data)]
    if not starts:
        return None
    events_depth = None
    cut = None
    cut_stack: list[bytes] = []
    next_events = 0
    try:
        for m, stack in tokens(data):
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
    except Irregular:
        return None
    if cut is None:
        return None
    try:
        return orjson.loads(data[:cut] + closers(cut_stack)), cut
    except orjson.JSONDecodeError:
        return None
