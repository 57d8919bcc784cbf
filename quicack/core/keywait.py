"""Packets that waited for their keys, and how much the RTT samples taken from them are inflated.

Theory of operation: a receiver that gets a packet it cannot decrypt yet (the keys come with a
packet still on its way: a Handshake packet before the Initial holding the ServerHello, 1-RTT data
before the handshake completes) may keep it and process it once the keys exist — RFC 9001 §4.7:
"Endpoints could choose to buffer packets that they cannot decrypt yet".  Its trace logs the
packet as buffered (qlog ``packet_buffered``, quic-go) and later as received.  Each buffered
packet is matched here to the first later received packet of the same type and size, and that to
the first ACK the receiver sent that acknowledges it.

What the ACK's sender must report, RFC 9000 §13.2.5: "the time from when the largest acknowledged
packet was received to when this ACK was sent" — received, not processed: counted from receipt,
the ACK delay covers the wait and the peer's RTT sample stays honest (Google's fix, seed 002).
So per wait: ``ack_delay_from_receipt_ms`` (ACK sent − buffered), ``uncovered_ms`` (what the
reported ACK delay left out: the wait, for a stack that counts from processing) and
``sample_inflation_ms``, the most the peer's adjusted RTT sample is inflated by: RFC 9002 §5.3
lets the peer subtract the ACK delay only up to the receiver's max_ack_delay once the handshake
is confirmed ("MUST use the lesser of the acknowledgment delay and the peer's max_ack_delay"), so
even an honest delay of 200 ms inflates a 1-RTT sample by 200 ms − max_ack_delay.  A wait whose
packet was not the largest acknowledged by that ACK gives the peer no sample (RFC 9002 §5.1).
Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple


class Buffered(NamedTuple):
    event_index: int
    time_ms: float
    packet_type: str
    size_bytes: int | None


class Received(NamedTuple):
    event_index: int
    time_ms: float
    packet_type: str
    size_bytes: int | None
    packet_number: int | None
    space: str | None


class AckSent(NamedTuple):
    event_index: int
    time_ms: float
    space: str | None
    largest: int | None
    ranges: tuple[tuple[int, int], ...]
    ack_delay_ms: float | None


class KeyWait(NamedTuple):
    buffered: Buffered
    received: Received | None
    ack: AckSent | None
    wait_ms: float | None
    ack_delay_from_receipt_ms: float | None
    uncovered_ms: float | None
    sample_inflation_ms: float | None  # None: no sample for the peer from this packet


def match_waits(buffered: list[Buffered], received: list[Received], acks: list[AckSent],
                max_ack_delay_ms: float) -> list[KeyWait]:
    """One :class:`KeyWait` per buffered packet (all lists in trace order)."""
    used: set[int] = set()
    out = []
    for b in buffered:
        r = next((p for p in received if p.event_index > b.event_index and p.event_index not in used
                  and p.packet_type == b.packet_type and (b.size_bytes is None or p.size_bytes == b.size_bytes)),
                 None)
        if r is None:
            out.append(KeyWait(b, None, None, None, None, None, None))
            continue
        used.add(r.event_index)
        ack = next((a for a in acks if a.event_index > r.event_index and a.space == r.space
                    and r.packet_number is not None
                    and any(lo <= r.packet_number <= hi for lo, hi in a.ranges)), None)
        from_receipt = uncovered = inflation = None
        if ack is not None:
            from_receipt = ack.time_ms - b.time_ms
            reported = ack.ack_delay_ms or 0.0
            uncovered = from_receipt - reported
            if ack.largest == r.packet_number:
                # RFC 9002 §5.3: min(ack_delay, max_ack_delay) once confirmed (1-RTT packets)
                subtracted = min(reported, max_ack_delay_ms) if r.space == "application_data" else reported
                inflation = from_receipt - subtracted
        out.append(KeyWait(b, r, ack, r.time_ms - b.time_ms, from_receipt, uncovered, inflation))
    return out
