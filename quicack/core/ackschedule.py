"""When a data receiver sends an ACK: the ACK schedules quicack's client can follow.

Theory of operation: a receiver of application data (the 1-RTT packet number space) decides,
packet by packet, whether to acknowledge now, by a deadline, or not yet.  An
:class:`AckSchedule` makes that decision from what it is told — each packet's arrival
(:meth:`~AckSchedule.on_packet`: time, packet number, whether it is ack-eliciting), each ACK the
connection sent (:meth:`~AckSchedule.on_ack_sent`), the connection's min_rtt, and for
``ack-frequency`` the sender's ACK_FREQUENCY and IMMEDIATE_ACK frames — and answers with the
time by which the pending ACK must go (``now``: at once; None: nothing to acknowledge).  Pure:
the time is passed in, nothing is sent; :mod:`quicack.scan.acking` applies it to aioquic.

The schedules, by the name ``quicack scan --ack-policy`` and the testbed's ``ack_policy`` take:

- ``aioquic`` — aioquic 1.7's own: an ACK 1 ms (its timer granularity) after the first
  unacknowledged ack-eliciting packet, however many arrive meanwhile (the connection keeps
  aioquic's code; this class is for comparisons on paper);
- ``ratio:N`` — an ACK after N ack-eliciting packets or max_ack_delay (25 ms) after the first of
  them, whichever comes first (``ratio:2`` is RFC 9000 §13.2.2's "at least two");
- ``custura`` — Custura, Jones and Fairhurst's proposal (seeds 001, 004): 1:10, but at least
  every min(max_ack_delay, min_rtt/4), and 1:2 for the first 100 ack-eliciting packets;
- ``ack-frequency`` — RFC 9000's 1:2 / 25 ms until the sender asks otherwise with
  draft-ietf-quic-ack-frequency-12's frames (:mod:`quicack.core.ackfrequency`), then theirs.

All but ``aioquic`` acknowledge an out-of-order ack-eliciting packet at once, RFC 9000 §13.2.1's
rule, which an ACK_FREQUENCY frame's Reordering Threshold replaces (0: never; above 1: the
draft's reordering window, §6.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from quicack.core.ackfrequency import AckFrequency
from quicack.model import QuicackError

#: RFC 9000 §18.2: "If this value is absent, a default of 25 milliseconds is assumed."
DEFAULT_MAX_ACK_DELAY_S = 0.025
#: aioquic 1.7.2: ``self._ack_delay = K_GRANULARITY`` (0.001 s)
AIOQUIC_ACK_DELAY_S = 0.001
#: seeds 001/004: "ACK every 10 packets ... AR 1:2 for the first 100 packets"
CUSTURA_RATIO, CUSTURA_START_RATIO, CUSTURA_START_PACKETS = 10, 2, 100
#: what ``ack-frequency`` advertises as min_ack_delay: aioquic's timer granularity (µs)
MIN_ACK_DELAY_US = 1000
#: received packet numbers kept for the reordering window (far more than any threshold)
_KEPT = 4096

POLICIES = ("aioquic", "ratio:N", "custura", "ack-frequency")


class AckSchedule:
    """The common bookkeeping: ack-eliciting packets since the last ACK, the first one's time,
    the largest packet numbers seen; subclasses say when that calls for an ACK."""

    name = "?"
    #: whether the connection advertises min_ack_delay (and so accepts the draft's frames)
    advertises_min_ack_delay = False

    def __init__(self, max_ack_delay_s: float = DEFAULT_MAX_ACK_DELAY_S) -> None:
        self.max_ack_delay_s = max_ack_delay_s
        self.min_rtt_s: float | None = None
        #: ack-eliciting packets received since the last ACK, and overall
        self.unacked = 0
        self.received_eliciting = 0
        self.first_unacked_s: float | None = None
        #: largest ack-eliciting packet number received; largest acknowledged in the last ACK
        self.largest_eliciting = -1
        self.largest_received = -1
        self.largest_acked = -1
        self.immediate = False
        self.acks_sent = 0
        self._received: set[int] = set()

    # --- what happened ------------------------------------------------------------------------

    def on_packet(self, now: float, packet_number: int, ack_eliciting: bool) -> float | None:
        """A packet of the space arrived; the time by which an ACK must go (None: no ACK due)."""
        out_of_order = self._out_of_order(packet_number) if ack_eliciting else False
        self._received.add(packet_number)
        if len(self._received) > 2 * _KEPT:
            low = max(self._received) - _KEPT
            self._received = {pn for pn in self._received if pn >= low}
        self.largest_received = max(self.largest_received, packet_number)
        if ack_eliciting:
            self.largest_eliciting = max(self.largest_eliciting, packet_number)
            self.unacked += 1
            self.received_eliciting += 1
            if self.first_unacked_s is None:
                self.first_unacked_s = now
            if out_of_order or self.unacked >= self.ratio():
                self.immediate = True
        return self.deadline(now)

    def on_ack_sent(self, now: float) -> None:
        """The connection sent an ACK of this space (it acknowledges all received so far)."""
        self.unacked = 0
        self.first_unacked_s = None
        self.immediate = False
        self.largest_acked = self.largest_received
        self.acks_sent += 1

    def deadline(self, now: float) -> float | None:
        """When the pending ACK must go: ``now`` when at once, None when nothing is pending."""
        if self.first_unacked_s is None:
            return None
        if self.immediate:
            return now
        return self.first_unacked_s + self.delay_s()

    # --- the policy ---------------------------------------------------------------------------

    def ratio(self) -> int:
        """Ack-eliciting packets that call for an ACK at once."""
        raise NotImplementedError

    def delay_s(self) -> float:
        """The longest an ack-eliciting packet waits for its ACK."""
        return self.max_ack_delay_s

    def _out_of_order(self, pn: int) -> bool:
        """RFC 9000 §13.2.1: "an endpoint SHOULD generate and send an ACK frame without delay
        when it receives an ack-eliciting packet either: when the received packet has a packet
        number less than another ack-eliciting packet that has been received, or when the packet
        has a packet number larger than the highest-numbered ack-eliciting packet that has been
        received and there are missing packets between that packet and this packet." """
        if pn < self.largest_eliciting:
            return True
        return self.largest_eliciting >= 0 and any(
            m not in self._received for m in range(self.largest_eliciting + 1, pn))


