"""The receivers' ACK schedules (quicack/core/ackschedule.py) on synthetic packet arrivals: each
policy's ACK times, and the draft's reordering examples (draft-ietf-quic-ack-frequency-12 §6.2.1)."""

from __future__ import annotations

import pytest

from quicack.core import ackschedule
from quicack.core.ackfrequency import AckFrequency
from quicack.model import QuicackError


def run(schedule, arrivals):
    """Replays ``arrivals`` ((time s, packet number, ack-eliciting)) as a connection would: an ACK
    goes when its deadline has come (at the deadline, or at once).  The ACKs' times."""
    acks, due = [], None
    for now, pn, eliciting in arrivals:
        if due is not None and due < now:
            schedule.on_ack_sent(due)
            acks.append(due)
        due = schedule.on_packet(now, pn, eliciting)
        if due is not None and due <= now:
            schedule.on_ack_sent(now)
            acks.append(now)
            due = schedule.deadline(now)
    if due is not None:
        schedule.on_ack_sent(due)
        acks.append(due)
    return acks


def burst(count, start=0.0, gap=0.001, first_pn=0):
    return [(start + i * gap, first_pn + i, True) for i in range(count)]


def test_ratio_2_acks_every_second_packet():
    acks = run(ackschedule.make("ratio:2"), burst(10))
    assert acks == pytest.approx([0.001, 0.003, 0.005, 0.007, 0.009])


def test_ratio_10_acks_every_tenth_packet_and_the_rest_after_max_ack_delay():
    acks = run(ackschedule.make("ratio:10"), burst(25))
    # packets 9 and 19 complete a ten; 20..24 wait 25 ms from packet 20 (t = 20 ms)
    assert acks == pytest.approx([0.009, 0.019, 0.020 + 0.025])


def test_ratio_n_on_a_slow_sender_acks_at_max_ack_delay():
    acks = run(ackschedule.make("ratio:10"), burst(4, gap=0.030))
    # one packet every 30 ms: each waits the 25 ms max_ack_delay alone
    assert acks == pytest.approx([0.025, 0.055, 0.085, 0.115])


def test_non_ack_eliciting_packets_call_for_no_ack():
    schedule = ackschedule.make("ratio:2")
    assert run(schedule, [(0.0, 0, False), (0.001, 1, False), (0.002, 2, False)]) == []
    assert schedule.unacked == 0


def test_out_of_order_packets_are_acknowledged_at_once():
    # RFC 9000 §13.2.1: a gap (3 after 1), then the late packet 2
    arrivals = [(0.000, 0, True), (0.001, 1, True), (0.002, 3, True), (0.003, 2, True), (0.004, 4, True)]
    acks = run(ackschedule.make("ratio:10"), arrivals)
    assert acks == pytest.approx([0.002, 0.003, 0.004 + 0.025])


def test_aioquic_acks_one_ms_after_the_first_packet_however_many_came():
    acks = run(ackschedule.make("aioquic"), burst(6, gap=0.0004))
    # packets at 0, 0.4, 0.8 ms share the ACK at 1 ms; 1.2, 1.6, 2.0 ms the ACK at 2.2 ms
    assert acks == pytest.approx([0.001, 0.0022])


def test_custura_is_1_to_2_for_100_packets_then_1_to_10():
    schedule = ackschedule.make("custura")
    acks = run(schedule, burst(300, gap=0.0001))
    assert len([t for t in acks if t < 0.0100]) == 50      # packets 0..99: 1:2
    assert len([t for t in acks if t >= 0.0100]) == 20     # packets 100..299: 1:10
    assert schedule.acks_sent == 70


def test_custura_waits_at_most_a_quarter_of_min_rtt():
    schedule = ackschedule.make("custura")
    run(schedule, burst(100, gap=0.0001))                  # the 1:2 start is over
    schedule.min_rtt_s = 0.040                              # 10 ms < max_ack_delay
    acks = run(schedule, burst(3, start=1.0, first_pn=100))
    assert acks == pytest.approx([1.010])
    schedule.min_rtt_s = 0.600                              # a GEO path: max_ack_delay (25 ms) rules
    acks = run(schedule, burst(3, start=2.0, first_pn=103))
    assert acks == pytest.approx([2.025])


