"""Field spellings of the qlog normalizer that no other test reached, found by mutation testing of
quicack/qlog/normalize.py (dropping one alternative of a ``coalesce(...)`` spelling list, or one column
expression, at a time, and running the normalizer's tests).

Each test pins the column one spelling feeds: read off a real file in tests/data/ where one uses
that spelling (the event quoted in a comment; event_index = 0-based position of the event in its
trace, a JSON-SEQ header not counted; time_ms = event time minus the trace's first event time),
else from a minimal hand-written file in the shape of the qlog draft named beside it.  The audit
found five bugs, fixed with these tests: draft-00/01 STREAM frames' ``id`` and qlog 0.1's
``stream.stream_id``/``stream.length`` were not read, an absent ``fin`` gave NULL instead of
false, quic-go's ``parameters_set`` ``initiator`` was not read (both endpoints' parameters merged
into one 'local' row), and qlog 0.1's root ``connectionid`` (the client's source CID) was taken
for the ODCID; mvfst's ``reorder_threshold`` was not read either.
"""

from __future__ import annotations

import json

import orjson
import pytest

from conftest import DATA, ms, read_seq, tuples, write_json, write_seq

PICO_TRACE = DATA / "picoquic/picoquictest/qlog_trace_ref.txt"
QUIC_GO_SERVER = DATA / "peers/quic-go/server.sqlog"
NGTCP2_SERVER = DATA / "peers/ngtcp2/server.sqlog"
QUINN_SERVER = DATA / "peers/quinn/server.sqlog"
QUINN_CLIENT = DATA / "peers/quinn/client-aioquic.qlog"
PCAP2QLOG_MULTI_STREAM = DATA / "pcap2qlog/examples/draft-01/multi_stream.qlog"
PCAP2QLOG_01 = DATA / "pcap2qlog/examples/ngtcp2-pcap.qlog"
QUICKER_01 = DATA / "pcap2qlog/examples/20181219_handshake_v6_quicker.edm.uhasselt.be.qlog"
AIOQUIC_CLIENT = DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"
BINLOG = DATA / "picoquic/picoquictest/binlog_ref.qlog"
PARALLEL = DATA / "qvis/visualizations/public/standalone_data/draft-01/parallel_10_50KB_f5.qlog"
DOUBLEVANTAGE = DATA / "qvis/visualizations/public/standalone_data/draft-01/doublevantage_100ms.qlog"


SEQ_03 = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
          "trace": {"vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb"}}}


# ---------------------------------------------------------------- packets: size_bytes


def test_quinn_header_length_is_the_packet_size(store):
    # quinn 0.11 logs no raw.length; its sent packets say header.length, the whole packet's size:
    # server.sqlog events 2, 3, 5, 11, 13, 14 ("transport:packet_sent"):
    #   {"header": {"packet_type": "initial", "packet_number": 0, "length": 176}}
    #   {"header": {"packet_type": "handshake", "packet_number": 0, "length": 1024}}
    #   {"header": {"packet_type": "1RTT", "packet_number": 0, "length": 222}}, then 1RTT 1/35, 2/1326, 3/98
    # and the aioquic client of that connection received those packets with raw.length 176, 1024,
    # 222, 35, 1326, 98 (client-aioquic.qlog, events 10, 14, 26, 28, 42, 47).  Received packets
    # (event 0: {"header": {"packet_type": "initial", "packet_number": 0}}) log no size.
    store.ingest(QUINN_SERVER)
    got = tuples(store, """SELECT event_index, direction, packet_type, packet_number, size_bytes FROM packets
                          WHERE event_index <= 14 ORDER BY event_index""")
    assert [r for r in got if r[1] == "sent"] == [
        (2, "sent", "initial", 0, 176), (3, "sent", "handshake", 0, 1024), (5, "sent", "1RTT", 0, 222),
        (11, "sent", "1RTT", 1, 35), (13, "sent", "1RTT", 2, 1326), (14, "sent", "1RTT", 3, 98)]
    assert {r[4] for r in got if r[1] == "received"} == {None}
    client = orjson.loads(QUINN_CLIENT.read_bytes())["traces"][0]["events"]
    assert [client[i]["data"]["raw"]["length"] for i in (10, 14, 26, 28, 42, 47)] == [176, 1024, 222, 35, 1326, 98]


# ---------------------------------------------------------------- packets: datagram_id


