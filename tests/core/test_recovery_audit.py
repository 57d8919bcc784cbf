"""RFC 9002 replay (quicack/core/recovery.py): rules a mutation audit found no test checking.

Same style as test_recovery.py: each expected number is worked out in the test from the RFC text
quoted above it (or, for quicack's own heuristics, from the rule the module documents).
"""

from __future__ import annotations

import pytest

from quicack.core.recovery import (APPLICATION, FIRST_PTO_MS, HANDSHAKE, INITIAL, K_GRANULARITY_MS, K_INITIAL_RTT_MS, AckReceived, HandshakeConfirmed, Lost, PtoExpired, RetryReceived, RttEstimator, Sent, SpaceDiscarded, first_pto_after, initial_pto_ms, replay)


def ack(t, space, *ranges, delay=0.0):
    return AckReceived(t, space, tuple(ranges), delay)


def pto(smoothed, rttvar, max_ack_delay=0.0):
    # §6.2.1: "PTO = smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay"
    return smoothed + max(4 * rttvar, 1.0) + max_ack_delay


# --- constants and helpers ------------------------------------------------------------------------

def test_first_pto_constant_is_one_second_as_the_probe_and_server_use_it():
    # §6.2.2: "the initial RTT SHOULD be set to 333 milliseconds.  This results in handshakes
    # starting with a PTO of 1 second"; §5.3 rttvar = kInitialRtt / 2:
    # 333 + max(4 × 166.5, 1) = 999 ms.  (scan/connection.py and serve.py read FIRST_PTO_MS.)
    assert (K_INITIAL_RTT_MS, K_GRANULARITY_MS) == (333.0, 1.0)
    assert FIRST_PTO_MS == 333.0 + max(4 * 333.0 / 2, 1.0) == 999.0 == initial_pto_ms()


def test_first_pto_after_adds_max_ack_delay_in_the_application_space():
    # §5.3 first sample: smoothed_rtt = 100, rttvar = 50; §6.2.1 Application Data PTO adds the
    # max_ack_delay: 100 + max(200, 1) + 25 = 325 (Initial: 300).
    assert first_pto_after(100.0, APPLICATION, 25.0) == pto(100.0, 50.0, 25.0) == 325.0
    assert first_pto_after(100.0, INITIAL, 25.0) == pto(100.0, 50.0) == 300.0


def test_estimator_keeps_the_latest_rtt():
    # §5.1: latest_rtt is the most recent sample, not smoothed or adjusted.
    est = RttEstimator()
    est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert est.latest_rtt_ms == 100.0
    est.update(130.0, 10.0, space=HANDSHAKE, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert est.latest_rtt_ms == 130.0


# --- max_ack_delay default and confirmation ---------------------------------------------------------

def test_application_pto_uses_the_default_max_ack_delay_of_25_ms_when_the_peer_sent_none():
    # RFC 9000 §18.2 max_ack_delay: "If this value is absent, a default of 25 milliseconds is
    # assumed."  Samples: Initial 100 (smoothed 100, rttvar 50), then Application 100 after
    # confirmation, no ack delay: rttvar = 3/4 × 50 + 1/4 × |100 − 100| = 37.5, smoothed = 100.
    # §6.2.1: PTO = 100 + max(4 × 37.5, 1) + 25 = 275.
    events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0)), HandshakeConfirmed(101.0),
              Sent(102.0, APPLICATION, 0, True), ack(202.0, APPLICATION, (0, 0))]
    s = replay(events, is_client=True).samples
    rttvar = 3 / 4 * 50.0 + 1 / 4 * abs(100.0 - 100.0)
    assert (s[1].smoothed_rtt_ms, s[1].rttvar_ms) == (100.0, rttvar)
    assert s[1].pto_ms == pto(100.0, rttvar, 25.0) == 275.0
    assert s[1].handshake_confirmed is True and s[0].handshake_confirmed is False


