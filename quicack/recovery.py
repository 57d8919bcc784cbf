"""RFC 9002 replay: one endpoint's RTT estimate and PTO, from its own packets and the ACKs it got.

Theory of operation: :func:`replay` walks one endpoint's events in trace order — packets it sent
(:class:`Sent`), ACK frames it received (:class:`AckReceived`), packets it declared lost
(:class:`Lost`), PTO expiries the trace shows (:class:`PtoExpired`), packet number spaces it
discarded (:class:`SpaceDiscarded`), a Retry (:class:`RetryReceived`), handshake confirmation (:class:`HandshakeConfirmed`) and the
peer's ``max_ack_delay`` (:class:`PeerMaxAckDelay`) — and re-computes what RFC 9002 §5 and §6.2
(with erratum 7539: rttvar is updated before smoothed_rtt) say the endpoint should have estimated.
Each RTT sample becomes a :class:`Sample`.  Pure: no clock, no I/O; times are the trace's, in ms.

One :class:`RttEstimator` per connection (min_rtt, smoothed_rtt and rttvar belong to the path, not
to a packet number space); the PTO is computed per packet number space (§6.2.1).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

INITIAL = "initial"
HANDSHAKE = "handshake"
APPLICATION = "application_data"
SPACES = (INITIAL, HANDSHAKE, APPLICATION)

#: §6.1.2: "The RECOMMENDED value of the timer granularity (kGranularity) is 1 millisecond."
K_GRANULARITY_MS = 1.0
#: §6.2.2: "When no previous RTT is available, the initial RTT SHOULD be set to 333 milliseconds."
K_INITIAL_RTT_MS = 333.0
#: §6.2.2: "This results in handshakes starting with a PTO of 1 second": §5.3 sets rttvar to
#: half the initial RTT, so the first PTO is 333 + max(4 × 166.5, kGranularity) = 999 ms.
FIRST_PTO_MS = K_INITIAL_RTT_MS + max(4 * K_INITIAL_RTT_MS / 2, K_GRANULARITY_MS)
#: RFC 9000 §18.2 max_ack_delay: "If this value is absent, a default of 25 milliseconds is assumed."
DEFAULT_MAX_ACK_DELAY_MS = 25.0

#: A first sample this many times the connection's final min_rtt (and > 1 ms above it) is flagged.
INFLATED_FIRST_SAMPLE_RATIO = 1.5


# --- events ------------------------------------------------------------------------------------
# Every event knows where it sits in the trace (``event_index``, the packet's for a frame); -1
# means "its position in the list given to replay()".  Events and samples are named tuples: a
# long connection has one per ACK, and a named tuple is built several times faster than a
# frozen dataclass (the replay tells events apart by their type, never by comparing them).

class Sent(NamedTuple):
    time_ms: float
    space: str
    packet_number: int
    ack_eliciting: bool
    #: where the packet sits in the trace; -1: its position in the event list
    event_index: int = -1


class AckReceived(NamedTuple):
    time_ms: float
    space: str
    #: inclusive [low, high] ranges, any order
    acked_ranges: tuple[tuple[int, int], ...]
    #: decoded ACK Delay (ms); None when the trace does not say
    ack_delay_ms: float | None
    #: where the ACK sits in the trace (event_index of its packet); -1: its position in the list
    event_index: int = -1


class Lost(NamedTuple):
    time_ms: float
    space: str
    packet_number: int
    event_index: int = -1


class PtoExpired(NamedTuple):
    time_ms: float
    event_index: int = -1


class SpaceDiscarded(NamedTuple):
    time_ms: float
    space: str
    event_index: int = -1


class RetryReceived(NamedTuple):
    time_ms: float
    event_index: int = -1


class HandshakeConfirmed(NamedTuple):
    time_ms: float
    event_index: int = -1


class PeerMaxAckDelay(NamedTuple):
    time_ms: float
    max_ack_delay_ms: float
    event_index: int = -1


# --- the estimator -----------------------------------------------------------------------------

@dataclass(slots=True)
class RttEstimator:
    """RFC 9002 §5: min_rtt, smoothed_rtt and rttvar of one path."""

    latest_rtt_ms: float = 0.0
    min_rtt_ms: float = 0.0
    #: §5.3: "smoothed_rtt = kInitialRtt; rttvar = kInitialRtt / 2"
    smoothed_rtt_ms: float = K_INITIAL_RTT_MS
    rttvar_ms: float = K_INITIAL_RTT_MS / 2
    has_sample: bool = False

    def update(self, latest_rtt_ms: float, ack_delay_ms: float, *, space: str,
               handshake_confirmed: bool, max_ack_delay_ms: float) -> tuple[float, float]:
        """Take one RTT sample; return (the ack_delay §5.3 allows, adjusted_rtt).  The delay was
        subtracted when adjusted_rtt differs from latest_rtt."""
        self.latest_rtt_ms = latest_rtt_ms
        if not self.has_sample:
            # §5.2: "min_rtt MUST be set to the latest_rtt on the first RTT sample."
            # §5.3: "On the first RTT sample after initialization, smoothed_rtt and rttvar are set
            # as follows: smoothed_rtt = latest_rtt; rttvar = latest_rtt / 2"
            self.has_sample = True
            self.min_rtt_ms = latest_rtt_ms
            self.smoothed_rtt_ms = latest_rtt_ms
            self.rttvar_ms = latest_rtt_ms / 2
            return 0.0, latest_rtt_ms
        # §5.2: "min_rtt MUST be set to the lesser of min_rtt and latest_rtt on all other
        # samples." ... "does not adjust for acknowledgment delays reported by the peer"
        self.min_rtt_ms = min(self.min_rtt_ms, latest_rtt_ms)
        ack_delay = ack_delay_ms
        if space == INITIAL:
            # §5.3: "MAY ignore the acknowledgment delay for Initial packets, since these
            # acknowledgments are not delayed by the peer"
            ack_delay = 0.0
        elif handshake_confirmed:
            # §5.3: "MUST use the lesser of the acknowledgment delay and the peer's max_ack_delay
            # after the handshake is confirmed" (and "SHOULD ignore the peer's max_ack_delay
            # until the handshake is confirmed")
            ack_delay = min(ack_delay, max_ack_delay_ms)
        # §5.3: "MUST NOT subtract the acknowledgment delay from the RTT sample if the
        # resulting value is smaller than the min_rtt."
        adjusted = latest_rtt_ms
        if latest_rtt_ms >= self.min_rtt_ms + ack_delay:
            adjusted = latest_rtt_ms - ack_delay
        # §5.3 with erratum 7539 (as Appendix A.7): rttvar first, from the previous smoothed_rtt
        # "rttvar = 3/4 * rttvar + 1/4 * abs(smoothed_rtt - adjusted_rtt)
        #  smoothed_rtt = 7/8 * smoothed_rtt + 1/8 * adjusted_rtt"
        self.rttvar_ms = 3 / 4 * self.rttvar_ms + 1 / 4 * abs(self.smoothed_rtt_ms - adjusted)
        self.smoothed_rtt_ms = 7 / 8 * self.smoothed_rtt_ms + 1 / 8 * adjusted
        return ack_delay, adjusted

    def pto_ms(self, space: str, *, handshake_confirmed: bool, max_ack_delay_ms: float) -> float | None:
        """The PTO period of ``space`` without backoff; None where it is not armed."""
        if space == APPLICATION and not handshake_confirmed:
            # §6.2.1: "An endpoint MUST NOT set its PTO timer for the Application Data packet
            # number space until the handshake is confirmed."
            return None
        # §6.2.1: "PTO = smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay" ... "When
        # the PTO is armed for Initial or Handshake packet number spaces, the max_ack_delay in
        # the PTO period computation is set to 0"
        pto = self.smoothed_rtt_ms + max(4 * self.rttvar_ms, K_GRANULARITY_MS)
        if space == APPLICATION:
            pto += max_ack_delay_ms
        # "The PTO period MUST be at least kGranularity to avoid the timer expiring immediately."
        return max(pto, K_GRANULARITY_MS)


# --- the replay --------------------------------------------------------------------------------

class Sample(NamedTuple):
    event_index: int
    time_ms: float
    space: str
    largest_acknowledged: int
    latest_rtt_ms: float
    #: as decoded from the ACK frame (None: the trace does not say; taken as 0)
    ack_delay_ms: float | None
    #: what §5.3 lets the estimator use (0 for Initial, capped after confirmation)
    ack_delay_used_ms: float
    adjusted_rtt_ms: float
    min_rtt_ms: float
    smoothed_rtt_ms: float
    rttvar_ms: float
    #: PTO period of this sample's space right after the sample (None: not armed)
    pto_ms: float | None
    #: PTO backoff exponent; None when the trace does not show PTO expiries
    pto_count: int | None
    handshake_confirmed: bool
    flags: tuple[str, ...] = ()

    @property
    def pto_backoff_ms(self) -> float | None:
        if self.pto_ms is None or self.pto_count is None:
            return None
        return self.pto_ms * 2 ** self.pto_count


@dataclass
class Replay:
    #: every sample in trace order; with a ``sink`` (:func:`replay`), the first one and those
    #: not handed to the sink yet
    samples: list[Sample] = field(default_factory=list)
    #: ACK frames that acknowledged nothing new, or whose largest was not newly acknowledged, or
    #: that newly acknowledged only non-ack-eliciting packets (§5.1: no sample)
    acks_without_sample: int = 0
    #: ACKs naming packets this endpoint never sent in the trace (trace starts late, or is cut)
    acks_of_unknown_packets: int = 0
    #: samples in all (handed to the sink or in ``samples``)
    sample_count: int = 0
    #: the smallest min_rtt of any sample
    lowest_min_rtt_ms: float | None = None

    @property
    def first_pto_ms(self) -> float | None:
        """The PTO right after the first RTT sample, for that sample's space."""
        return self.samples[0].pto_ms if self.samples else None