def test_logged_datagram_id_wins_over_the_derived_one(store, tmp_path):
    # qlog 0.3 / draft-ietf-quic-qlog-quic-events-01..: packet_sent/packet_received data carry
    # "datagram_id" (uint32) beside "header" and "raw".  Two packets of datagram 7 (an Initial and a
    # Handshake at the same time), then one of datagram 9 — ids as logged, not counted from 0.
    def packet(t, ptype, pn, datagram_id):
        return {"time": t, "name": "transport:packet_received",
                "data": {"header": {"packet_type": ptype, "packet_number": pn}, "raw": {"length": 600},
                         "datagram_id": datagram_id, "frames": [{"frame_type": "ping"}]}}
    events = [packet(1.0, "initial", 0, 7), packet(1.0, "handshake", 0, 7), packet(5.0, "1RTT", 0, 9)]
    store.ingest(write_seq(tmp_path / "dg.sqlog", SEQ_03, events))
    assert tuples(store, "SELECT event_index, datagram_id FROM packets ORDER BY event_index") == [(0, 7), (1, 7), (2, 9)]


def test_quinn_same_time_packets_share_a_datagram_only_in_coalescing_order(store):
    # server.sqlog (one connection, group_id 3807a70634526fb4; its first packet event is a received
    # Initial, so the vantage is the server).  Packet events and times:
    #    0 received initial 0   50.911583
    #    2 sent initial 0       51.477886  \ same time, Initial then Handshake: one datagram
    #    3 sent handshake 0     51.477886  /
    #    5 sent 1RTT 0          53.347824
    #    7 received initial 1   54.051624  \
    #    8 received handshake 2 54.051624   | one datagram
    #    9 received 1RTT 3      54.051624  /
    #   11 sent 1RTT 1          54.60728   \ same time but both 1-RTT (RFC 9000 §12.2: a 1-RTT packet
    #   13 sent 1RTT 2          54.60728   / ends its datagram): two datagrams
    #   14 sent 1RTT 3          54.859596
    # The aioquic client of that connection received exactly these datagrams: raw.length 1208
    # (initial 176 + handshake 1024, 8 bytes UDP header), then 230, 43, 1334, 106 (client-aioquic.qlog
    # events 9, 25, 27, 41, 46: transport:datagrams_received), one 1-RTT packet each.
    store.ingest(QUINN_SERVER)
    got = tuples(store, "SELECT event_index, datagram_id FROM packets WHERE event_index <= 14 ORDER BY event_index")
    assert got == [(0, 0), (2, 1), (3, 1), (5, 2), (7, 3), (8, 3), (9, 3), (11, 4), (13, 5), (14, 6)]


# ---------------------------------------------------------------- packets: packet_type, space, datagram


def test_0rtt_version_negotiation_and_stateless_reset_packet_types(store, tmp_path):
    # qlog 0.3 / draft-ietf-quic-qlog-quic-events PacketType: "initial", "handshake", "0RTT", "1RTT",
    # "retry", "version_negotiation", "stateless_reset".  A client sends Initial + 0-RTT in one
    # datagram, later Handshake and 0-RTT at the same time: a 0-RTT packet cannot follow a Handshake
    # packet in a datagram (RFC 9000 §12.2 order Initial, 0-RTT, Handshake, 1-RTT), so two datagrams.
    # Version Negotiation and Stateless Reset packets have no packet number space.  A packet event
    # naming no type at all is 'unknown' (schemas/README.md), in no space.
    def packet(t, name, ptype, pn=None):
        header = ({} if ptype is None else {"packet_type": ptype}) | ({} if pn is None else {"packet_number": pn})
        return {"time": t, "name": f"transport:{name}", "data": {"header": header, "raw": {"length": 100},
                                                                   "frames": [{"frame_type": "ping"}]}}
    events = [packet(0.0, "packet_sent", "initial", 0), packet(0.0, "packet_sent", "0RTT", 0),
              packet(30.0, "packet_sent", "handshake", 0), packet(30.0, "packet_sent", "0RTT", 1),
              packet(40.0, "packet_received", "version_negotiation"),
              packet(50.0, "packet_received", "stateless_reset"), packet(60.0, "packet_received", None, 9)]
    store.ingest(write_seq(tmp_path / "types.sqlog", SEQ_03, events))
    got = tuples(store, """SELECT event_index, packet_type, packet_number_space, packet_number, datagram_id
                          FROM packets ORDER BY event_index""")
    assert got == [(0, "initial", "initial", 0, 0), (1, "0RTT", "application_data", 0, 0),
                   (2, "handshake", "handshake", 0, 1), (3, "0RTT", "application_data", 1, 2),
                   (4, "version_negotiation", None, None, 3), (5, "stateless_reset", None, None, 4),
                   (6, "unknown", None, 9, 5)]


# ---------------------------------------------------------------- packets: ack_eliciting


