"""One test per producer quirk in quicack.qlog.dialect.QUIRKS (and the time quirks of the readers).

Real files where this repository has them (picoquic, pcap2qlog, aioquic); minimal hand-written
files in the producer's documented shape where it has none (neqo, mvfst, quinn, quic-go, ngtcp2).
"""

from __future__ import annotations

import pytest

from conftest import DATA, rows, write_json, write_seq
from quicack.qlog import dialect as qlog


def _ack_packet(name, packet_type, pn, ack_delay=None, largest=0):
    ack = {"frame_type": "ack", "acked_ranges": [[0, largest]]}
    if ack_delay is not None:
        ack["ack_delay"] = ack_delay
    return {"time": 10.0, "name": name, "data": {
        "header": {"packet_type": packet_type, "packet_number": pn}, "frames": [ack]}}


def test_picoquic_logs_the_encoded_ack_delay(store):
    # picoquic's reference server trace: the 1-RTT ACK sent at 25196 µs acknowledges pn 4,
    # which arrived at 23602 µs (1594 µs earlier); it logs ack_delay 199 = 1592 µs / 2^3.
    store.ingest(DATA / "picoquic/picoquictest/qlog_trace_ref.txt")
    ack = rows(store, """SELECT f.ack_delay_ms, f.ack_delay_raw, p.time_ms FROM frames f
                         JOIN packets p USING (connection_id, event_index)
                         WHERE f.frame_type = 'ack' AND p.direction = 'sent' AND f.largest_acknowledged = 4""")
    assert len(ack) == 1
    assert ack[0]["ack_delay_raw"] == 199
    assert ack[0]["ack_delay_ms"] == pytest.approx(199 * 8 / 1000)
    assert ack[0]["time_ms"] == pytest.approx(25.196)  # time_units us
    received = rows(store, """SELECT time_ms FROM packets WHERE direction = 'received'
                              AND packet_type = '1RTT' AND packet_number = 4""")
    assert ack[0]["time_ms"] - received[0]["time_ms"] == pytest.approx(ack[0]["ack_delay_ms"], abs=0.008)


def test_pcap2qlog_copies_the_raw_ack_delay_field(store):
    # spin_bit.qlog: the server's first Initial carries "ack_delay": "451" (tshark's raw field);
    # an Initial ACK is decoded with the default exponent 3.
    store.ingest(DATA / "pcap2qlog/examples/draft-01/spin_bit.qlog")
    ack = rows(store, """SELECT f.ack_delay_ms, f.ack_delay_raw FROM frames f JOIN packets p USING (connection_id, event_index)
                         WHERE p.sender = 'server' AND p.packet_type = 'initial' AND f.frame_type = 'ack'""")
    assert ack[0] == {"ack_delay_ms": pytest.approx(3.608), "ack_delay_raw": 451}


def test_pcap2qlog_raw_1rtt_ack_delays_use_the_default_exponent_when_none_is_logged(store):
    # ngtcp2-29-dsb.qlog (draft-02): no transport parameter in the trace names an exponent, so
    # the raw fields ("307", "246", …) are × 2^3 µs in 1-RTT packets too (RFC 9000 §18.2 default 3)
    import orjson
    path = DATA / "pcap2qlog/examples/draft-02/ngtcp2-29-dsb.qlog"
    events = orjson.loads(path.read_bytes())["traces"][1]["events"]
    raw = [int(f["ack_delay"]) for e in events if e[3].get("packet_type") == "1RTT"
           for f in e[3]["frames"] if f["frame_type"] == "ack"]
    assert len(raw) == 5 and 307 in raw
    store.ingest(path)
    assert rows(store, "SELECT ack_delay_exponent FROM transport_parameters WHERE ack_delay_exponent IS NOT NULL") == []
    got = rows(store, """SELECT f.ack_delay_ms FROM frames f JOIN packets p USING (connection_id, event_index)
                         WHERE p.packet_type = '1RTT' AND f.frame_type = 'ack' ORDER BY p.event_index""")
    assert [r["ack_delay_ms"] for r in got] == pytest.approx([r * 8 / 1000 for r in raw])


