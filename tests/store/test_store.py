"""The store: idempotent ingest, re-analysis, cut files, refused files, schema versions, export."""

from __future__ import annotations

import hashlib
import shutil

import duckdb
import orjson
import polars as pl
import pytest

from conftest import DATA, RS, rows
from quicack import QuicackError, Store
from quicack.store.schema import SCHEMA_VERSION
from quicack.store.schema import table_names

AIOQUIC_CLIENT = DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"
QUICHE_SEQ = DATA / "quiche-qlog-crate/streamer_test_expected_main-schema.sqlog"


def snapshot(store: Store) -> dict[str, list]:
    """Every row of every table, for comparing a store before and after."""
    return {t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in table_names()
            if t != "files"} | {"files": store.con.execute(
                "SELECT file_id, path, content_sha256 FROM files ORDER BY ALL").fetchall()}


def test_reingesting_the_same_content_changes_nothing(store, tmp_path):
    first = store.ingest(AIOQUIC_CLIENT)
    assert first.status == "ingested" and first.connections == 1
    before = snapshot(store)
    again = store.ingest(AIOQUIC_CLIENT)
    copy = tmp_path / "renamed.qlog"
    shutil.copy(AIOQUIC_CLIENT, copy)
    renamed = store.ingest(copy)
    assert (again.status, renamed.status) == ("unchanged", "unchanged")
    assert snapshot(store) == before


def test_reanalyze_replaces_the_rows_of_that_file(store):
    store.ingest(AIOQUIC_CLIENT)
    store.ingest(QUICHE_SEQ)
    counts = {t: len(v) for t, v in snapshot(store).items()}
    result = store.ingest(AIOQUIC_CLIENT, reanalyze=True)
    assert result.status == "ingested"
    assert {t: len(v) for t, v in snapshot(store).items()} == counts
    # the other file's connection is untouched; the re-analysed one got a new id
    assert rows(store, "SELECT count(DISTINCT file_id) AS n FROM connections") == [{"n": 2}]


def _events(n: int) -> list[dict]:
    return [{"time": float(i), "name": "transport:packet_sent",
             "data": {"header": {"packet_type": "1RTT", "packet_number": i}, "frames": [{"frame_type": "ping"}]}}
            for i in range(n)]


def test_a_json_qlog_never_closed_keeps_its_complete_events(store, tmp_path):
    head = b'{"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": ['
    parts = [orjson.dumps(e) for e in _events(10)]
    complete = head + b",".join(parts[:7])
    cut = complete + b"," + parts[7][:25]  # the writer died inside event 7
    path = tmp_path / "cut.qlog"
    path.write_bytes(cut)
    result = store.ingest(path)
    assert result.status == "ingested"
    assert result.packets == 7
    assert [w for w in result.warnings] == [
        f"{path}: JSON cut short at byte {len(cut)}; kept every complete event up to byte {len(complete)}"]
    assert [r["packet_number"] for r in rows(store, "SELECT packet_number FROM packets ORDER BY 1")] == list(range(7))


@pytest.mark.parametrize("suffix", [".sqlog", ".qlog"])
def test_a_file_with_an_event_too_large_for_the_ingest_memory_cap_is_read_again_without_it(store, tmp_path, suffix):
    # One 30 MB event (a producer logging a large payload) needs more than the 80 MB DuckDB is
    # given while a qlog is ingested: the file is valid, so it is read again with the usual limit.
    events = _events(5)
    events[2:2] = [{"time": 2.5, "name": "transport:blob", "data": {"payload": "ab" * 15_000_000}}]
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ", "trace": {"vantage_point": {"type": "client"}}}
    path = tmp_path / f"large{suffix}"
    if suffix == ".sqlog":
        path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    else:
        path.write_bytes(orjson.dumps({"qlog_version": "0.3", "traces": [
            {"vantage_point": {"type": "client"}, "events": events}]}))
    limit = rows(store, "SELECT current_setting('memory_limit') AS v")
    result = store.ingest(path)
    assert result.status == "ingested", result.error
    assert result.packets == 5 and result.skipped_events == {"transport:blob": 1}
    assert len(result.warnings) == 1 and result.warnings[0].startswith(
        "DuckDB needed more memory than the 80MB it is given while a qlog is ingested")
    assert rows(store, "SELECT warnings FROM files") == [{"warnings": result.warnings}]
    assert rows(store, "SELECT length(data->>'$.payload') AS n FROM other_events") == [{"n": 30_000_000}]
    assert rows(store, "SELECT current_setting('memory_limit') AS v") == limit