def test_aioquic_ack_eliciting(store):
    # qlog_client/e60faf3e02b8978c.qlog, every packet event: (event, type, pn, frame_type of each frame)
    #    4 sent initial 0 [crypto]             7 received initial 0 [ack, crypto]
    #   11 received handshake 1 [crypto]      15 received 1RTT 2 [stream, stream, stream, padding]
    #   17 sent initial 1 [ack]               19 sent handshake 2 [ack, crypto]
    #   21 sent 1RTT 3 [ack, new_connection_id × 7, padding]
    #   25 received 1RTT 3 [ack, handshake_done, new_connection_id × 7]
    #   36 sent 1RTT 4 [ack, stream × 4]      39 received 1RTT 4 [ack, stream, stream]
    #   45 sent 1RTT 5 [connection_close]
    # RFC 9002 §2: ACK, PADDING and CONNECTION_CLOSE frames do not make a packet ack-eliciting.
    store.ingest(AIOQUIC_CLIENT)
    got = tuples(store, "SELECT event_index, ack_eliciting, frame_count FROM packets ORDER BY event_index")
    assert got == [(4, True, 1), (7, True, 2), (11, True, 1), (15, True, 4), (17, False, 1), (19, True, 2),
                   (21, True, 9), (25, True, 9), (36, True, 5), (39, True, 3), (45, False, 1)]


def test_picoquic_padding_is_not_ack_eliciting(store):
    # binlog_ref.qlog event 0: [0, "transport", "packet_sent", {"packet_type": "1RTT", "header":
    #   {"packet_size": 3, "packet_number": 0, …}, "frames": [{"frame_type": "padding"}]}]
    # event 64: packet_sent 1RTT pn 17, frames [{"frame_type": "ack", …}, {"frame_type": "padding"}]
    store.ingest(BINLOG)
    got = tuples(store, "SELECT event_index, ack_eliciting, frame_count FROM packets WHERE event_index IN (0, 64)")
    assert sorted(got) == [(0, False, 1), (64, False, 2)]


def test_packet_without_frames_has_unknown_ack_elicitation(store):
    # parallel_10_50KB_f5.qlog event 5: ["171", "transport", "packet_received", {"packet_type": "retry",
    #   "header": {"scid": "476d7390951e587c", "dcid": "3b5acd936de12a10"}, "frames": []}]
    # "ack_eliciting … NULL when no frames were logged" (schemas/README.md)
    store.ingest(PARALLEL)
    assert tuples(store, "SELECT packet_type, ack_eliciting, frame_count FROM packets WHERE event_index = 5") == [
        ("retry", None, 0)]


# ---------------------------------------------------------------- frames: ACK


def test_ngtcp2_ack_frames_with_single_packet_ranges(store):
    # server.sqlog (qlog 0.3, ack_delay in ms); every ACK frame (one per packet, position 0):
    #    4 packet_sent initial 0      {"frame_type": "ack", "ack_delay": 0, "acked_ranges": [[0]]}
    #   10 packet_received initial 1  {"frame_type": "ack", "ack_delay": 0, "acked_ranges": [[0]]}
    #   12 packet_received handshake 2 {… "ack_delay": 0, "acked_ranges": [[0]]}
    #   14 packet_received 1RTT 3     {… "ack_delay": 2, "acked_ranges": [[0]]}
    #   18 packet_sent 1RTT 1         {… "ack_delay": 0, "acked_ranges": [[3, 4]]}
    #   24 packet_received 1RTT 7     {… "ack_delay": 0, "acked_ranges": [[1, 3]]}
    #   28 packet_sent 1RTT 5         {… "ack_delay": 0, "acked_ranges": [[7]]}
    # A one-number range [n] is the single packet n (qlog draft-02 / 0.3 AckFrame: acked_ranges is an
    # array of [uint64, uint64] or [uint64]): acked_ranges holds it as [n, n].
    store.ingest(NGTCP2_SERVER)
    got = tuples(store, """SELECT event_index, position, ack_delay_ms, largest_acknowledged, acked_ranges
                          FROM frames WHERE frame_type = 'ack' ORDER BY event_index""")
    assert got == [(4, 0, 0.0, 0, [[0, 0]]), (10, 0, 0.0, 0, [[0, 0]]), (12, 0, 0.0, 0, [[0, 0]]),
                   (14, 0, 2.0, 0, [[0, 0]]), (18, 0, 0.0, 4, [[3, 4]]), (24, 0, 0.0, 3, [[1, 3]]),
                   (28, 0, 0.0, 7, [[7, 7]])]


# ---------------------------------------------------------------- frames: STREAM


