"""Handshake classification (quicack/core/classify.py): rules and side results that the cases in
tests/core/test_classify.py do not reach.  Found by a mutation audit; each test names what it pins.
"""

from __future__ import annotations

import pytest

from quicack.core.classify import Close, classify
from quicack.model import Frame
from test_classify import CH, PAD, SH, Trace, ack_of  # noqa: F401  (the same packet builder)

def iack_trace(vantage="client"):
    """ACK-only server Initial at 10 ms, ServerHello at 30 ms, Finished at 40 ms."""
    tr = Trace(vantage).add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    return tr.add(30, "server", "initial", 1, SH).finish(40)


# --- failures and their reasons --------------------------------------------------------------

def test_a_close_without_any_server_packet_names_its_sender_not_timeout():
    # rule 3: no server packet but a CONNECTION_CLOSE (the client gave up) → failed, by whom
    tr = Trace().add(0, "client", "initial", 0, CH).add(1000, "client", "initial", 1, CH)
    h = classify(tr.packets, close=Close(3000, "client", "0x0"))
    assert (h.handshake_class, h.reason) == ("failed", "connection_close_by_client")


@pytest.mark.parametrize("code", ["0x100", "0x1ff", "256", "crypto_error_0x12a", "CRYPTO_ERROR(0x12a)",
                                  "crypto_error", "TLS handshake failure", "bad_certificate alert",
                                  "error 0x128", "0x128 (40)"])
def test_tls_alert_codes_and_names(code):
    # RFC 9000 §20.1: CRYPTO_ERROR is 0x0100-0x01ff (both ends included); names are matched
    # case-insensitively on crypto_error / tls / alert; a hex number is read up to its last digit
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, Frame("connection_close"))
    h = classify(tr.packets, close=Close(10, "server", code))
    assert (h.handshake_class, h.reason) == ("failed", "tls_alert")


@pytest.mark.parametrize("code", ["0xff", "0x200", "10", "internal_error", "0x12 handshake"])
def test_codes_outside_the_crypto_error_range_are_not_tls_alerts(code):
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, Frame("connection_close"))
    assert classify(tr.packets, close=Close(10, "server", code)).reason == "connection_close_by_server"


def test_a_client_close_after_a_server_answer_names_the_client():
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    h = classify(tr.packets, close=Close(500, "client", "0x0"))
    assert (h.handshake_class, h.reason) == ("failed", "connection_close_by_client")


def test_no_server_packets_and_no_frames_logged_is_a_timeout():
    # with no server packet at all nothing else matters: the rule order says timeout first
    tr = Trace().add(0, "client", "initial", 0).add(1000, "client", "initial", 1)
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("failed", "timeout")


# --- unknowns --------------------------------------------------------------------------------

def test_server_packets_but_no_server_initial():
    # the capture missed the server's Initials: no class, and the reason says which packets
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "handshake", 0, Frame("crypto", offset_bytes=0))
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("unknown", "no_server_initial")
    tr.finish(25)
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("unknown", "no_server_initial")


def test_a_completed_handshake_whose_serverhello_was_not_seen_is_unknown_not_failed():
    # rule 9: the client sent its Finished, so there was a ServerHello; it was just not seen
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0))).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("unknown", "server_hello_not_found")


def test_serverhello_without_an_ack_and_no_finished_is_unknown():
    # rule 12: no Initial ACK yet and the handshake did not complete: the ACK may still have come.
    # The server's own Handshake CRYPTO (its certificate) does not complete the handshake.
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, SH)
    tr.add(10, "server", "handshake", 1, Frame("crypto", offset_bytes=0, length_bytes=1000), same_datagram=True)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("unknown", "no_initial_ack_handshake_incomplete")


def test_handshake_done_completes_the_handshake():
    # _handshake_completed: the client's Finished or HANDSHAKE_DONE (here without Finished logged)
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, SH)
    tr.add(30, "server", "1RTT", 0, Frame("handshake_done"))
    assert (classify(tr.packets).handshake_class, classify(tr.packets).reason) == ("no_ack", "no_initial_ack")


def test_a_capture_that_missed_the_client_initial_still_classifies_from_the_server_initials():
    # Facts.initial_packets: any Initial, from either side
    tr = Trace("network").add(20, "server", "initial", 0, ack_of((0, 0)), SH).finish(25)
    h = classify(tr.packets)
    assert (h.handshake_class, h.client_initial_time_ms, h.first_ack_acknowledges_first_initial) == ("wfc", None, None)


# --- which packet is the ServerHello / the first ACK -----------------------------------------