def initial_pto_ms() -> float:
    """§6.2.2: before any sample, 333 ms + max(4 × 166.5 ms, 1 ms) = 999 ms."""
    return RttEstimator().pto_ms(INITIAL, handshake_confirmed=False, max_ack_delay_ms=0.0)


def first_pto_after(sample_ms: float, space: str = INITIAL, max_ack_delay_ms: float = 0.0) -> float:
    """The PTO right after a first sample of ``sample_ms``: sample + max(2 × sample, 1 ms)
    (+ max_ack_delay in the application space)."""
    est = RttEstimator()
    est.update(sample_ms, 0.0, space=space, handshake_confirmed=True, max_ack_delay_ms=max_ack_delay_ms)
    return est.pto_ms(space, handshake_confirmed=True, max_ack_delay_ms=max_ack_delay_ms)


class SentLog:
    """The packets one endpoint sent, per packet number space, sorted by packet number.

    Held as columns (not one object per packet): a long transfer sends hundreds of thousands of
    packets and the replay touches each one at most once more, when it is acknowledged, lost or
    discarded.  Acknowledged/removed packets are skipped with a "next still in flight" pointer per
    position (union–find with path compression), so an ACK whose ranges repeat already
    acknowledged packets costs nothing for them.
    """

    __slots__ = ("numbers", "times", "eliciting", "sent_at", "_next")

    def __init__(self, numbers: Sequence[int], times: Sequence[float], eliciting: Sequence[bool],
                 sent_at: Sequence[int], *, presorted: bool = False):
        """Columns of equal length (lists, or ``array.array`` for long traces); ``presorted``:
        the caller guarantees ascending packet numbers (else they are sorted here)."""
        if not presorted and any(numbers[i] > numbers[i + 1] for i in range(len(numbers) - 1)):
            order = sorted(range(len(numbers)), key=numbers.__getitem__)
            numbers, times, eliciting, sent_at = ([col[i] for i in order]
                                                  for col in (numbers, times, eliciting, sent_at))
        self.numbers, self.times, self.eliciting, self.sent_at = numbers, times, eliciting, sent_at
        self._next = array("q", range(len(numbers) + 1))

    @classmethod
    def from_packets(cls, packets: Iterable[Sent]) -> dict[str, "SentLog"]:
        by_space: dict[str, list[Sent]] = {space: [] for space in SPACES}
        for i, p in enumerate(packets):
            by_space[p.space].append(p if p.event_index >= 0 else p._replace(event_index=i))
        return {space: cls([p.packet_number for p in ps], [p.time_ms for p in ps],
                           [p.ack_eliciting for p in ps], [p.event_index for p in ps])
                for space, ps in by_space.items()}

    def _alive(self, i: int) -> int:
        """The first position ≥ i still in flight (len(numbers) if none)."""
        nxt = self._next
        root = i
        while nxt[root] != root:
            root = nxt[root]
        while nxt[i] != root:
            nxt[i], i = root, nxt[i]
        return root

    def lookup(self, pn: int, before: int) -> tuple[bool, int | None]:
        """(was ``pn`` ever sent, its latest send still in flight before ``before`` or None)."""
        i = bisect_right(self.numbers, pn) - 1
        if i < 0 or self.numbers[i] != pn:
            return False, None
        return True, self._in_flight(i, pn, before)

    def position(self, pn: int, before: int | None = None) -> int | None:
        """Where packet ``pn`` is; with ``before``: its latest send still in flight before that
        trace position, if any.  (A number is logged twice only when a trace reuses it, as
        aioquic does after a Retry; the earlier send is gone by then.)"""
        i = bisect_right(self.numbers, pn) - 1
        if i < 0 or self.numbers[i] != pn:
            return None
        return i if before is None else self._in_flight(i, pn, before)

    def _in_flight(self, i: int, pn: int, before: int) -> int | None:
        """The last position ≤ ``i`` of packet ``pn`` still in flight and sent before ``before``."""
        numbers, sent_at, nxt = self.numbers, self.sent_at, self._next
        while i >= 0 and numbers[i] == pn:
            if nxt[i] == i and sent_at[i] < before:  # (nxt[i] == i: i itself is in flight)
                return i
            i -= 1
        return None

    def take_ranges(self, ranges, before: int) -> tuple[bool, bool]:
        """Remove the packets in flight with numbers in the ACK's inclusive ``ranges`` that were sent
        before trace position ``before``: (any packet newly acknowledged, any of them ack-eliciting).
        (One inlined loop: it runs for every packet acknowledged.)"""
        numbers, sent_at, nxt, eliciting = self.numbers, self.sent_at, self._next, self.eliciting
        newly_any = newly_eliciting = False
        for low, high in ranges:
            i = bisect_left(numbers, low)
            if nxt[i] != i:
                i = self._alive(i)
            end = bisect_right(numbers, high)
            while i < end:
                if sent_at[i] < before:
                    nxt[i] = i + 1
                    newly_any = True
                    if eliciting[i]:
                        newly_eliciting = True
                j = i + 1
                # _alive(j), with its common case (j itself still in flight) first
                i = j if nxt[j] == j else self._alive(j)
        return newly_any, newly_eliciting

    def remove(self, pn: int, before: int) -> None:
        i = self.position(pn, before)
        if i is not None:
            self._next[i] = i + 1

    def clear_sent_before(self, before: int) -> None:
        i = self._alive(0)
        while i < len(self.numbers):
            if self.sent_at[i] < before:
                self._next[i] = i + 1
            i = self._alive(i + 1)


