"""RFC 9002 replay: one endpoint's RTT estimate and PTO, from its own packets and the ACKs it got.

Theory of operation: :func:`replay` walks one endpoint's events in trace order — packets it sent
(:class:`Sent`), ACK frames it received (:class:`AckReceived`), packets it declared lost
(:class:`Lost`), PTO expiries the trace shows (:class:`PtoExpired`), packet number spaces it
discarded (:class:`SpaceDiscarded`), a Retry (:class:`RetryReceived`), handshake confirmation
(:class:`HandshakeConfirmed`) and the peer's ``max_ack_delay`` (:class:`PeerMaxAckDelay`) — and
re-computes what RFC 9002 §5 and §6.2 (with erratum 7539: rttvar is updated before smoothed_rtt)
say the endpoint should have estimated.  Each RTT sample becomes a :class:`Sample`.  Pure: no
clock, no I/O; times are the trace's, in ms.

The replay itself is the native core's (``native/src/recovery.rs``, quoting the RFC rule by rule):
a long transfer has a hundred thousand ACKs, and ``quicack.store.analysis`` hands it every stored
connection's packets and ACKs as columns at once.  This module is its face for a list of events,
with the same code: the event and sample types, :class:`RttEstimator` (one per connection:
min_rtt, smoothed_rtt and rttvar belong to the path, not to a packet number space; the PTO is
computed per packet number space, §6.2.1) and the first PTO after a sample.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from quicack.core import native

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
# (the replay's other constants — the default max_ack_delay, the inflated-first-sample ratio —
# are native/src/recovery.rs's; FIRST_PTO_MS, for the scanner and the test servers, is checked
# against its estimator by the tests)


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

#: RFC 9002 §5: ``update(latest_rtt_ms, ack_delay_ms, *, space, handshake_confirmed,
#: max_ack_delay_ms)`` takes one sample and returns (the ack_delay §5.3 allows, adjusted_rtt);
#: ``pto_ms(space, *, handshake_confirmed, max_ack_delay_ms)`` the PTO period without backoff
#: (None where it is not armed); ``latest_rtt_ms``, ``min_rtt_ms``, ``smoothed_rtt_ms``,
#: ``rttvar_ms``, ``has_sample``.
RttEstimator = native.RttEstimator


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
    #: every sample in trace order (``quicack.store.analysis``, which stores them, keeps the first only)
    samples: list[Sample] = field(default_factory=list)
    #: ACK frames that acknowledged nothing new, or whose largest was not newly acknowledged, or
    #: that newly acknowledged only non-ack-eliciting packets (§5.1: no sample)
    acks_without_sample: int = 0
    #: ACKs naming packets this endpoint never sent in the trace (trace starts late, or is cut)
    acks_of_unknown_packets: int = 0
    #: samples in all
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


_SPACE_CODES = {INITIAL: 0, HANDSHAKE: 1, APPLICATION: 2}


def replay(events: Iterable, *, is_client: bool, pto_observable: bool = False) -> Replay:
    """Replay RFC 9002 §5–§6.2 over one endpoint's events (in trace order), packets it sent as
    :class:`Sent` events among them."""
    sent: list[tuple] = []
    rows: list[tuple] = []  # (at, kind, time, space, packet number, flat ranges, value): Replayer's kinds
    for position, ev in enumerate(events):
        kind = type(ev)
        at = ev.event_index if getattr(ev, "event_index", -1) >= 0 else position
        if kind is Sent:
            sent.append((_SPACE_CODES[ev.space], ev.packet_number, ev.time_ms, ev.ack_eliciting, at))
        elif kind is AckReceived:
            flat = [x for r in ev.acked_ranges for x in r]
            rows.append((at, 1, ev.time_ms, _SPACE_CODES[ev.space], None, flat, ev.ack_delay_ms))
        elif kind is Lost:
            rows.append((at, 2, ev.time_ms, _SPACE_CODES[ev.space], ev.packet_number, None, None))
        elif kind is PtoExpired:
            rows.append((at, 3, ev.time_ms, None, None, None, None))
        elif kind is SpaceDiscarded:
            rows.append((at, 4, ev.time_ms, _SPACE_CODES[ev.space], None, None, None))
        elif kind is HandshakeConfirmed:
            rows.append((at, 5, ev.time_ms, None, None, None, None))
        elif kind is PeerMaxAckDelay:
            rows.append((at, 6, ev.time_ms, None, None, None, ev.max_ack_delay_ms))
        elif kind is RetryReceived:
            rows.append((at, 7, ev.time_ms, None, None, None, None))
        else:
            raise TypeError(f"not a replay event: {ev!r}")
    replayer = native.Replayer([(0, is_client, pto_observable, False)])
    types = (pa.int64(), pa.int64(), pa.float64(), pa.bool_(), pa.int64())
    replayer.add_sent((native.column(pa.array([0] * len(sent), pa.int64())),
                       *(native.column(pa.array([r[i] for r in sent], t)) for i, t in enumerate(types))))
    types = (pa.int64(), pa.int64(), pa.float64(), pa.int64(), pa.int64(), pa.list_(pa.int64()), pa.float64())
    replayer.add_events((native.column(pa.array([0] * len(rows), pa.int64())),
                         *(native.column(pa.array([r[i] for r in rows], t)) for i, t in enumerate(types))))
    table, [(_, count, without, unknown, lowest, _)] = replayer.run(False)
    return Replay(samples=samples_of(native.table(table)), acks_without_sample=without,
                  acks_of_unknown_packets=unknown, sample_count=count, lowest_min_rtt_ms=lowest)


#: the columns of Replayer's samples that make a Sample (not connection_id, pto_backoff_ms)
_SAMPLE_COLUMNS = ("event_index", "time_ms", "packet_number_space", "largest_acknowledged", "latest_rtt_ms",
                   "ack_delay_ms", "ack_delay_used_ms", "adjusted_rtt_ms", "min_rtt_ms", "smoothed_rtt_ms",
                   "rttvar_ms", "pto_ms", "pto_count", "handshake_confirmed", "flags")


def samples_of(table: pa.Table) -> list[Sample]:
    """The rows of :class:`quicack._native.Replayer`'s samples table as :class:`Sample` values."""
    columns = [table.column(name).to_pylist() for name in _SAMPLE_COLUMNS]
    return [Sample(*row[:-1], tuple(row[-1])) for row in zip(*columns)]
