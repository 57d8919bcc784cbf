"""Every qlog generation and serialization maps the same client-side handshake to the same rows.

One logical connection, seen by a client: it sends Initial pn 0 (CRYPTO + PADDING) at 0 ms; the
server's Initial pn 0 (ACK of 0 with ack_delay 1.5 ms, CRYPTO) arrives at 25 ms; the client logs
its RTT at 25 ms; an unknown event follows.  Each generation writes this in its own shape (real
files of each generation are covered by test_shared_traces.py; these are the hand-written minimal
ones for shapes no real file here has).
"""

from __future__ import annotations

import pytest

from conftest import DATA, rows, write_json, write_seq
from quicack.qlog import dialect as qlog

REFERENCE_MS = 1_700_000_000_000.0
CLIENT_INITIAL = {"packet_type": "initial", "packet_number": 0, "size": 1252,
                  "frames": [{"frame_type": "crypto", "offset": 0, "length": 280}, {"frame_type": "padding"}]}
SERVER_INITIAL = {"packet_type": "initial", "packet_number": 0, "size": 180,
                  "frames": [{"frame_type": "ack", "ack_delay": 1.5, "acked_ranges": [[0, 0]]},
                             {"frame_type": "crypto", "offset": 0, "length": 90}]}


def _data_03(p, stringly=False):
    conv = str if stringly else (lambda v: v)
    frames = []
    for f in p["frames"]:
        g = {k: (conv(v) if k in ("offset", "length", "ack_delay") else v) for k, v in f.items()}
        if "acked_ranges" in g:
            g["acked_ranges"] = [[conv(a) for a in r] for r in f["acked_ranges"]]
        frames.append(g)
    return {"header": {"packet_type": p["packet_type"], "packet_number": conv(p["packet_number"])},
            "raw": {"length": p["size"]}, "frames": frames}


def _data_draft(p, stringly=True, scale=1.0):
    d = _data_03(p, False)
    frames = d["frames"]
    for f in frames:
        if "ack_delay" in f:
            f["ack_delay"] *= scale
        for k in ("offset", "length", "ack_delay"):
            if stringly and k in f:
                f[k] = str(f[k])
    return {"packet_type": p["packet_type"],
            "header": {"packet_number": str(p["packet_number"]), "packet_size": p["size"]},
            "frames": frames}


METRICS = {"latest_rtt": 25, "min_rtt": 25, "smoothed_rtt": 25, "rtt_variance": 12.5, "congestion_window": 14720,
           "bytes_in_flight": 0}


def draft01(tmp_path, gz=False):
    events = [["0", "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["25", "transport", "packet_received", _data_draft(SERVER_INITIAL)],
              ["25", "recovery", "metrics_updated", METRICS],
              ["26", "transport", "something_new", {"x": 1}]]
    doc = {"qlog_version": "draft-01", "traces": [{
        "vantage_point": {"name": "aioquic", "type": "client"},
        "common_fields": {"ODCID": "aabb", "reference_time": str(int(REFERENCE_MS))},
        "event_fields": ["relative_time", "category", "event_type", "data"], "events": events}]}
    return write_json(tmp_path / ("d1.qlog.gz" if gz else "d1.qlog"), doc, gz)


def draft02_delta(tmp_path):
    events = [["0", "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["25", "transport", "packet_received", _data_draft(SERVER_INITIAL)],
              ["0", "recovery", "metrics_updated", METRICS],
              ["1", "transport", "something_new", {"x": 1}]]
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"},
        "common_fields": {"ODCID": "aabb", "reference_time": str(REFERENCE_MS / 1000)},  # seconds
        "event_fields": ["delta_time", "category", "event", "data"], "events": events}]}
    return write_json(tmp_path / "d2.qlog", doc)