#: samples a replay with a sink holds before handing them over
SINK_SAMPLES = 8192


def replay(events: Iterable, *, is_client: bool, pto_observable: bool = False,
           sent: dict[str, SentLog] | None = None,
           sink: Callable[[list[Sample]], None] | None = None) -> Replay:
    """Replay RFC 9002 §5–§6.2 over one endpoint's events (in trace order).

    Packets it sent come either as :class:`Sent` events in ``events`` or, for long traces, as
    ``sent`` (one :class:`SentLog` per space, each packet knowing its trace position).
    ``sink``: samples after the first are handed to it in lists of :data:`SINK_SAMPLES` as they
    come (the rest stay in the result), so a long connection's samples are not all held at once.
    """
    events = list(events) if sent is None else events
    if sent is None:
        sent = SentLog.from_packets(
            e._replace(event_index=i) if e.event_index < 0 else e
            for i, e in enumerate(events) if type(e) is Sent)
    for space in SPACES:
        if space not in sent:
            sent[space] = SentLog([], [], [], [])
    est = RttEstimator()
    confirmed = False
    address_validated = not is_client  # Appendix A.8: "Assume clients validate the server's address implicitly."
    max_ack_delay = DEFAULT_MAX_ACK_DELAY_MS
    pto_count = 0
    result = Replay()

    for position, ev in enumerate(events):
        kind = type(ev)
        at = ev.event_index if getattr(ev, "event_index", -1) >= 0 else position
        if kind is Sent:
            continue
        if kind is AckReceived:
            sample = _on_ack(ev, at, est, sent[ev.space], result, confirmed, max_ack_delay)
            if ev.space == HANDSHAKE and is_client:
                # Appendix A.8 PeerCompletedAddressValidation: "has received Handshake ACK"
                address_validated = True
            # §6.2.1: "The PTO backoff factor is reset when an acknowledgment is received, except
            # ... a client does not reset the PTO backoff factor on receiving acknowledgments in
            # Initial packets." (Appendix A.7: only if PeerCompletedAddressValidation())
            if address_validated or confirmed:
                pto_count = 0
            if sample is not None:
                largest, latest, delay, used, adjusted, flags = sample
                samples = result.samples
                result.sample_count += 1
                if sink is not None and len(samples) > SINK_SAMPLES:
                    sink(samples[1:])
                    del samples[1:]
                samples.append(Sample(
                    at, ev.time_ms, ev.space, largest, latest, delay, used, adjusted, est.min_rtt_ms,
                    est.smoothed_rtt_ms, est.rttvar_ms,
                    est.pto_ms(ev.space, handshake_confirmed=confirmed, max_ack_delay_ms=max_ack_delay),
                    pto_count if pto_observable else None, confirmed, flags))
        elif kind is Lost:
            # A packet the endpoint declared lost is no longer in sent_packets (Appendix A.10
            # DetectAndRemoveLostPackets), so a late ACK of it cannot yield a sample.
            sent[ev.space].remove(ev.packet_number, at)
        elif kind is PtoExpired:
            # §6.2.1: "When a PTO timer expires, the PTO backoff MUST be increased"
            pto_count += 1
        elif kind is SpaceDiscarded:
            # Appendix A.11 OnPacketNumberSpaceDiscarded: "sent_packets[pn_space].clear() ...
            # pto_count = 0"
            sent[ev.space].clear_sent_before(at)
            pto_count = 0
        elif kind is RetryReceived:
            # §6.3: "Clients that receive a Retry packet reset congestion control and loss
            # recovery state, including resetting any pending timers."  (The RTT estimate is not
            # loss recovery state; §6.3 only allows, not requires, a sample from the Retry.)
            for log in sent.values():
                log.clear_sent_before(at)
            pto_count = 0
        elif kind is HandshakeConfirmed:
            confirmed = True
        elif kind is PeerMaxAckDelay:
            max_ack_delay = ev.max_ack_delay_ms
        else:
            raise TypeError(f"not a replay event: {ev!r}")

    if est.has_sample:
        # §5.2: min_rtt only ever takes a lesser value here (no persistent congestion reset)
        result.lowest_min_rtt_ms = est.min_rtt_ms
    _flag_inflated_first_sample(result, est)
    return result


