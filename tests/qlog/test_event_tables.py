"""lost_packets, dropped_packets, timers and the ACK_FREQUENCY / IMMEDIATE_ACK / ECN-CE columns of
frames, from real qlog files in tests/data/ (see tests/data/MANIFEST.md).

Every expected value was read off the files with the json module, never copied from quicack:
event_index = 0-based position of the event in the trace's events (JSON-SEQ: the header record is
not an event); time_ms = the event's time minus the trace's first (and earliest) event time, in ms.
The picoquic traces say "configuration": {"time_units": "us"}: their times are µs / 1000, and the
ACK_FREQUENCY "max_ack_delay" they log is the frame's Request Max Ack Delay field (µs on the wire).
Two tests here found bugs (fixed with them): aioquic's packet_lost type (``{"type": "1RTT", …}``)
was not read, and a packet_dropped logging no type got 'unknown' instead of NULL ("the trace does
not say", schemas/README.md).
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA, ms

PICO = DATA / "picoquic/picoquictest"
BINLOG = PICO / "binlog_ref.qlog"
PICO_TRACE = PICO / "qlog_trace_ref.txt"
PICO_TRACE_ECN = PICO / "qlog_trace_ecn_ref.txt"
QUIC_GO_SERVER = DATA / "peers/quic-go/server.sqlog"
AIOQUIC_CLIENT_NGTCP2 = DATA / "peers/ngtcp2/client-aioquic.qlog"
AIOQUIC_SERVER = DATA / "local/aioquic-transfer/qlog_server/34d060400e22933c.qlog"

ACK_FREQUENCY = """SELECT event_index, position, frame_type, sequence_number, ack_eliciting_threshold,
                          request_max_ack_delay_ms, reordering_threshold, details
                   FROM frames WHERE frame_type IN ('ack_frequency', 'immediate_ack') ORDER BY event_index, position"""
ACK_CE = "SELECT event_index, position, ecn_ce FROM frames WHERE frame_type = 'ack' ORDER BY event_index, position"
LOST = """SELECT event_index, time_ms, packet_type, packet_number_space, packet_number, trigger
          FROM lost_packets ORDER BY event_index"""
DROPPED = """SELECT event_index, time_ms, packet_type, packet_number, size_bytes, trigger
             FROM dropped_packets ORDER BY event_index"""
TIMERS = """SELECT event_index, time_ms, timer_type, event_type, packet_number_space, delta_ms
            FROM timers ORDER BY event_index"""


def table(store, sql: str) -> list[tuple]:
    """Rows of ``sql``; a JSON column (frames.details) parsed."""
    return [tuple(json.loads(v) if k == "details" and v is not None else v for k, v in row.items())
            for row in store.sql(sql).to_dicts()]


# ---------------------------------------------------------------- frames: ACK_FREQUENCY, IMMEDIATE_ACK, ECN-CE


def test_binlog_ack_frequency_immediate_ack_and_ce(store):
    store.ingest(BINLOG)
    # events 28, 29, 30 (1RTT packet_sent pn 28, 29, 30), one frame each:
    #   {"frame_type": "ack_frequency", "sequence_number": 17, "packet_tolerance": 10, "max_ack_delay": 1056,
    #    "reordering_threshold": 0}, the same with "reordering_threshold": 5, and {"frame_type": "immediate_ack"}
    af = {"frame_type": "ack_frequency", "sequence_number": 17, "packet_tolerance": 10, "max_ack_delay": 1056}
    assert table(store, ACK_FREQUENCY) == [
        (28, 0, "ack_frequency", 17, 10, ms(1.056), 0, {**af, "reordering_threshold": 0}),
        (29, 0, "ack_frequency", 17, 10, ms(1.056), 5, {**af, "reordering_threshold": 5}),
        (30, 0, "immediate_ack", None, None, None, None, {"frame_type": "immediate_ack"}),
    ]
    # five "ack" frames (events 19, 20, 63, 64, 65); only event 20's logs "ect0": 3, "ect1": 0, "ce": 1
    assert table(store, ACK_CE) == [(19, 0, None), (20, 0, 1), (63, 0, None), (64, 0, None), (65, 0, None)]


@pytest.mark.parametrize("path", [PICO_TRACE, PICO_TRACE_ECN], ids=lambda p: p.name)
def test_picoquic_trace_ack_frequency(store, path):
    store.ingest(path)
    # event 24 (packet_sent 1RTT pn 2) frame 0 and event 65 (packet_received 1RTT pn 5) frame 0:
    #   {"frame_type": "ack_frequency", "sequence_number": 0, "packet_tolerance": 2,
    #    "max_ack_delay": 5260 (sent) / 5500 (received), "reordering_threshold": 0}
    af = {"frame_type": "ack_frequency", "sequence_number": 0, "packet_tolerance": 2, "reordering_threshold": 0}
    assert table(store, ACK_FREQUENCY) == [
        (24, 0, "ack_frequency", 0, 2, ms(5.26), 0, {**af, "max_ack_delay": 5260}),
        (65, 0, "ack_frequency", 0, 2, ms(5.5), 0, {**af, "max_ack_delay": 5500}),
    ]


# the 14 "ack" frames of both picoquic server traces, each at position 0 of its packet
PICO_ACK_EVENTS = [7, 18, 20, 29, 44, 46, 67, 70, 74, 77, 85, 92, 95, 98]


def test_picoquic_trace_ack_without_ecn_counts(store):
    store.ingest(PICO_TRACE)
    # no ack frame of qlog_trace_ref.txt logs "ce" (nor ect0/ect1): the trace does not say
    assert table(store, ACK_CE) == [(i, 0, None) for i in PICO_ACK_EVENTS]


def test_picoquic_trace_ecn_ce_zero(store):
    store.ingest(PICO_TRACE_ECN)
    # every ack frame of qlog_trace_ecn_ref.txt logs "ect0": n, "ect1": 0, "ce": 0
    assert table(store, ACK_CE) == [(i, 0, 0) for i in PICO_ACK_EVENTS]


# ---------------------------------------------------------------- lost_packets, dropped_packets


@pytest.mark.parametrize("path, lost_us, dropped_us", [(PICO_TRACE, (51183, 54114), 161682),
                                                       (PICO_TRACE_ECN, (51190, 54126), 161718)],
                         ids=["qlog_trace_ref", "qlog_trace_ecn_ref"])
def test_picoquic_trace_lost_and_dropped(store, path, lost_us, dropped_us):
    store.ingest(path)
    # events 78 and 86: [t, "recovery", "packet_lost", {"packet_type": "1RTT", "packet_number": 7 / 9,
    #   "trigger": "repeat", "header": {"packet_type": "1RTT", "packet_number": 7 / 9, ...}}]
    assert table(store, LOST) == [
        (78, ms(lost_us[0] / 1000), "1RTT", "application_data", 7, "repeat"),
        (86, ms(lost_us[1] / 1000), "1RTT", "application_data", 9, "repeat"),
    ]
    # event 6:   [0, "transport", "packet_dropped", {"packet_size": 923, "trigger": "padding_packet"}]
    # event 103: [t, "transport", "packet_dropped", {"packet_type": "1RTT", "packet_size": 256,
    #             "trigger": "payload_decrypt_error"}]  (no packet_number in either)
    # (packet_type of event 6, which logs none: test_packet_dropped_without_type)
    assert [r[:2] + r[3:] for r in table(store, DROPPED)] == [
        (6, 0.0, None, 923, "padding_packet"),
        (103, ms(dropped_us / 1000), None, 256, "payload_decrypt_error"),
    ]
    assert table(store, "SELECT packet_type FROM dropped_packets WHERE event_index = 103") == [("1RTT",)]


def test_quic_go_packet_dropped(store):
    store.ingest(QUIC_GO_SERVER)
    # event 14 (first event at time 0.203874): {"time": 1.229712, "name": "transport:packet_dropped", "data":
    #   {"header": {"packet_type": "unknown", "dcid": "00000000"}, "raw": {"length": 682},
    #    "trigger": "connection_unknown", "details": {"reason": "unknown_connection_id"}}}
    assert table(store, DROPPED) == [(14, ms(1.025838), "unknown", None, 682, "connection_unknown")]


def test_aioquic_client_packet_lost(store):
    store.ingest(AIOQUIC_CLIENT_NGTCP2)
    # events 37 and 45 (first event at time 1795420181342.3477, epoch ms):
    #   {"data": {"type": "handshake", "packet_number": 2 / 5}, "name": "recovery:packet_lost",
    #    "time": 1795420181355.9478 / 1795420181370.3687}; no trigger; no packet_dropped in the file.
    # (epoch-ms doubles near 1.8e12 are 0.24 µs apart: times compared to 1 µs)
    assert [(r[0], r[1], r[4], r[5]) for r in table(store, LOST)] == [
        (37, ms(13.6001, 1e-3), 2, None),
        (45, ms(28.0210, 1e-3), 5, None),
    ]
    assert table(store, DROPPED) == []


def test_aioquic_packet_lost_type(store):
    store.ingest(AIOQUIC_CLIENT_NGTCP2)
    # {"data": {"type": "handshake", "packet_number": 2}} and {"type": "handshake", "packet_number": 5}
    assert [r[2:4] for r in table(store, LOST)] == [("handshake", "handshake")] * 2


# aioquic server (400 KB transfer): 20 packet_lost events {"type": "1RTT", "packet_number": n}
AIOQUIC_SERVER_LOST = [(826, 145), (828, 146), (839, 171), (841, 172), (843, 173), (845, 174), (847, 175),
                       (849, 176), (851, 177), (853, 178), (855, 179), (857, 180), (859, 181), (903, 206),
                       (905, 208), (907, 209), (909, 210), (911, 211), (966, 212), (968, 213)]


def test_aioquic_server_lost_and_dropped(store):
    store.ingest(AIOQUIC_SERVER)
    # first event at time 1795420306903.3591; event 826 at 1795420306942.6345, 828 at ...942.6404,
    # 839 at ...944.9873, 968 at ...948.5188; none logs a trigger
    got = table(store, LOST)
    assert [(r[0], r[4]) for r in got] == AIOQUIC_SERVER_LOST
    assert [r[5] for r in got] == [None] * 20
    assert [r[1] for r in got[:3]] + [got[-1][1]] == [ms(39.2754, 1e-3), ms(39.2813, 1e-3), ms(41.6282, 1e-3),
                                                      ms(45.1597, 1e-3)]
    # event 7: {"data": {"trigger": "header_parse_error", "raw": {"length": 690}},
    #           "name": "transport:packet_dropped", "time": 1795420306904.837}  (no type, no number)
    assert [r[:2] + r[3:] for r in table(store, DROPPED)] == [(7, ms(1.4779, 1e-3), None, 690, "header_parse_error")]


def test_aioquic_server_packet_lost_type(store):
    store.ingest(AIOQUIC_SERVER)
    # all 20: {"data": {"type": "1RTT", "packet_number": n}, "name": "recovery:packet_lost", ...}
    assert [r[2:4] for r in table(store, LOST)] == [("1RTT", "application_data")] * 20


@pytest.mark.parametrize("path, event_index", [(PICO_TRACE, 6), (PICO_TRACE_ECN, 6), (AIOQUIC_SERVER, 7)],
                         ids=["qlog_trace_ref", "qlog_trace_ecn_ref", "aioquic_server"])
def test_packet_dropped_without_type(store, path, event_index):
    store.ingest(path)
    # picoquic event 6 {"packet_size": 923, "trigger": "padding_packet"};
    # aioquic event 7 {"trigger": "header_parse_error", "raw": {"length": 690}}: no packet type logged
    assert table(store, f"SELECT packet_type FROM dropped_packets WHERE event_index = {event_index}") == [(None,)]


# ---------------------------------------------------------------- timers


def test_quic_go_loss_timer_updated(store):
    store.ingest(QUIC_GO_SERVER)
    # the file's 8 "recovery:loss_timer_updated" events (first event at time 0.203874; delta in ms):
    #   19   t 1.277183  {"event_type": "set", "timer_type": "pto", "packet_number_space": "initial",
    #                     "delta": 199.953932}
    #   29   t 4.707154  set pto handshake 6.46568
    #   34   t 4.716147  {"event_type": "cancelled"}
    #   39   t 4.978498  set pto application_data 29.837289
    #   44   t 5.152958  set pto application_data 28.418829
    #   53   t 5.417562  set pto application_data 31.859476
    #   57   t 7.271715  {"event_type": "cancelled"}
    #   65   t 10.338794 set pto application_data 32.280173
    set_pto = ("pto", "set")
    assert table(store, TIMERS) == [
        (19, ms(1.073309), *set_pto, "initial", ms(199.953932)),
        (29, ms(4.503280), *set_pto, "handshake", ms(6.46568)),
        (34, ms(4.512273), None, "cancelled", None, None),
        (39, ms(4.774624), *set_pto, "application_data", ms(29.837289)),
        (44, ms(4.949084), *set_pto, "application_data", ms(28.418829)),
        (53, ms(5.213688), *set_pto, "application_data", ms(31.859476)),
        (57, ms(7.067841), None, "cancelled", None, None),
        (65, ms(10.134920), *set_pto, "application_data", ms(32.280173)),
    ]