def test_neqo_raw_ack_delay_uses_the_senders_exponent_after_the_handshake(store, tmp_path):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "neqo-Client", "type": "client"}}}
    events = [
        {"time": 1.0, "name": "transport:parameters_set", "data": {"owner": "remote", "ack_delay_exponent": 5}},
        _ack_packet("transport:packet_received", "initial", 0, ack_delay=100),
        _ack_packet("transport:packet_received", "1RTT", 0, ack_delay=100),
    ]
    store.ingest(write_seq(tmp_path / "neqo.sqlog", header, events))
    got = rows(store, """SELECT p.packet_type, f.ack_delay_ms FROM frames f JOIN packets p
                         USING (connection_id, event_index) ORDER BY p.event_index""")
    assert got == [{"packet_type": "initial", "ack_delay_ms": pytest.approx(0.8)},
                   {"packet_type": "1RTT", "ack_delay_ms": pytest.approx(3.2)}]


@pytest.mark.parametrize("exponent, expected_ms", [(20, 100 * 2 ** 20 / 1000), (21, None), (-1, None)])
def test_raw_ack_delay_with_an_invalid_exponent_is_left_undecoded(store, tmp_path, exponent, expected_ms):
    # RFC 9000 §18.2: "Values above 20 are invalid." (and a varint is never negative): the
    # sender's scaling is unknown, so the 1-RTT delay stays NULL beside its raw field; the
    # Initial ACK, sent before any transport parameter, still uses 3; the parameter is kept as logged
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "neqo-Client", "type": "client"}}}
    events = [
        {"time": 1.0, "name": "transport:parameters_set", "data": {"owner": "remote", "ack_delay_exponent": exponent}},
        _ack_packet("transport:packet_received", "initial", 0, ack_delay=100),
        _ack_packet("transport:packet_received", "1RTT", 0, ack_delay=100),
    ]
    store.ingest(write_seq(tmp_path / "neqo.sqlog", header, events))
    got = rows(store, """SELECT p.packet_type, f.ack_delay_ms, f.ack_delay_raw FROM frames f JOIN packets p
                         USING (connection_id, event_index) ORDER BY p.event_index""")
    assert got == [{"packet_type": "initial", "ack_delay_ms": pytest.approx(0.8), "ack_delay_raw": 100},
                   {"packet_type": "1RTT", "ack_delay_ms": pytest.approx(expected_ms), "ack_delay_raw": 100}]
    assert rows(store, "SELECT ack_delay_exponent FROM transport_parameters") == [{"ack_delay_exponent": exponent}]


def test_mvfst_metric_update_and_microsecond_ack_delay(store, tmp_path):
    doc = {"qlog_version": "draft-00", "title": "mvfst", "traces": [{
        "vantage_point": {"type": "server"}, "common_fields": {"reference_time": "1600000000000"},
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [
            ["5", "transport", "packet_sent", {"packet_type": "initial", "header": {"packet_number": 0},
                                                "frames": [{"frame_type": "ack", "ack_delay": 1500,
                                                            "acked_ranges": [[0, 0]]}]}],
            ["6", "recovery", "metric_update", {"latest_rtt": 20, "smoothed_rtt": 20, "min_rtt": 20}],
        ]}]}
    store.ingest(write_json(tmp_path / "mvfst.qlog", doc))
    assert rows(store, "SELECT ack_delay_ms FROM frames") == [{"ack_delay_ms": pytest.approx(1.5)}]
    assert rows(store, "SELECT smoothed_rtt_ms FROM logged_metrics") == [{"smoothed_rtt_ms": 20.0}]
    assert rows(store, "SELECT implementation FROM connections") == [{"implementation": "mvfst"}]