def test_sample_reports_the_connection_min_rtt_not_its_own_latest_rtt():
    # §5.2: "min_rtt MUST be set to the lesser of min_rtt and latest_rtt on all other samples":
    # samples 100 then 120 → the second sample's min_rtt is 100.
    events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0)),
              Sent(100.0, HANDSHAKE, 0, True), ack(220.0, HANDSHAKE, (0, 0))]
    s = replay(events, is_client=True).samples
    assert [x.latest_rtt_ms for x in s] == [100.0, 120.0]
    assert [x.min_rtt_ms for x in s] == [100.0, 100.0]


# --- PTO backoff ------------------------------------------------------------------------------------

def test_pto_backoff_is_a_power_of_two():
    # Appendix A.8: "duration = (smoothed_rtt + max(4 * rttvar, kGranularity)) * (2 ^ pto_count)".
    # Client, three PTO expiries, then the first sample (Initial ACK, so no reset, §6.2.1):
    # latest 7093 − 6993 = 100 → PTO 300, × 2^3 = 2400.  A server resets on the ACK: × 2^0.
    events = [Sent(0.0, INITIAL, 0, True), PtoExpired(999.0), PtoExpired(2997.0), PtoExpired(6993.0),
              Sent(6993.0, INITIAL, 1, True), ack(7093.0, INITIAL, (1, 1))]
    client = replay(events, is_client=True, pto_observable=True).samples[0]
    assert (client.pto_ms, client.pto_count) == (pto(100.0, 50.0), 3)
    assert client.pto_backoff_ms == pto(100.0, 50.0) * 2 ** 3 == 2400.0
    server = replay(events, is_client=False, pto_observable=True).samples[0]
    assert server.pto_count == 0 and server.pto_backoff_ms == server.pto_ms == 300.0


def test_client_application_ack_before_handshake_ack_does_not_reset_backoff():
    # §6.2.1: "the PTO backoff is not reset at a client that is not yet certain that the server
    # has finished validating the client's address"; Appendix A.8 PeerCompletedAddressValidation:
    # "return has received Handshake ACK || handshake confirmed".  An ACK of 0-RTT (Application
    # Data space) is neither: the backoff stays 1.
    events = [Sent(0.0, INITIAL, 0, True), Sent(1.0, APPLICATION, 0, True), PtoExpired(999.0),
              ack(1100.0, APPLICATION, (0, 0))]
    s = replay(events, is_client=True, pto_observable=True).samples
    assert [x.pto_count for x in s] == [1]


def test_client_resets_backoff_once_the_handshake_is_confirmed_even_on_initial_acks():
    # Appendix A.8 PeerCompletedAddressValidation: "... || handshake confirmed"; Appendix A.7
    # OnAckReceived: "if (PeerCompletedAddressValidation()) pto_count = 0".  No Handshake ACK in
    # this trace, but confirmation: the Initial ACK resets the backoff.
    events = [Sent(0.0, INITIAL, 0, True), PtoExpired(999.0), HandshakeConfirmed(1000.0),
              ack(1100.0, INITIAL, (0, 0))]
    s = replay(events, is_client=True, pto_observable=True).samples
    assert [x.pto_count for x in s] == [0]


def test_retry_resets_the_pto_backoff():
    # §6.3: "Clients that receive a Retry packet reset congestion control and loss recovery state,
    # including resetting any pending timers" (Appendix A: pto_count is loss recovery state).
    # Initial ACKs do not reset a client's backoff (§6.2.1), so the sample shows it: 0, not 1.
    events = [Sent(0.0, INITIAL, 0, True), PtoExpired(999.0), Sent(999.0, INITIAL, 1, True),
              RetryReceived(1000.0), Sent(1001.0, INITIAL, 2, True), ack(1101.0, INITIAL, (2, 2))]
    s = replay(events, is_client=True, pto_observable=True).samples
    assert [(x.latest_rtt_ms, x.pto_count) for x in s] == [(100.0, 0)]