def test_a_file_too_large_even_for_the_usual_memory_limit_is_refused_and_the_store_is_untouched(store, tmp_path):
    store.ingest(QUICHE_SEQ)
    before = snapshot(store)
    store.con.execute("SET memory_limit = '32MB'")  # the usual limit of a (very) small machine
    path = tmp_path / "large.sqlog"
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ", "trace": {"vantage_point": {"type": "client"}}}
    blob = {"time": 1.0, "name": "transport:blob", "data": {"payload": "ab" * 14_000_000}}
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, blob, *_events(3)]))
    result = store.ingest(path)
    assert result.status == "refused"
    assert result.error.startswith(f"{path}: out of memory: Out of Memory Error")
    store.con.execute("RESET memory_limit")
    assert snapshot(store) == before


def test_an_event_of_40_mb_is_kept_whole(store, tmp_path):
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ", "trace": {"vantage_point": {"type": "client"}}}
    blob = {"time": 1.0, "name": "transport:blob", "data": {"payload": "ab" * 20_000_000}}
    records = [RS + orjson.dumps(r) + b"\n" for r in [header, *_events(2), blob]]
    path = tmp_path / "huge.sqlog"
    path.write_bytes(b"".join(records))
    result = store.ingest(path)
    assert result.status == "ingested" and result.events == 3
    # (more than the memory DuckDB is given while a qlog is ingested: read again, and said so)
    assert any("read again with its usual limit" in w for w in result.warnings)
    assert store.con.execute("""SELECT length(data->>'$.payload') FROM other_events
                                WHERE event_name = 'transport:blob'""").fetchall() == [(40_000_000,)]


@pytest.mark.parametrize("gz", [False, True])
def test_a_json_seq_record_cut_in_the_middle_keeps_the_records_before(store, tmp_path, gz):
    import gzip
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}})
    records = [RS + header + b"\n"] + [RS + orjson.dumps(e) + b"\n" for e in _events(5)]
    kept = b"".join(records[:5])  # header + 4 events
    raw = kept + records[5][:30]
    path = tmp_path / ("cut.sqlog.gz" if gz else "cut.sqlog")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    result = store.ingest(path)
    assert result.status == "ingested" and result.packets == 4
    unit = "decompressed byte" if gz else "byte"
    assert result.warnings == [f"{path}: last record cut short at {unit} {len(kept)} (file ends at "
                               f"{unit} {len(raw)}); kept every complete event before it"]


def _gzip_cut(raw: bytes, keep: float) -> tuple[bytes, bytes]:
    """The first ``keep`` of ``raw``'s gzip stream (a writer killed mid-file), and what any gzip
    reader can decompress of it."""
    import gzip
    import zlib
    # (level 1: the compressed stream is long enough for cuts inside every decompressed chunk)
    compressed = gzip.compress(raw, compresslevel=1)
    cut = compressed[:int(len(compressed) * keep)]
    return cut, zlib.decompressobj(wbits=31).decompress(cut)


GZIP_ENDED = "stream ends with an error at decompressed byte {} (Compressed file ended before the " \
             "end-of-stream marker was reached); kept the complete records before it"


@pytest.mark.parametrize("events, keep", [(40, 0.6), (60_000, 0.5)], ids=["within the head", "further on"])
def test_a_gzip_json_seq_stream_cut_short_keeps_every_record_decompressed_before_the_cut(
        store, tmp_path, events, keep):
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}})
    raw = b"".join(RS + r + b"\n" for r in [header] + [orjson.dumps(e) for e in _events(events)])
    cut, readable = _gzip_cut(raw, keep)
    path = tmp_path / "cut.sqlog.gz"
    path.write_bytes(cut)
    complete = readable.count(b"\n") - 1  # records whose line end was decompressed, header left out
    assert 0 < complete < events
    result = store.ingest(path)
    assert result.status == "ingested" and result.packets == complete
    assert result.warnings[0] == f"{path}: " + GZIP_ENDED.format(len(readable))
    last = readable.rindex(b"\n") + 1  # the record cut short starts here, at its RS
    assert result.warnings[1:] == [f"{path}: last record cut short at decompressed byte {last} (file ends at "
                                   f"decompressed byte {len(readable)}); kept every complete event before it"]
    # the kept packets are the first ones of the file, in order
    assert rows(store, "SELECT min(packet_number) AS lo, max(packet_number) AS hi FROM packets") == [
        {"lo": 0, "hi": complete - 1}]