def draft02_delta_absolute_first(tmp_path):
    # "The first event in a trace typically logs the full absolute timestamp" (main schema of
    # the draft-02 era, time_format "delta"): no reference_time, the running sum is epoch ms
    events = [[str(int(REFERENCE_MS)), "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["25", "transport", "packet_received", _data_draft(SERVER_INITIAL)],
              ["0", "recovery", "metrics_updated", METRICS],
              ["1", "transport", "something_new", {"x": 1}]]
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb"},
        "event_fields": ["delta_time", "category", "event", "data"], "events": events}]}
    return write_json(tmp_path / "d2abs.qlog", doc)


def _delta_object_events(prefix="transport"):
    events = _object_events(prefix, "recovery" if prefix == "transport" else prefix)
    for event, delta in zip(events, (REFERENCE_MS, 25, 0, 1)):
        event["time"] = delta
    return events


def v03_delta(tmp_path):
    # 0.3 common_fields.time_format "delta", first event absolute (the draft's example: 1500, 5, 17, 66)
    doc = {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "time_format": "delta"},
        "events": _delta_object_events()}]}
    return write_json(tmp_path / "v03delta.qlog", doc)


def v03_absolute(tmp_path):
    events = _object_events()
    for event in events:
        event["time"] += REFERENCE_MS
    doc = {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "time_format": "absolute"},
        "events": events}]}
    return write_json(tmp_path / "v03abs.qlog", doc)


def main_schema_previous_event(tmp_path):
    # the main schema's own relative_to_previous_event example: epoch 1970, first time absolute
    header = {"file_schema": "urn:ietf:params:qlog:file:sequential", "serialization_format": "application/qlog+json-seq",
              "trace": {"vantage_point": {"type": "client"}, "common_fields": {
                  "group_id": "aabb", "time_format": "relative_to_previous_event",
                  "reference_time": {"clock_type": "system", "epoch": "1970-01-01T00:00:00.000Z"}}}}
    events = _delta_object_events("quic")
    events[2]["name"] = "quic:recovery_metrics_updated"
    return write_seq(tmp_path / "msdelta.sqlog", header, events)


def draft01_common_event_fields(tmp_path):
    # event_fields among the common_fields, times epoch ms with no reference_time
    events = [[REFERENCE_MS, "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              [REFERENCE_MS + 25, "transport", "packet_received", _data_draft(SERVER_INITIAL)],
              [REFERENCE_MS + 25, "recovery", "metrics_updated", METRICS],
              [REFERENCE_MS + 26, "transport", "something_new", {"x": 1}]]
    doc = {"qlog_version": "draft-01", "traces": [{
        "vantage_point": {"type": "client"},
        "common_fields": {"ODCID": "aabb", "event_fields": ["relative_time", "category", "event", "data"]},
        "events": events}]}
    return write_json(tmp_path / "d1common.qlog", doc)


def draft00_upper_case(tmp_path):
    # event_fields, vantage type and names in capitals (as qlog 0.1 wrote its categories and types)
    events = [["0", "TRANSPORT", "PACKET_SENT", _data_draft(CLIENT_INITIAL)],
              ["25", "TRANSPORT", "PACKET_RECEIVED", _data_draft(SERVER_INITIAL)],
              ["25", "RECOVERY", "METRICS_UPDATED", METRICS],
              ["26", "TRANSPORT", "SOMETHING_NEW", {"x": 1}]]
    doc = {"qlog_version": "draft-00", "traces": [{
        "vantage_point": {"type": "CLIENT"},
        "common_fields": {"ODCID": "aabb", "reference_time": str(int(REFERENCE_MS))},
        "event_fields": ["RELATIVE_TIME", "CATEGORY", "EVENT_TYPE", "DATA"], "events": events}]}
    return write_json(tmp_path / "d0upper.qlog", doc)


def draft00_us(tmp_path):
    us = 1000
    metrics = {k: (v * us if k.endswith("rtt") or k == "rtt_variance" else v) for k, v in METRICS.items()}
    events = [[0, "transport", "packet_sent", _data_draft(CLIENT_INITIAL, stringly=False)],
              [25 * us, "transport", "packet_received", _data_draft(SERVER_INITIAL, stringly=False, scale=us)],
              [25 * us, "recovery", "metrics_updated", metrics],
              [26 * us, "transport", "something_new", {"x": 1}]]
    doc = {"qlog_version": "draft-00", "title": "some stack", "traces": [{
        "vantage_point": {"type": "client"}, "configuration": {"time_units": "us"},
        "common_fields": {"ODCID": "aabb", "reference_time": str(int(REFERENCE_MS * 1000))},  # µs
        "event_fields": ["relative_time", "category", "event", "data"], "events": events}]}
    return write_json(tmp_path / "d0.qlog", doc)


def _object_events(prefix_t="transport", prefix_r="recovery"):
    return [{"time": 0, "name": f"{prefix_t}:packet_sent", "data": _data_03(CLIENT_INITIAL)},
            {"time": 25, "name": f"{prefix_t}:packet_received", "data": _data_03(SERVER_INITIAL)},
            {"time": 25, "name": f"{prefix_r}:metrics_updated", "data": METRICS},
            {"time": 26, "name": f"{prefix_t}:something_new", "data": {"x": 1}}]


def v03_json(tmp_path, gz=False):
    doc = {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": "client"},
        "common_fields": {"ODCID": "aabb", "reference_time": REFERENCE_MS, "time_format": "relative"},
        "events": _object_events()}]}
    return write_json(tmp_path / ("v03.qlog.gz" if gz else "v03.qlog"), doc, gz)


