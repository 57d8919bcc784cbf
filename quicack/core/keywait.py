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

A capture logs no buffering, but one taken next to the receiver shows when each packet arrived
and when the packets carrying the keys did (:func:`key_ready`): a packet that arrived before its
receiver could have its keys waited at least until they came (:func:`capture_waits`; its
"processed" time is that arrival, the earliest it could have been read).  Such a packet is often
one the capture could not decrypt either (tshark too lacks its keys when it meets it): its
packet number is then the smallest one the receiver's first ACK in its space acknowledges that no
decrypted packet of the capture carries.  Pure: no I/O.
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
        out.append(_acknowledged(b, r, acks, max_ack_delay_ms))
    return out


def _acknowledged(b: Buffered, r: Received, acks: list[AckSent], max_ack_delay_ms: float) -> KeyWait:
    """The wait of ``b``, processed as ``r``, with the first ACK after ``r`` acknowledging it."""
    ack = next((a for a in acks if a.event_index >= r.event_index and a.space == r.space
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
    return KeyWait(b, r, ack, r.time_ms - b.time_ms, from_receipt, uncovered, inflation)


# --- captures: when each side could have its keys --------------------------------------------

class Captured(NamedTuple):
    """A packet as a capture next to its receiver saw it arrive."""

    event_index: int
    time_ms: float
    sender: str
    packet_type: str
    packet_number: int | None
    size_bytes: int | None
    space: str | None
    #: its CRYPTO frames: (offset, length)
    crypto: tuple[tuple[int, int], ...] = ()


def _completed(frames: list[tuple[float, int, int, int]]) -> tuple[float, int] | None:
    """(time, event_index) at which CRYPTO frames (time, event_index, offset, length) first cover
    their stream from 0 to its end (the end of the last byte any frame carries)."""
    if not frames:
        return None
    end = max(offset + length for _, _, offset, length in frames)
    have: list[tuple[int, int]] = []
    for t, event, offset, length in sorted(frames):
        have = sorted(have + [(offset, offset + length)])
        reach = 0
        for lo, hi in have:
            if lo > reach:
                break
            reach = max(reach, hi)
        if reach >= end:
            return t, event
    return None


def key_ready(packets: list[Captured]) -> dict[tuple[str, str], tuple[float, int]]:
    """(receiver, packet type) → (time, event index) of the arrival that gave the receiver the
    keys for that type, from a capture next to it:

    - a client reads Handshake packets once the server's Initial CRYPTO (its ServerHello) is
      whole, and 1-RTT packets once the server's Handshake CRYPTO (up to its Finished) is whole,
      each Handshake packet counted from when it could be read;
    - a server reads Handshake and 0-RTT packets once the client's Initial CRYPTO (its
      ClientHello) is whole, and 1-RTT packets once the client's Handshake CRYPTO (its Finished)
      is whole — RFC 9001 §5.7: "a server MUST NOT process incoming 1-RTT protected packets
      before the TLS handshake is complete".
    The receiver's own packets prove its keys as well: a Handshake packet it sent, its Handshake
    keys; a client's first 1-RTT packet, its 1-RTT keys (derived with the read keys, after the
    server's Finished); a server's 1-RTT readiness rests on the client's Finished alone.  The earlier of the two counts (a
    packet the capture could not decrypt may have carried CRYPTO bytes it cannot place).  A type
    whose keys came neither way is absent."""
    ready: dict[tuple[str, str], tuple[float, int]] = {}
    for receiver, sender in (("client", "server"), ("server", "client")):
        hello = _earlier(_completed([(p.time_ms, p.event_index, o, n) for p in packets
                                     if p.sender == sender and p.packet_type == "initial" for o, n in p.crypto]),
                         _first_sent(packets, receiver, "handshake"))
        if hello is None:
            continue
        ready[(receiver, "handshake")] = hello
        if receiver == "server":
            ready[(receiver, "0RTT")] = hello
        flight = _completed([(max(p.time_ms, hello[0]), p.event_index, o, n) for p in packets
                             if p.sender == sender and p.packet_type == "handshake" for o, n in p.crypto])
        flight = _earlier(flight, _first_sent(packets, receiver, "1RTT") if receiver == "client" else None)
        if flight is not None:
            ready[(receiver, "1RTT")] = flight
    return ready


def _first_sent(packets: list[Captured], side: str, packet_type: str) -> tuple[float, int] | None:
    return next(((p.time_ms, p.event_index) for p in packets if p.sender == side and p.packet_type == packet_type),
                None)


def _earlier(a: tuple[float, int] | None, b: tuple[float, int] | None) -> tuple[float, int] | None:
    return min((x for x in (a, b) if x is not None), default=None)


def capture_waits(packets: list[Captured], acks: dict[str, list[AckSent]],
                  max_ack_delay_ms: dict[str, float],
                  numbers: dict[tuple[str, str], set[int]] | None = None) -> list[tuple[str, KeyWait]]:
    """(receiver, wait) for every packet that arrived before its receiver could have its keys
    (:func:`key_ready`), processed — at the earliest — when they came; ``acks`` and
    ``max_ack_delay_ms`` by the receiver (``client``, ``server``), ACKs in capture order.
    ``numbers``: the packet numbers the whole capture shows per (sender, space) (default: those of
    ``packets``), when ``packets`` are only the handshake's and those before its keys were ready;
    only packets the capture could not decrypt need them."""
    ready = key_ready(packets)
    known: dict[tuple[str, str], set[int]] = {k: set(v) for k, v in numbers.items()} if numbers is not None else {}
    for p in packets if numbers is None else ():
        if p.packet_number is not None:
            known.setdefault((p.sender, SPACES.get(p.packet_type, p.space)), set()).add(p.packet_number)
    out = []
    for p in packets:
        receiver = "client" if p.sender == "server" else "server"
        keys = ready.get((receiver, p.packet_type))
        if keys is None or p.time_ms >= keys[0]:
            continue
        space = SPACES.get(p.packet_type, p.space)
        mine = acks.get(receiver, [])
        number = p.packet_number
        if number is None:  # not decrypted in the capture either: the number its ACK reveals
            number = _unseen(mine, keys[1], space, known.setdefault((p.sender, space), set()))
            if number is not None:
                known[(p.sender, space)].add(number)
        b = Buffered(p.event_index, p.time_ms, p.packet_type, p.size_bytes)
        r = Received(keys[1], keys[0], p.packet_type, p.size_bytes, number, space)
        out.append((receiver, _acknowledged(b, r, mine, max_ack_delay_ms[receiver])))
    return out


#: packet number space of each packet type (RFC 9000 §12.3: 0-RTT and 1-RTT share one)
SPACES = {"initial": "initial", "handshake": "handshake", "0RTT": "application_data", "1RTT": "application_data"}


def _unseen(acks: list[AckSent], after: int, space: str | None, seen: set[int]) -> int | None:
    """The smallest packet number that the first ACK in ``space`` from event ``after`` on to
    acknowledge one acknowledges and no packet of the capture carries: a packet the capture (like
    its receiver, on arrival) could not decrypt, whose number only the receiver's ACK tells."""
    for ack in acks:
        if ack.event_index >= after and ack.space == space:
            for lo, hi in sorted(ack.ranges):
                for number in range(lo, min(hi, lo + 4096) + 1):
                    if number not in seen:
                        return number
    return None