def test_a_retransmitted_serverhello_does_not_move_the_serverhello():
    # the first server Initial with CRYPTO offset 0 is the ServerHello, not a later PTO copy
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "initial", 0, ack_of((0, 0)), SH)
    tr.add(320, "server", "initial", 1, SH).finish(330)
    h = classify(tr.packets)
    assert (h.handshake_class, h.server_hello_event_index, h.server_hello_ms) == ("wfc", 1, 20)


def test_crypto_without_a_logged_offset_is_taken_for_offset_zero():
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto")).add(20, "server", "initial", 0, ack_of((0, 0)),
                                                                    Frame("crypto")).finish(25)
    assert classify(tr.packets).handshake_class == "wfc"


@pytest.mark.parametrize("split", [1100, 1])
def test_a_crypto_frame_at_a_later_offset_is_not_the_serverhello(split):
    # a large (post-quantum) ServerHello in two Initials, the second arriving first: the ACK
    # packet carries CRYPTO at a later offset, the ServerHello is the packet with offset 0
    tr = Trace().add(0, "client", "initial", 0, CH)
    tr.add(20, "server", "initial", 1, ack_of((0, 0)), Frame("crypto", offset_bytes=split, length_bytes=1250 - split))
    tr.add(21, "server", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=split)).finish(30)
    h = classify(tr.packets)
    assert (h.server_hello_event_index, h.first_ack_event_index) == (2, 1)


def test_the_ping_that_makes_iack_ping_is_in_the_ack_packet():
    # a PING in the ServerHello packet does not make the instant ACK an iack_ping
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(30, "server", "initial", 1, SH, Frame("ping")).finish(40)
    assert classify(tr.packets).handshake_class == "iack"


def test_the_size_fallback_is_not_used_when_crypto_frames_are_logged():
    # a padded ACK-only Initial is large, but CRYPTO frames are logged: it is not the ServerHello
    tr = Trace().add(0, "client", "initial", 0, CH, size=1252).add(10, "server", "initial", 0, ack_of((0, 0)),
                                                                   PAD, size=1252)
    tr.add(30, "server", "initial", 1, SH, size=1252).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes) == ("iack", ())


@pytest.mark.parametrize("size, klass", [(99, "failed"), (100, "iack")])
def test_the_size_fallback_threshold_is_inclusive(size, klass):
    # SERVER_HELLO_MIN_BYTES = 100: "at least" 100 bytes is a ServerHello
    tr = Trace().add(0, "client", "initial", 0, PAD, size=1280).add(10, "server", "initial", 0, ack_of((0, 0)), size=47)
    tr.add(12, "server", "initial", 1, PAD, size=size)
    h = classify(tr.packets)
    assert h.handshake_class == klass
    assert h.clienthello_packets is None  # no CRYPTO logged: no ClientHello packets to count


# --- restarts: Retry and Version Negotiation ------------------------------------------------

def test_after_retry_the_first_initial_is_that_of_the_second_attempt():
    # RFC 9000 §17.2.5.3: packet numbers go on after a Retry.  The first ACK acknowledges the
    # first Initial of the last attempt; the ClientHello sent again is no retransmission.
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "retry", None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "initial", 0, ack_of((1, 1)))
    tr.add(45, "server", "initial", 1, SH).finish(50)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.notes) == ("iack", "instant_ack", ("after_retry",))
    assert h.first_ack_acknowledges_first_initial is True and h.clienthello_packets == 1


def test_version_negotiation_then_retry_classifies_the_attempt_after_the_last_one():
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "version_negotiation", None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "retry", None)
    tr.add(41, "client", "initial", 2, CH).add(60, "server", "initial", 0, ack_of((2, 2)), SH).finish(70)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes) == ("wfc", ("after_version_negotiation", "after_retry"))
    assert h.first_ack_acknowledges_first_initial is True and "client_initial_retransmitted" not in h.notes


def test_version_negotiation_then_a_handshake():
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "version_negotiation", None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "initial", 0, ack_of((1, 1)))
    tr.add(45, "server", "initial", 1, SH).finish(50)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes) == ("iack", ("after_version_negotiation",))


def test_a_duplicated_retry_is_noted_once():
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(20, "server", "retry", None)
    tr.add(20.1, "server", "retry", None).add(21, "client", "initial", 1, CH)
    tr.add(40, "server", "initial", 0, ack_of((1, 1)), SH).finish(50)
    assert classify(tr.packets).notes == ("after_retry",)


def test_a_restart_that_led_nowhere_classifies_all_packets_without_after_notes():
    # "the restart led nowhere: classify what there is": no after_retry note, the ClientHello
    # packets of the whole trace are counted
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", "retry", None)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.notes, h.clienthello_packets) == \
        ("retry", "retry_without_handshake", (), 1)
    # the client answering the Retry is not enough: the server must have answered too
    tr.add(21, "client", "initial", 1, CH)
    h = classify(tr.packets)
    assert h.handshake_class == "retry" and "after_retry" not in h.notes


