"""Ingesting in bounded slices: a file cut into many slices gives exactly the rows of one slice.

quicack.qlog.reader cuts a file into slices of about SLICE_BYTES and quicack.qlog.normalize carries what a
slice needs from the earlier ones (connection ids, event indexes, time base, datagram counter and
last packet, client CID, transport parameters, ODCID).  Every test here ingests the same file
twice — once as one slice (a SLICE_BYTES larger than the file), once cut into many — and
compares every row of every table; the expected rows are thus those of the one-slice ingest,
which the other test modules check against the files' own content.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import zlib
from pathlib import Path

import orjson
import pytest

from conftest import DATA, RS, rows, write_json, write_seq
from quicack import Store
from quicack.store import ingest
from quicack.qlog import document, fallback, reader, slicing
from quicack.store.schema import table_names

TRACES = sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix in (".qlog", ".sqlog", ".txt")
                and p.read_bytes()[:1] in (b"{", RS))  # picoquic's reference qlogs are .txt


def snapshot(store: Store) -> dict[str, list]:
    """Every row of every table, less what differs between two ingests of one file by design."""
    out = {}
    for t in table_names():
        if t == "files":
            out[t] = store.con.execute("SELECT content_sha256, size_bytes, format, qlog_version, events, warnings "
                                       "FROM files ORDER BY ALL").fetchall()
        elif t != "store_meta":
            out[t] = store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
    return out


def ingest_with(path: Path, tmp_path: Path, name: str, slice_bytes: int, monkeypatch, chunk_bytes=None):
    """Ingest ``path`` into a fresh store with the given slice size; return (result, snapshot, slices)."""
    staged = []
    real_stage = slicing.stage

    def counting_stage(source, part):
        staged.append(part)
        return real_stage(source, part)
    with monkeypatch.context() as m:
        m.setattr(slicing, "SLICE_BYTES", slice_bytes)
        if chunk_bytes:
            m.setattr(slicing, "CHUNK_BYTES", chunk_bytes)
        m.setattr(slicing, "stage", counting_stage)
        with Store(tmp_path / f"{name}.duckdb") as store:
            result = store.ingest(path)
            return result, snapshot(store), len(staged)


def assert_same_rows_in_slices(path: Path, tmp_path: Path, monkeypatch, slice_bytes: int, min_slices: int = 3,
                               chunk_bytes=None):
    whole, whole_rows, one = ingest_with(path, tmp_path, "whole", 1 << 40, monkeypatch)
    cut, cut_rows, many = ingest_with(path, tmp_path, "cut", slice_bytes, monkeypatch, chunk_bytes)
    assert whole.status == "ingested", whole.error
    assert many >= min(min_slices, one + 1) and many > one  # one slice per trace, unless cut
    assert (cut.status, cut.error, cut.warnings) == (whole.status, whole.error, whole.warnings)
    for table in whole_rows:
        assert cut_rows[table] == whole_rows[table], table
    return whole_rows


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(DATA)) for p in TRACES])
def test_every_shared_trace_gives_the_same_rows_in_many_slices(tmp_path, monkeypatch, path):
    # About eight slices per file: every generation, layout (object/array events, one line or
    # pretty-printed), several traces per file, network vantage (sender from CIDs), raw ACK delays.
    assert_same_rows_in_slices(path, tmp_path, monkeypatch, max(256, path.stat().st_size // 8))


def _events(n: int, groups: int = 1) -> list[dict]:
    """n packet events (alternately sent/received, coalesced pairs) with metrics and an unknown event."""
    out = []
    for i in range(n):
        g = f"g{i % groups}" if groups > 1 else None
        t = float(i // 2)  # two packets at each time: Initial then Handshake coalesce
        kind = "initial" if i % 2 == 0 else "handshake"
        frames = [{"frame_type": "ack", "ack_delay": 2, "acked_ranges": [[0, i]]},
                  {"frame_type": "crypto", "offset": i * 10, "length": 10},
                  {"frame_type": "new_token", "token": "ab},{cd]"}]
        ev = {"time": t, "name": "transport:packet_sent" if i % 4 < 2 else "transport:packet_received",
              "data": {"header": {"packet_type": kind, "packet_number": i, "scid": "c1" if i % 4 < 2 else "s1",
                                  "dcid": "s1" if i % 4 < 2 else "c1"}, "frames": frames}}
        out.append(ev | ({"group_id": g} if g else {}))
        out.append({"time": t, "name": "recovery:metrics_updated", "data": {"smoothed_rtt": 10 + i, "cwnd": 1000},
                    **({"group_id": g} if g else {})})
        if i % 7 == 0:
            out.append({"time": t, "name": "transport:something_new", "data": {"i": i, "nested": {"events": [1]}},
                        **({"group_id": g} if g else {})})
    return out


SEQ_HEADER = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "neqo", "type": "client"},
                        "common_fields": {"reference_time": 1_700_000_000_000}}}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_json_seq_records_cut_by_slices_and_reads(tmp_path, monkeypatch, gz):
    # 64-byte reads and 2500-byte slices: records straddle both boundaries; three connections
    # (group_id) interleave, so every slice carries state for each of them.
    path = write_seq(tmp_path / ("t.sqlog.gz" if gz else "t.sqlog"), SEQ_HEADER, _events(120, groups=3), gz=gz)
    got = assert_same_rows_in_slices(path, tmp_path, monkeypatch, 2500, min_slices=10, chunk_bytes=64)
    assert len(got["connections"]) == 3 and len(got["packets"]) == 120
    assert len(got["frames"]) == 360 and len(got["other_events"]) == 18


def test_a_json_document_cut_into_slices_with_brackets_inside_strings(tmp_path, monkeypatch):
    # Strings holding "},{" and "]" and a nested "events" key must not fool the cutter.
    doc = {"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "title": 'a "}]}, {" title', "events": _events(40)},
        {"vantage_point": {"type": "server"}, "events": []},
        {"vantage_point": {"type": "server"}, "events": _events(30)}]}
    path = write_json(tmp_path / "t.qlog", doc)
    got = assert_same_rows_in_slices(path, tmp_path, monkeypatch, 1500, min_slices=8)
    assert len(got["connections"]) == 2 and len(got["packets"]) == 70  # a trace without events has none
    details = {d for (*_, d) in got["frames"] if d is not None}
    assert details == {'{"frame_type":"new_token","token":"ab},{cd]"}'}


def test_the_streamed_json_document_gives_the_rows_of_a_whole_parse(tmp_path, monkeypatch):
    # The fallback (orjson parses the document at once) and the streamed cut agree.
    doc = {"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "server"}, "events": _events(50)}]}
    path = tmp_path / "pretty.qlog"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    streamed, streamed_rows, _ = ingest_with(path, tmp_path, "streamed", 2000, monkeypatch)
    monkeypatch.setattr(document, "open_streaming", lambda *a: None)
    whole, whole_rows, slices = ingest_with(path, tmp_path, "whole", 2000, monkeypatch)
    assert slices == 1 and streamed.status == whole.status == "ingested"
    assert streamed_rows == whole_rows


def test_an_event_earlier_than_the_first_slice_shifts_the_connection_times(tmp_path, monkeypatch):
    # time_ms counts from the connection's earliest event even when that event comes late in the
    # file (out-of-order logging): the rows written by earlier slices are shifted.
    events = _events(30)
    events.append({"time": -5.0, "name": "transport:packet_received", "data": {
        "header": {"packet_type": "1RTT", "packet_number": 99}, "frames": [{"frame_type": "ping"}]}})
    path = write_seq(tmp_path / "late.sqlog", SEQ_HEADER, events)
    got = assert_same_rows_in_slices(path, tmp_path, monkeypatch, 1500)
    assert min(r[2] for r in got["packets"]) == 0.0  # time_ms of the late, earliest packet
    assert got["connections"][0][12] == len(events)


@pytest.mark.parametrize("exponent, expected_ms", [(5, 3.2), (21, None)])
def test_a_raw_ack_delay_is_decoded_with_an_exponent_logged_in_a_later_slice(tmp_path, monkeypatch,
                                                                             exponent, expected_ms):
    # neqo logs the encoded ACK Delay; the server's exponent (5) is logged only at the end of the
    # file, after the ACKs: a 1-RTT ACK's delay is 100 * 2^5 µs whether or not it shares a slice.
    # An invalid exponent (RFC 9000 §18.2: above 20) leaves every one undecoded, as in one slice.
    events = [{"time": float(i), "name": "transport:packet_received",
               "data": {"header": {"packet_type": "1RTT", "packet_number": i},
                        "frames": [{"frame_type": "ack", "ack_delay": 100, "acked_ranges": [[0, i]]}]}}
              for i in range(20)]
    events.append({"time": 30.0, "name": "transport:parameters_set",
                   "data": {"owner": "remote", "ack_delay_exponent": exponent}})
    path = write_seq(tmp_path / "neqo.sqlog", SEQ_HEADER, events)
    assert_same_rows_in_slices(path, tmp_path, monkeypatch, 500)
    monkeypatch.setattr(slicing, "SLICE_BYTES", 500)
    with Store(tmp_path / "check.duckdb") as store:
        store.ingest(path)
        delays = rows(store, "SELECT DISTINCT ack_delay_ms, ack_delay_raw FROM frames")
    assert delays == [{"ack_delay_ms": pytest.approx(expected_ms), "ack_delay_raw": 100}]


_ODCID_CANDIDATES = {
    # a server receives the client's first Initial, sent to the ODCID
    "client Initial": {"name": "transport:packet_received", "data": {
        "header": {"packet_type": "initial", "packet_number": 0, "scid": "c1", "dcid": "aa01"},
        "frames": [{"frame_type": "padding"}]}},
    # RFC 9000 §18.2: a server sends original_destination_connection_id
    "parameters_set": {"name": "transport:parameters_set",
                       "data": {"owner": "local", "original_destination_connection_id": "bb02"}},
    "connection_started": {"name": "connectivity:connection_started", "data": {"src_cid": "s1", "dst_cid": "cc03"}},
}


@pytest.mark.parametrize("first", _ODCID_CANDIDATES, ids=list(_ODCID_CANDIDATES))
def test_the_odcid_is_the_first_candidate_in_the_events_even_in_a_later_slice(tmp_path, monkeypatch, first):
    # A server trace naming no ODCID in its header: the connection's ODCID is the first candidate
    # logged, here after 40 events of no candidate (several slices), the others following it.
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "server", "type": "server"}}}
    filler = [{"time": float(i), "name": "transport:something_new", "data": {"i": i}} for i in range(40)]
    rest = [first] + [c for c in _ODCID_CANDIDATES if c != first]
    events = filler + [dict(_ODCID_CANDIDATES[c], time=50.0 + i) for i, c in enumerate(rest)] + filler
    path = write_seq(tmp_path / "server.sqlog", header, events)
    got = assert_same_rows_in_slices(path, tmp_path, monkeypatch, 600, min_slices=5)
    with Store(tmp_path / "check.duckdb") as store:
        store.ingest(path)
        odcid = rows(store, "SELECT odcid FROM connections")
    assert odcid == [{"odcid": _ODCID_CANDIDATES[first]["data"].get("original_destination_connection_id")
                      or _ODCID_CANDIDATES[first]["data"].get("dst_cid")
                      or _ODCID_CANDIDATES[first]["data"]["header"]["dcid"]}]
    assert len(got["connections"]) == 1


def test_connections_first_seen_in_a_later_slice_get_their_vantage_and_odcid(tmp_path, monkeypatch):
    # quinn writes every connection into one stream, tagged with group_id, and names no vantage
    # point: each connection's first packet gives it (a client sends its first Initial, a server
    # receives one).  On a server the group_id is the client's source CID, so the ODCID comes from
    # the events: the destination CID of the client's first Initial.  The server connection shows
    # up only after the client one has its vantage and ODCID (several slices later).
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",
              "trace": {"vantage_point": {"type": "unknown"}, "title": "quinn"}}

    def packet(t, name, group, pn, kind="initial", dcid=None):
        return {"time": t, "name": f"transport:{name}", "group_id": group,
                "data": {"header": {"packet_type": kind, "packet_number": pn, "length": 1200, "dcid": dcid},
                         "frames": [{"frame_type": "ping"}]}}
    client = [packet(0.0, "packet_sent", "aa01", 0, dcid="aa01")]
    client += [packet(1.0 + i, "packet_received" if i % 2 else "packet_sent", "aa01", i + 1, "1RTT")
               for i in range(30)]
    server = [packet(40.0, "packet_received", "c1c1", 0, dcid="dd04"), packet(41.0, "packet_sent", "c1c1", 0)]
    path = write_seq(tmp_path / "quinn.sqlog", header, client + server + client[1:5])
    got = assert_same_rows_in_slices(path, tmp_path, monkeypatch, 700, min_slices=5)
    assert len(got["connections"]) == 2
    with Store(tmp_path / "check.duckdb") as store:
        store.ingest(path)
        conns = rows(store, "SELECT vantage, group_id, odcid FROM connections ORDER BY connection_id")
    assert conns == [{"vantage": "client", "group_id": "aa01", "odcid": "aa01"},
                     {"vantage": "server", "group_id": "c1c1", "odcid": "dd04"}]


def test_a_malformed_record_in_a_later_slice_refuses_the_file_and_keeps_the_store(tmp_path, monkeypatch):
    records = [RS + orjson.dumps(SEQ_HEADER) + b"\n"] + [RS + orjson.dumps(e) + b"\n" for e in _events(40)]
    bad_at = sum(len(r) for r in records[:60]) + 1  # the record's text, after its RS
    records.insert(60, RS + b'{"time": 1, "name": oops}\n')
    path = tmp_path / "bad.sqlog"
    path.write_bytes(b"".join(records))
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1500)
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(write_seq(tmp_path / "good.sqlog", SEQ_HEADER, _events(4)))
        before = snapshot(store)
        result = store.ingest(path)
        assert result.status == "refused"
        assert result.error.startswith(f"{path} at byte {bad_at}: malformed record 61: ")
        assert snapshot(store) == before


def test_progress_is_reported_within_a_large_file(tmp_path, monkeypatch):
    seq = write_seq(tmp_path / "t.sqlog", SEQ_HEADER, _events(200))
    doc = write_json(tmp_path / "t.qlog", {"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "events": _events(200)}]})
    monkeypatch.setattr(slicing, "SLICE_BYTES", 8000)
    calls: list[tuple[str, int]] = []
    summary = ingest.analyze([seq, doc], db=tmp_path / "p.duckdb", progress=lambda p, n: calls.append((p.name, n)))
    assert [f.status for f in summary.files] == ["ingested", "ingested"]
    for path in (seq, doc):
        steps = [n for name, n in calls if name == path.name]
        assert len(steps) >= path.stat().st_size // 8000 - 1  # once per slice, not once per file
        assert all(n > 0 for n in steps)
        assert sum(steps) == path.stat().st_size


def test_a_large_file_hashed_while_staging_is_still_skipped_when_unchanged(tmp_path, monkeypatch):
    from quicack.store import transaction
    monkeypatch.setattr(transaction, "SYNC_HASH_BYTES", 0)  # always hash in the background
    monkeypatch.setattr(slicing, "SLICE_BYTES", 4000)
    path = write_seq(tmp_path / "t.sqlog", SEQ_HEADER, _events(60))
    with Store(tmp_path / "h.duckdb") as store:
        assert store.ingest(path).status == "ingested"
        before = snapshot(store)
        assert store.ingest(path).status == "unchanged"
        assert snapshot(store) == before
        again = store.ingest(path, reanalyze=True)
        assert again.status == "ingested"
        assert {t: len(v) for t, v in snapshot(store).items()} == {t: len(v) for t, v in before.items()}
        assert rows(store, "SELECT count(*) AS n FROM files") == [{"n": 1}]


def _many_traces_doc() -> dict:
    """Real aioquic client traces (the scanner's and the peers' clients), repeated, with a
    server trace and a delta-time trace (which never share a slice) in between."""
    clients = []
    for path in sorted((DATA / "peers").glob("*/*client*.qlog")):
        clients += orjson.loads(path.read_bytes())["traces"]
    server = {"vantage_point": {"type": "server"}, "events": _events(12)}
    delta = {"vantage_point": {"type": "client"}, "common_fields": {"time_format": "delta", "reference_time": 1e12},
             "events": [dict(e, time=1.0) for e in _events(6)]}
    return {"qlog_version": "0.3", "traces": clients * 4 + [server] + clients * 2 + [delta] + clients}


def _ingest_counting(path: Path, db: Path, monkeypatch, **patches) -> tuple[dict, list]:
    staged = []
    real_stage = slicing.stage
    with monkeypatch.context() as m:
        for name, value in patches.items():
            m.setattr(reader if name == "WHOLE_JSON_BYTES" else slicing, name, value)
        m.setattr(slicing, "stage", lambda source, part: staged.append(part) or real_stage(source, part))
        with Store(db) as store:
            assert store.ingest(path).status == "ingested"
            return snapshot(store), staged


def test_many_small_traces_share_slices_and_give_the_rows_of_one_slice_each(tmp_path, monkeypatch):
    # A scan's batch file holds hundreds of small client traces; normalizing each in its own
    # slice costs a dozen statements per trace.  Traces alike (normalize.slice_key) share one
    # slice instead: the rows must be exactly those of one slice per trace, through the whole
    # parse and the streaming cut alike.
    doc = _many_traces_doc()
    n = len(doc["traces"])
    path = write_json(tmp_path / "batch.qlog", doc)
    alone, alone_slices = _ingest_counting(path, tmp_path / "alone.duckdb", monkeypatch, slice_key=lambda t: None)
    shared, shared_slices = _ingest_counting(path, tmp_path / "shared.duckdb", monkeypatch)
    streamed, streamed_slices = _ingest_counting(path, tmp_path / "streamed.duckdb", monkeypatch,
                                                 WHOLE_JSON_BYTES=0)
    assert len(alone_slices) == n
    # clients ×4 | server | clients ×2 | delta | clients: five slices
    for slices in (shared_slices, streamed_slices):
        assert [len(p.traces) or 1 for p in slices] == [4 * (n - 2) // 7, 1, 2 * (n - 2) // 7, 1, (n - 2) // 7]
    assert len(alone["connections"]) == n
    for table in alone:
        assert shared[table] == alone[table], table
        assert streamed[table] == alone[table], table


def test_traces_sharing_slices_are_cut_at_the_slice_size(tmp_path, monkeypatch):
    doc = _many_traces_doc()
    path = write_json(tmp_path / "batch.qlog", doc)
    alone, _ = _ingest_counting(path, tmp_path / "alone.duckdb", monkeypatch, slice_key=lambda t: None)
    small, slices = _ingest_counting(path, tmp_path / "small.duckdb", monkeypatch, SLICE_BYTES=60_000,
                                     WHOLE_JSON_BYTES=1 << 30)
    assert len(slices) > 5 and max(len(p.traces) for p in slices) > 1
    assert sum(len(p.traces) or 1 for p in slices) == len(doc["traces"])
    assert small == alone


def _plain_events(n: int) -> list[dict]:
    """_events without the unknown event, whose data nests an "events" key."""
    return [e for e in _events(n) if e["name"] != "transport:something_new"]


def _whole_and_cut(path: Path, tmp_path: Path, monkeypatch, slice_bytes: int) -> tuple[dict, int]:
    """Rows of ``path`` cut into slices, checked against the same file parsed whole; and how
    many times the one-array path (slices cut while staging) opened it."""
    opened = []
    real = document._open_one_array

    def counting(*args):
        taken = real(*args)
        if taken:
            opened.append(args[1])
        return taken
    monkeypatch.setattr(document, "_open_one_array", counting)
    cut, cut_rows, slices = ingest_with(path, tmp_path, "cut", slice_bytes, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(document, "open_streaming", lambda *a: None)
        whole, whole_rows, _ = ingest_with(path, tmp_path, "whole", slice_bytes, monkeypatch)
    assert (cut.status, cut.error, cut.warnings) == (whole.status, whole.error, whole.warnings) == ("ingested", None, [])
    assert cut_rows == whole_rows and slices >= 3
    return cut_rows, len(opened)


def test_one_events_array_is_cut_while_staging_and_its_end_found_from_the_tail(tmp_path, monkeypatch):
    # The last event ends with brackets and a "]" inside a string; keys follow the events array
    # in the trace and in the document, so its end is not the file's last "]".
    events = _plain_events(60)
    events.append({"time": 99.0, "name": "transport:packet_received", "data": {
        "header": {"packet_type": "1RTT", "packet_number": 99}, "frames": [
            {"frame_type": "stream", "stream_id": 0, "offset": 0, "length": 3, "raw": "]]}],"}]}})
    doc = {"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": events,
                                              "title": "after [the] events"}], "summary": {"x": [1, [2]]}}
    got, lazily = _whole_and_cut(write_json(tmp_path / "one.qlog", doc), tmp_path, monkeypatch, 2000)
    assert lazily == 1
    assert len(got["packets"]) == 61 and len(got["connections"]) == 1


def test_several_events_arrays_are_not_taken_for_one(tmp_path, monkeypatch):
    # From the first events key to the last array's end the document emptied of "one array"
    # still parses (one trace, keys of both): the other array's key in between sends it to the
    # up-front cut, which sees two traces.
    doc = {"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": _plain_events(30)},
                                             {"vantage_point": {"type": "server"}, "events": _plain_events(20)}]}
    got, lazily = _whole_and_cut(write_json(tmp_path / "two.qlog", doc), tmp_path, monkeypatch, 1500)
    assert lazily == 0
    assert len(got["connections"]) == 2 and len(got["packets"]) == 50


def test_a_malformed_event_in_a_later_slice_of_one_array_refuses_the_file(tmp_path, monkeypatch):
    body = orjson.dumps({"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "events": _plain_events(60)}]})
    bad_at = body.index(b'{"time":20.0')
    path = tmp_path / "bad.qlog"
    path.write_bytes(body[:bad_at] + b'{"time":20.0,"name":oops},' + body[bad_at:])
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1500)
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(write_seq(tmp_path / "good.sqlog", SEQ_HEADER, _events(4)))
        before = snapshot(store)
        result = store.ingest(path)
        assert result.status == "refused" and result.error.startswith(f"{path} at byte ")
        assert "malformed events array" in result.error
        assert int(result.error.split(" at byte ")[1].split(":")[0]) <= bad_at
        assert snapshot(store) == before


def test_an_element_longer_than_a_slice_is_staged_whole_between_small_ones(store, tmp_path, monkeypatch):
    # A slice of a JSON document ends at an element boundary: an element of 30 MB between 120 k
    # small ones (10 MB slices) makes one slice of its own, not a refusal or a cut inside it.
    def ticks(start):
        return [{"time": float(i), "name": "quic:tick", "data": {"pad": "v" * 100}} for i in range(start, start + 60_000)]
    blob = {"time": 60_000.5, "name": "quic:blob", "data": {"payload": "ab" * 15_000_000}}
    path = write_json(tmp_path / "long.qlog", {"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "events": [*ticks(0), blob, *ticks(60_001)]}]})
    monkeypatch.setattr(reader, "WHOLE_JSON_BYTES", 0)  # (cut and staged, not parsed whole)
    staged = []
    monkeypatch.setattr(slicing, "stage", lambda source, part, real=slicing.stage: staged.append(
        os.path.getsize(part.path)) or real(source, part))
    result = store.ingest(path)
    assert result.status == "ingested" and result.events == 120_001
    assert max(staged) > 30_000_000 and len(staged) >= 3
    rows = store.con.execute("""SELECT event_index, length(data->>'$.payload') FROM other_events
                                WHERE event_name = 'quic:blob'""").fetchall()
    assert rows == [(60_000, 30_000_000)]


@pytest.mark.parametrize("traces", [1, 2], ids=["one events array", "two events arrays"])
@pytest.mark.parametrize("streamed", [False, True], ids=["parsed whole", "streamed"])
def test_a_json_document_with_a_byte_order_mark_gives_the_rows_of_one_without(tmp_path, monkeypatch, traces,
                                                                                streamed):
    # RFC 8259 §8.1: a parser "MAY ignore the presence of a byte order mark" (Windows tools write
    # one); orjson refuses it, so each reading path must skip it.
    doc = {"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "server"}, "events": _plain_events(300)}
                                             for _ in range(traces)]}
    plain = write_json(tmp_path / "plain.qlog", doc)
    marked = tmp_path / "bom.qlog"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    if streamed:
        monkeypatch.setattr(reader, "WHOLE_JSON_BYTES", 0)
        monkeypatch.setattr(fallback, "open_whole", None)  # (the streaming pass must not give up)
    got = {}
    for path in (plain, marked):
        result, snap, slices = ingest_with(path, tmp_path, path.stem, 4000 if streamed else 1 << 40, monkeypatch)
        assert (result.status, result.warnings) == ("ingested", []), result.error
        assert slices > 2 if streamed else slices == 1
        got[path.stem] = {t: rows for t, rows in snap.items() if t != "files"}
    assert len(got["plain"]["packets"]) == 300 * traces
    assert got["bom"] == got["plain"]


def test_byte_positions_in_a_document_with_a_byte_order_mark_count_it(store, tmp_path):
    head = b'\xef\xbb\xbf{"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": ['
    events = _plain_events(10)
    parts = [orjson.dumps(e) for e in events]
    raw = head + b",".join(parts[:6]) + b"," + parts[6][:20]  # never closed, cut inside event 7
    path = tmp_path / "cut.qlog"
    path.write_bytes(raw)
    result = store.ingest(path)
    kept_until = len(head) + len(b",".join(parts[:6]))
    assert result.status == "ingested" and result.events == 6
    assert result.packets == sum(e["name"].endswith(("packet_sent", "packet_received")) for e in events[:6])
    assert result.warnings == [f"{path}: JSON cut short at byte {len(raw)}; kept every complete event "
                               f"up to byte {kept_until}"]


def test_delta_times_keep_counting_across_slices(tmp_path, monkeypatch):
    # qlog draft-02 delta_time (µs here): each event's time is the sum of all deltas before it,
    # so a slice starts from the sum carried over from the one before.
    events = [[str(1500 + (i % 7) * 100), "transport", "packet_sent",
               {"packet_type": "1RTT", "header": {"packet_number": str(i)}, "frames": [{"frame_type": "ping"}]}]
              for i in range(200)]
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"}, "configuration": {"time_units": "us"},
        "event_fields": ["delta_time", "category", "event", "data"], "events": events}]}
    got = assert_same_rows_in_slices(write_json(tmp_path / "delta.qlog", doc), tmp_path, monkeypatch, 1500,
                                     min_slices=5)
    last = sum(int(e[0]) for e in events[1:]) / 1000  # ms after the first event
    assert sorted(r[2] for r in got["packets"])[-1] == pytest.approx(last)


@pytest.mark.parametrize("traces", [1, 3], ids=["one events array", "several traces"])
def test_a_large_gzip_json_document_is_cut_like_a_plain_one(tmp_path, monkeypatch, traces):
    # Parsed whole, a gzip JSON document took ~12 × its gzip file in memory (an 80 MB document:
    # 970 MB); above WHOLE_JSON_BYTES decompressed it is written to a temporary file and cut.
    doc = {"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "common_fields": {"ODCID": f"0{i}", "reference_time": 1.7e12},
         "events": _events(150)} for i in range(traces)]}
    plain = write_json(tmp_path / "doc.qlog", doc)
    packed = write_json(tmp_path / "doc.qlog.gz", doc, gz=True)
    whole, _ = _ingest_counting(plain, tmp_path / "whole.duckdb", monkeypatch)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    done = []
    with monkeypatch.context() as m:
        m.setattr(reader, "WHOLE_JSON_BYTES", 20_000)
        m.setattr(slicing, "SLICE_BYTES", 40_000)
        staged = []
        real_stage = slicing.stage
        m.setattr(slicing, "stage", lambda source, part: staged.append(part) or real_stage(source, part))
        parsed_whole = []
        real_whole = fallback.open_whole
        m.setattr(fallback, "open_whole", lambda *a, **k: parsed_whole.append(a[0]) or real_whole(*a, **k))
        with Store(tmp_path / "cut.duckdb") as store:
            result = store.ingest(packed, progress=done.append)
            cut = snapshot(store)
    assert (result.status, result.warnings) == ("ingested", [])
    assert parsed_whole == [] and len(staged) > traces  # cut in slices, never parsed whole
    assert sum(done) == packed.stat().st_size  # progress in the gzip file's bytes
    assert list(temp.iterdir()) == []  # the decompressed copy is gone
    for table in whole:
        if table != "files":
            assert cut[table] == whole[table], table


def test_a_large_gzip_json_document_cut_short_keeps_its_complete_events(tmp_path, monkeypatch):
    events = _events(300)
    for e in events:  # (an "events" key inside an event sends a document to the whole parse)
        e["data"].pop("nested", None)
    doc = {"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": events}]}
    raw = orjson.dumps(doc)
    packed = gzip.compress(raw)
    path = tmp_path / "cut.qlog.gz"
    path.write_bytes(packed[:len(packed) * 3 // 4])
    monkeypatch.setattr(reader, "WHOLE_JSON_BYTES", 20_000)
    decompressed = len(zlib.decompressobj(31).decompress(path.read_bytes()))
    parsed_whole = []
    real_whole = fallback.open_whole
    monkeypatch.setattr(fallback, "open_whole", lambda *a, **k: parsed_whole.append(a[0]) or real_whole(*a, **k))
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(path)
        kept = store.con.execute("SELECT count(*) FROM packets").fetchone()[0]
    assert result.status == "ingested" and parsed_whole == []  # cut in slices, not parsed whole
    assert result.warnings[0].startswith(f"{path}: stream ends with an error at decompressed byte {decompressed} (")
    assert result.warnings[1].startswith(f"{path}: JSON cut short at decompressed byte {decompressed}; kept every "
                                         "complete event up to decompressed byte ")
    expected = sum(1 for e in doc["traces"][0]["events"]
                   if e["name"].endswith(("packet_sent", "packet_received"))
                   and raw.find(orjson.dumps(e)) + len(orjson.dumps(e)) <= decompressed)
    assert kept == expected > 0


def _gzip_results(path: Path, tmp_path: Path, monkeypatch, name: str):
    """Ingest ``path`` (gzip JSON documents above 20 kB decompressed go to a temporary file):
    (result, snapshot, whether it was parsed whole)."""
    with monkeypatch.context() as m:
        m.setattr(reader, "WHOLE_JSON_BYTES", 20_000)
        m.setattr(slicing, "SLICE_BYTES", 9_000)
        whole = []
        real_whole = fallback.open_whole
        m.setattr(fallback, "open_whole", lambda *a, **k: whole.append(a[0]) or real_whole(*a, **k))
        with Store(tmp_path / f"{name}.duckdb") as store:
            result = store.ingest(path)
            return result, snapshot(store), bool(whole)


def test_a_large_gzip_json_document_of_two_traces_cut_short_counts_decompressed_bytes(tmp_path, monkeypatch):
    # The warning of a document of several traces cut in its last events array was written
    # before the gzip reader set the unit: it said "byte" for a position in decompressed bytes.
    raw = (DATA / "pcap2qlog/examples/draft-02/ngtcp2-29-dsb.qlog").read_bytes()
    plain, packed = tmp_path / "cut.qlog", tmp_path / "cut.qlog.gz"
    plain.write_bytes(raw[:27275])
    packed.write_bytes(gzip.compress(raw[:27275]))
    p, p_rows, _ = _gzip_results(plain, tmp_path, monkeypatch, "plain")
    g, g_rows, g_whole = _gzip_results(packed, tmp_path, monkeypatch, "gzip")
    assert not g_whole  # cut in slices
    assert g.warnings == [f"{packed}: JSON cut short at decompressed byte 27275; kept every complete event "
                          f"up to decompressed byte {raw.rindex(b']', 0, raw.rindex(b'[', 0, 27275)) + 1}"]
    assert p.warnings == [w.replace(str(packed), str(plain)).replace("decompressed byte", "byte") for w in g.warnings]
    assert {t: v for t, v in g_rows.items() if t != "files"} == {t: v for t, v in p_rows.items() if t != "files"}


def test_a_gzip_stream_that_lost_only_its_trailer_holds_a_whole_document(tmp_path, monkeypatch):
    # The gzip stream ends early (no CRC/size trailer) but what it decompressed is the whole
    # document: a warning says the stream ended early; none says the JSON was cut short.
    raw = (DATA / "picoquic/picoquictest/app_msg_overflow_ref.qlog").read_bytes()
    packed = gzip.compress(raw)
    path = tmp_path / "trailer.qlog.gz"
    path.write_bytes(packed[:-8])
    assert zlib.decompressobj(31).decompress(path.read_bytes()) == raw
    result, rows_gz, whole = _gzip_results(path, tmp_path, monkeypatch, "gz")
    full, rows_full, _ = _gzip_results(DATA / "picoquic/picoquictest/app_msg_overflow_ref.qlog", tmp_path,
                                       monkeypatch, "full")
    assert not whole and len(result.warnings) == 1
    assert result.warnings[0].startswith(f"{path}: stream ends with an error at decompressed byte {len(raw)} (")
    assert {t: v for t, v in rows_gz.items() if t != "files"} == {t: v for t, v in rows_full.items() if t != "files"}


def _read_both_ways(path: Path, tmp_path: Path, monkeypatch, name: str) -> dict[str, tuple]:
    """``path`` ingested streamed (the reader's choice) and salvaged (a JSON document parsed whole,
    its complete events kept): per way (status, error, warnings, snapshot or None, whether the
    document was parsed whole)."""
    results = {}
    for how in ("streamed", "salvaged"):
        with monkeypatch.context() as m:
            whole = []
            real_whole = fallback.open_whole
            m.setattr(fallback, "open_whole", lambda *a, **k: whole.append(a[0]) or real_whole(*a, **k))
            if how == "salvaged":
                m.setattr(document, "open_streaming", lambda *a, **k: None)
            with Store(tmp_path / f"{how}-{name}.duckdb") as store:
                result = store.ingest(path)
                results[how] = (result.status, result.error, result.warnings,
                                snapshot(store) if result.status == "ingested" else None, bool(whole))
    return results


def _assert_cut_like_the_salvage(raw: bytes, cuts: list[int], tmp_path: Path, monkeypatch) -> int:
    """Each prefix of ``raw`` read streamed and salvaged gives the same result and rows; returns
    how many were read without parsing the document whole."""
    monkeypatch.setattr(slicing, "SLICE_BYTES", 9_000)
    streamed_ones = 0
    for n, cut in enumerate(cuts):
        path = tmp_path / f"cut{n}.qlog"
        path.write_bytes(raw[:cut])
        results = _read_both_ways(path, tmp_path, monkeypatch, str(n))
        streamed_ones += not results["streamed"][4]
        assert results["streamed"][:3] == results["salvaged"][:3], cut
        if results["salvaged"][3] is not None:
            for table, expected in results["salvaged"][3].items():
                if table != "files":
                    assert results["streamed"][3][table] == expected, (cut, table)
    return streamed_ones


def test_a_json_document_cut_anywhere_in_its_events_is_cut_in_slices_like_its_salvage(tmp_path, monkeypatch):
    # A writer killed mid-file leaves a JSON qlog without its closing brackets.  Such a document
    # of one events array is cut in slices up to its last complete event, not parsed whole
    # (60 MB of it took 837 MB and 16 s): the rows and the warning must be those of the salvage
    # of the whole document, wherever the file ends.
    events = _events(60)
    for e in events:  # (an "events" key inside an event sends a document to the up-front cut)
        e["data"].pop("nested", None)
    trace = {"vantage_point": {"type": "client"}, "common_fields": {"reference_time": 1.7e12}, "events": events}
    raw = orjson.dumps({"qlog_version": "0.3", "traces": [trace]}, option=orjson.OPT_INDENT_2)
    body = raw.index(b'"events"')
    cuts = sorted({body + 30, len(raw) - 40, *range(body + 200, len(raw) - 40, len(raw) // 23)})
    # (not the two cuts inside the first event: nothing to keep)
    assert _assert_cut_like_the_salvage(raw, cuts, tmp_path, monkeypatch) >= len(cuts) - 2


@pytest.mark.parametrize("nested", [False, True], ids=["plain", "events-key-in-events"])
def test_a_json_document_of_several_traces_cut_anywhere_is_cut_in_slices_like_its_salvage(tmp_path, monkeypatch,
                                                                                          nested):
    # The same for a document of two traces (a client's and a server's), with or without an
    # "events" key inside some events: the array the file ends in is cut up to its last
    # complete event in the up-front pass, the traces before it whole.
    client, server = _events(40), _events(40)
    if not nested:
        for e in client + server:
            e["data"].pop("nested", None)
    traces = [{"vantage_point": {"type": "client"}, "common_fields": {"reference_time": 1.7e12}, "events": client},
              {"vantage_point": {"type": "server"}, "common_fields": {"reference_time": 1.7e12}, "events": server}]
    raw = orjson.dumps({"qlog_version": "0.3", "traces": traces}, option=orjson.OPT_INDENT_2)
    first_body = raw.index(b'"events"')
    second_body = raw.index(b'"events"', raw.index(b'"server"'))
    cuts = sorted({first_body + 30, second_body - 60, second_body + 30, len(raw) - 40,
                   *range(first_body + 200, len(raw) - 40, len(raw) // 23)})
    # (not inside the first event, nor between the traces)
    assert _assert_cut_like_the_salvage(raw, cuts, tmp_path, monkeypatch) >= len(cuts) - 3


def test_the_salvage_keeps_no_part_of_an_event_after_one_that_holds_an_events_key():
    # An "events" key inside an event (here data.nested.events of the third event) is the
    # event's own: the salvage of a document cut inside a later event must not take that
    # event's inner brackets (its ACK ranges, as deep as the nested array's elements) for the
    # end of a complete event — it kept the cut packet, its frames cut short, as if complete.
    events = _events(8)
    assert "nested" in events[2]["data"] and events[3]["data"]["header"]["packet_number"] == 1
    raw = orjson.dumps({"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"},
                                                          "events": events}]}, option=orjson.OPT_INDENT_2)
    fourth = raw.index(b'"packet_number": 1,')
    at = raw.index(b'"frame_type": "crypto"', fourth)  # its ACK frame (and ranges) complete
    doc, kept = fallback.salvage(raw[:at])
    assert doc["traces"][0]["events"] == events[:3]
    assert raw[:kept].rstrip().endswith(b"}") and kept < raw.rindex(b'"time"', 0, fourth)


@pytest.mark.parametrize("name, cut", [
    ("pcap2qlog/examples/draft-01/spin_bit.qlog", 8728),  # slices of 9 kB: the last holds no whole event
    ("pcap2qlog/examples/draft-01/ngtcp2_test.qlog", 11704),
    ("picoquic/picoquictest/app_msg_overflow_ref.qlog", 28698),
    ("pcap2qlog/examples/draft-02/ngtcp2-29-dsb.qlog", 5000),  # two traces, cut in the second
])
def test_a_real_document_cut_short_is_read_like_its_salvage(tmp_path, monkeypatch, name, cut):
    # Cuts a fuzz run (real files cut at random positions, streamed against salvaged) found
    # differing: where the last slice holds no complete event, the warning named the byte after
    # the ',' that ends the last one, not the end of that event; and the salvage of a document
    # cut after a trace's events array took a list of a later trace's header (``original_uris``,
    # as deep as the events) for events.
    path = tmp_path / "cut.qlog"
    path.write_bytes((DATA / name).read_bytes()[:cut])
    monkeypatch.setattr(slicing, "SLICE_BYTES", 9_000)
    results = _read_both_ways(path, tmp_path, monkeypatch, "real")
    streamed, salvaged = results["streamed"], results["salvaged"]
    assert streamed[4] is False and salvaged[4] is True  # (parsed whole or not)
    assert streamed[0] == "ingested" and len(streamed[2]) == 1
    assert streamed[:3] == salvaged[:3]
    for table, rows_salvaged in salvaged[3].items():
        assert table == "files" or streamed[3][table] == rows_salvaged, table


def _odd_events() -> list[dict]:
    """Packet, ACK, metrics and parameters events with values of every JSON type where a number,
    string, object or list belongs (times stay numbers: a packet event without one refuses)."""
    good = {"time": 1, "name": "transport:packet_sent",
            "data": {"header": {"packet_type": "initial", "packet_number": 0}, "raw": {"length": 1200},
                     "frames": [{"frame_type": "ack", "ack_delay": 1.5, "acked_ranges": [[0, 0]]}]}}
    odd = [[1, 2], 5, "x", None, True, {"a": {"b": 1}}, -1, 1e300, ""]
    out = [good]
    for i, v in enumerate(odd):
        t = 2 + i
        out += [
            {"time": t, "name": "transport:packet_received", "data": v},
            {"time": t, "name": "transport:packet_received", "data": {"header": v, "raw": v, "frames": v}},
            {"time": t, "name": "transport:packet_sent",
             "data": {"header": {"packet_type": v, "packet_number": v}, "raw": {"length": v},
                      "frames": [v, {"frame_type": v}, {"frame_type": "ack", "ack_delay": v, "acked_ranges": v},
                                 {"frame_type": "ack", "acked_ranges": [v, [v, v]]},
                                 {"frame_type": "crypto", "offset": v, "length": v}]}},
            {"time": t, "name": "recovery:metrics_updated", "data": {"smoothed_rtt": v, "congestion_window": v}},
            {"time": t, "name": "transport:parameters_set", "data": {"owner": v, "max_ack_delay": v}},
            {"time": t, "name": v if isinstance(v, str) else "transport:something", "data": v},
        ]
    return out


def test_odd_values_give_the_same_rows_through_every_reading_path(tmp_path, monkeypatch):
    # The JSON document path (orjson, then DuckDB) and the stream paths (DuckDB's CSV reader,
    # then json_transform) must agree on what every odd value becomes (feeding 253 odd events
    # one by one through both found a stored text that kept a record's own spacing on one path)
    events = _odd_events()
    trace = {"vantage_point": {"type": "client"}, "common_fields": {"reference_time": 1.7e12}}
    doc = write_json(tmp_path / "odd.qlog", {"qlog_version": "0.3", "traces": [dict(trace, events=events)]})
    seq = tmp_path / "odd.sqlog"  # records written with spaces, as Python's json module does
    seq.write_text("".join("\x1e" + json.dumps(r) + "\n" for r in [
        {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": trace}, *events]))
    ndjson = write_seq(tmp_path / "odd.ndjson", {"qlog_format": "NDJSON", "qlog_version": "0.3", "trace": trace},
                       events, separator=b"")
    got = {}
    for path in (doc, seq, ndjson):
        for slice_bytes in (1 << 30, 2000):
            result, snap, _ = ingest_with(path, tmp_path, f"{path.suffix}{slice_bytes}", slice_bytes, monkeypatch)
            assert (result.status, result.error) == ("ingested", None)
            got[path.suffix, slice_bytes] = {t: v for t, v in snap.items() if t != "files"}
    first = got[".qlog", 1 << 30]
    assert len(first["packets"]) == 1 + 3 * 9 and len(first["other_events"]) == 9
    for key, snap in got.items():
        assert snap == first, key


def test_a_temporary_file_removed_twice_leaves_the_file_that_took_its_name_alone():
    # ingests on two threads: one removed its temporary file (its descriptor name freed), the
    # other made one with the same name, then the first removed its own again (Source.close):
    # that closed the other's descriptor, and its slice read as "cannot read: None" (clean-clone CI)
    fd, first = slicing.temp_file(".json", 1)
    os.close(fd)
    slicing.unlink(first)
    fd, second = slicing.temp_file(".json", 1)
    with os.fdopen(fd, "wb") as out:
        out.write(b"[1]")
    assert second == first  # (the lowest free descriptor: the same name)
    slicing.unlink(first)
    with open(second, "rb") as f:
        assert f.read() == b"[1]"
    slicing.unlink(second)
    assert second not in slicing._KEPT