def v03_split_names(tmp_path):
    # "qlog tools SHOULD be able to deal with both the concatenated "name" field, and the separate
    # "category" and "type" fields" (draft-marx-qlog-main-schema); "event" as draft-01 called it
    events = _object_events()
    for event, key in zip(events, ("type", "event", "type", "event")):
        event["category"], event[key] = event.pop("name").split(":")
    doc = {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "reference_time": REFERENCE_MS},
        "events": events}]}
    return write_json(tmp_path / "v03split.qlog", doc)


def v03_seq(tmp_path, gz=False):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "reference_time": REFERENCE_MS}}}
    return write_seq(tmp_path / ("v03.sqlog.gz" if gz else "v03.sqlog"), header, _object_events(), gz)


def v04_json(tmp_path):
    doc = {"qlog_format": "JSON", "qlog_version": "0.4", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "reference_time": REFERENCE_MS},
        "events": _object_events("quic", "recovery")}]}
    return write_json(tmp_path / "v04.qlog", doc)


def main_schema_seq(tmp_path, gz=False):
    header = {"file_schema": "urn:ietf:params:qlog:file:sequential", "serialization_format": "application/qlog+json-seq",
              "trace": {"vantage_point": {"type": "client"}, "common_fields": {
                  "group_id": "aabb", "time_format": "relative_to_epoch",
                  "reference_time": {"clock_type": "system", "epoch": "2023-11-14T22:13:20Z"}}}}
    events = _object_events("quic", "quic")
    events[2]["name"] = "quic:recovery_metrics_updated"
    return write_seq(tmp_path / ("ms.sqlog.gz" if gz else "ms.sqlog"), header, events, gz)


def main_schema_json(tmp_path):
    doc = {"file_schema": "urn:ietf:params:qlog:file:contained", "serialization_format": "application/qlog+json",
           "traces": [{"vantage_point": {"type": "client"}, "common_fields": {
               "group_id": "aabb", "reference_time": {"clock_type": "monotonic", "epoch": "unknown",
                                                      "wall_clock_time": "2023-11-14T22:13:20Z"}},
                       "events": _object_events("quic", "quic")}]}
    return write_json(tmp_path / "ms.qlog", doc)