def test_picoquic_stream_frame_offset_length_fin(store):
    # qlog_trace_ref.txt event 28 (draft-00, server): [22313, "transport", "packet_received",
    #   {"packet_type": "1RTT", "header": {"packet_size": 822, "packet_number": 1, …}, "frames": [
    #    {"frame_type": "stream", "id": 4, "offset": 0, "length": 257, "fin": true, …},
    #    {"frame_type": "stream", "id": 8, "offset": 0, "length": 531, "fin": true, …}]}]
    # event 29: packet_sent 1RTT pn 3, frames ack, then {"frame_type": "stream", "id": 4, "offset": 0,
    #   "length": 1219, "fin": false, "has_length": false, …}
    store.ingest(PICO_TRACE)
    got = tuples(store, """SELECT event_index, position, frame_type, offset_bytes, length_bytes, fin FROM frames
                          WHERE event_index IN (28, 29) AND frame_type = 'stream' ORDER BY event_index, position""")
    assert got == [(28, 0, "stream", 0, 257, True), (28, 1, "stream", 0, 531, True), (29, 1, "stream", 0, 1219, False)]


def test_ngtcp2_stream_frames(store):
    # server.sqlog (qlog 0.3) STREAM frames: event 8 packet_sent 1RTT 0, positions 0-2:
    #   {"frame_type": "stream", "stream_id": 3, "offset": 0, "length": 18}, {… 11, 0, 1}, {… 7, 0, 1}
    # event 16 packet_received 1RTT 4, position 0: {"stream_id": 0, "offset": 0, "length": 32, "fin": true}
    # event 22 packet_sent 1RTT 3, positions 10, 11: {"stream_id": 7, "offset": 1, "length": 30},
    #   {"stream_id": 0, "offset": 0, "length": 38, "fin": true}
    store.ingest(NGTCP2_SERVER)
    got = tuples(store, """SELECT event_index, position, stream_id, offset_bytes, length_bytes FROM frames
                          WHERE frame_type = 'stream' AND event_index IN (8, 16, 22) ORDER BY event_index, position""")
    assert got == [(8, 0, 3, 0, 18), (8, 1, 11, 0, 1), (8, 2, 7, 0, 1), (16, 0, 0, 0, 32), (22, 10, 7, 1, 30),
                   (22, 11, 0, 0, 38)]
    assert tuples(store, "SELECT event_index, position FROM frames WHERE fin ORDER BY event_index") == [(16, 0), (22, 11)]


def test_stream_frame_without_fin_has_fin_false(store):
    # ngtcp2 server.sqlog event 8 (packet_sent 1RTT 0): three STREAM frames without "fin" (streams 3, 11,
    # 7: its HTTP/3 control and QPACK streams, which never end); event 16's frame says "fin": true.
    store.ingest(NGTCP2_SERVER)
    got = tuples(store, "SELECT position, fin FROM frames WHERE frame_type = 'stream' AND event_index IN (8, 16) "
                       "ORDER BY event_index, position")
    assert got == [(0, False), (1, False), (2, False), (0, True)]


STREAM_ID_CASES = {
    # picoquic (draft-00 JSON) qlog_trace_ref.txt event 28: stream frames "id": 4 and "id": 8
    "picoquic": (PICO_TRACE, 0, 28, [4, 8]),
    # pcap2qlog draft-01 multi_stream.qlog event 11: ["176", "transport", "packet_sent", "line",
    #   {"packet_type": "1RTT", …, "frames": [{"frame_type": "stream", "id": "2", "offset": "0",
    #   "length": "3", "fin": false}, {"frame_type": "ack", …}]}]
    "pcap2qlog-draft-01": (PCAP2QLOG_MULTI_STREAM, 0, 11, [2]),
    # aioquic draft-01 doublevantage_100ms.qlog trace 0 event 13: packet_received 1RTT pn 3, frames
    #   crypto, then {"frame_type": "stream", "id": "3", …}, {… "id": "7" …}, {… "id": "11" …}
    "aioquic-draft-01": (DOUBLEVANTAGE, 0, 13, [3, 7, 11]),
}


@pytest.mark.parametrize("path, trace, event_index, stream_ids", STREAM_ID_CASES.values(), ids=STREAM_ID_CASES.keys())
def test_draft_01_stream_frame_id_is_the_stream_id(store, path, trace, event_index, stream_ids):
    store.ingest(path)
    got = tuples(store, f"""SELECT f.stream_id FROM frames f JOIN connections c USING (connection_id)
                           WHERE c.trace_index = {trace} AND f.event_index = {event_index}
                             AND f.frame_type = 'stream' ORDER BY f.position""")
    assert [r[0] for r in got] == stream_ids