def test_discarding_a_space_resets_the_pto_backoff():
    # Appendix A.11 OnPacketNumberSpaceDiscarded: "sent_packets[pn_space].clear() ... pto_count = 0".
    # The client's Initial ACK does not reset the backoff itself (§6.2.1), so the sample shows the
    # discard's reset: 0, not 1.
    events = [Sent(0.0, INITIAL, 0, True), Sent(1.0, HANDSHAKE, 0, True), PtoExpired(999.0),
              SpaceDiscarded(1000.0, HANDSHAKE), ack(1100.0, INITIAL, (0, 0))]
    s = replay(events, is_client=True, pto_observable=True).samples
    assert [(x.latest_rtt_ms, x.pto_count) for x in s] == [(1100.0, 0)]


# --- which sent packets an ACK can acknowledge ------------------------------------------------------

def test_packets_sent_before_a_retry_are_forgotten():
    # §6.3: a Retry resets loss recovery state (Appendix A: sent_packets): a later ACK of a packet
    # sent before the Retry is not an RTT sample.
    events = [Sent(0.0, INITIAL, 0, True), RetryReceived(100.0), Sent(101.0, INITIAL, 1, True),
              ack(200.0, INITIAL, (0, 0))]
    r = replay(events, is_client=True)
    assert r.samples == [] and r.acks_without_sample == 1


def test_a_loss_before_a_retry_does_not_remove_the_resend_of_the_same_number():
    # Appendix A.10: a packet declared lost leaves sent_packets; the Retry's resend of Initial pn 0
    # (aioquic reuses the number) is a new packet, sent after the loss: its ACK is a sample,
    # 161 − 61 = 100 ms (§5.1 latest_rtt = ack_time − send_time_of_largest_acked).
    events = [Sent(0.0, INITIAL, 0, True), Lost(50.0, INITIAL, 0), RetryReceived(60.0),
              Sent(61.0, INITIAL, 0, True), ack(161.0, INITIAL, (0, 0))]
    assert [s.latest_rtt_ms for s in replay(events, is_client=True).samples] == [100.0]


def test_an_ack_cannot_acknowledge_a_packet_sent_after_it_in_the_trace():
    # §5.1: a sample needs "the largest acknowledged packet number is newly acknowledged" — pn 1
    # is not sent yet when the second ACK names it, so that ACK has no sample; the third ACK does:
    # 40 − 15 = 25 ms.
    events = [Sent(0.0, APPLICATION, 0, True), ack(10.0, APPLICATION, (0, 0)),
              ack(12.0, APPLICATION, (0, 1)), Sent(15.0, APPLICATION, 1, True),
              ack(40.0, APPLICATION, (1, 1))]
    r = replay(events, is_client=True)
    assert [(s.event_index, s.latest_rtt_ms) for s in r.samples] == [(1, 10.0), (4, 25.0)]
    assert r.acks_without_sample == 1


def test_packets_logged_out_of_number_order_are_found():
    # §5.1 "latest_rtt = ack_time - send_time_of_largest_acked": pn 1 logged (sent at 0) before
    # pn 0 (sent at 5); the ACK of 0–1 at 50 measures to pn 1: 50 ms.
    events = [Sent(0.0, APPLICATION, 1, True), Sent(5.0, APPLICATION, 0, True), ack(50.0, APPLICATION, (0, 1))]
    s = replay(events, is_client=True).samples
    assert [(x.largest_acknowledged, x.latest_rtt_ms) for x in s] == [(1, 50.0)]


def test_an_ack_frame_without_ranges_counts_as_an_ack_without_sample():
    events = [Sent(0.0, APPLICATION, 0, True), AckReceived(10.0, APPLICATION, (), 0.0)]
    r = replay(events, is_client=True)
    assert r.samples == [] and r.acks_without_sample == 1


# --- the replay's contract --------------------------------------------------------------------------

def test_an_unknown_event_is_refused():
    with pytest.raises(TypeError):
        replay([Sent(0.0, INITIAL, 0, True), ("ack", 10.0)], is_client=True)


