"""Handshake classification rules (quicack/core/classify.py) on small hand-made packet sequences.

Real traces are classified in tests/store/test_handshakes.py; here each rule and reason gets a minimal
sequence that reaches it (the shapes follow the cases listed in ReACKed QUICer and issue 3).
"""

from __future__ import annotations

from quicack.core.classify import Close, classify
from quicack.model import Frame, Packet

CH = Frame("crypto", offset_bytes=0, length_bytes=300)
SH = Frame("crypto", offset_bytes=0, length_bytes=90)
PAD = Frame("padding")


def ack_of(*ranges, delay=0.5):
    return Frame("ack", ack_delay_ms=delay, largest_acknowledged=max(h for _, h in ranges), acked_ranges=ranges)


class Trace:
    """Builds packets in order: client/server Initial, Handshake … with increasing event_index."""

    def __init__(self, vantage="client"):
        self.vantage = vantage
        self.packets: list[Packet] = []
        self.datagram = 0

    def add(self, t, sender, ptype, pn, *frames, size=None, same_datagram=False):
        if not same_datagram:
            self.datagram += 1
        direction = "sent" if sender == self.vantage else "received"
        self.packets.append(Packet(len(self.packets), t, direction, sender, ptype, pn, size,
                                   self.datagram, tuple(frames)))
        return self

    def finish(self, t):
        """The client's Finished: the handshake completed."""
        return self.add(t, "client", "handshake", 0, ack_of((0, 0)), Frame("crypto", offset_bytes=0, length_bytes=36))


def test_wfc_ack_in_the_serverhello_packet():
    tr = Trace().add(0, "client", "initial", 0, CH, PAD).add(20, "server", "initial", 0, ack_of((0, 0), delay=12.0), SH)
    tr.add(20, "server", "handshake", 1, Frame("crypto", offset_bytes=0), same_datagram=True).finish(25)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("wfc", "ack_with_server_hello")
    assert h.ack_sh_gap_ms == 0.0 and h.first_ack_delay_ms == 12.0
    assert h.first_ack_frames == "ack+crypto" and h.first_ack_acknowledges_first_initial
    assert (h.first_server_packet_ms, h.server_hello_ms, h.handshake_complete_ms) == (20, 20, 25)


def test_iack_ack_only_initial_before_the_serverhello():
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(31.5, "server", "initial", 1, SH).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("iack", "instant_ack")
    assert h.ack_sh_gap_ms == 21.5 and h.first_ack_packet_number == 0


def test_iack_ping_when_the_instant_ack_carries_a_ping():
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)), Frame("ping"))
    tr.add(30, "server", "initial", 1, SH).finish(40)
    assert classify(tr.packets).handshake_class == "iack_ping"


def test_partial_clienthello_acknowledged_at_once():
    # ClientHello over two Initials (offsets 0 and 1200); the server ACKs the first one only.
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200))
    tr.add(0.1, "client", "initial", 1, Frame("crypto", offset_bytes=1200, length_bytes=400))
    tr.add(10, "server", "initial", 0, ack_of((0, 0))).add(12, "server", "initial", 1, ack_of((0, 1)), SH).finish(20)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "partial_clienthello", 2)


def test_split_clienthello_acknowledged_whole_is_a_plain_instant_ack():
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200))
    tr.add(0.1, "client", "initial", 1, Frame("crypto", offset_bytes=1200, length_bytes=400))
    tr.add(10, "server", "initial", 0, ack_of((0, 1))).add(12, "server", "initial", 1, SH).finish(20)
    assert classify(tr.packets).reason == "instant_ack"


def test_serverhello_before_ack():
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(119, "server", "initial", 0, SH)
    tr.add(119.5, "server", "initial", 1, ack_of((0, 0))).finish(127)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.ack_sh_gap_ms) == ("sh_before_ack", "ack_after_server_hello", -0.5)


def test_no_initial_ack_but_handshake_completed():
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, SH).finish(20)
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("no_ack", "no_initial_ack")


def test_random_initial_packet_numbers_and_a_retransmitted_client_initial():
    # mvfst/ngtcp2/picoquic start at random numbers; the client retransmits before any answer;
    # the first ACK acknowledges the retransmission, not the first Initial.
    tr = Trace().add(0, "client", "initial", 7133, CH).add(999, "client", "initial", 7134, CH)
    tr.add(1020, "server", "initial", 90211, ack_of((7134, 7134))).add(1030, "server", "initial", 90212, SH).finish(1040)
    h = classify(tr.packets)
    assert h.handshake_class == "iack" and "client_initial_retransmitted" in h.notes
    assert h.first_ack_acknowledges_first_initial is False and h.first_ack_largest_acknowledged == 7134