def test_quinn_one_stream_many_connections_rtts_in_seconds(store, tmp_path):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "client"}, "title": "quinn"}}
    events = [
        {"time": 0.0, "name": "transport:packet_sent", "group_id": "c1",
         "data": {"header": {"packet_type": "initial", "packet_number": 0}}},
        {"time": 1.0, "name": "transport:packet_sent", "group_id": "c2",
         "data": {"header": {"packet_type": "initial", "packet_number": 0}}},
        {"time": 30.0, "name": "recovery:metrics_updated", "group_id": "c1",
         "data": {"smoothed_rtt": 0.025, "latest_rtt": 0.03, "min_rtt": 0.025, "rtt_variance": 0.0125}},
    ]
    result = store.ingest(write_seq(tmp_path / "quinn.sqlog", header, events))
    assert result.connections == 2
    conns = rows(store, "SELECT group_id, odcid, events FROM connections ORDER BY connection_id")
    assert conns == [{"group_id": "c1", "odcid": "c1", "events": 2}, {"group_id": "c2", "odcid": "c2", "events": 1}]
    m = rows(store, "SELECT smoothed_rtt_ms, latest_rtt_ms, rtt_variance_ms FROM logged_metrics")[0]
    assert m == {"smoothed_rtt_ms": pytest.approx(25.0), "latest_rtt_ms": pytest.approx(30.0),
                 "rtt_variance_ms": pytest.approx(12.5)}
    # packets carry no frames in quinn's qlog: ack-elicitation is unknown, not false
    assert rows(store, "SELECT DISTINCT ack_eliciting, frame_count FROM packets") == [
        {"ack_eliciting": None, "frame_count": 0}]


@pytest.mark.parametrize("producer, expected", [("quic-go", 0.0), ("someone-else", None)])
def test_quic_go_omits_zero_ack_delay(store, tmp_path, producer, expected):
    header = {"file_schema": "urn:ietf:params:qlog:file:sequential", "qlog_format": "JSON-SEQ",
              "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"},
                                               "title": f"{producer} event trace"}}
    store.ingest(write_seq(tmp_path / "q.sqlog", header,
                           [_ack_packet("transport:packet_received", "1RTT", 3)]))
    assert rows(store, "SELECT ack_delay_ms FROM frames") == [{"ack_delay_ms": expected}]


def test_aioquic_writes_epoch_millisecond_times(store):
    # aioquic 0.3 JSON: no reference_time, the first event's "time" is 1795331576819.0432 (epoch ms).
    store.ingest(DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog")
    conn = rows(store, "SELECT implementation, first_event_epoch_ms, quirks FROM connections")[0]
    assert conn["implementation"] == "aioquic"
    assert conn["first_event_epoch_ms"] == pytest.approx(1795331576819.0432)
    assert "absolute_epoch_times" in conn["quirks"]
    first = rows(store, "SELECT min(time_ms) AS t, min(epoch_ms) AS e FROM packets")[0]
    assert first["t"] >= 0 and first["e"] >= conn["first_event_epoch_ms"]


def test_epoch_millisecond_times_are_found_in_a_json_seq_stream_too(store, tmp_path):
    # The same aioquic events written as a JSON-SEQ stream (its header without reference_time):
    # the reader sniffs the first record's time there, not from a parsed document.
    import orjson
    doc = orjson.loads((DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog").read_bytes())
    trace = doc["traces"][0]
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {k: v for k, v in trace.items() if k != "events"}}
    store.ingest(write_seq(tmp_path / "aioquic.sqlog", header, trace["events"]))
    conn = rows(store, "SELECT first_event_epoch_ms, quirks FROM connections")[0]
    assert conn["first_event_epoch_ms"] == pytest.approx(trace["events"][0]["time"])
    assert "absolute_epoch_times" in conn["quirks"]
    assert rows(store, "SELECT min(time_ms) AS t FROM packets")[0]["t"] < 1e6  # since the first event, not epoch


def test_ngtcp2_reference_time_zero_means_no_epoch(store, tmp_path):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "ngtcp2", "type": "server"},
                        "common_fields": {"reference_time": 0}}}
    store.ingest(write_seq(tmp_path / "n.sqlog", header,
                           [dict(_ack_packet("transport:packet_sent", "initial", 0, 1.0), time=12),
                            dict(_ack_packet("transport:packet_sent", "handshake", 0, 1.0), time=15)]))
    assert rows(store, "SELECT time_ms, epoch_ms FROM packets ORDER BY event_index") == [
        {"time_ms": 0.0, "epoch_ms": None}, {"time_ms": 3.0, "epoch_ms": None}]