def ndjson_draft(tmp_path):
    header = {"qlog_format": "NDJSON", "qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"},
        "common_fields": {"ODCID": "aabb", "reference_time": str(int(REFERENCE_MS))},
        "event_fields": ["relative_time", "category", "event", "data"]}]}
    events = [["0", "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["25", "transport", "packet_received", _data_draft(SERVER_INITIAL)],
              ["25", "recovery", "metrics_updated", METRICS],
              ["26", "transport", "something_new", {"x": 1}]]
    return write_seq(tmp_path / "nd.ndjson", header, events, separator=b"")


GENERATIONS = {
    "draft-01 JSON, string numbers": draft01,
    "draft-01 JSON gzip": lambda p: draft01(p, gz=True),
    "draft-02 delta_time, reference in s": draft02_delta,
    "draft-02 delta_time, first time absolute": draft02_delta_absolute_first,
    "draft-01 event_fields in common_fields, epoch times": draft01_common_event_fields,
    "draft-00 time_units us": draft00_us,
    "draft-00 upper case": draft00_upper_case,
    "0.3 JSON": v03_json,
    "0.3 JSON gzip": lambda p: v03_json(p, gz=True),
    "0.3 JSON-SEQ": v03_seq,
    "0.3 JSON-SEQ gzip": lambda p: v03_seq(p, gz=True),
    "0.3 time_format delta": v03_delta,
    "0.3 category and type fields": v03_split_names,
    "0.3 time_format absolute": v03_absolute,
    "0.4 JSON quic:": v04_json,
    "main-schema JSON-SEQ": main_schema_seq,
    "main-schema JSON-SEQ gzip": lambda p: main_schema_seq(p, gz=True),
    "main-schema JSON wall clock": main_schema_json,
    "main-schema relative_to_previous_event": main_schema_previous_event,
    "draft NDJSON": ndjson_draft,
}


@pytest.mark.parametrize("make", GENERATIONS.values(), ids=GENERATIONS.keys())
def test_generation_maps_to_the_same_rows(store, tmp_path, make):
    path = make(tmp_path)
    result = store.ingest(path)
    assert result.status == "ingested", result.error
    assert (result.connections, result.packets, result.events) == (1, 2, 4)
    # the name as logged (case too), category included (array events log it in a column of its own)
    assert result.skipped_events in ({"transport:something_new": 1}, {"quic:something_new": 1},
                                     {"TRANSPORT:SOMETHING_NEW": 1})

    conn = rows(store, "SELECT vantage, odcid, first_event_epoch_ms FROM connections")[0]
    assert conn["vantage"] == "client" and conn["odcid"] == "aabb"
    assert conn["first_event_epoch_ms"] == pytest.approx(REFERENCE_MS)

    packets = rows(store, "SELECT * FROM packets ORDER BY event_index")
    assert [(p["direction"], p["sender"], p["packet_type"], p["packet_number_space"], p["packet_number"])
            for p in packets] == [("sent", "client", "initial", "initial", 0),
                                  ("received", "server", "initial", "initial", 0)]
    assert [p["time_ms"] for p in packets] == pytest.approx([0.0, 25.0])
    assert [p["epoch_ms"] for p in packets] == pytest.approx([REFERENCE_MS, REFERENCE_MS + 25])
    assert [p["size_bytes"] for p in packets] == [1252, 180]
    assert [p["ack_eliciting"] for p in packets] == [True, True]
    assert [p["datagram_id"] for p in packets] == [0, 1]

    frames = rows(store, """SELECT f.* FROM frames f JOIN packets p USING (connection_id, event_index)
                            WHERE p.sender = 'server' ORDER BY position""")
    assert [f["frame_type"] for f in frames] == ["ack", "crypto"]
    assert frames[0]["ack_delay_ms"] == pytest.approx(1.5)
    assert frames[0]["largest_acknowledged"] == 0 and frames[0]["acked_ranges"] == [[0, 0]]
    assert (frames[1]["offset_bytes"], frames[1]["length_bytes"]) == (0, 90)

    metrics = rows(store, "SELECT * FROM logged_metrics")
    assert len(metrics) == 1
    m = metrics[0]
    assert (m["time_ms"], m["latest_rtt_ms"], m["smoothed_rtt_ms"], m["rtt_variance_ms"]) == pytest.approx(
        (25.0, 25.0, 25.0, 12.5))
    assert m["congestion_window_bytes"] == 14720


def test_several_traces_in_one_file_are_several_connections(store, tmp_path):
    doc = {"qlog_version": "0.3", "traces": [
        {"vantage_point": {"type": "client"}, "common_fields": {"ODCID": "01", "reference_time": REFERENCE_MS},
         "events": _object_events()},
        {"vantage_point": {"type": "server"}, "common_fields": {"ODCID": "01", "reference_time": REFERENCE_MS},
         "events": _object_events()}]}
    result = store.ingest(write_json(tmp_path / "two.qlog", doc))
    assert (result.connections, result.packets) == (2, 4)
    senders = rows(store, """SELECT c.vantage, p.direction, p.sender FROM packets p JOIN connections c
                             USING (connection_id) ORDER BY c.trace_index, p.event_index""")
    assert [tuple(r.values()) for r in senders] == [
        ("client", "sent", "client"), ("client", "received", "server"),
        ("server", "sent", "server"), ("server", "received", "client")]


# What each real file's header says of its generation and producer (files.qlog_version,
# connections.implementation), and the words that say it.
_PRODUCERS = [
    ("local/aioquic-transfer/qlog_client/34d060400e22933c.qlog", "0.3", "aioquic"),  # vantage_point name "aioquic"
    ("pcap2qlog/examples/20181219_handshake_v6_quicker.edm.uhasselt.be.qlog", "0.1", "pcap2qlog"),  # 0.1 NETWORK
    ("pcap2qlog/examples/draft-01/ack_range.qlog", "draft-01", "pcap2qlog"),  # original_uris …/pcap2qlog/….json
    ("pcap2qlog/examples/draft-02/ngtcp2-29-dsb.qlog", "draft-02-wip", "pcap2qlog"),  # original_uris ….json only
    ("peers/ngtcp2/server.sqlog", "0.3", "ngtcp2"),  # vantage_point name "ngtcp2"
    ("peers/quic-go/server.sqlog", "0.3", "quic-go"),  # title "quic-go qlog"; qlog_version 0.3 beside file_schema
    ("peers/quinn/server.sqlog", "0.3", "quinn"),  # title "quinn 0.11.12 server …"
    ("picoquic/picoquictest/binlog_ref.qlog", "draft-00", "picoquic"),  # title "picoquic"
    ("quiche-qlog-crate/streamer_test_expected_main-schema.sqlog", "main-schema", "quiche"),  # "Quiche qlog trace"
]


@pytest.mark.parametrize("path, version, producer", _PRODUCERS, ids=[p for p, *_ in _PRODUCERS])
def test_real_files_are_told_apart_by_generation_and_producer(store, path, version, producer):
    result = store.ingest(DATA / path)
    assert result.status == "ingested", result.error
    assert rows(store, "SELECT DISTINCT f.qlog_version, c.implementation FROM connections c JOIN files f "
                       "USING (file_id)") == [{"qlog_version": version, "implementation": producer}]


@pytest.mark.parametrize("header, trace, producer", [
    ({"qlog_version": "0.3"}, {"vantage_point": {"type": "client", "name": "aioquic"}}, "aioquic"),
    # aioquic's header shape alone (0.3, ODCID, no reference time) names no producer: a quicack
    # export of an unnamed trace has it too, and aioquic's datagram quirk would be wrong there
    ({"qlog_version": "0.3"}, {"common_fields": {"ODCID": "ab"}}, "unknown"),
    ({"qlog_version": "0.3"}, {"vantage_point": {"type": "client", "name": "unknown"},
                               "common_fields": {"ODCID": "ab", "time_format": "relative"}}, "unknown"),
    # names found in the trace's description, configuration.code_version, the file's description
    ({"qlog_version": "0.3"}, {"description": "neqo client"}, "neqo"),
    ({"qlog_version": "0.3"}, {"configuration": {"code_version": "mvfst 2024.1"}}, "mvfst"),
    ({"qlog_version": "0.3", "description": "an msquic trace"}, {}, "msquic"),
    ({"qlog_version": "draft-02"}, {"configuration": {"original_uris": ["/data/pcap2qlog/out"]}}, "pcap2qlog"),
])
def test_the_producer_is_read_from_every_header_field_that_names_it(header, trace, producer):
    assert qlog.describe_trace(header, trace, 0).implementation == producer


@pytest.mark.parametrize("reference_time, epoch_ms, quirk", [
    (1_700_000_000, 1_700_000_000_000.0, None),  # seconds since the epoch
    (1_700_000_000_000, 1_700_000_000_000.0, None),  # ms
    (3_600_000, None, "reference_time_not_epoch"),  # an hour of a monotonic clock, in ms
    ("soon", None, "reference_time_not_epoch"),
    ("11001", None, "reference_time_not_epoch"),  # picoquic's reference traces (qlog_trace_ref.txt)
    ("1700000000000", 1_700_000_000_000.0, None),  # draft-01's string numbers
    (1_700_000_000_000_000, 1_700_000_000_000.0, None),  # µs
])
def test_a_reference_time_counts_as_epoch_only_within_this_century(reference_time, epoch_ms, quirk):
    info = qlog.describe_trace({"qlog_version": "0.3"}, {"common_fields": {"reference_time": reference_time}}, 0)
    assert info.reference_epoch_ms == epoch_ms
    assert (quirk in info.quirks) if quirk else "reference_time_not_epoch" not in info.quirks


def test_a_group_id_column_of_draft_array_events_tells_connections_apart(store, tmp_path):
    # qlog draft-01/02: "group_id" may be one of a trace's event_fields, one connection per value.
    events = [["0", "g1", "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["1", "g2", "transport", "packet_sent", _data_draft(CLIENT_INITIAL)],
              ["25", "g1", "transport", "packet_received", _data_draft(SERVER_INITIAL)]]
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"reference_time": str(int(REFERENCE_MS))},
        "event_fields": ["relative_time", "group_id", "category", "event", "data"], "events": events}]}
    result = store.ingest(write_json(tmp_path / "groups.qlog", doc))
    assert (result.status, result.connections, result.packets) == ("ingested", 2, 3)
    assert rows(store, """SELECT c.group_id, count(*) AS packets FROM packets JOIN connections c
                          USING (connection_id) GROUP BY 1 ORDER BY 1""") == [
        {"group_id": "g1", "packets": 2}, {"group_id": "g2", "packets": 1}]


def test_a_0_1_trace_starts_at_its_starttime_in_seconds(store):
    # pcap2qlog 0.1: "starttime": 1545242603.978787 (seconds), event times in ms from it
    path = DATA / "pcap2qlog/examples/20181219_handshake_v6_quicker.edm.uhasselt.be.qlog"
    assert store.ingest(path).status == "ingested"
    conn = rows(store, "SELECT reference_epoch_ms, first_event_epoch_ms FROM connections")
    assert conn == [{"reference_epoch_ms": pytest.approx(1545242603978.787),
                     "first_event_epoch_ms": pytest.approx(1545242603978.787)}]
    first = rows(store, "SELECT time_ms, epoch_ms FROM packets ORDER BY event_index LIMIT 1")[0]
    assert first["epoch_ms"] == pytest.approx(1545242603978.787 + first["time_ms"])
