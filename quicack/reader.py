"""Reading qlog files into DuckDB: the I/O edge of the qlog path.

Theory of operation: a file is sniffed (gzip? JSON-SEQ record separator? one JSON document or
one record per line?), its header is parsed in Python (small), and its events go to DuckDB's JSON
reader, which parses them in C++ on both cores.  JSON-SEQ and NDJSON are copied once, chunk by
chunk, into a temporary NDJSON file with the 0x1E record separators turned into newlines (the same
length, so byte offsets stay those of the original file); a record cut off at the end is dropped
with a warning.  A JSON document is parsed with orjson and each trace's events written out as one
JSON array for DuckDB.  The result is the temporary table ``ev``:

    ev(trace_index, group_key, t_ms, name, data)      -- rowid = file order

with ``t_ms`` already in milliseconds (time units, delta times applied) and ``name`` the event
name as logged ('category:event' for array events).
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson

from . import qlog
from .model import QuicackError, TraceInfo

CHUNK_BYTES = 8 << 20
HEAD_BYTES = 1 << 20
RS = b"\x1e"


@dataclass
class Staged:
    format: str  # 'json', 'json-seq', 'ndjson'
    qlog_version: str
    traces: list[TraceInfo]
    events: int = 0
    warnings: list[str] = field(default_factory=list)


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return (gzip.open(path, "rb"), True) if magic == b"\x1f\x8b" else (open(path, "rb"), False)


def stage(con: duckdb.DuckDBPyConnection, path: Path) -> Staged:
    """Read ``path`` into the temporary table ``ev``; raise QuicackError if nothing is readable."""
    name = str(path)
    try:
        stream, compressed = _open(path)
    except OSError as e:
        raise QuicackError(f"cannot open: {e.strerror}", name) from None
    with stream:
        try:
            head = stream.read(HEAD_BYTES)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise QuicackError(f"cannot read: {e}", name, "byte 0") from None
        stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        if not stripped:
            raise QuicackError("empty file, no qlog header", name, "byte 0")
        con.execute("DROP TABLE IF EXISTS ev")
        if stripped[:1] == RS:
            return _stage_lines(con, name, stream, head, "json-seq", compressed)
        if stripped[:1] != b"{":
            raise QuicackError(f"not a qlog file: starts with {stripped[:16]!r}", name,
                               f"byte {len(head) - len(stripped)}")
        first_line = stripped.split(b"\n", 1)[0]
        try:
            first = orjson.loads(first_line)
        except orjson.JSONDecodeError:
            first = None
        if isinstance(first, dict) and _is_stream_header(first):
            return _stage_lines(con, name, stream, head, "ndjson", compressed)
        rest = stream.read()
    return _stage_json(con, name, head + rest)


def _is_stream_header(header: dict) -> bool:
    fmt = str(header.get("qlog_format") or header.get("serialization_format") or "").upper()
    if fmt in ("JSON-SEQ", "NDJSON", "JSON-TEXT-SEQ"):
        return True
    if "trace" in header and "traces" not in header:
        return True
    traces = header.get("traces")
    return isinstance(traces, list) and all("events" not in t for t in traces if isinstance(t, dict))


# --- JSON-SEQ and NDJSON ----------------------------------------------------------------------

def _stage_lines(con, name: str, stream, head: bytes, fmt: str, compressed: bool) -> Staged:
    warnings: list[str] = []
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
    fd, tmp = tempfile.mkstemp(suffix=".ndjson", prefix="quicack-")
    try:
        first_record = None
        with os.fdopen(fd, "wb") as out:
            chunk = text[body_offset:]
            total = body_offset
            last_line_start = body_offset
            tail = b""
            while True:
                if chunk:
                    out.write(chunk)
                    nl = chunk.rfind(b"\n")
                    if nl >= 0:
                        last_line_start = total + nl + 1
                        tail = chunk[nl + 1:]
                    else:
                        tail += chunk
                    if first_record is None:
                        first_record = _first_record(chunk)
                    total += len(chunk)
                try:
                    raw = stream.read(CHUNK_BYTES)
                except (OSError, EOFError) as e:
                    warnings.append(f"{name}: stream ends with an error at {unit} {total} ({e}); "
                                    "kept the complete records before it")
                    raw = b""
                if not raw:
                    break
                chunk = raw.replace(RS, b"\n")
            if _incomplete_tail(tail):
                out.truncate(last_line_start - body_offset)
                record_start = last_line_start - (1 if fmt == "json-seq" else 0)  # at its RS
                warnings.append(f"{name}: last record cut short at {unit} {record_start} "
                                f"(file ends at {unit} {total}); kept every complete event before it")
        if first_record is None and not trace_headers[0].get("events"):
            raise QuicackError("qlog stream has a header but no events", name, f"{unit} {total}")
        traces = [qlog.describe_trace(header, trace_headers[0], 0, _first_time(first_record, trace_headers[0]))]
        layout = traces[0].layout
        try:
            if layout == ("object",):
                _insert_objects(con, tmp, "newline_delimited", traces[0])
            else:
                _insert_arrays(con, f"read_ndjson_objects('{_sql_path(tmp)}')", traces[0])
        except duckdb.Error as e:
            raise _bad_record(name, tmp, body_offset, unit, e) from None
    finally:
        os.unlink(tmp)
    events = con.execute("SELECT count(*) FROM ev").fetchall()[0][0]
    return Staged(fmt, version, traces, events, warnings)


def _first_record(chunk: bytes):
    for line in chunk.split(b"\n", 20)[:20]:
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
        fields = trace.get("event_fields") or trace.get("fields") or []
        key = next((k for k in ("relative_time", "time", "delta_time") if k in fields), None)
        value = record[fields.index(key)] if key and fields.index(key) < len(record) else None
    else:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _duck_message(e: Exception) -> str:
    return str(e).splitlines()[0][:300]


def _bad_record(name: str, tmp: str, body_offset: int, unit: str, e: Exception) -> QuicackError:
    """Name the first record DuckDB could not read (error path only: a Python scan is fine)."""
    offset = body_offset
    record = 1  # the header
    with open(tmp, "rb") as f:
        for line in f:
            if line.strip():
                record += 1
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError as err:
                    start = offset + len(line) - len(line.lstrip())
                    return QuicackError(f"malformed record {record}: {err.msg}", name, f"{unit} {start}")
            offset += len(line)
    return QuicackError(f"malformed event records: {_duck_message(e)}", name)


def _sql_path(p: str) -> str:
    return p.replace("'", "''")


# --- whole JSON documents ---------------------------------------------------------------------

def _stage_json(con, name: str, data: bytes) -> Staged:
    warnings: list[str] = []
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        doc = _salvage(data)
        if doc is None:
            raise QuicackError(f"not valid JSON: {e.msg}", name, f"byte {e.pos}") from None
        doc, kept_until = doc
        warnings.append(f"{name}: JSON cut short at byte {len(data)}; kept every complete event "
                        f"up to byte {kept_until}")
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
        info = qlog.describe_trace(doc, trace, index, _first_time(events[0], trace) if events else None)
        traces.append(info)
        fd, tmp = tempfile.mkstemp(suffix=".json", prefix="quicack-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(orjson.dumps(events))
            if info.layout == ("object",):
                _insert_objects(con, tmp, "array", info)
            else:
                _insert_arrays(con, f"read_json_objects('{_sql_path(tmp)}', format='array')", info)
        except duckdb.Error as e:
            raise QuicackError(f"malformed events in trace {index}: {_duck_message(e)}", name) from None
        finally:
            os.unlink(tmp)
    events = con.execute("SELECT count(*) FROM ev").fetchall()[0][0]
    return Staged("json", version, traces, events, warnings)


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_EVENTS_KEY = re.compile(rb'"events"\s*:\s*\[')


def _salvage(data: bytes):
    """Keep the complete events of a JSON qlog that was never closed (a writer killed mid-file).

    Walks the brackets (skipping strings), remembers where the last complete element of the last
    ``events`` array ended, cuts there and closes every bracket still open.
    """
    starts = [m.end() for m in _EVENTS_KEY.finditer(data)]
    if not starts:
        return None
    stack: list[bytes] = []
    events_depth = None
    cut = None
    cut_stack: list[bytes] = []
    next_events = 0
    for m in _TOKEN.finditer(data):
        tok = m.group()
        while next_events < len(starts) and m.start() >= starts[next_events] - 1:
            if m.start() == starts[next_events] - 1 and tok == b"[":
                events_depth = len(stack) + 1
            next_events += 1
        if tok in (b"[", b"{"):
            stack.append(tok)
        elif tok in (b"]", b"}"):
            if not stack:
                return None
            stack.pop()
            if events_depth is not None and len(stack) == events_depth:
                cut, cut_stack = m.end(), list(stack)
    if cut is None:
        return None
    closers = b"".join(b"]" if t == b"[" else b"}" for t in reversed(cut_stack))
    try:
        return orjson.loads(data[:cut] + closers), cut
    except orjson.JSONDecodeError:
        return None


# --- the SQL that fills ev --------------------------------------------------------------------

def _append(con, info: TraceInfo, raw_sql: str) -> None:
    """Append one trace's events, in file order, to ``ev``.

    ``raw_sql`` yields (time, name, data, group_id) in file order.  The table's ``rowid`` keeps
    that order, so no window function is needed on the fast path; delta times (draft-era only)
    need a running sum and take the slow one.
    """
    time = "TRY_CAST(time AS DOUBLE)"
    if info.time_format == "delta":
        raw_sql = f"SELECT row_number() OVER () AS rn, * FROM ({raw_sql})"
        time = f"sum({time}) OVER (ORDER BY rn ROWS UNBOUNDED PRECEDING)"
        order = " ORDER BY rn"
    else:
        order = ""
    select_sql = f"""
        SELECT {info.trace_index}::INTEGER AS trace_index, coalesce(group_id, '') AS group_key,
               {time} * {info.time_scale_ms!r} AS t_ms, coalesce(name, '') AS name, data
        FROM ({raw_sql}){order}"""
    exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'ev' AND temporary").fetchall()[0][0]
    if exists:
        con.execute(f"INSERT INTO ev {select_sql}")
    else:
        con.execute(f"CREATE TEMP TABLE ev AS {select_sql}")


def _insert_objects(con, tmp: str, fmt: str, info: TraceInfo) -> None:
    source = (f"read_json('{_sql_path(tmp)}', format='{fmt}', maximum_object_size=33554432, "
              "columns={'time': 'DOUBLE', 'name': 'VARCHAR', 'category': 'VARCHAR', "
              "'event': 'VARCHAR', 'type': 'VARCHAR', 'data': 'JSON', 'group_id': 'VARCHAR'})")
    _append(con, info, "SELECT time, coalesce(name, category || ':' || coalesce(event, type)) AS name, "
                       f"data, group_id FROM {source}")


def _insert_arrays(con, source: str, info: TraceInfo) -> None:
    t, cat, ev, data, group = info.layout

    def at(i: int) -> str:
        return f"(json->>'$[{i}]')"
    name = f"({at(cat)} || ':' || {at(ev)})" if cat >= 0 else at(ev)
    group_sql = at(group) if group >= 0 else "NULL"
    _append(con, info, f"SELECT {at(t)} AS time, {name} AS name, (json->'$[{data}]') AS data, "
                       f"{group_sql} AS group_id FROM {source}")
