"""HelloRetryRequest in handshake classification (quicack/core/classify.py).

A HelloRetryRequest is a ServerHello message (RFC 8446 §4.1.4) that the server sends at once,
without a certificate; the client answers with a second ClientHello at the next offset of its
Initial crypto stream.  The round after it is classified, like the attempt after a Retry.  The
real exchange (quic-go client and server, groups chosen so the server must ask again) is in
tests/lab/test_peers_hrr.py.
"""

from __future__ import annotations

from quicack.core.classify import classify
from quicack.model import Frame

from test_classify import CH, PAD, SH, Trace, ack_of

HRR = SH  # the server's first Initial crypto bytes, at offset 0 (56 bytes for quic-go)
CH2 = Frame("crypto", offset_bytes=300, length_bytes=330)  # right after the first ClientHello
REAL_SH = Frame("crypto", offset_bytes=90, length_bytes=100)  # right after the HelloRetryRequest


def hrr_trace(vantage="client"):
    """ClientHello, HelloRetryRequest with an ACK, second ClientHello."""
    tr = Trace(vantage).add(0, "client", "initial", 0, CH, PAD)
    tr.add(10, "server", "initial", 0, ack_of((0, 0)), HRR)
    return tr.add(10.2, "client", "initial", 1, ack_of((0, 0)), CH2, PAD)


def test_the_round_after_a_hello_retry_request_is_classified_iack():
    tr = hrr_trace().add(20, "server", "initial", 1, ack_of((0, 1)))
    tr.add(41, "server", "initial", 2, REAL_SH).finish(50)
    h = classify(tr.packets)
    # first round: ACK and HelloRetryRequest in one packet, which alone would read as wfc
    assert (h.handshake_class, h.reason) == ("iack", "instant_ack")
    assert "after_hello_retry_request" in h.notes
    assert (h.first_ack_packet_number, h.ack_time_ms, h.server_hello_time_ms) == (1, 20, 41)
    assert h.server_hello_event_index == 4 and h.ack_sh_gap_ms == 21
    assert h.first_ack_acknowledges_first_initial  # the second ClientHello's first Initial (pn 1)
    assert h.clienthello_packets == 1 and h.server_hello_ms == 41 and h.first_server_packet_ms == 10


def test_the_round_after_a_hello_retry_request_is_classified_wfc():
    tr = hrr_trace("server").add(20, "server", "initial", 1, ack_of((0, 1)), REAL_SH).finish(30)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.notes) == ("wfc", "ack_with_server_hello", ("after_hello_retry_request",))
    assert h.server_hello_time_ms == 20


def test_a_late_ack_of_the_first_clienthello_is_not_the_answer_to_the_second():
    # the server's PTO re-sends the HelloRetryRequest with its ACK of pn 0 after the second
    # ClientHello went out; the ACK of pn 1 comes with the ServerHello
    tr = hrr_trace().add(15, "server", "initial", 1, ack_of((0, 0)), HRR)
    tr.add(20, "server", "initial", 2, ack_of((0, 1)), REAL_SH).finish(30)
    h = classify(tr.packets)
    assert (h.handshake_class, h.first_ack_packet_number, h.server_hello_time_ms) == ("wfc", 2, 20)


def test_split_second_clienthello_partly_acknowledged():
    tr = hrr_trace().add(10.3, "client", "initial", 2, Frame("crypto", offset_bytes=630, length_bytes=900))
    tr.add(20, "server", "initial", 1, ack_of((0, 1))).add(30, "server", "initial", 2, ack_of((0, 2)), REAL_SH)
    h = classify(tr.finish(40).packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "partial_clienthello", 2)


def test_no_serverhello_after_the_second_clienthello_is_a_failure():
    h = classify(hrr_trace().add(20, "server", "initial", 1, ack_of((0, 1))).packets)
    assert (h.handshake_class, h.reason, h.notes) == ("failed", "ack_without_server_hello",
                                                        ("after_hello_retry_request",))
    assert h.server_hello_time_ms is None and h.first_ack_packet_number == 1


def test_without_packet_numbers_any_ack_after_the_second_clienthello_answers_it():
    tr = Trace().add(0, "client", "initial", None, CH).add(10, "server", "initial", None, ack_of((0, 0)), HRR)
    tr.add(10.2, "client", "initial", None, CH2).add(20, "server", "initial", None, ack_of((0, 0)))
    tr.add(30, "server", "initial", None, REAL_SH).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.ack_time_ms, h.server_hello_time_ms) == ("iack", 20, 30)


def test_clienthello_retransmitted_after_the_serverhello_is_not_a_second_one():
    # the client re-sends its ClientHello (frames reordered) after the ServerHello arrived
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)), SH)
    tr.add(11, "client", "initial", 1, Frame("crypto", offset_bytes=150, length_bytes=150),
           Frame("crypto", offset_bytes=0, length_bytes=150)).finish(20)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes, h.server_hello_time_ms) == ("wfc", (), 10)


def test_missed_piece_of_the_first_clienthello_is_not_a_second_one():
    # a capture that missed the first Initial's second half sees it only when re-sent late:
    # bytes no earlier packet showed, but below the end of what was sent
    tr = Trace("network").add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200),
                              Frame("crypto", offset_bytes=1500, length_bytes=100))
    tr.add(10, "server", "initial", 0, ack_of((0, 0)), SH)
    tr.add(11, "client", "initial", 2, Frame("crypto", offset_bytes=1200, length_bytes=300)).finish(20)
    h = classify(tr.packets)
    assert "after_hello_retry_request" not in h.notes and h.server_hello_time_ms == 10


def test_split_clienthello_sent_before_any_answer_is_not_a_second_one():
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200))
    tr.add(0.1, "client", "initial", 1, Frame("crypto", offset_bytes=1200, length_bytes=400))
    tr.add(10, "server", "initial", 0, ack_of((0, 1)), SH).finish(20)
    h = classify(tr.packets)
    assert "after_hello_retry_request" not in h.notes and h.clienthello_packets == 2
