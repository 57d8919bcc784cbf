"""RFC 9002 replay (quicack/core/recovery.py): hand-worked numbers, one rule per test, and properties.

Each expected number is worked out in the comment above it from the RFC text cited.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quicack.core.recovery import (APPLICATION, HANDSHAKE, INITIAL, AckReceived, HandshakeConfirmed, Lost, PeerMaxAckDelay, PtoExpired, RetryReceived, RttEstimator, Sent, SpaceDiscarded, first_pto_after, initial_pto_ms, replay)


def ack(t, space, *ranges, delay=0.0):
    return AckReceived(t, space, tuple(ranges), delay)


def test_pto_before_any_sample_is_999_ms():
    # §6.2.2: kInitialRtt 333 ms; §5.3: rttvar = kInitialRtt / 2 = 166.5;
    # §6.2.1: PTO = 333 + max(4 × 166.5, 1) = 333 + 666 = 999 ms
    assert initial_pto_ms() == 999.0


def test_first_sample_sets_min_smoothed_and_half_rttvar():
    # §5.2 "min_rtt MUST be set to the latest_rtt on the first RTT sample"; §5.3 "smoothed_rtt =
    # latest_rtt; rttvar = latest_rtt / 2".  PTO (Initial, §6.2.1, no max_ack_delay) =
    # 100 + max(4 × 50, 1) = 300 ms.
    est = RttEstimator()
    used, adjusted = est.update(100.0, 7.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert (est.min_rtt_ms, est.smoothed_rtt_ms, est.rttvar_ms) == (100.0, 100.0, 50.0)
    assert (used, adjusted) == (0.0, 100.0)  # the first sample is taken as it is
    assert est.pto_ms(INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0) == 300.0
    # first PTO = sample + max(2 × sample, 1 ms)
    assert first_pto_after(100.0) == 300.0
    assert first_pto_after(0.2) == pytest.approx(0.2 + 1.0)  # kGranularity floor: 4 × 0.1 < 1


def test_second_sample_updates_rttvar_before_smoothed_rtt_erratum_7539():
    # Second sample, Handshake space, not confirmed: latest 120, ack_delay 10, min_rtt 100.
    # §5.3: 120 >= 100 + 10 → adjusted = 110.
    # Erratum 7539 (Appendix A.7 order): rttvar = 3/4 × 50 + 1/4 × |100 − 110| = 37.5 + 2.5 = 40;
    # then smoothed = 7/8 × 100 + 1/8 × 110 = 101.25.  (The §5.3 order as first published would
    # give rttvar = 37.5 + 1/4 × |101.25 − 110| = 39.6875.)
    est = RttEstimator()
    est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    used, adjusted = est.update(120.0, 10.0, space=HANDSHAKE, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert (used, adjusted) == (10.0, 110.0)
    assert est.rttvar_ms == 40.0
    assert est.smoothed_rtt_ms == 101.25
    # §6.2.1 Handshake PTO: 101.25 + max(160, 1) = 261.25 (no max_ack_delay)
    assert est.pto_ms(HANDSHAKE, handshake_confirmed=False, max_ack_delay_ms=25.0) == 261.25


def test_ack_delay_is_ignored_for_initial_packets():
    # §5.3: "MAY ignore the acknowledgment delay for Initial packets" (quicack does)
    est = RttEstimator()
    est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    used, adjusted = est.update(120.0, 10.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert (used, adjusted) == (0.0, 120.0)


def test_max_ack_delay_caps_only_after_confirmation():
    # §5.3: "SHOULD ignore the peer's max_ack_delay until the handshake is confirmed; MUST use the
    # lesser of the acknowledgment delay and the peer's max_ack_delay after".
    # min_rtt 100, latest 200, ack_delay 40, max_ack_delay 25:
    # before confirmation: 200 − 40 = 160; after: 200 − min(40, 25) = 175.
    for confirmed, expected in ((False, (40.0, 160.0)), (True, (25.0, 175.0))):
        est = RttEstimator()
        est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
        assert est.update(200.0, 40.0, space=APPLICATION, handshake_confirmed=confirmed,
                          max_ack_delay_ms=25.0) == expected


def test_ack_delay_is_not_subtracted_below_min_rtt():
    # §5.3: "MUST NOT subtract the acknowledgment delay from the RTT sample if the resulting value
    # is smaller than the min_rtt"; pseudocode "if (latest_rtt >= min_rtt + ack_delay)".
    est = RttEstimator()
    est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert est.update(105.0, 10.0, space=HANDSHAKE, handshake_confirmed=False, max_ack_delay_ms=25.0)[1] == 105.0
    # equality subtracts (>=, not >): 110 >= 100 + 10 → 100
    assert est.update(110.0, 10.0, space=HANDSHAKE, handshake_confirmed=False, max_ack_delay_ms=25.0)[1] == 100.0


def test_application_pto_adds_max_ack_delay_and_is_not_armed_before_confirmation():
    # §6.2.1: "An endpoint MUST NOT set its PTO timer for the Application Data packet number space
    # until the handshake is confirmed"; after: 100 + max(200, 1) + 25 = 325.
    est = RttEstimator()
    est.update(100.0, 0.0, space=INITIAL, handshake_confirmed=False, max_ack_delay_ms=25.0)
    assert est.pto_ms(APPLICATION, handshake_confirmed=False, max_ack_delay_ms=25.0) is None
    assert est.pto_ms(APPLICATION, handshake_confirmed=True, max_ack_delay_ms=25.0) == 325.0
    assert est.pto_ms(HANDSHAKE, handshake_confirmed=True, max_ack_delay_ms=25.0) == 300.0


# --- §5.1: which ACK frames give a sample ---------------------------------------------------------

def test_sample_is_measured_to_the_largest_acknowledged():
    # §5.1 "latest_rtt = ack_time - send_time_of_largest_acked": pn 1 sent at 10, ACK at 50 → 40
    r = replay([Sent(0.0, INITIAL, 0, True), Sent(10.0, INITIAL, 1, True), ack(50.0, INITIAL, (0, 1))],
               is_client=True)
    assert [s.latest_rtt_ms for s in r.samples] == [40.0]
    assert r.samples[0].largest_acknowledged == 1


def test_no_sample_when_only_non_ack_eliciting_packets_are_newly_acknowledged():
    # §5.1: "An RTT sample MUST NOT be generated on receiving an ACK frame that does not newly
    # acknowledge at least one ack-eliciting packet."
    r = replay([Sent(0.0, APPLICATION, 0, False), ack(30.0, APPLICATION, (0, 0), delay=500.0)], is_client=True)
    assert r.samples == [] and r.acks_without_sample == 1


def test_no_sample_when_the_largest_is_not_newly_acknowledged():
    # §5.1: "the largest acknowledged packet number is newly acknowledged": the second ACK adds
    # pn 0 (ack-eliciting) but its largest, pn 1, was acknowledged already.
    events = [Sent(0.0, APPLICATION, 0, True), Sent(1.0, APPLICATION, 1, True),
              ack(30.0, APPLICATION, (1, 1)), ack(40.0, APPLICATION, (0, 1))]
    r = replay(events, is_client=True)
    assert [s.latest_rtt_ms for s in r.samples] == [29.0]


def test_sample_when_the_largest_is_not_eliciting_but_another_newly_acknowledged_one_is():
    # pn 1 (ACK-only) is the largest; pn 0 (eliciting) is newly acknowledged with it: a sample,
    # measured to pn 1 (sent at 5): 35 − 5 = 30.
    events = [Sent(0.0, APPLICATION, 0, True), Sent(5.0, APPLICATION, 1, False), ack(35.0, APPLICATION, (0, 1))]
    assert [s.latest_rtt_ms for s in replay(events, is_client=True).samples] == [30.0]


def test_a_packet_declared_lost_gives_no_sample_when_a_late_ack_arrives():
    events = [Sent(0.0, APPLICATION, 0, True), Lost(40.0, APPLICATION, 0), ack(60.0, APPLICATION, (0, 0))]
    assert replay(events, is_client=True).samples == []


def test_retry_resets_the_sent_packets_and_a_reused_number_is_measured_from_its_resend():
    # §6.3: "Clients that receive a Retry packet reset ... loss recovery state".  aioquic sends
    # its Initial pn 0 again after a Retry; the ACK of pn 0 measures from the resend (174 → 346).
    events = [Sent(2.0, INITIAL, 0, True), RetryReceived(171.0), Sent(174.0, INITIAL, 0, True),
              ack(346.0, INITIAL, (0, 0))]
    assert [s.latest_rtt_ms for s in replay(events, is_client=True).samples] == [172.0]


def test_discarded_space_packets_give_no_sample():
    events = [Sent(0.0, INITIAL, 0, True), SpaceDiscarded(10.0, INITIAL), ack(20.0, INITIAL, (0, 0))]
    assert replay(events, is_client=True).samples == []


# --- PTO backoff -------------------------------------------------------------------------------

def test_pto_count_is_null_unless_the_trace_shows_expiries():
    events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0))]
    assert replay(events, is_client=True).samples[0].pto_count is None


def test_client_keeps_pto_backoff_on_initial_acks_and_resets_on_handshake_acks():
    # §6.2.1: "a client does not reset the PTO backoff factor on receiving acknowledgments in
    # Initial packets"; Appendix A.8: address validated once a Handshake ACK arrived.
    events = [Sent(0.0, INITIAL, 0, True), PtoExpired(999.0), Sent(999.0, INITIAL, 1, True),
              ack(1100.0, INITIAL, (0, 1)), Sent(1101.0, HANDSHAKE, 2, True), ack(1200.0, HANDSHAKE, (2, 2))]
    samples = replay(events, is_client=True, pto_observable=True).samples
    # first sample: 1100 − 999 = 101 → PTO 101 + 202 = 303, backoff 2^1 = 606
    assert samples[0].latest_rtt_ms == 101.0 and samples[0].pto_count == 1
    assert samples[0].pto_backoff_ms == 606.0
    assert samples[1].pto_count == 0
    # a server resets on any ACK
    server = replay(events, is_client=False, pto_observable=True).samples
    assert server[0].pto_count == 0


def test_peer_max_ack_delay_and_confirmation_shape_the_application_pto():
    events = [Sent(0.0, INITIAL, 0, True), ack(100.0, INITIAL, (0, 0)), PeerMaxAckDelay(100.0, 10.0),
              Sent(101.0, APPLICATION, 1, True), ack(201.0, APPLICATION, (1, 1)), HandshakeConfirmed(202.0),
              Sent(203.0, APPLICATION, 2, True), ack(303.0, APPLICATION, (2, 2), delay=30.0)]
    s = replay(events, is_client=True).samples
    assert s[1].pto_ms is None  # not confirmed yet
    # third sample: latest 100, min 100, ack_delay min(30, 10) = 10 → 100 >= 110? no: unadjusted
    assert s[2].ack_delay_used_ms == 0.0 and "ack_delay_not_subtracted" in s[2].flags
    assert s[2].pto_ms == pytest.approx(s[2].smoothed_rtt_ms + max(4 * s[2].rttvar_ms, 1.0) + 10.0)


def test_inflated_first_sample_is_flagged():
    events = [Sent(0.0, INITIAL, 0, True), ack(50.0, INITIAL, (0, 0)),
              Sent(60.0, HANDSHAKE, 1, True), ack(80.0, HANDSHAKE, (1, 1))]
    s = replay(events, is_client=True).samples
    assert "first_sample_inflated" in s[0].flags  # 50 > 1.5 × 20


# --- properties ------------------------------------------------------------------------------------

samples_ms = st.lists(st.tuples(st.floats(0.01, 5000.0), st.floats(0.0, 500.0),
                                st.sampled_from([INITIAL, HANDSHAKE, APPLICATION]), st.booleans()),
                      min_size=1, max_size=60)


@given(samples_ms, st.floats(0.0, 100.0))
def test_estimator_invariants(samples, max_ack_delay):
    est = RttEstimator()
    adjusted_seen = []
    for latest, delay, space, confirmed in samples:
        _, adjusted = est.update(latest, delay, space=space, handshake_confirmed=confirmed,
                                 max_ack_delay_ms=max_ack_delay)
        adjusted_seen.append(adjusted)
        for space_ in (INITIAL, HANDSHAKE, APPLICATION):
            pto = est.pto_ms(space_, handshake_confirmed=True, max_ack_delay_ms=max_ack_delay)
            assert pto >= 1.0  # "The PTO period MUST be at least kGranularity"
        assert est.rttvar_ms >= 0
        assert est.min_rtt_ms <= latest
    # min_rtt is never above any adjusted sample (§5.3 refuses adjustments below min_rtt)
    assert all(est.min_rtt_ms <= a + 1e-9 for a in adjusted_seen)
    assert min(adjusted_seen) - 1e-9 <= est.smoothed_rtt_ms <= max(adjusted_seen) + 1e-9


def _naive_samples(events):
    """A deliberately simple reference for §5.1: sets, linear scans."""
    unacked: dict[tuple[str, int], tuple[float, bool, int]] = {}
    out = []
    for i, ev in enumerate(events):
        if isinstance(ev, Sent):
            unacked.setdefault((ev.space, ev.packet_number), (ev.time_ms, ev.ack_eliciting, i))
        elif isinstance(ev, Lost):
            unacked.pop((ev.space, ev.packet_number), None)
        elif isinstance(ev, AckReceived):
            covered = {pn for lo, hi in ev.acked_ranges for pn in range(lo, hi + 1)}
            largest = max(covered)
            newly = {pn: unacked.pop((ev.space, pn)) for pn in sorted(covered) if (ev.space, pn) in unacked}
            if largest in newly and any(eliciting for _, eliciting, _ in newly.values()):
                out.append((i, ev.time_ms - newly[largest][0]))
    return out


@st.composite
def traces(draw):
    events = []
    next_pn = {INITIAL: 0, HANDSHAKE: 0, APPLICATION: 0}
    t = 0.0
    for _ in range(draw(st.integers(1, 80))):
        t += draw(st.floats(0.0, 20.0))
        space = draw(st.sampled_from([INITIAL, HANDSHAKE, APPLICATION]))
        kind = draw(st.sampled_from(["sent", "sent", "sent", "ack", "ack", "lost"]))
        if kind == "sent":
            next_pn[space] += draw(st.integers(1, 3))  # gaps, as random packet number skips
            events.append(Sent(t, space, next_pn[space], draw(st.booleans())))
        elif kind == "lost" and next_pn[space]:
            events.append(Lost(t, space, draw(st.integers(0, next_pn[space]))))
        elif next_pn[space]:
            ranges = []
            for _ in range(draw(st.integers(1, 3))):
                lo = draw(st.integers(0, next_pn[space]))
                ranges.append((lo, draw(st.integers(lo, next_pn[space]))))
            events.append(AckReceived(t, space, tuple(ranges), draw(st.floats(0.0, 30.0))))
    return events


@settings(max_examples=300)
@given(traces())
def test_replay_samples_match_a_naive_reference(events):
    expected = _naive_samples(events)
    got = replay(events, is_client=False).samples
    assert [(s.event_index, s.latest_rtt_ms) for s in got] == expected


def test_a_long_transfer_yields_a_sample_per_ack_and_the_lowest_min_rtt():
    # Every packet acknowledged 10 ms after it was sent, the RTT falling slowly: each ACK newly
    # acknowledges its ack-eliciting largest packet (§5.1), so each is a sample.
    n = 25_000
    events = []
    for pn in range(n):
        events.append(Sent(float(pn), APPLICATION, pn, True))
        events.append(ack(pn + 10.0 - pn / n, APPLICATION, (pn, pn)))
    r = replay(events, is_client=True)
    assert r.sample_count == len(r.samples) == n and r.acks_without_sample == 0
    assert [s.event_index for s in r.samples] == list(range(1, 2 * n, 2))
    assert r.lowest_min_rtt_ms == min(s.min_rtt_ms for s in r.samples) == r.samples[-1].latest_rtt_ms
