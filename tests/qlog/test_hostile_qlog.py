"""Hostile and broken qlogs (issue 31): a wrong type in a header, values no column holds,
numbers beyond a double, records longer than the cap, a gzip record that never ends, and the
positions messages give — each the input the issue describes, each ending in a stored file or
one line naming the file, the byte of the bad token and its field."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time

import orjson
import pytest

from conftest import DATA, RS, rows, write_json, write_seq
from quicack import Store
from quicack.qlog import slicing

DRAFT_01 = DATA / "pcap2qlog/examples/draft-01/ack_range.qlog"
AIOQUIC = DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"
SEQ_HEADER = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"}}}


def _packet(i: int, **frame) -> dict:
    return {"time": float(i), "name": "transport:packet_sent",
            "data": {"header": {"packet_type": "1RTT", "packet_number": i},
                     "frames": [{"frame_type": "ack", "ack_delay": 1.0, "acked_ranges": [[0, i]], **frame}]}}


def _as_document(header: dict, events: list) -> dict:
    trace = dict(header["trace"], events=events)
    return {"qlog_version": header["qlog_version"], "traces": [trace]}


def _draft_01_with(tmp_path, value, name="uris.qlog"):
    doc = orjson.loads(DRAFT_01.read_bytes())
    doc["traces"][0]["configuration"]["original_uris"] = value
    return write_json(tmp_path / name, doc)


@pytest.mark.parametrize("value", [7, True, {"x": 7}, None])
def test_a_header_member_of_the_wrong_type_reads_as_absent(tmp_path, value):
    # configuration.original_uris a number: was "TypeError: 'int' object is not iterable", the batch gone
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(_draft_01_with(tmp_path, value))
        assert (result.status, result.error) == ("ingested", None)
        # (pcap2qlog was told by the .json it names there: without it, the producer is not known)
        assert rows(store, "SELECT implementation FROM connections") == [{"implementation": "unknown"}]


def test_original_uris_as_one_string_is_one_uri(tmp_path):
    # a string was joined character by character; it is one URI (pcap2qlog names its .json input)
    doc = orjson.loads(DRAFT_01.read_bytes())
    doc["traces"][0]["configuration"]["original_uris"] = "file:///srv/x.json"
    doc["traces"][0]["vantage_point"]["type"] = "client"  # (not the 0.1 network rule)
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(write_json(tmp_path / "one.qlog", doc))
        assert result.status == "ingested", result.error
        assert rows(store, "SELECT implementation FROM connections") == [{"implementation": "pcap2qlog"}]


# --- values no column holds, numbers beyond a double: one policy for JSON-SEQ and documents ----

def _both_formats(tmp_path, events, name="t"):
    return [write_seq(tmp_path / f"{name}.sqlog", SEQ_HEADER, events),
            write_json(tmp_path / f"{name}.qlog", _as_document(SEQ_HEADER, events))]


def _raw_both_formats(tmp_path, events_text: list[bytes], name="raw"):
    """The events as JSON text (for what orjson cannot write), as JSON-SEQ and as a document."""
    seq = tmp_path / f"{name}.sqlog"
    seq.write_bytes(b"".join(RS + r + b"\n" for r in [orjson.dumps(SEQ_HEADER), *events_text]))
    doc = orjson.dumps(_as_document(SEQ_HEADER, []))
    at = doc.index(b'"events":[]') + len(b'"events":[')
    document = tmp_path / f"{name}.qlog"
    document.write_bytes(doc[:at] + b",".join(events_text) + doc[at:])
    return [seq, document]


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity"])
@pytest.mark.parametrize("where", ["time", "ack_delay", "latest_rtt"])
def test_a_number_beyond_a_double_refuses_the_file_like_nan_in_either_format(tmp_path, literal, where):
    # 1e400 was inf in time_ms, duration_ms, ack_delay_ms (NaN for every time of a JSON-SEQ file)
    # while NaN was refused: now both refuse, in both formats, naming the byte and the field
    events = [orjson.dumps(_packet(i)) for i in range(3)]
    if where == "latest_rtt":
        bad = b'{"time":3.0,"name":"recovery:metrics_updated","data":{"latest_rtt":' + literal + b'}}'
        field = "data.latest_rtt"
    elif where == "time":
        bad = orjson.dumps(_packet(3)).replace(b'"time":3.0', b'"time":' + literal)
        field = "time"
    else:
        bad = orjson.dumps(_packet(3)).replace(b'"ack_delay":1.0', b'"ack_delay":' + literal)
        field = "data.frames[0].ack_delay"
    with Store(tmp_path / "s.duckdb") as store:
        for path in _raw_both_formats(tmp_path, events + [bad]):
            result = store.ingest(path)
            token = path.read_bytes().index(literal)
            assert result.status == "refused", (path, result)
            assert "\n" not in result.error
            assert result.error.startswith(f"{path} at byte "), result.error
            assert f"byte {token}" in result.error and f"field {field}" in result.error, result.error
        assert rows(store, "SELECT count(*) AS n FROM packets") == [{"n": 0}]


def test_values_no_column_holds_are_null_and_counted_alike_in_either_format(tmp_path):
    # packet_number 2^64 was NULL silently, -1 kept, 0.5 stored as 0; an ACK delay of -1 ms kept
    events_text = [orjson.dumps(_packet(0)),
                   orjson.dumps(_packet(1)).replace(b'"packet_number":1', b'"packet_number":-1'),
                   orjson.dumps(_packet(2)).replace(b'"packet_number":2', b'"packet_number":0.5'),
                   orjson.dumps(_packet(3)).replace(b'"packet_number":3', b'"packet_number":18446744073709551616'),
                   orjson.dumps(_packet(4)).replace(b'"ack_delay":1.0', b'"ack_delay":-1'),
                   orjson.dumps(_packet(5)).replace(b'"ack_delay":1.0', b'"ack_delay":"NaN"'),
                   b'{"time":6.0,"name":"recovery:metrics_updated","data":{"latest_rtt":1e305,"min_rtt":-2}}']
    got = []
    for k, path in enumerate(_raw_both_formats(tmp_path, events_text)):
        with Store(tmp_path / f"s{k}.duckdb") as store:
            result = store.ingest(path)
            if path.suffix == ".qlog" and result.status == "refused":
                pytest.fail(result.error)
            got.append((result.status, [w.replace(str(path), "F") for w in result.warnings],
                        store.con.execute("SELECT p.event_index, p.packet_number, f.ack_delay_ms, isfinite(p.time_ms) "
                                          "FROM packets p JOIN frames f USING (connection_id, event_index) "
                                          "ORDER BY 1").fetchall()))
    assert got[0] == got[1]
    assert got[0] == ("ingested", ["F: 7 values outside what their column holds read as NULL (packet_number 3, "
                                   "ack_delay 2, latest_rtt 1, min_rtt 1)"],
                      [(0, 0, 1.0, True), (1, None, 1.0, True), (2, None, 1.0, True), (3, None, 1.0, True),
                       (4, 4, None, True), (5, 5, None, True)])


def test_a_time_beyond_the_range_refuses_its_packet_with_the_token_and_field(tmp_path):
    events_text = [orjson.dumps(_packet(0)), orjson.dumps(_packet(1)).replace(b'"time":1.0', b'"time":"1e400"')]
    with Store(tmp_path / "s.duckdb") as store:
        for path in _raw_both_formats(tmp_path, events_text):
            result = store.ingest(path)
            assert result.status == "refused"
            assert 'time "1e400" is no time' in result.error and "field time" in result.error, result.error
            if path.suffix == ".sqlog":  # (a document parsed whole has no byte for its events)
                token = path.read_bytes().index(b'"1e400"')
                assert result.error.startswith(f"{path} at byte {token}: "), result.error


def test_a_duplicate_time_that_is_text_is_named_where_it_is(tmp_path):
    # was "event without a time": the event has one, it is no time
    bad = b'{"time":"x",' + orjson.dumps(_packet(1))[1:]
    path = tmp_path / "dup.sqlog"
    path.write_bytes(b"".join(RS + r + b"\n" for r in [orjson.dumps(SEQ_HEADER), orjson.dumps(_packet(0)), bad]))
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
    token = path.read_bytes().index(b'"x"')
    assert result.error == (f'{path} at byte {token}: transport:packet_sent event\'s time "x" is no time (a finite '
                            "number; field time of trace 0 event 2)")


# --- where a message points -------------------------------------------------------------------

@pytest.mark.parametrize("bad", [b"NaN", b"nul", b"[1,}"])
def test_a_bad_token_inside_an_event_of_a_document_is_named_at_its_byte(tmp_path, bad):
    # was "at byte 118: malformed events array", the array's start
    events = [orjson.dumps(_packet(i)) for i in range(40)]
    events[25] = events[25].replace(b'"ack_delay":1.0', b'"ack_delay":' + bad)
    path = _raw_both_formats(tmp_path, events)[1]
    token = path.read_bytes().index(b'"ack_delay":' + bad) + len(b'"ack_delay":')
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
    assert result.status == "refused" and "\n" not in result.error
    event_at = path.read_bytes().index(events[25])
    assert result.error.startswith(f"{path} at byte {event_at}: malformed events array: "), result.error
    assert "field data.frames[0].ack_delay" in result.error
    position = int(result.error.split("(byte ")[1].split(",")[0])
    assert token <= position <= token + 3, result.error


def test_a_flipped_byte_in_a_large_document_names_the_event_and_the_byte(tmp_path, monkeypatch):
    monkeypatch.setattr(slicing, "SLICE_BYTES", 2000)
    events = [orjson.dumps(_packet(i)) for i in range(200)]
    events[150] = events[150].replace(b'"frames":[', b'"frames":{')
    path = _raw_both_formats(tmp_path, events)[1]
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
    event_at = path.read_bytes().index(events[150])
    assert result.error.startswith(f"{path} at byte {event_at}: malformed events array: "), result.error
    assert "field data.frames" in result.error


def test_a_json_seq_header_longer_than_a_megabyte_is_read(tmp_path):
    # was "unexpected end of data … column 1048576"
    header = dict(SEQ_HEADER, title="t" * (3 << 20))
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(write_seq(tmp_path / "h.sqlog", header, [_packet(i) for i in range(3)]))
        assert (result.status, result.packets) == ("ingested", 3), result.error
        assert rows(store, "SELECT length(title) AS n FROM connections") == [{"n": 3 << 20}]


# --- record sizes: one cap for every format ---------------------------------------------------

def _long_event(n: int) -> dict:
    return {"time": 5.0, "name": "app:note", "data": {"text": "x" * n}}


@pytest.mark.parametrize("form", ["json-seq", "json-seq.gz", "document", "document.gz"])
def test_an_event_longer_than_the_cap_is_refused_alike_in_every_format(tmp_path, monkeypatch, form):
    # a 1 GB string was read in JSON-SEQ and refused in a document (64 MB): one cap, stated
    monkeypatch.setattr(slicing, "MAX_RECORD_BYTES", 1 << 20)
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1 << 16)
    events = [_packet(0), _long_event(3 << 20), _packet(1)]
    gz = form.endswith(".gz")
    if form.startswith("json-seq"):
        path = write_seq(tmp_path / ("t.sqlog" + (".gz" if gz else "")), SEQ_HEADER, events, gz=gz)
    else:
        path = write_json(tmp_path / ("t.qlog" + (".gz" if gz else "")), _as_document(SEQ_HEADER, events), gz=gz)
    from quicack.qlog import reader
    monkeypatch.setattr(reader, "WHOLE_JSON_BYTES", 1 << 16)
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
    assert result.status == "refused" and "\n" not in result.error, result
    assert "1 MB" in result.error and ("the most one may hold" in result.error), result.error


def test_an_event_under_the_cap_is_read_in_every_format(tmp_path, monkeypatch):
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1 << 16)
    events = [_packet(0), _long_event(1 << 20), _packet(1)]
    with Store(tmp_path / "s.duckdb") as store:
        for path in _both_formats(tmp_path, events):
            result = store.ingest(path)
            assert (result.status, result.packets) == ("ingested", 2), result.error


#: what a child prints last: its peak resident memory in KB (the kernel's VmHWM, which, unlike
#: ru_maxrss, does not start from the parent's when the child is forked)
PEAK = "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"


def _run(code: str, timeout: float = 120) -> tuple[str, float, int]:
    """Run ``code`` in a fresh interpreter: (its output, seconds, peak RSS in KB)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, time.monotonic() - started, int(proc.stdout.split()[-1])