def test_reference_time_in_seconds_is_scaled(store):
    # pcap2qlog writes "reference_time": "1564682471.651907" (seconds).
    store.ingest(DATA / "pcap2qlog/examples/draft-01/spin_bit.qlog")
    conn = rows(store, "SELECT reference_epoch_ms FROM connections")[0]
    assert conn["reference_epoch_ms"] == pytest.approx(1564682471651.907)


def test_every_quirk_has_a_test_here():
    import inspect
    import sys
    source = inspect.getsource(sys.modules[__name__])
    for producer in qlog.QUIRKS:
        assert producer in source, f"quirk {producer} has no test"


@pytest.mark.parametrize("name, canonical", [
    ("transport:packet_sent", "packet_sent"), ("quic:packet_sent", "packet_sent"),
    ("PACKET_RX", "packet_received"), ("recovery:metric_update", "metrics_updated"),
    ("quic:recovery_metrics_updated", "metrics_updated"), ("NEW CONNECTION", "new_connection"),
    ("PACKET_TX", "packet_sent"), ("recovery:loss_timer_set", "loss_timer_updated"),
    ("recovery:loss_timer_expired", "loss_timer_updated"), ("transport:transport_parameters_set", "parameters_set"),
    (" Transport:Packet Sent ", "packet_sent")])
def test_canonical_event_names(name, canonical):
    assert qlog.canonical_event(name) == canonical


# --- quirks found on the real peers (tests/data/peers, generated by quicack.lab.peers; MANIFEST) ---

PEERS_DATA = DATA / "peers"


def test_quinn_vantage_unknown_is_taken_from_the_first_packet(store):
    # quinn's header says "vantage_point": {"type": "unknown"}; the server's first event is
    # transport:packet_received of an Initial (read off the file), so it is the server.
    store.ingest(PEERS_DATA / "quinn/server.sqlog")
    conn = rows(store, "SELECT vantage, implementation, quirks FROM connections")
    assert [(c["vantage"], c["implementation"]) for c in conn] == [("server", "quinn")]
    assert "vantage_from_first_packet" in conn[0]["quirks"]
    first = rows(store, "SELECT direction, sender, packet_type FROM packets ORDER BY event_index LIMIT 2")
    assert first == [{"direction": "received", "sender": "client", "packet_type": "initial"},
                     {"direction": "sent", "sender": "server", "packet_type": "initial"}]


@pytest.mark.parametrize("first_event, packet_type, vantage", [
    ("transport:packet_sent", "initial", "client"),
    ("transport:packet_received", "initial", "server"),
    ("transport:packet_received", "1RTT", "unknown"),  # a trace cut at the start: no guess
])
def test_unknown_vantage_from_the_first_packet_event(store, tmp_path, first_event, packet_type, vantage):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "unknown"}, "title": "quinn"}}
    events = [{"time": 1.0, "name": "recovery:metrics_updated", "group_id": "c1", "data": {"smoothed_rtt": 0.333}},
              {"time": 2.0, "name": first_event, "group_id": "c1",
               "data": {"header": {"packet_type": packet_type, "packet_number": 0}}}]
    store.ingest(write_seq(tmp_path / "q.sqlog", header, events))
    assert rows(store, "SELECT vantage FROM connections") == [{"vantage": vantage}]


def test_ngtcp2_latest_rtt_zero_before_the_first_sample_is_null(store):
    # gtlsserver's metrics_updated events before its first RTT sample read
    # {"smoothed_rtt":333,"latest_rtt":0,"rtt_variance":166,...} without min_rtt (lines 5-11 of
    # the file); the first one with a sample (line 13) has min_rtt 3, latest_rtt 3.
    store.ingest(PEERS_DATA / "ngtcp2/server.sqlog")
    m = rows(store, "SELECT latest_rtt_ms, min_rtt_ms, smoothed_rtt_ms FROM logged_metrics ORDER BY event_index")
    assert m[:4] == [{"latest_rtt_ms": None, "min_rtt_ms": None, "smoothed_rtt_ms": 333.0}] * 4
    assert m[4] == {"latest_rtt_ms": 3.0, "min_rtt_ms": 3.0, "smoothed_rtt_ms": 3.0}


