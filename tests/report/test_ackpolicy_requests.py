"""ACK_FREQUENCY requests in a transfer and whether the receiver obeyed them
(quicack/report/ackpolicy.py: ``requests``), from a hand-written qlog ingested into a store: the
frames' fields as the store keeps them, then the ratio asked for beside the ratio measured.

A server sends 60 one-packet STREAM datagrams, one every 10 ms; the client acknowledges every
second one.  At 200 ms the server asks for 1:10 (Ack-Eliciting Threshold 9, 25 ms) and the
client follows; at 400 ms it sends the same request again (sequence 0: a retransmission, ignored)
and an IMMEDIATE_ACK."""

from __future__ import annotations

from conftest import write_seq
from quicack import Store
from quicack.report import ackpolicy
from quicack.report.document import _frequency_frames, _policy_packets


def _qlog(tmp_path):
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "server"}, "title": "ack-frequency"}}
    events, acked, client_pn = [], -1, 0
    for pn in range(60):
        t = 10.0 * pn
        frames = [{"frame_type": "stream", "stream_id": 0, "offset": pn * 1000, "length": 1000}]
        if pn == 20 or pn == 40:
            frames.append({"frame_type": "ack_frequency", "sequence_number": 0, "ack_eliciting_threshold": 9,
                           "request_max_ack_delay": 25.0, "reordering_threshold": 1})
        if pn == 40:
            frames.append({"frame_type": "immediate_ack"})
        events.append({"time": t, "name": "transport:packet_sent",
                       "data": {"header": {"packet_type": "1RTT", "packet_number": pn}, "raw": {"length": 1050},
                                "frames": frames}})
        ratio = 2 if pn < 20 else 10
        if (pn + 1) % ratio == 0:
            events.append({"time": t + 5.0, "name": "transport:packet_received",
                           "data": {"header": {"packet_type": "1RTT", "packet_number": client_pn},
                                    "raw": {"length": 40}, "frames": [{"frame_type": "ack", "acked_ranges": [[acked + 1, pn]]}]}})
            acked, client_pn = pn, client_pn + 1
    return write_seq(tmp_path / "server.sqlog", header, events)


def test_requests_and_the_ratio_that_followed(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        assert store.ingest(_qlog(tmp_path)).status == "ingested"
        cid = store.sql("SELECT connection_id FROM connections")["connection_id"].to_list()[0]
        frames = _frequency_frames(store, cid)
        assert frames.filter(frames["frame_type"] == "ack_frequency").select(
            "sequence_number", "ack_eliciting_threshold", "request_max_ack_delay_ms", "reordering_threshold"
        ).rows() == [(0, 9, 25.0, 1), (0, 9, 25.0, 1)]
        packets = _policy_packets(store, cid)
    policy = ackpolicy.summarize(packets)
    assert policy.forward_sender == "server"
    asked = ackpolicy.requests(packets, frames, policy.forward_sender)
    assert asked.height == 1  # the second frame repeats sequence number 0
    (row,) = asked.to_dicts()
    assert row["time_ms"] == 200.0 and row["requested_ratio"] == 10 and row["request_max_ack_delay_ms"] == 25.0
    assert row["measured_ratio"] == 10.0  # 40 packets from 200 ms on, 4 ACKs
    assert row["immediate_acks"] == 1