def test_a_gzip_record_without_a_line_end_is_refused_as_it_streams(tmp_path):
    # a 128 MB record took 2.78 s and 384 MB (quadratic); 10 GB of blanks grew without bound
    record = b'{"time": 1, "name": "x", "data": "' + b"y" * (200 << 20) + b'"}'
    path = tmp_path / "long.sqlog.gz"
    path.write_bytes(gzip.compress(RS + orjson.dumps(SEQ_HEADER) + b"\n" + RS + record, compresslevel=1))
    out, seconds, peak_kb = _run(
        "from quicack import Store\n"
        f"with Store({str(tmp_path / 's.duckdb')!r}) as s: print(s.ingest({str(path)!r}).error)\n" + PEAK)
    start = len(RS + orjson.dumps(SEQ_HEADER) + b"\n" + RS)
    assert out.splitlines()[0] == (f"{path} at decompressed byte {start}: a record longer than 48 MB, the most one "
                                   "may hold")
    assert peak_kb < 450_000, peak_kb  # (48 MB held, never the record)
    assert seconds < 30


def test_a_gzip_stream_of_blanks_is_read_in_bounded_memory(tmp_path):
    header = RS + orjson.dumps(SEQ_HEADER) + b"\n"
    events = b"".join(RS + orjson.dumps(_packet(i)) + b"\n" for i in range(3))
    compressor = gzip.GzipFile(tmp_path / "blanks.sqlog.gz", "wb", compresslevel=9)
    compressor.write(header + events)
    for _ in range(300):
        compressor.write(b" " * (1 << 20))  # 300 MB of blanks, no line end
    compressor.write(b"\n" + RS + orjson.dumps(_packet(3)) + b"\n")
    compressor.close()
    out, seconds, peak_kb = _run(
        "from quicack import Store\n"
        f"with Store({str(tmp_path / 's.duckdb')!r}) as s:\n"
        f"    r = s.ingest({str(tmp_path / 'blanks.sqlog.gz')!r}); print(r.status, r.packets, r.error)\n" + PEAK)
    assert out.splitlines()[0] == "ingested 4 None"
    assert peak_kb < 300_000, peak_kb