def test_a_gzip_json_document_cut_short_keeps_its_complete_events(store, tmp_path):
    head = b'{"qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": ['
    parts = [orjson.dumps(e) for e in _events(30_000)]
    raw = head + b",".join(parts) + b"]}]}"
    cut, readable = _gzip_cut(raw, 0.5)
    ends = [len(head) + sum(len(p) + 1 for p in parts[:i]) + len(parts[i]) for i in range(len(parts))]
    complete = sum(1 for end in ends if end <= len(readable))
    assert 0 < complete < len(parts)
    path = tmp_path / "cut.qlog.gz"
    path.write_bytes(cut)
    result = store.ingest(path)
    assert result.status == "ingested" and result.packets == complete
    assert result.warnings[0] == f"{path}: " + GZIP_ENDED.format(len(readable))
    assert result.warnings[1].startswith(f"{path}: JSON cut short at decompressed byte {len(readable)}; ")


@pytest.mark.parametrize("event", [
    {"name": "recovery:metrics_updated", "data": {"smoothed_rtt": 20}},
    {"name": "recovery:packet_lost", "data": {"header": {"packet_type": "1RTT", "packet_number": 1}}},
    {"name": "transport:packet_dropped", "data": {"packet_type": "initial"}},
    {"name": "recovery:loss_timer_updated", "data": {"event_type": "set"}},
], ids=lambda e: e["name"])
def test_any_event_with_a_table_of_its_own_needs_a_time(store, tmp_path, event):
    # their time_ms is NOT NULL, as a packet's is: refused with a message that names the event
    # (it was DuckDB's "NOT NULL constraint failed: logged_metrics.time_ms"), the store unchanged
    before = snapshot(store)
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"}}}
    path = tmp_path / "untimed.sqlog"
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *_events(2), event]))
    result = store.ingest(path)
    assert result.error == (f"{path} at trace 0 event 3: {event['name']} event without a time "
                            "(qlog requires one on every event)")
    assert snapshot(store) == before


def test_json_seq_records_are_split_at_every_record_separator(store, tmp_path):
    # RFC 7464 §2.1: RS "is used to separate texts"; a writer that leaves out the line feed
    # between two records still wrote two records (DuckDB's CSV reader kept only the second)
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"}}}
    records = [orjson.dumps(r) for r in [header, *_events(4)]]
    path = tmp_path / "joined.sqlog"
    path.write_bytes(RS + records[0] + b"\n" + RS + records[1] + RS + records[2] + b"\n"
                     + b"".join(RS + r + b"\n" for r in records[3:]))
    result = store.ingest(path)
    assert (result.status, result.events, result.packets) == ("ingested", 4, 4)
    assert rows(store, "SELECT event_index FROM packets ORDER BY 1") == [{"event_index": i} for i in range(4)]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("separator", [RS, b""], ids=["JSON-SEQ", "NDJSON"])
def test_records_with_crlf_line_ends_give_the_rows_of_lf_ones(tmp_path, gz, separator):
    # RFC 8259: CR is whitespace, so a file written with Windows line ends holds the same records
    # (DuckDB's CSV reader, which splits them, refuses CRLF mixed with LF and LF-only settings).
    import gzip
    header = orjson.dumps({"qlog_format": "JSON-SEQ" if separator else "NDJSON", "qlog_version": "0.3",
                           "trace": {"vantage_point": {"type": "server"}}})
    lines = [separator + r + b"\n" for r in [header] + [orjson.dumps(e) for e in _events(20)]]
    got = {}
    for name, raw in {"lf": b"".join(lines),
                      "crlf": b"".join(lines).replace(b"\n", b"\r\n"),
                      "mixed": b"".join(line.replace(b"\n", b"\r\n") if i % 3 else line
                                        for i, line in enumerate(lines))}.items():
        path = tmp_path / f"{name}.{'sqlog' if separator else 'ndjson'}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(raw) if gz else raw)
        with Store(tmp_path / f"{name}.duckdb") as s:
            result = s.ingest(path)
            assert (result.status, result.warnings) == ("ingested", [])
            got[name] = {t: s.con.execute(f"SELECT * EXCLUDE (connection_id) FROM {t} ORDER BY ALL").fetchall()
                         for t in ("packets", "frames")}
    assert len(got["lf"]["packets"]) == 20
    assert got["crlf"] == got["lf"] and got["mixed"] == got["lf"]


