"""Matching buffered packets to their processing and first ACK (quicack.core.keywait)."""

from __future__ import annotations

import pytest

from quicack.core.keywait import AckSent, Buffered, Received, match_waits


def test_a_stack_counting_the_ack_delay_from_processing_leaves_the_wait_uncovered():
    """A 1-RTT packet arrives at 10 ms, waits 100 ms for keys, is acknowledged 2 ms after
    processing with an ACK delay of 2 ms (counted from processing): the whole wait is uncovered
    and the peer's sample is inflated by it plus the 2 ms beyond its max_ack_delay subtraction."""
    waits = match_waits([Buffered(3, 10.0, "1RTT", 60)],
                        [Received(2, 5.0, "handshake", 600, 0, "handshake"),
                         Received(9, 110.0, "1RTT", 60, 4, "application_data")],
                        [AckSent(11, 112.0, "application_data", 4, ((0, 4),), 2.0)], max_ack_delay_ms=25.0)
    [w] = waits
    assert w.wait_ms == 100.0 and w.ack_delay_from_receipt_ms == 102.0
    assert w.uncovered_ms == pytest.approx(100.0) and w.sample_inflation_ms == pytest.approx(100.0)


def test_an_honest_delay_still_inflates_beyond_max_ack_delay_and_a_non_largest_gives_no_sample():
    buffered = [Buffered(1, 0.0, "1RTT", 50), Buffered(2, 0.5, "1RTT", 51)]
    received = [Received(5, 200.0, "1RTT", 50, 7, "application_data"),
                Received(6, 200.1, "1RTT", 51, 8, "application_data")]
    acks = [AckSent(8, 201.0, "application_data", 8, ((7, 8),), 200.5)]
    first, second = match_waits(buffered, received, acks, max_ack_delay_ms=25.0)
    assert first.sample_inflation_ms is None  # pn 7 is not the ACK's largest: no sample from it
    assert second.uncovered_ms == pytest.approx(0.0)
    assert second.sample_inflation_ms == pytest.approx(200.5 - 25.0)