def test_pcap2qlog_0_1_crypto_and_ack_frames(store):
    # ngtcp2-pcap.qlog (qlog 0.1: tshark's field names below "quic.", frame types upper case):
    # event 2: PACKET_RX Handshake pn "0", frames [{"frame_type": "CRYPTO", "frame_type.crypto.offset": "0",
    #          "frame_type.crypto.length": "995", …}]
    # event 3: PACKET_RX Handshake pn "1", [{"frame_type": "CRYPTO", "frame_type.crypto.offset": "995",
    #          "frame_type.crypto.length": "299", …}]
    # event 5: PACKET_RX Handshake pn "0", [{"frame_type": "ACK", "frame_type.ack.largest_acknowledged": "1",
    #          "frame_type.ack.ack_delay": "0", "frame_type.ack.ack_block_count": "0", "frame_type.ack.fab": "1"}]
    # event 6: the same with "frame_type.ack.largest_acknowledged": "0", "frame_type.ack.ack_delay": "0"
    # (no acked_ranges: the ACK's ranges are not in the file)
    store.ingest(PCAP2QLOG_01)
    got = tuples(store, """SELECT event_index, frame_type, offset_bytes, length_bytes, largest_acknowledged, acked_ranges,
                                 ack_delay_ms, ack_delay_raw
                          FROM frames WHERE event_index IN (2, 3, 5, 6) ORDER BY event_index, position""")
    assert got == [(2, "crypto", 0, 995, None, None, None, None), (3, "crypto", 995, 299, None, None, None, None),
                   (5, "ack", None, None, 1, None, 0.0, 0), (6, "ack", None, None, 0, None, 0.0, 0)]


def test_pcap2qlog_0_1_stream_frame(store):
    # ngtcp2-pcap.qlog (0.1, root "fields"/"events") event 7: [29, "TRANSPORT", "PACKET_RX", "LINE",
    #   {"header": {"form": "short", …, "packet_number": "0"}, "frames": [{"frame_type": "STREAM",
    #    "frame_type_tree": {…}, "stream.stream_id": "3", "stream.length": "12",
    #    "stream_data": "48:65:6c:6c:6f:20:57:6f:72:6c:64:21"}]}]   (12 bytes: "Hello World!")
    store.ingest(PCAP2QLOG_01)
    assert tuples(store, "SELECT frame_type, stream_id, length_bytes FROM frames WHERE event_index = 7") == [
        ("stream", 3, 12)]


# ---------------------------------------------------------------- frames: ACK_FREQUENCY

ACK_FREQUENCY = """SELECT frame_type, sequence_number, ack_eliciting_threshold, request_max_ack_delay_ms,
                          reordering_threshold FROM frames ORDER BY event_index, position"""


def test_quic_go_ack_frequency_frame(store, tmp_path):
    # quic-go's qlog (qlog/frame.go, encodeAckFrequencyFrame; its unit test's values): {"frame_type":
    # "ack_frequency", "sequence_number": 1337, "ack_eliciting_threshold": 123, "request_max_ack_delay": 42,
    # "reordering_threshold": 1234}, request_max_ack_delay in ms (draft-ietf-quic-ack-frequency field
    # names; picoquic's older "packet_tolerance"/"max_ack_delay" are in test_event_tables.py)
    header = {"file_schema": "urn:ietf:params:qlog:file:sequential", "serialization_format": "application/qlog+json-seq",
              "title": "quic-go qlog", "trace": {"vantage_point": {"type": "client"}, "common_fields": {
                  "group_id": "aabb", "reference_time": {"clock_type": "monotonic", "epoch": "unknown"}}}}
    frame = {"frame_type": "ack_frequency", "sequence_number": 1337, "ack_eliciting_threshold": 123,
             "request_max_ack_delay": 42, "reordering_threshold": 1234}
    events = [{"time": 1.0, "name": "transport:packet_sent",
               "data": {"header": {"packet_type": "1RTT", "packet_number": 5}, "raw": {"length": 40}, "frames": [frame]}}]
    store.ingest(write_seq(tmp_path / "qg.sqlog", header, events))
    assert tuples(store, ACK_FREQUENCY) == [("ack_frequency", 1337, 123, 42.0, 1234)]


def _mvfst_sent(tmp_path, packet_type: str, frames: list[dict]):
    """One packet_sent in mvfst's qlog: draft-00 JSON, times in µs."""
    doc = {"qlog_version": "draft-00", "title": "mvfst", "traces": [{
        "vantage_point": {"type": "server"}, "configuration": {"time_units": "us"},
        "common_fields": {"reference_time": "1600000000000000"},
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [["5000", "transport", "packet_sent", {
            "packet_type": packet_type, "header": {"packet_number": 9, "packet_size": 40}, "frames": frames}]]}]}
    return write_json(tmp_path / "mvfst.qlog", doc)