def test_records_that_are_not_events_are_kept_whole_and_counted(store, tmp_path):
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}})
    odd = [b"[1, 2]", b"42", b'{"x": 1}', b'{"time": 3, "data": {"y": 2}}']
    records = [header, *[orjson.dumps(e) for e in _events(2)], *odd, orjson.dumps(_events(3)[2])]
    path = tmp_path / "odd.sqlog"
    path.write_bytes(b"".join(RS + r + b"\n" for r in records))
    result = store.ingest(path)
    assert (result.status, result.packets, result.skipped_events) == ("ingested", 3, {"": 4})
    kept = store.con.execute("SELECT event_index, event_name, data FROM other_events ORDER BY 1").fetchall()
    assert [(i, n, orjson.loads(d)) for i, n, d in kept] == [
        (2, "", [1, 2]), (3, "", 42), (4, "", {"x": 1}), (5, "", {"time": 3, "data": {"y": 2}})]
    # stored as JSON text without the record's own spacing: a JSON document of the same records,
    # which orjson re-serializes, stores the same text
    assert [d for _, _, d in kept] == ["[1,2]", "42", '{"x":1}', '{"time":3,"data":{"y":2}}']


def test_a_packet_event_without_a_time_refuses_the_file_naming_it(store, tmp_path):
    # Every qlog draft requires "time" on every event, and a packet cannot be placed without one;
    # another event without one is kept (time_ms NULL).
    store.ingest(AIOQUIC_CLIENT)
    before = snapshot(store)
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}}
    events = _events(4)
    events.insert(1, {"name": "transport:spin_bit_updated", "data": {"state": True}})
    del events[3]["time"]  # the third packet event, the file's fourth event
    path = tmp_path / "untimed.sqlog"
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    result = store.ingest(path)
    assert result.status == "refused"
    assert result.error == (f"{path} at trace 0 event 4: transport:packet_sent event without a time "
                            "(qlog requires one on every event)")
    assert snapshot(store) == before
    del events[3]
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    result = store.ingest(path)
    assert (result.status, result.packets) == ("ingested", 3)
    assert rows(store, "SELECT time_ms FROM other_events JOIN connections USING (connection_id) "
                       f"WHERE file_id = {result.file_id}") == [{"time_ms": None}]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("separator", [RS, b""], ids=["JSON-SEQ", "NDJSON"])
def test_a_last_record_without_its_line_end_is_kept(store, tmp_path, gz, separator):
    # RFC 7464 ends each record with LF, but a complete last record without one (a writer that
    # never added it) is still a whole event, unlike a record cut short.
    import gzip
    header = orjson.dumps({"qlog_format": "JSON-SEQ" if separator else "NDJSON", "qlog_version": "0.3",
                           "trace": {"vantage_point": {"type": "server"}}})
    raw = b"\n".join(separator + r for r in [header] + [orjson.dumps(e) for e in _events(5)])  # no final LF
    path = tmp_path / f"t.{'sqlog' if separator else 'ndjson'}{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    result = store.ingest(path)
    assert (result.status, result.packets, result.warnings) == ("ingested", 5, [])
    assert rows(store, "SELECT max(packet_number) AS last FROM packets") == [{"last": 4}]