def test_temporary_files_are_gone_even_after_a_kill(tmp_path):
    # a temporary .ndjson was left behind after kill -9: each is removed as soon as it is made
    temp = tmp_path / "tmp"
    temp.mkdir()
    path = write_seq(tmp_path / "t.sqlog.gz", SEQ_HEADER, [_packet(i) for i in range(2000)], gz=True)
    code = ("import os, signal\n"
            "from quicack.qlog import slicing, normalize\n"
            "slicing.SLICE_BYTES = 20000\n"
            "insert = normalize.Normalizer.insert\n"
            "def killed(self, rows):\n"
            "    insert(self, rows)\n"
            "    assert [n for n in os.listdir(os.environ['TMPDIR'])] == [], os.listdir(os.environ['TMPDIR'])\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "normalize.Normalizer.insert = killed\n"
            "from quicack import Store\n"
            f"Store({str(tmp_path / 's.duckdb')!r}).ingest({str(path)!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TMPDIR=str(temp)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert list(temp.iterdir()) == []


def test_a_json_document_whose_title_is_50_mb_is_stored(tmp_path):
    # was "cannot normalize: TransactionContext Error: Current transaction is aborted": the first
    # error (DuckDB out of its ingest memory) was hidden, so the file was not read again
    doc = orjson.loads(AIOQUIC.read_bytes())
    doc["title"] = "t" * (50 << 20)
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(write_json(tmp_path / "title.qlog", doc))
        assert (result.status, result.error) == ("ingested", None)
        assert rows(store, "SELECT length(title) AS n FROM connections") == [{"n": 50 << 20}]


def test_a_document_header_beyond_the_cap_is_refused_without_parsing_it(tmp_path, monkeypatch):
    monkeypatch.setattr(slicing, "MAX_HEADER_BYTES", 1 << 20)
    from quicack.qlog import reader
    monkeypatch.setattr(reader, "WHOLE_JSON_BYTES", 1 << 16)
    doc = orjson.loads(AIOQUIC.read_bytes())
    doc["title"] = "t" * (2 << 20)
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(write_json(tmp_path / "title.qlog", doc))
    assert result.status == "refused" and "\n" not in result.error
    assert "longer than 1 MB" in result.error, result.error


_WATCH_TEMPS = """
import os, threading, time
largest = [0]
def watch():  # the largest temporary file this process holds (removed ones are seen by descriptor)
    while True:
        for fd in os.listdir('/proc/self/fd'):
            try:
                target = os.readlink(f'/proc/self/fd/{fd}')
                if 'quicack-' in target:
                    largest[0] = max(largest[0], os.stat(f'/proc/self/fd/{fd}').st_size)
            except OSError:
                pass
        time.sleep(0.002)
threading.Thread(target=watch, daemon=True).start()
"""


def test_a_gzip_json_document_is_cut_without_a_temporary_file_larger_than_a_slice(tmp_path):
    # a gzip JSON document that expands to 10 GB was written to a 10 GB temporary file before it
    # was refused: it is read from the gzip file itself, slice by slice
    doc = orjson.dumps(_as_document(SEQ_HEADER, [_packet(i) for i in range(300_000)]))
    path = tmp_path / "big.qlog.gz"
    path.write_bytes(gzip.compress(doc, compresslevel=1))  # (~60 MB decompressed)
    out, seconds, peak_kb = _run(
        _WATCH_TEMPS + "from quicack import Store\n"
        f"with Store({str(tmp_path / 's.duckdb')!r}) as s:\n"
        f"    r = s.ingest({str(path)!r}); print(r.status, r.packets, r.error)\n"
        "time.sleep(0.05); print(largest[0])\n" + PEAK, timeout=600)
    status, largest = out.splitlines()[0], int(out.splitlines()[1])
    assert status == "ingested 300000 None"
    assert 0 < largest <= slicing.SLICE_BYTES + (1 << 20), largest
    assert peak_kb < 1_000_000, peak_kb


def test_a_gzip_json_document_of_blanks_is_refused_in_bounded_memory_and_disk(tmp_path):
    header = orjson.dumps(_as_document(SEQ_HEADER, []))
    at = header.index(b'"events":[') + len(b'"events":[')
    path = tmp_path / "blanks.qlog.gz"
    with gzip.GzipFile(path, "wb", compresslevel=9) as out:
        out.write(header[:at] + orjson.dumps(_packet(0)) + b",")
        for _ in range(400):
            out.write(b" " * (1 << 20))  # 400 MB of blanks in the events array
        out.write(orjson.dumps(_packet(1)) + header[at:])
    out, seconds, peak_kb = _run(
        _WATCH_TEMPS + "from quicack import Store\n"
        f"with Store({str(tmp_path / 's.duckdb')!r}) as s:\n"
        f"    r = s.ingest({str(path)!r}); print(r.status, r.error)\n"
        "time.sleep(0.05); print(largest[0])\n" + PEAK, timeout=600)
    line, largest = out.splitlines()[0], int(out.splitlines()[1])
    assert line.startswith(f"refused {path} at decompressed byte "), line
    assert "no event boundary within 64 MB" in line
    assert largest <= 64 << 20, largest
    assert peak_kb < 1_000_000, peak_kb


def test_the_gzip_window_reads_and_seeks_like_the_decompressed_file(tmp_path):
    import random

    from quicack.qlog.gzipfile import GzipWindow
    rng = random.Random(31)
    data = bytes(rng.getrandbits(8) for _ in range(200_000)) + b"x" * 3_000_000 + b"end"
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(data[:1_000_000]) + gzip.compress(data[1_000_000:]))  # (two members)
    with GzipWindow(path, keep=100_000, every=300_000) as f:
        assert f.size() == len(data)
        for _ in range(200):  # forward, back within what is kept, back past a checkpoint
            at, n = rng.randrange(len(data)), rng.randrange(1, 200_000)
            f.seek(at)
            assert f.read(n) == data[at:at + n]
            assert f.tell() == min(at + n, len(data))
        f.seek(len(data) - 10)
        assert f.read() == data[-10:] and f.error is None
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(data)[:100_000])
    with GzipWindow(cut) as f:
        kept = f.read()
        assert data.startswith(kept) and 0 < len(kept) < len(data)
        assert isinstance(f.error, EOFError)