def _mvfst_ack_frequency(tmp_path):
    # mvfst (quic/logging/QLoggerTypes.cpp AckFrequencyFrameLog): {"frame_type": "ack_frequency",
    # "sequence_number", "packet_tolerance", "update_max_ack_delay" (µs, the wire field of
    # draft-ietf-quic-ack-frequency-01), "reorder_threshold"}
    return _mvfst_sent(tmp_path, "1RTT", [{"frame_type": "ack_frequency", "sequence_number": 3, "packet_tolerance": 10,
                                          "update_max_ack_delay": 25000, "reorder_threshold": 1}])


def test_mvfst_ack_frequency_frame(store, tmp_path):
    store.ingest(_mvfst_ack_frequency(tmp_path))
    assert tuples(store, ACK_FREQUENCY)[0][:4] == ("ack_frequency", 3, 10, 25.0)


def test_mvfst_ack_frequency_reorder_threshold(store, tmp_path):
    store.ingest(_mvfst_ack_frequency(tmp_path))
    assert tuples(store, "SELECT reordering_threshold FROM frames") == [(1,)]


def test_mvfst_crypto_frame_len(store, tmp_path):
    # mvfst (quic/logging/QLoggerTypes.cpp CryptoFrameLog): {"frame_type": "crypto", "offset", "len"}
    store.ingest(_mvfst_sent(tmp_path, "initial", [{"frame_type": "crypto", "offset": 0, "len": 90}]))
    assert tuples(store, "SELECT frame_type, offset_bytes, length_bytes FROM frames") == [("crypto", 0, 90)]

def test_quicker_application_close_is_not_ack_eliciting(store):
    # 20181219_handshake_v6_quicker…qlog (qlog 0.1, draft-15) event 12: PACKET_RX short header pn "2",
    # frames [{"frame_type": "APPLICATION_CLOSE", "frame_type.ac.error_code": "0", …}]: the
    # application CONNECTION_CLOSE (0x1d) of its day, which RFC 9002 §2 does not count as ack-eliciting
    store.ingest(QUICKER_01)
    assert tuples(store, "SELECT packet_number, frame_count, ack_eliciting FROM packets WHERE event_index = 12") == [
        (2, 1, False)]


def test_new_connection_id_length_is_not_a_payload_length(store):
    # doublevantage_100ms.qlog trace 0 event 18 (packet_sent at "220"): {"frame_type":
    # "new_connection_id", "connection_id": "880cf6dee89bfa02", "length": 35, "sequence_number": "1", …}:
    # draft-01's NewConnectionIDFrame "length" describes the CID, not a payload: length_bytes (and
    # offset_bytes) stay NULL, the frame is kept in details
    store.ingest(DOUBLEVANTAGE)
    got = tuples(store, """SELECT count(*), count(length_bytes), count(offset_bytes),
                                 count(*) FILTER (WHERE details->>'$.length' IS NOT NULL)
                          FROM frames WHERE frame_type = 'new_connection_id'""")
    assert got[0][0] > 0 and got[0][1:3] == (0, 0) and got[0][3] == got[0][0]


def test_draft_01_version_negotation_typo(store, tmp_path):
    # qlog draft-01's PacketType lists "version_negotation" (sic); a client receiving one
    doc = {"qlog_version": "draft-01", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"ODCID": "aabb", "reference_time": "1600000000000"},
        "event_fields": ["relative_time", "category", "event_type", "data"],
        "events": [["0", "transport", "packet_received", {"packet_type": "version_negotation", "header": {}}]]}]}
    store.ingest(write_json(tmp_path / "vn.qlog", doc))
    assert tuples(store, "SELECT packet_type FROM packets") == [("version_negotiation",)]

# ---------------------------------------------------------------- transport_parameters: owner / initiator


def test_quic_go_parameters_set_initiator(store):
    # server.sqlog (vantage server, first event at time 0.203874):
    # event 2 t 0.235661 "transport:parameters_set" {"initiator": "local", "max_idle_timeout": 30000,
    #   "max_udp_payload_size": 1452, "ack_delay_exponent": 3, "max_ack_delay": 26,
    #   "active_connection_id_limit": 4, "initial_max_data": 786432, …}
    # event 11 t 1.206618 {"initiator": "remote", "max_idle_timeout": 60000,
    #   "max_udp_payload_size": 4611686018427387903, "ack_delay_exponent": 3, "max_ack_delay": 25,
    #   "active_connection_id_limit": 8, "initial_max_data": 1048576, …}
    events = read_seq(QUIC_GO_SERVER)
    assert [events[i]["data"]["initiator"] for i in (2, 11)] == ["local", "remote"]
    store.ingest(QUIC_GO_SERVER)
    got = tuples(store, """SELECT owner, endpoint, time_ms, max_ack_delay_ms, ack_delay_exponent, initial_max_data_bytes,
                                 max_udp_payload_size_bytes, max_idle_timeout_ms, active_connection_id_limit
                          FROM transport_parameters ORDER BY owner""")
    assert got == [("local", "server", ms(0.031787), 26.0, 3, 786432, 1452, 30000.0, 4),
                   ("remote", "client", ms(1.002744), 25.0, 3, 1048576, 4611686018427387903, 60000.0, 8)]