def test_ngtcp2_latest_rtt_zero_after_a_sample_stays_zero(store, tmp_path):
    # integer milliseconds: a sub-millisecond sample is logged as 0 with min_rtt 0 — a real 0
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "ngtcp2", "type": "server"},
                        "common_fields": {"reference_time": 0}}}
    store.ingest(write_seq(tmp_path / "n.sqlog", header, [
        {"time": 5, "name": "recovery:metrics_updated", "data": {"min_rtt": 0, "latest_rtt": 0, "smoothed_rtt": 1}}]))
    assert rows(store, "SELECT latest_rtt_ms FROM logged_metrics") == [{"latest_rtt_ms": 0.0}]


def _first_datagram(store, vantage: str, direction: str) -> list[dict]:
    return rows(store, f"""
        SELECT p.packet_type, p.packet_number, p.size_bytes FROM packets p JOIN connections c USING (connection_id)
        WHERE c.vantage = '{vantage}' AND p.direction = '{direction}' AND p.datagram_id = (
            SELECT min(datagram_id) FROM packets q WHERE q.connection_id = p.connection_id
            AND q.direction = '{direction}')
        ORDER BY p.event_index""")


@pytest.mark.parametrize("peer, expected, payload_bytes", [
    # read off each client-aioquic.qlog: the first transport:datagrams_received event
    # ("payload_length") and the packet_received events after it, before the next one
    ("ngtcp2", [("initial", 0), ("handshake", 0), ("1RTT", 0)], 1200),
    ("quic-go", [("initial", 0), ("handshake", 1), ("1RTT", 2)], 1280),
    ("quinn", [("initial", 0), ("handshake", 0)], 1200),
    ("caddy", [("initial", 0), ("handshake", 0), ("1RTT", 0)], 1252),
])
def test_aioquic_received_packets_share_the_datagram_logged_before_them(store, peer, expected, payload_bytes):
    # aioquic logs each packet_received when it has processed it (the Handshake packet of the
    # ngtcp2 trace 5 ms after the Initial of the same datagram): times cannot tell coalescing.
    store.ingest(PEERS_DATA / peer / "client-aioquic.qlog")
    first = _first_datagram(store, "client", "received")
    assert [(p["packet_type"], p["packet_number"]) for p in first] == expected
    assert sum(p["size_bytes"] for p in first) == payload_bytes


def test_quic_go_datagram_payload_checksum_marks_coalesced_packets(store):
    # quic-go v0.65 writes "datagram_payload_checksum": 1625009644 on its first three packets
    # (Initial pn 0, Handshake pn 1, 1-RTT pn 2, logged at 1.270273, 1.270754, 1.271875 ms)
    # and another checksum on the next; the client saw them in one 1280-byte datagram.
    store.ingest(PEERS_DATA / "quic-go/server.sqlog")
    first = _first_datagram(store, "server", "sent")
    assert [(p["packet_type"], p["packet_number"]) for p in first] == [("initial", 0), ("handshake", 1), ("1RTT", 2)]
    assert sum(p["size_bytes"] for p in first) == 1280


def test_rtt_logged_before_the_first_sent_packet_is_not_a_sample(store):
    # quinn's first metrics_updated of the connection (line 3 of the file, right after the
    # client's Initial was received, before anything was sent) reads min_rtt = latest_rtt =
    # smoothed_rtt = 0.333 s, rtt_variance 0.1665 s: its initial RTT, not a measurement.
    store.ingest(PEERS_DATA / "quinn/server.sqlog")
    m = rows(store, "SELECT latest_rtt_ms, min_rtt_ms, smoothed_rtt_ms, rtt_variance_ms FROM logged_metrics ORDER BY event_index")
    assert m[0] == {"latest_rtt_ms": None, "min_rtt_ms": None, "smoothed_rtt_ms": pytest.approx(333.0),
                    "rtt_variance_ms": pytest.approx(166.5)}
    samples = [r["latest_rtt_ms"] for r in m if r["latest_rtt_ms"] is not None]
    assert samples and all(0 < s < 100 for s in samples)  # loopback samples, in ms