@pytest.mark.parametrize("time", ["x", None, "missing"])
def test_parameters_set_events_none_of_which_has_a_time_are_refused_naming_the_first(tmp_path, time):
    # was "cannot store: Constraint Error: NOT NULL constraint failed: transport_parameters.time_ms"
    # (the mutation sweep, quic-go's client-aioquic.qlog): a parameters_set row takes the earliest
    # time of its owner's events, and here none has one
    doc = orjson.loads(AIOQUIC.read_bytes())
    events = doc["traces"][0]["events"]
    where = [i for i, e in enumerate(events) if e["name"] == "transport:parameters_set"]
    assert len(where) == 2
    for i in where:
        if time == "missing":
            del events[i]["time"]
        else:
            events[i]["time"] = time
    path = tmp_path / "untimed.qlog"
    path.write_bytes(orjson.dumps(doc))
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
        assert result.error == (f"{path} at trace 0 event {where[0] + 1}: transport:parameters_set event without a "
                                "time that is a finite number (qlog requires one on every event)")
        assert store.con.execute("SELECT count(*) FROM transport_parameters").fetchone() == (0,)
        # each owner (here local, then remote) needs one: the first mended, the second is named
        assert {e["data"].get("owner") for e in (events[i] for i in where)} == {"local", "remote"}
        events[where[0]]["time"] = 1.5
        path.write_bytes(orjson.dumps(doc))
        assert store.ingest(path).error.startswith(f"{path} at trace 0 event {where[1] + 1}: ")
        events[where[1]]["time"] = 2.5
        path.write_bytes(orjson.dumps(doc))
        assert store.ingest(path).status == "ingested"
        assert store.con.execute("SELECT count(*) FROM transport_parameters").fetchone() == (2,)