# ---------------------------------------------------------------- dropped_packets, timers, other_events


def test_dropped_packet_number_from_the_header(store, tmp_path):
    # qlog 0.3 / quic-events PacketDropped: {"header": PacketHeader, "raw": RawInfo, "trigger": …}; the
    # header may carry the packet number (no real file here logs one on a dropped packet)
    events = [{"time": 2.0, "name": "transport:packet_dropped",
               "data": {"header": {"packet_type": "1RTT", "packet_number": 12}, "raw": {"length": 50},
                        "trigger": "decryption_failure"}}]
    store.ingest(write_seq(tmp_path / "drop.sqlog", SEQ_03, events))
    assert tuples(store, "SELECT event_index, packet_type, packet_number, size_bytes, trigger FROM dropped_packets") == [
        (0, "1RTT", 12, 50, "decryption_failure")]


def test_timer_delta_in_the_traces_time_unit(store, tmp_path):
    # qlog draft-02 recovery:loss_timer_updated {"timer_type", "packet_number_space", "event_type", "delta"}:
    # delta is a duration in the trace's time unit, here configuration "time_units": "us"
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"}, "configuration": {"time_units": "us"},
        "common_fields": {"ODCID": "aabb", "reference_time": "1600000000000000"},
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [["1000", "recovery", "loss_timer_updated", {"timer_type": "pto", "packet_number_space": "initial",
                                                                "event_type": "set", "delta": 25000}]]}]}
    store.ingest(write_json(tmp_path / "timer.qlog", doc))
    assert tuples(store, "SELECT timer_type, event_type, packet_number_space, delta_ms FROM timers") == [
        ("pto", "set", "initial", 25.0)]


def test_other_events_keep_the_events_data(store):
    # quic-go server.sqlog event 0: {"time": 0.203874, "name": "recovery:congestion_state_updated",
    #   "data": {"new": "slow_start"}}; event 1: {"time": 0.20771, "name": "quic:recovery_parameters_set",
    #   "data": {"reordering_threshold": 3, "time_threshold": 1.125, "timer_granularity": 1,
    #            "initial_congestion_window": 40960}}
    store.ingest(QUIC_GO_SERVER)
    got = tuples(store, "SELECT event_index, time_ms, event_name, data FROM other_events WHERE event_index <= 1 "
                       "ORDER BY event_index")
    assert [(i, t, n, json.loads(d)) for i, t, n, d in got] == [
        (0, 0.0, "recovery:congestion_state_updated", {"new": "slow_start"}),
        (1, ms(0.003836), "quic:recovery_parameters_set",
         {"reordering_threshold": 3, "time_threshold": 1.125, "timer_granularity": 1, "initial_congestion_window": 40960})]


# ---------------------------------------------------------------- connections: odcid


def test_picoquic_server_odcid_is_the_dcid_of_the_clients_first_initial(store):
    # qlog_trace_ref.txt (draft-00 server trace, no ODCID/group_id in its header) event 1:
    #   [0, "transport", "packet_received", {"packet_type": "initial", "header": {"packet_size": 329,
    #    "packet_number": 0, …, "scid": "0203040506070809", "dcid": "0102030405060708"}, …}]
    # (its parameters_set says "original_connection_id": "0102030405060708", draft-00's name)
    store.ingest(PICO_TRACE)
    assert tuples(store, "SELECT vantage, odcid FROM connections") == [("server", "0102030405060708")]


ODCID_0_1 = {
    # ngtcp2-pcap.qlog: root "connectionid": "0e8ac117cd49382ca96244849f52c15e42"; event 1, the client's
    # first Initial: {"header": {"form": "long", "type": "Initial", …, "scid": "0e8ac117cd49382ca96244849f52c15e42",
    #   "dcid": "409fb12c4c35d5bd03bf5876588f326413c9", …, "packet_number": "0"}, …}
    "ngtcp2-pcap": (PCAP2QLOG_01, "409fb12c4c35d5bd03bf5876588f326413c9"),
    # 20181219_handshake_v6_quicker…qlog: root "connectionid": "eca03c64cff7d334"; event 1: Initial pn "0",
    #   "scid": "eca03c64cff7d334", "dcid": "c901f77788489c51"
    "quicker": (QUICKER_01, "c901f77788489c51"),
}