@pytest.mark.parametrize("content, message", [
    (b"", "at byte 0: empty file, no qlog header"),
    (b"\n\n  ", "at byte 0: empty file, no qlog header"),
    (b"hello, world", "at byte 0: not a qlog file: starts with b'hello, world'"),
    ('{"qlog_version": "0.3"}'.encode("utf-16"), "at byte 0: UTF-16 text, not UTF-8 as JSON requires (RFC 8259 "
     "§8.1): convert it, e.g. iconv -f UTF-16 -t UTF-8"),
    (b'{"just": "json"}', "at byte 0: not a qlog file: no qlog_version, file_schema or traces"),
    (b'{"qlog_version": "0.3", "traces": [{"events": [{"time": 1, "na', "at byte 62: not valid JSON: unexpected end of data"),
    (b'\x1e{"qlog_version": "0.3", "trace": {}}\n\x1e{"time": 1, "name": "x"}\n\x1e{broken}\n\x1e{"time": 2}\n',
     "at byte 65: malformed record 3: "),
    (b"\x1f\x8bnot really gzip", "at byte 0: cannot read"),
    (b'{"qlog_version": "0.3", "traces": []}', "at byte 0: qlog file has no traces"),
    # a stream's header: the position is its first byte after the record separator and blanks
    (b'\x1e{"qlog_version": "0.3", "trace": {\n\x1e{"time": 1}\n', "at byte 1: unreadable qlog header: "),
    (b'\n \x1e[1, 2]\n\x1e{"time": 1}\n', "at byte 3: qlog header is not a JSON object"),
    (b'\x1e{"qlog_format": "JSON-SEQ"}\n\x1e{"time": 1}\n',
     "at byte 1: not a qlog file: no qlog_version, file_schema or traces"),
    (b'  {"qlog_format": "NDJSON", "traces": []}\n{"time": 1}\n', "at byte 2: qlog file has no traces"),
    (b'{"qlog_version": "draft-01", "traces": [{"event_fields": ["relative_time", "category", "event"], '
     b'"events": [["0", "transport", "packet_sent"]]}]}',
     "at trace 0: event_fields ['relative_time', 'category', 'event'] lack a time, event or data column"),
])
def test_unreadable_files_are_refused_and_the_store_is_untouched(store, tmp_path, content, message):
    store.ingest(AIOQUIC_CLIENT)
    before = snapshot(store)
    path = tmp_path / "bad.qlog"
    path.write_bytes(content)
    result = store.ingest(path)
    assert result.status == "refused"
    assert result.error.startswith(f"{path} {message}"), result.error
    assert "\n" not in result.error
    assert snapshot(store) == before


def test_a_newer_store_is_refused_with_a_clear_message(tmp_path):
    db = tmp_path / "new.duckdb"
    Store(db).close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(QuicackError) as e:
        Store(db)
    assert str(e.value) == (f"{db}: store has schema version 99, newer than this quicack understands "
                            f"({SCHEMA_VERSION}); upgrade quicack")


def test_a_foreign_database_is_not_touched(tmp_path):
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE mine (x INTEGER)")
    con.close()
    with pytest.raises(QuicackError, match="not a quicack store"):
        Store(db)
    con = duckdb.connect(str(db))
    assert con.execute("SELECT table_name FROM duckdb_tables()").fetchall() == [("mine",)]


def test_schema_version_is_recorded(store):
    assert rows(store, "SELECT value FROM store_meta WHERE key = 'schema_version'") == [{"value": str(SCHEMA_VERSION)}]


def test_export_writes_every_table_as_parquet(store, tmp_path):
    store.ingest(AIOQUIC_CLIENT)
    written = store.export_parquet(tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(f"{t}.parquet" for t in table_names())
    for p in written:
        table = p.stem
        assert pl.read_parquet(p).height == store.con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    assert pl.read_parquet(tmp_path / "out/packets.parquet").height > 0


def test_table_and_sql_return_polars(store):
    store.ingest(AIOQUIC_CLIENT)
    assert isinstance(store.table("packets"), pl.DataFrame)
    assert store.sql("SELECT count(*) AS n FROM frames WHERE frame_type = $t", {"t": "ack"})["n"][0] > 0
    with pytest.raises(QuicackError, match="no table 'nope'"):
        store.table("nope")


def test_a_version_1_store_is_upgraded_in_place_and_reanalysis_fills_the_new_columns(tmp_path):
    # tests/data/store_v1.sql is schemas/store.sql as released with schema version 1.
    db = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(db))
    con.execute((DATA / "store_v1.sql").read_text())
    con.execute("INSERT INTO store_meta VALUES ('schema_version', '1')")
    con.close()
    with Store(db) as old:  # upgrade 1 → 2 happens here
        assert rows(old, "SELECT value FROM store_meta WHERE key = 'schema_version'") == [{"value": str(SCHEMA_VERSION)}]
        columns = {r["column_name"] for r in rows(old, "SELECT column_name FROM duckdb_columns() WHERE table_name = 'connections'")}
        assert {"handshake_class", "ack_sh_gap_ms", "first_pto_ms"} <= columns
        assert old.table("rtt_samples").height == 0
    # A file stored by analysis version 1 is ingested again by this version (the key includes it).
    con = duckdb.connect(str(db))
    con.execute("""INSERT INTO files VALUES (1, 'old.qlog', ?, 1, 'json', '0.3', 1, now()::TIMESTAMP, 0, [])""",
                [hashlib.sha256(AIOQUIC_CLIENT.read_bytes()).hexdigest()])
    con.close()
    with Store(db) as store:
        assert store.ingest(AIOQUIC_CLIENT).status == "ingested"
        assert rows(store, "SELECT handshake_class FROM connections") == [{"handshake_class": "wfc"}]
        assert rows(store, "SELECT count(*) AS n FROM files") == [{"n": 1}]