# --- quicack's inflated-first-sample flag (its documented rule, not the RFC's) ----------------------

@pytest.mark.parametrize("first, later, flagged", [
    (35.0, 20.0, True),    # 35 > 1.5 × 20 = 30 and 15 > 1
    (30.0, 20.0, False),   # 30 is not > 30
    (40.0, 30.0, False),   # 40 is not > 45, though 10 ms above min_rtt
    (2.5, 1.0, True),      # 2.5 > 1.5 and 1.5 > 1
    (2.0, 1.0, False),     # 2.0 > 1.5, but only 1 ms above (not > kGranularity)
    (1.0, 0.5, False),     # 1.0 > 0.75, but 0.5 ms above
])
def test_first_sample_inflated_flag_needs_both_ratio_and_one_millisecond(first, later, flagged):
    # recovery.py: "A first sample this many times [1.5] the connection's final min_rtt (and > 1 ms
    # above it) is flagged."
    assert (first > 1.5 * later and first - later > 1.0) is flagged
    events = [Sent(0.0, INITIAL, 0, True), ack(first, INITIAL, (0, 0)),
              Sent(100.0, HANDSHAKE, 0, True), ack(100.0 + later, HANDSHAKE, (0, 0))]
    s = replay(events, is_client=True).samples
    assert [x.latest_rtt_ms for x in s] == [first, later]
    assert ("first_sample_inflated" in s[0].flags) is flagged


# --- ACK bookkeeping and sample flags ---------------------------------------------------------------

def test_acks_naming_packets_never_sent_are_counted():
    # The second ACK's largest, pn 5, was never sent in this trace (trace cut): counted once; the
    # first and third ACKs name only a sent packet.
    events = [Sent(0.0, APPLICATION, 0, True), ack(10.0, APPLICATION, (0, 0)), ack(20.0, APPLICATION, (0, 5)),
              ack(30.0, APPLICATION, (0, 0))]
    r = replay(events, is_client=True)
    assert r.acks_of_unknown_packets == 1 and r.sample_count == 1


def test_an_ack_delay_the_trace_does_not_give_is_taken_as_zero():
    # Sample.ack_delay_ms: "None: the trace does not say; taken as 0".  Second sample (Handshake,
    # not confirmed): latest 130, min_rtt 100, ack_delay 0 → adjusted = 130 (§5.3).
    events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0)),
              Sent(100.0, HANDSHAKE, 0, True), AckReceived(230.0, HANDSHAKE, ((0, 0),), None)]
    s = replay(events, is_client=True).samples[1]
    assert (s.ack_delay_ms, s.ack_delay_used_ms, s.adjusted_rtt_ms) == (None, 0.0, 130.0)
    # §5.3 with erratum 7539: rttvar = 3/4 × 50 + 1/4 × |100 − 130|; smoothed = 7/8 × 100 + 1/8 × 130
    assert (s.rttvar_ms, s.smoothed_rtt_ms) == (3 / 4 * 50 + 1 / 4 * 30, 7 / 8 * 100 + 1 / 8 * 130)


def test_ack_delay_flags():
    # quicack's flags: "ack_delay_exceeds_sample" when the reported delay is larger than the
    # sample (equal is not larger); "ack_delay_not_subtracted" only when there was a delay to
    # subtract and §5.3 ("MUST NOT subtract ... if the resulting value is smaller than the
    # min_rtt") refused it — not for a sample whose delay is 0.
    def samples(delay):
        events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0)),
                  Sent(100.0, HANDSHAKE, 0, True), ack(200.0, HANDSHAKE, (0, 0), delay=delay)]
        return replay(events, is_client=True).samples
    assert [s.flags for s in samples(0.0)] == [(), ()]
    assert samples(100.0)[1].flags == ("ack_delay_not_subtracted",)  # 100 >= 100 + 100? no
    assert samples(100.5)[1].flags == ("ack_delay_exceeds_sample", "ack_delay_not_subtracted")