@pytest.mark.parametrize("path, odcid", ODCID_0_1.values(), ids=ODCID_0_1.keys())
def test_pcap2qlog_0_1_odcid_is_the_dcid_of_the_clients_first_initial(store, path, odcid):
    store.ingest(path)
    assert tuples(store, "SELECT vantage, odcid FROM connections") == [("network", odcid)]


def test_odcid_of_a_client_that_was_retried_is_its_first_initials_dcid(store, tmp_path):
    # qlog 0.3 client trace, no ODCID/group_id in the header: Initial to DCID c1c1c1c1, a Retry from
    # the server (scid 5e5e5e5e), the Initial again to the Retry's SCID: the ODCID is the first DCID.
    def packet(t, name, ptype, scid, dcid, pn=None):
        header = {"packet_type": ptype, "scid": scid, "dcid": dcid} | ({} if pn is None else {"packet_number": pn})
        return {"time": t, "name": f"transport:{name}", "data": {"header": header, "raw": {"length": 1200}}}
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"}}}
    events = [packet(0.0, "packet_sent", "initial", "0a0a0a0a", "c1c1c1c1", 0),
              packet(20.0, "packet_received", "retry", "5e5e5e5e", "0a0a0a0a"),
              packet(20.5, "packet_sent", "initial", "0a0a0a0a", "5e5e5e5e", 1)]
    store.ingest(write_seq(tmp_path / "retry.sqlog", header, events))
    assert tuples(store, "SELECT vantage, odcid FROM connections") == [("client", "c1c1c1c1")]


def test_odcid_from_a_servers_original_destination_connection_id(store, tmp_path):
    # qlog 0.3 server trace, no ODCID/group_id, no packet events: transport:parameters_set
    # {"owner": "local", "original_destination_connection_id": …} (qlog draft-02 and later)
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}}
    events = [{"time": 1.0, "name": "transport:parameters_set",
               "data": {"owner": "local", "original_destination_connection_id": "0d0d0d0d0d0d0d0d",
                        "max_ack_delay": 25}}]
    store.ingest(write_seq(tmp_path / "server.sqlog", header, events))
    assert tuples(store, "SELECT vantage, odcid FROM connections") == [("server", "0d0d0d0d0d0d0d0d")]


def test_odcid_from_connection_started_dst_cid(store, tmp_path):
    # qlog draft-02 connectivity:connection_started {"ip_version", "src_ip", "dst_ip", "protocol", "src_port",
    # "dst_port", "quic_version", "src_cid", "dst_cid"} (as in pcap2qlog's ngtcp2-29-dsb.qlog, whose
    # group_id takes precedence), a client trace without ODCID in its header and without packets
    doc = {"qlog_version": "draft-02", "traces": [{
        "vantage_point": {"type": "client"}, "common_fields": {"reference_time": "1600000000000"},
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [["0", "connectivity", "connection_started", {
            "ip_version": "4", "src_ip": "10.9.0.1", "dst_ip": "10.9.0.2", "protocol": "QUIC", "src_port": "36588",
            "dst_port": "443", "quic_version": "0xff00001d", "src_cid": "43944eda18beb7e5",
            "dst_cid": "f36e07bf0b7088ef"}]]}]}
    store.ingest(write_json(tmp_path / "started.qlog", doc))
    assert tuples(store, "SELECT vantage, odcid FROM connections") == [("client", "f36e07bf0b7088ef")]


# ---------------------------------------------------------------- packets: sender of a network vantage


def test_network_vantage_with_server_flow(store, tmp_path):
    # qlog draft-01 and later VantagePoint {"type": "network", "flow": "client" | "server"}: a network
    # observer's "sent"/"received" are from the point of view of the side named by flow; here the
    # server's, so its packet_sent Initial is the server's and its packet_received Initial the client's.
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "network", "flow": "server"}, "common_fields": {"ODCID": "aabb"}}}
    events = [{"time": 0.0, "name": "transport:packet_received",
               "data": {"header": {"packet_type": "initial", "packet_number": 0}, "raw": {"length": 1200}}},
              {"time": 1.0, "name": "transport:packet_sent",
               "data": {"header": {"packet_type": "initial", "packet_number": 0}, "raw": {"length": 1200}}}]
    store.ingest(write_seq(tmp_path / "net.sqlog", header, events))
    assert tuples(store, "SELECT event_index, direction, sender FROM packets ORDER BY event_index") == [
        (0, "received", "client"), (1, "sent", "server")]