@pytest.mark.parametrize("bad", [
    b'{"time": 2, "name": "x",}',  # a trailing comma
    b"{'time': 2}",  # single quotes
    b'{"time": NaN}',
    b'{"time": 02}',  # a leading zero
    b'{"time": 2, "name": "a\x01b"}',  # a control character in a string
    b'{"time": 2, "name": "a\\qb"}',  # an escape RFC 8259 does not have
    b'{"time": 2, "name": "x"} {"time": 3}',  # two values in one record
    b'{"time": 2, "name": "\xff"}',  # not UTF-8
], ids=["trailing comma", "single quotes", "NaN", "leading zero", "control character", "bad escape",
        "two values", "not UTF-8"])
def test_a_record_that_is_not_rfc_8259_json_is_refused_where_it_is(store, tmp_path, bad):
    # The native parser is strict as orjson is, which names the record and its byte
    before = snapshot(store)
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}})
    records = [RS + header + b"\n", RS + orjson.dumps(_events(1)[0]) + b"\n", RS + bad + b"\n"]
    path = tmp_path / "bad.sqlog"
    path.write_bytes(b"".join(records))
    result = store.ingest(path)
    assert result.status == "refused"
    assert result.error.startswith(f"{path} at byte {len(records[0]) + len(records[1]) + 1}: malformed record 3: "), \
        result.error
    assert snapshot(store) == before


def test_a_malformed_record_in_a_later_slice_refuses_the_file_and_stops_the_staging_thread(
        store, tmp_path, monkeypatch):
    # Slices of ~1 KB: the broken record is staged in the background thread while the slices
    # before it are normalized; the error still names the record and its byte, nothing is kept,
    # and no staging thread outlives the ingest.
    import threading

    from quicack.qlog import slicing
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1024)
    store.ingest(AIOQUIC_CLIENT)
    before = snapshot(store)
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}})
    records = [RS + header + b"\n"] + [RS + orjson.dumps(e) + b"\n" for e in _events(200)]
    broken_at = 150
    records[broken_at] = RS + b"{broken}\n"
    path = tmp_path / "late.sqlog"
    path.write_bytes(b"".join(records))
    result = store.ingest(path)
    offset = len(b"".join(records[:broken_at])) + 1  # the record's JSON text, after its RS
    assert result.status == "refused"
    # records count from 1, the header being the first
    assert result.error.startswith(f"{path} at byte {offset}: malformed record {broken_at + 1}: "), result.error
    assert snapshot(store) == before
    assert not [t for t in threading.enumerate() if t.name == "quicack-stage"]


@pytest.mark.parametrize("layout", ["one line", "indented"])
@pytest.mark.parametrize("container", ["trace", "traces"])
def test_a_json_document_on_one_line_is_not_taken_for_a_stream_header(store, tmp_path, layout, container):
    # the first line of an NDJSON file is its header ("trace" without events); a whole document
    # written on one line is a first line too, and its "trace" holds the events
    trace = {"vantage_point": {"type": "client"}, "events": _events(3)}
    doc = {"qlog_version": "0.3", container: trace if container == "trace" else [trace]}
    path = tmp_path / "doc.qlog"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 if layout == "indented" else 0))
    result = store.ingest(path)
    assert (result.status, result.error, result.packets) == ("ingested", None, 3)