class AioquicSchedule(AckSchedule):
    """aioquic 1.7's: 1 ms after the first unacknowledged ack-eliciting packet, nothing else."""

    name = "aioquic"

    def ratio(self) -> int:
        return 1 << 62

    def delay_s(self) -> float:
        return AIOQUIC_ACK_DELAY_S

    def _out_of_order(self, pn: int) -> bool:
        return False


class RatioSchedule(AckSchedule):
    """``ratio:N``: every N ack-eliciting packets or max_ack_delay, whichever first."""

    def __init__(self, n: int, max_ack_delay_s: float = DEFAULT_MAX_ACK_DELAY_S) -> None:
        super().__init__(max_ack_delay_s)
        self.n = n
        self.name = f"ratio:{n}"

    def ratio(self) -> int:
        return self.n


class CusturaSchedule(AckSchedule):
    """Seeds 001/004: "ACK every 10 packets but at least every min(max_ack_delay, min_rtt/4);
    AR 1:2 for the first 100 packets during slow start"."""

    name = "custura"

    def ratio(self) -> int:
        return CUSTURA_START_RATIO if self.received_eliciting <= CUSTURA_START_PACKETS else CUSTURA_RATIO

    def delay_s(self) -> float:
        if self.min_rtt_s is None:
            return self.max_ack_delay_s
        return min(self.max_ack_delay_s, self.min_rtt_s / 4)