@pytest.mark.parametrize("restart", ["retry", "version_negotiation"])
def test_after_a_restart_an_ack_without_serverhello_is_a_failure_not_the_restart(restart):
    # rules 6/7 need neither an ACK nor a ServerHello: with an ACK the attempt after the
    # restart failed
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", restart, None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "initial", 0, ack_of((1, 1)))
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("failed", "ack_without_server_hello")
    # … and with a ServerHello (no ACK) it completed without an Initial ACK
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", restart, None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "initial", 0, SH).finish(50)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason) == ("no_ack", "no_initial_ack")


# --- ClientHello packets, partial ClientHello and retransmissions ---------------------------

def test_a_retransmitted_clienthello_is_one_clienthello_packet_and_not_partial():
    # the first ACK acknowledges only the retransmission; the ClientHello is one packet (offset 0)
    tr = Trace().add(0, "client", "initial", 7133, CH).add(999, "client", "initial", 7134, CH)
    tr.add(1020, "server", "initial", 90211, ack_of((7134, 7134))).add(1030, "server", "initial", 90212, SH).finish(1040)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "instant_ack", 1)


def test_several_crypto_frames_in_one_client_initial_count_as_one_clienthello_packet():
    # Chrome splits its ClientHello into several CRYPTO frames, out of order, in one Initial
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto", offset_bytes=500, length_bytes=700),
                     Frame("crypto", offset_bytes=0, length_bytes=500))
    tr.add(10, "server", "initial", 0, ack_of((0, 0)), SH).finish(20)
    h = classify(tr.packets)
    assert (h.handshake_class, h.clienthello_packets) == ("wfc", 1)


def test_a_clienthello_part_sent_after_the_first_ack_still_makes_it_partial():
    # ClientHello packets are counted up to the ServerHello: the ACK covers only the first part
    tr = Trace("network").add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200))
    tr.add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(11, "client", "initial", 1, Frame("crypto", offset_bytes=1200, length_bytes=400))
    tr.add(30, "server", "initial", 1, ack_of((0, 1)), SH).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "partial_clienthello", 2)


def test_an_ack_frame_without_ranges_does_not_claim_a_partial_clienthello():
    # a producer that logs only the largest acknowledged: nothing to say about the parts
    tr = Trace().add(0, "client", "initial", 0, Frame("crypto", offset_bytes=0, length_bytes=1200))
    tr.add(0.1, "client", "initial", 1, Frame("crypto", offset_bytes=1200, length_bytes=400))
    tr.add(10, "server", "initial", 0, Frame("ack", ack_delay_ms=0.0, largest_acknowledged=1))
    tr.add(12, "server", "initial", 1, SH).finish(20)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.first_ack_largest_acknowledged) == ("iack", "instant_ack", 1)


def test_largest_acknowledged_from_the_ranges_when_not_logged():
    tr = Trace().add(0, "client", "initial", 0, CH).add(1, "client", "initial", 2, CH)
    tr.add(10, "server", "initial", 0, Frame("ack", acked_ranges=((2, 2), (0, 0))), SH).finish(20)
    assert classify(tr.packets).first_ack_largest_acknowledged == 2


def test_a_retransmission_after_the_servers_first_answer_is_not_before_the_answer():
    # network vantage: the client's spurious retransmission crosses the server's ACK
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(11, "client", "initial", 1, CH).add(30, "server", "initial", 1, SH).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.notes) == ("iack", ())


# --- unreadable capture datagrams (GSO super-frames) -----------------------------------------

def test_unreadable_datagrams_at_the_serverhello_time_count_as_before_it():
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(20, "server", "initial", 0, ack_of((0, 0)), SH)
    h = classify(tr.finish(25).packets, unreadable_from_ms=20.0)
    assert (h.handshake_class, h.reason) == ("unknown", "gso_superframes")


def test_unreadable_datagrams_between_the_ack_and_the_serverhello_make_an_iack_unknown():
    # the rule is "before the ServerHello", not "before the ACK"
    h = classify(iack_trace("network").packets, unreadable_from_ms=20.0)
    assert (h.handshake_class, h.reason, h.notes) == ("unknown", "gso_superframes", ("visible_packets_say_iack",))


def test_unreadable_datagrams_and_no_serverhello_at_all():
    # no ServerHello: unreadable datagrams may hold it, whenever they come
    tr = Trace("network").add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    h = classify(tr.packets, unreadable_from_ms=500.0)
    assert (h.handshake_class, h.reason, h.notes) == ("unknown", "gso_superframes", ("visible_packets_say_failed",))