def test_scanner_traces_without_datagram_events_group_received_packets_by_time(store):
    # The scanner's probes log no transport:datagrams_received (quicack.scan.connection.SKIPPED_EVENTS) but
    # stamp every packet of a datagram with the datagram's kernel receive time.  In the first trace
    # of scan-client.qlog (a probe of Caddy) the packets received at 1795425255142.1064 are one
    # datagram (Initial 543 + Handshake 653 + 1-RTT 56 bytes: 1252, as the capture of that scan
    # shows), and the four received at .145.0383, .145.0557, .145.217 and .148.9324 four datagrams
    # (the capture: frames 19, 20, 21, 22).
    store.ingest(PEERS_DATA / "caddy/scan-client.qlog")
    got = rows(store, """SELECT p.datagram_id, list(p.packet_type || ' ' || p.packet_number ORDER BY p.event_index) AS packets
        FROM packets p JOIN connections c USING (connection_id)
        WHERE c.trace_index = 0 AND p.direction = 'received' GROUP BY ALL ORDER BY 1""")
    assert [g["packets"] for g in got] == [["initial 0", "handshake 0", "1RTT 0"], ["handshake 1"], ["1RTT 1"],
                                           ["1RTT 2"], ["1RTT 3"]]


def test_quinn_server_group_id_is_the_client_source_cid_not_the_odcid(store):
    # quinn-proto 0.11 tags every event with its connection's orig_rem_cid: on the server the
    # client's initial source CID.  The aioquic client of the same connection logged its first
    # Initial with scid 3807a70634526fb4 (= quinn's group_id) and dcid 7927b1d125344746 (its ODCID).
    store.ingest(PEERS_DATA / "quinn/server.sqlog")
    store.ingest(PEERS_DATA / "quinn/client-aioquic.qlog")
    got = rows(store, "SELECT vantage, group_id, odcid FROM connections ORDER BY connection_id")
    assert got == [{"vantage": "server", "group_id": "3807a70634526fb4", "odcid": None},
                   {"vantage": "client", "group_id": None, "odcid": "7927b1d125344746"}]


def test_quinn_client_group_id_is_the_odcid(store, tmp_path):
    # On a quinn client orig_rem_cid is the destination CID of its first Initial: the ODCID.
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",
              "trace": {"vantage_point": {"type": "unknown"}, "title": "quinn"}}
    events = [{"time": 1.0, "name": "transport:packet_sent", "group_id": "aa01",
               "data": {"header": {"packet_type": "initial", "packet_number": 0, "length": 1200}}}]
    store.ingest(write_seq(tmp_path / "quinn.sqlog", header, events))
    assert rows(store, "SELECT vantage, odcid FROM connections") == [{"vantage": "client", "odcid": "aa01"}]


def test_quic_go_metrics_before_the_packet_that_carried_the_ack(store):
    # quic-go writes packet_received after handling the packet's frames: in server.sqlog the
    # metrics_updated with the first RTT sample (line 30: latest 3.313907, rttvar 1.656953) comes
    # before the client's Initial pn 1 carrying the ACK (line 32), and the one after the Handshake
    # ACK (line 35: smoothed 3.313, rttvar 1.242, float32 µs) before that Handshake packet.
    store.ingest(PEERS_DATA / "quic-go/server.sqlog")
    got = rows(store, """SELECT packet_number_space AS space, logged_event_index < event_index AS before,
        logged_latest_rtt_ms, logged_smoothed_rtt_ms, logged_rttvar_ms FROM rtt_samples ORDER BY event_index LIMIT 2""")
    assert got == [
        {"space": "initial", "before": True, "logged_latest_rtt_ms": 3.313907, "logged_smoothed_rtt_ms": 3.313907,
         "logged_rttvar_ms": 1.656953},
        {"space": "handshake", "before": True, "logged_latest_rtt_ms": 3.313907, "logged_smoothed_rtt_ms": 3.313,
         "logged_rttvar_ms": 1.242}]