def test_ack_frequency_is_rfc9000_until_the_sender_asks():
    schedule = ackschedule.make("ack-frequency")
    assert schedule.advertises_min_ack_delay
    assert run(schedule, burst(4)) == pytest.approx([0.001, 0.003])
    # the sender asks for an ACK when more than 9 have come (1:10), within 100 ms
    schedule.on_ack_frequency(AckFrequency(0, 9, 100_000, 1), 0.010)
    acks = run(schedule, burst(25, start=0.010, first_pn=4))
    assert acks == pytest.approx([0.019, 0.029, 0.030 + 0.100])


def test_ack_frequency_ignores_an_older_frame():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(5, 9, 50_000, 1), 0.0)
    schedule.on_ack_frequency(AckFrequency(4, 0, 1_000, 1), 0.0)   # reordered: sequence 4 < 5
    schedule.on_ack_frequency(AckFrequency(5, 0, 1_000, 1), 0.0)   # a duplicate
    assert (schedule.threshold, schedule.max_ack_delay_s, schedule.ignored) == (9, 0.050, 2)
    schedule.on_ack_frequency(AckFrequency(6, 3, 10_000, 1), 0.0)
    assert (schedule.threshold, schedule.max_ack_delay_s) == (3, 0.010)


def test_ack_frequency_threshold_zero_acks_every_packet():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(0, 0, 25_000, 1), 0.0)
    assert run(schedule, burst(3)) == pytest.approx([0.0, 0.001, 0.002])


def test_a_frame_lowering_the_threshold_makes_the_pending_ack_due():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(0, 9, 25_000, 1), 0.0)
    for now, pn, eliciting in burst(5):
        assert schedule.on_packet(now, pn, eliciting) == pytest.approx(0.025)
    assert schedule.on_ack_frequency(AckFrequency(1, 2, 25_000, 1), 0.006) == 0.006


def test_immediate_ack():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(0, 99, 200_000, 1), 0.0)
    assert schedule.on_packet(0.001, 0, True) == pytest.approx(0.201)
    assert schedule.on_immediate_ack(0.002) == 0.002
    assert schedule.immediate_acks == 1


def test_a_requested_delay_below_min_ack_delay_is_a_protocol_violation():
    schedule = ackschedule.make("ack-frequency")
    with pytest.raises(QuicackError, match="below min_ack_delay"):
        schedule.on_ack_frequency(AckFrequency(0, 1, ackschedule.MIN_ACK_DELAY_US - 1, 1), 0.0)


@pytest.mark.parametrize("threshold, received, acked_after", [
    # draft -12 §6.2.1, "Acknowledgement behavior with a reordering threshold of 3"
    (3, [0, 1, 3, 4, 5, 8, 9, 10], {5, 9, 10}),
    # "... with a reordering threshold of 5"
    (5, [0, 1, 3, 5, 6, 7, 8, 9], {7, 9}),
])
def test_the_drafts_reordering_examples(threshold, received, acked_after):
    schedule = ackschedule.make("ack-frequency")
    # "acknowledgements are only sent due to reordering": no threshold or delay comes into play
    schedule.on_ack_frequency(AckFrequency(0, 1000, 10_000_000, threshold), 0.0)
    sent = set()
    for i, pn in enumerate(received):
        if schedule.on_packet(i * 0.001, pn, True) == i * 0.001:
            schedule.on_ack_sent(i * 0.001)
            sent.add(pn)
    assert sent == acked_after


def test_reordering_threshold_zero_never_acks_for_reordering():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(0, 1000, 10_000_000, 0), 0.0)
    assert [schedule.on_packet(0.0, pn, True) for pn in (0, 5, 2, 1)] == [10.0] * 4


def test_reordering_beyond_the_window_of_an_earlier_ack_is_acked_at_once():
    schedule = ackschedule.make("ack-frequency")
    schedule.on_ack_frequency(AckFrequency(0, 1000, 10_000_000, 3), 0.0)
    for pn in (0, 1, 3, 4, 5):
        schedule.on_packet(0.0, pn, True)
    schedule.on_ack_sent(0.0)                        # largest acked 5: 2 is "reported missing"
    assert schedule.on_packet(0.1, 2, True) == 0.1   # "less than or equal to Largest Acked - Reordering Threshold"


@pytest.mark.parametrize("policy", ["ratio:0", "ratio:x", "ratio:", "ratio:1001", "tcp", ""])
def test_unknown_policies_are_refused(policy):
    with pytest.raises(QuicackError, match="ACK policy"):
        ackschedule.make(policy)


def test_policy_names():
    assert [ackschedule.make(p).name for p in ("aioquic", "ratio:3", "custura", "ack-frequency")] == [
        "aioquic", "ratio:3", "custura", "ack-frequency"]