def _on_ack(ev: AckReceived, at: int, est: RttEstimator, log: SentLog, result: Replay,
            confirmed: bool, max_ack_delay: float) -> tuple | None:
    """Appendix A.7 OnAckReceived, the RTT part: the sample's figures, or None."""
    ranges = ev.acked_ranges
    if not ranges:
        result.acks_without_sample += 1
        return None
    largest = ranges[0][1] if len(ranges) == 1 else max(high for _, high in ranges)
    known, largest_at = log.lookup(largest, at)
    if not known:
        result.acks_of_unknown_packets += 1
    newly_any, newly_eliciting = log.take_ranges(ranges, at)
    # §5.1: "An endpoint generates an RTT sample on receiving an ACK frame that meets the
    # following two conditions: the largest acknowledged packet number is newly acknowledged,
    # and at least one of the newly acknowledged packets was ack-eliciting."
    if not newly_any or largest_at is None or not newly_eliciting:
        result.acks_without_sample += 1
        return None
    # §5.1: "latest_rtt = ack_time - send_time_of_largest_acked"
    latest = ev.time_ms - log.times[largest_at]
    delay = ev.ack_delay_ms
    first = not est.has_sample
    used, adjusted = est.update(latest, delay if delay is not None else 0.0, space=ev.space,
                                handshake_confirmed=confirmed, max_ack_delay_ms=max_ack_delay)
    flags: tuple[str, ...] = ()
    if delay is not None and delay > latest:
        flags += ("ack_delay_exceeds_sample",)
    if not first and used > 0 and adjusted == latest:
        flags += ("ack_delay_not_subtracted",)
    return largest, latest, delay, used if adjusted != latest else 0.0, adjusted, flags


def _flag_inflated_first_sample(result: Replay, est: RttEstimator) -> None:
    if not result.samples:
        return
    first = result.samples[0]
    if (first.latest_rtt_ms > INFLATED_FIRST_SAMPLE_RATIO * est.min_rtt_ms
            and first.latest_rtt_ms - est.min_rtt_ms > K_GRANULARITY_MS):
        result.samples[0] = first._replace(flags=first.flags + ("first_sample_inflated",))