@pytest.mark.parametrize("header, trace", [
    ({"qlog_version": "0.3", "title": "exported by quicack"}, {}),  # exports before the configuration key
    ({"qlog_version": "0.3"}, {"configuration": {"quicack_export": {"connection_id": 4}}}),  # one trace copied out
])
def test_quicack_exports_keep_order_quirks_and_drop_value_quirks(header, trace):
    for name, kept in (("quic-go", "quic-go:metrics_before_packet_received"), ("aioquic", "aioquic:rx_datagram_events_first"),
                       ("picoquic", None), ("quinn", None), ("mvfst", None)):
        info = qlog.describe_trace(header, {**trace, "vantage_point": {"type": "client", "name": name}}, 0)
        assert info.implementation == name
        assert info.ack_delay_encoding is qlog.AckDelayEncoding.MS and info.metric_scale_ms == 1.0
        assert not info.missing_ack_delay_is_zero and not info.latest_rtt_zero_is_unset
        assert [q for q in info.quirks if q.startswith(name)] == ([kept] if kept else [])
        assert "quicack_export" in info.quirks
    plain = qlog.describe_trace({"qlog_version": "0.3", "title": "quicack"}, {"vantage_point": {"name": "picoquic"}}, 0)
    assert plain.ack_delay_encoding is qlog.AckDelayEncoding.RAW and "quicack_export" not in plain.quirks


def test_quic_go_metrics_before_an_earlier_received_packet_are_not_those_of_the_ack(store, tmp_path):
    # With metrics_before_packet_received, a sample's logged values are the last metrics event
    # *after the previous received packet*: one logged before that packet belongs to its handling.
    # Client view: pn 0 and 1 sent; server pn 0 acknowledges 0 (metrics logged before it: 10 ms),
    # then server pn 1 acknowledges 1 with no metrics event logged for it.
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "client"}, "title": "quic-go qlog"}}

    def received(t, pn, largest):
        return {"time": t, "name": "transport:packet_received",
                "data": {"header": {"packet_type": "1RTT", "packet_number": pn},
                         "frames": [{"frame_type": "ack", "acked_ranges": [[0, largest]]}]}}
    events = [
        {"time": 0, "name": "transport:packet_sent",
         "data": {"header": {"packet_type": "1RTT", "packet_number": 0}, "frames": [{"frame_type": "ping"}]}},
        {"time": 5, "name": "transport:packet_sent",
         "data": {"header": {"packet_type": "1RTT", "packet_number": 1}, "frames": [{"frame_type": "ping"}]}},
        {"time": 10, "name": "recovery:metrics_updated", "data": {"latest_rtt": 10, "smoothed_rtt": 10, "rtt_variance": 5}},
        received(10, 0, 0),
        received(25, 1, 1),
    ]
    store.ingest(write_seq(tmp_path / "qg.sqlog", header, events))
    got = rows(store, """SELECT event_index, latest_rtt_ms, logged_event_index, logged_latest_rtt_ms
                         FROM rtt_samples ORDER BY event_index""")
    assert got == [{"event_index": 3, "latest_rtt_ms": 10.0, "logged_event_index": 2, "logged_latest_rtt_ms": 10.0},
                   {"event_index": 4, "latest_rtt_ms": 20.0, "logged_event_index": None, "logged_latest_rtt_ms": None}]


@pytest.mark.parametrize("producer", ["quiche", "tquic"])
def test_quiche_and_tquic_log_the_ack_delay_field_over_1000(store, producer):
    # `ack_delay as f32 / 1000.0` (their src/frame.rs): back to the field, × 2^3 µs; more in
    # tests/qlog/test_peer_quirks.py on the same traces
    assert store.ingest(DATA / "peers" / producer / "server.sqlog").status == "ingested"
    acks = rows(store, "SELECT ack_delay_ms, ack_delay_raw FROM frames WHERE frame_type = 'ack'")
    assert acks and all(a["ack_delay_ms"] == pytest.approx(a["ack_delay_raw"] * 0.008) for a in acks)