def test_coalesced_ack_initial_and_serverhello_in_one_datagram_is_noted():
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(10, "server", "initial", 1, SH, same_datagram=True).finish(20)
    h = classify(tr.packets)
    assert h.handshake_class == "iack" and "ack_and_server_hello_in_one_datagram" in h.notes


def test_retry_then_instant_ack_classifies_the_second_attempt():
    tr = Trace().add(2, "client", "initial", 0, CH).add(171, "server", "retry", None)
    tr.add(174, "client", "initial", 0, CH).add(346, "server", "initial", 0, ack_of((0, 0)))
    tr.add(348, "server", "initial", 1, SH).finish(357)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes, h.ack_sh_gap_ms) == ("iack", ("after_retry",), 2)
    assert h.first_server_packet_ms == 169  # the Retry, 171 − 2
    assert h.server_hello_ms == 346


def test_retry_and_version_negotiation_without_a_handshake():
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(1, "server", "retry", None)
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("retry", "retry_without_handshake")
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(1, "server", "version_negotiation", None)
    assert classify(tr.packets).handshake_class == "version_negotiation"


def test_failures():
    timeout = Trace().add(0, "client", "initial", 0, CH).add(1000, "client", "initial", 1, CH)
    assert (classify(timeout.packets).handshake_class, classify(timeout.packets).reason) == ("failed", "timeout")

    alert = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)),
                                                           Frame("connection_close", error_code="0x128"))
    h = classify(alert.packets, close=Close(10, "server", "0x128"))
    assert (h.handshake_class, h.reason) == ("failed", "tls_alert")  # 0x100 + alert 40

    closed = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, Frame("connection_close"))
    assert classify(closed.packets, close=Close(10, "server", "2")).reason == "connection_close_by_server"

    acked_only = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    assert classify(acked_only.packets).reason == "ack_without_server_hello"


def test_producers_without_crypto_frames_fall_back_to_packet_size():
    # quant logs ACK frames but no CRYPTO frames: a 47-byte ACK-only Initial, then a 202-byte one.
    tr = Trace().add(0, "client", "initial", 0, PAD, size=1280).add(10, "server", "initial", 0, ack_of((0, 0)), size=47)
    tr.add(12, "server", "initial", 1, Frame("padding"), size=202)
    tr.add(15, "client", "handshake", 0, Frame("handshake_done"))
    h = classify(tr.packets)
    assert h.handshake_class == "iack" and "server_hello_by_size" in h.notes and h.ack_sh_gap_ms == 2


def test_unknowns_say_why():
    assert classify([]).reason == "no_packets"
    no_frames = Trace().add(0, "client", "initial", 0).add(10, "server", "initial", 0)
    assert (classify(no_frames.packets).handshake_class, classify(no_frames.packets).reason) == \
        ("unknown", "frames_not_logged")
    late_start = Trace().add(0, "client", "1RTT", 5, Frame("stream"))
    assert classify(late_start.packets).reason == "no_initial_packets"


def test_server_vantage_uses_send_times():
    tr = Trace("server").add(4.4, "client", "initial", 0, CH).add(12.85, "server", "initial", 0, ack_of((0, 0)), SH)
    h = classify(tr.packets)
    assert h.handshake_class == "wfc" and h.first_server_packet_ms == 12.85 - 4.4


def test_a_capture_that_could_not_read_datagrams_before_the_serverhello_is_unknown():
    # a network capture: unreadable (GSO super-frame) datagrams from 5 ms on may hide an
    # instant ACK before what looks like a wfc first flight
    tr = Trace(vantage="network").add(0, "client", "initial", 0, CH)
    tr.add(20, "server", "initial", 0, ack_of((0, 0)), SH).finish(25)
    assert classify(tr.packets).handshake_class == "wfc"
    hidden = classify(tr.packets, unreadable_from_ms=5.0)
    assert (hidden.handshake_class, hidden.reason) == ("unknown", "gso_superframes")
    assert hidden.notes == ("visible_packets_say_wfc",)
    # after the ServerHello they hide nothing the class rests on
    after = classify(tr.packets, unreadable_from_ms=21.0)
    assert (after.handshake_class, after.notes) == ("wfc", ())
    # a connection the rules already call unknown keeps its own reason
    empty = classify([], unreadable_from_ms=0.0)
    assert (empty.handshake_class, empty.reason) == ("unknown", "no_packets")