@pytest.mark.parametrize("fmt", ["json-seq", "NDJSON", "ndjson", "JSON-TEXT-SEQ"])
def test_the_stream_format_is_named_in_any_case(store, tmp_path, fmt):
    # a header naming its format is a stream header even with a "traces" list holding events
    header = {"qlog_format": fmt, "qlog_version": "0.3", "traces": [{"vantage_point": {"type": "client"}, "events": []}]}
    path = tmp_path / "s.sqlog"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in [header] + _events(4)) + b"\n")
    result = store.ingest(path)
    assert (result.status, result.error, result.packets) == ("ingested", None, 4)


@pytest.mark.parametrize("member", ["common_fields", "configuration", "vantage_point"])
@pytest.mark.parametrize("value", [[1, 2], 5, "client", True])
@pytest.mark.parametrize("seq", [False, True])
def test_a_header_member_of_the_wrong_type_is_read_as_absent(store, tmp_path, member, value, seq):
    # (a list as common_fields ended the whole run with a Python traceback)
    trace = {"vantage_point": {"type": "client"}, member: value}
    path = tmp_path / ("t.sqlog" if seq else "t.qlog")
    if seq:
        header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": trace}
        path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header] + _events(2)))
    else:
        path.write_bytes(orjson.dumps({"qlog_version": "0.3", "traces": [dict(trace, events=_events(2))]}))
    result = store.ingest(path)
    assert (result.status, result.error, result.packets) == ("ingested", None, 2)


@pytest.mark.parametrize("value, kind", [(5, "int"), ("time", "str"), ({"time": 0}, "dict")])
def test_event_fields_that_are_not_a_list_are_refused(store, tmp_path, value, kind):
    doc = {"qlog_version": "draft-01", "traces": [{"event_fields": value, "events": [["0", "transport", "x", {}]]}]}
    path = tmp_path / "d.qlog"
    path.write_bytes(orjson.dumps(doc))
    result = store.ingest(path)
    assert result.status == "refused"
    assert result.error == f"{path} at trace 0: event_fields is {kind}, not a list of column names"


def test_trace_error_entries(store, tmp_path):
    # draft-marx-qlog-main-schema: "traces" may hold TraceError entries for files that could not
    # be included; such an entry is reported, and a file of nothing else is refused
    error = {"error_description": "File could not be found", "uri": "/srv/traces/today/latest.qlog"}
    only = tmp_path / "only.qlog"
    only.write_bytes(orjson.dumps({"qlog_version": "0.3", "traces": [error]}))
    result = store.ingest(only)
    assert (result.status, result.error) == (
        "refused", f"{only} at byte 0: qlog file has no traces, only 1 error entry: 'File could not be found'")
    mixed = tmp_path / "mixed.qlog"
    mixed.write_bytes(orjson.dumps({"qlog_version": "0.3", "traces": [
        error, {"vantage_point": {"type": "client"}, "events": _events(2)}]}))
    result = store.ingest(mixed)
    assert (result.status, result.packets) == ("ingested", 2)
    assert result.warnings == [f"{mixed}: trace 0 is an error entry: 'File could not be found'"]
    assert rows(store, "SELECT trace_index FROM connections") == [{"trace_index": 1}]


def test_a_version_8_store_gets_the_vantage_columns(tmp_path):
    db = tmp_path / "v8.duckdb"
    Store(db).close()
    con = duckdb.connect(str(db))
    for table in ("runs", "probes"):
        con.execute(f"ALTER TABLE {table} DROP COLUMN vantage")
    con.execute("UPDATE store_meta SET value = '8' WHERE key = 'schema_version'")
    con.execute("INSERT INTO runs (run_id, name, shard, cid_run_tag, repetitions, arguments, host, started_at, "
                "resumed_at, quicack_version, aioquic_version, python_version, output_dir) "
                "VALUES (1, 'old', '', 7, 1, '{}', 'h', now()::TIMESTAMP, [], 'q', 'a', 'p', '/o')")
    con.close()
    with Store(db) as store:  # upgrade 8 → 9 happens here
        assert rows(store, "SELECT name, vantage FROM runs") == [{"name": "old", "vantage": None}]
        assert "vantage" in store.table("probes").columns
        assert rows(store, "SELECT value FROM store_meta WHERE key = 'schema_version'") == [{"value": str(SCHEMA_VERSION)}]