class FrequencySchedule(AckSchedule):
    """``ack-frequency``: RFC 9000's schedule until the peer's ACK_FREQUENCY says otherwise."""

    name = "ack-frequency"
    advertises_min_ack_delay = True

    def __init__(self, max_ack_delay_s: float = DEFAULT_MAX_ACK_DELAY_S,
                 min_ack_delay_us: int = MIN_ACK_DELAY_US) -> None:
        super().__init__(max_ack_delay_s)
        self.min_ack_delay_us = min_ack_delay_us
        #: §4: by default "an ACK frame for every other ack-eliciting packet ... a value of 1";
        #: reordering: "corresponding to a default value of 1"
        self.threshold = 1
        self.reordering_threshold = 1
        self.largest_sequence: int | None = None
        #: the frames obeyed and ignored, and IMMEDIATE_ACKs received (for the record)
        self.applied: list[AckFrequency] = []
        self.ignored = 0
        self.immediate_acks = 0

    def on_ack_frequency(self, frame: AckFrequency, now: float) -> float | None:
        """§4: "A receiving endpoint MUST ignore a received ACK_FREQUENCY frame unless the
        Sequence Number value in the frame is greater than the largest processed value."  A
        valid newer frame: "On receipt of a valid value, the endpoint SHOULD update its
        max_ack_delay to the value provided by the peer."  QuicackError for an invalid value
        (the connection closes with PROTOCOL_VIOLATION).  The new deadline."""
        frame.check(self.min_ack_delay_us)
        if self.largest_sequence is not None and frame.sequence_number <= self.largest_sequence:
            self.ignored += 1
            return self.deadline(now)
        self.largest_sequence = frame.sequence_number
        self.threshold = frame.ack_eliciting_threshold
        self.max_ack_delay_s = frame.requested_max_ack_delay_us / 1e6
        self.reordering_threshold = frame.reordering_threshold
        self.applied.append(frame)
        if self.unacked >= self.ratio():
            self.immediate = True
        return self.deadline(now)

    def on_immediate_ack(self, now: float) -> float | None:
        """§5: "An endpoint SHOULD send a packet containing an ACK frame immediately upon
        receiving an IMMEDIATE_ACK frame."  (The frame is ack-eliciting: its packet is pending.)"""
        self.immediate_acks += 1
        self.immediate = True
        return self.deadline(now)

    def ratio(self) -> int:
        """§6: "The number of received ack-eliciting packets is greater than the Ack-Eliciting
        Threshold." """
        return self.threshold + 1

    def _out_of_order(self, pn: int) -> bool:
        """§6.2: threshold 0 — "SHOULD NOT send an immediate acknowledgment in response to
        packets received out of order"; 1 — RFC 9000's rule; larger — "SHOULD send an immediate
        ACK whenever it receives an ack-eliciting, out-of order packet whose packet number is
        outside the reordering window of the peer, i.e. when the difference between the smallest
        Unreported Missing packet and the Largest Unacked packet is greater than or equal to the
        Reordering Threshold value; or the received packet number is less than or equal to
        `Largest Acked - Reordering Threshold`." """
        threshold = self.reordering_threshold
        if threshold == 0:
            return False
        if threshold == 1:
            return super()._out_of_order(pn)
        # "Largest Reported Missing: ... Largest Acked - Reordering Threshold"
        reported = self.largest_acked - threshold if self.largest_acked >= 0 else -1
        if self.largest_acked >= 0 and pn <= reported:
            return True
        largest_unacked = max(self.largest_eliciting, pn)
        start = max(reported + 1, largest_unacked - _KEPT, 0)
        missing = next((m for m in range(start, largest_unacked) if m != pn and m not in self._received), None)
        return missing is not None and largest_unacked - missing >= threshold


def make(policy: str, max_ack_delay_s: float = DEFAULT_MAX_ACK_DELAY_S) -> AckSchedule:
    """The schedule named ``policy`` (module docstring); QuicackError for an unknown one."""
    if policy == "aioquic":
        return AioquicSchedule(AIOQUIC_ACK_DELAY_S)
    if policy == "custura":
        return CusturaSchedule(max_ack_delay_s)
    if policy == "ack-frequency":
        return FrequencySchedule(max_ack_delay_s)
    if policy.startswith("ratio:"):
        digits = policy[len("ratio:"):]
        if digits.isdigit() and 1 <= int(digits) <= 1000:
            return RatioSchedule(int(digits), max_ack_delay_s)
    raise QuicackError(f"ACK policy {policy!r}: expected one of aioquic, ratio:N (N from 1 to 1000), "
                       "custura, ack-frequency")