def test_the_handshake_completes_with_the_clients_finished_not_its_first_handshake_ack():
    # a client Handshake packet with only an ACK comes before the Finished (CRYPTO)
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(30, "server", "initial", 1, SH).add(35, "client", "handshake", 0, ack_of((0, 0))).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.handshake_complete_ms) == ("iack", 40)


def test_after_a_hello_retry_request_the_second_clienthello_is_not_a_part_of_the_first():
    # HelloRetryRequest (RFC 8446 §4.1.4) is the first message of the server's crypto stream;
    # the second ClientHello (at a later offset of the client's stream) starts the round that is
    # classified, and ClientHello packets are counted in it: one, not a "part" of the first
    # (the first round, an ACK before the HelloRetryRequest, would have read iack)
    tr = Trace().add(0, "client", "initial", 0, CH).add(10, "server", "initial", 0, ack_of((0, 0)))
    tr.add(12, "server", "initial", 1, Frame("crypto", offset_bytes=0, length_bytes=88))  # the HRR
    tr.add(20, "client", "initial", 1, ack_of((0, 1)), Frame("crypto", offset_bytes=300, length_bytes=300))
    tr.add(40, "server", "initial", 2, ack_of((0, 1)), Frame("crypto", offset_bytes=88, length_bytes=90)).finish(50)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("wfc", "ack_with_server_hello", 1)
    assert h.notes == ("after_hello_retry_request",) and h.server_hello_time_ms == 40


# --- bugs the audit found (fixed) --------------------------------------------------------------

@pytest.mark.parametrize("restart", ["retry", "version_negotiation"])
def test_a_failed_attempt_after_a_restart_is_classified_as_that_attempt(restart):
    # the note after_retry / after_version_negotiation says "the last attempt was classified":
    # the server's Initial after the restart closes the connection (INVALID_TOKEN 0xb), so the
    # class is that failure, as without the restart — not retry / version_negotiation
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", restart, None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", "initial", 0, Frame("connection_close"))
    h = classify(tr.packets, close=Close(40, "server", "0xb"))
    assert (h.handshake_class, h.reason, h.notes) == ("failed", "connection_close_by_server", (f"after_{restart}",))


@pytest.mark.parametrize("order, last", [(("version_negotiation", "retry"), "retry"),
                                         (("retry", "version_negotiation"), "version_negotiation")])
def test_a_handshake_that_ends_at_a_restart_is_classified_by_the_last_one(order, last):
    tr = Trace().add(0, "client", "initial", 0, CH).add(20, "server", order[0], None)
    tr.add(21, "client", "initial", 1, CH).add(40, "server", order[1], None).add(41, "client", "initial", 2, CH)
    h = classify(tr.packets)
    assert h.handshake_class == last
    # each restart started a new attempt: the ClientHellos after them are not retransmissions
    assert "client_initial_retransmitted" not in h.notes


def test_a_clienthello_retransmitted_with_its_crypto_frames_reordered_is_one_packet():
    # Chrome sends its ClientHello in several CRYPTO frames in shuffled order, shuffled again in
    # a retransmission: the same bytes, so one ClientHello packet, and the ACK of the
    # retransmission alone is an instant ACK of the whole ClientHello, not of a part
    first = (Frame("crypto", offset_bytes=500, length_bytes=700), Frame("crypto", offset_bytes=0, length_bytes=500))
    again = (Frame("crypto", offset_bytes=0, length_bytes=500), Frame("crypto", offset_bytes=500, length_bytes=700))
    tr = Trace().add(0, "client", "initial", 0, *first).add(999, "client", "initial", 1, *again)
    tr.add(1010, "server", "initial", 0, ack_of((1, 1))).add(1030, "server", "initial", 1, SH).finish(1040)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "instant_ack", 1)
    assert h.notes == ("client_initial_retransmitted",)


def test_a_clienthello_split_over_two_initials_whose_numbers_are_not_logged_is_not_claimed_partial():
    # no packet number, no evidence that the ACK left a part out
    second = Frame("crypto", offset_bytes=1200, length_bytes=400)
    tr = Trace().add(0, "client", "initial", None, CH).add(0, "client", "initial", None, second)
    tr.add(10, "server", "initial", 0, ack_of((0, 1))).add(30, "server", "initial", 1, SH).finish(40)
    h = classify(tr.packets)
    assert (h.handshake_class, h.reason, h.clienthello_packets) == ("iack", "instant_ack", 2)
    # with numbers, the ACK of pn 0 only does leave one out
    tr = Trace().add(0, "client", "initial", 0, CH).add(0, "client", "initial", 1, second)
    tr.add(10, "server", "initial", 0, ack_of((0, 0))).add(30, "server", "initial", 1, SH).finish(40)
    assert classify(tr.packets).reason == "partial_clienthello"
