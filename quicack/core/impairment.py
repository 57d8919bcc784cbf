"""What a relay does to one direction of a path: drop lists, random loss, delay, rate, queue, jitter.

Theory of operation: :class:`Direction` is a sans-I/O state machine for one direction of the
testbed's relay (``to_server`` or ``to_client``).  The relay offers it every datagram it reads —
(flow, size, arrival time in ms; the time is passed in, nothing here reads a clock) — and gets a
:class:`Verdict`: the datagram's index in its flow and direction (from 1), and either the time it
is to leave or why it is dropped.  The stages, in order:

1. **Drop list** (``drop_list``): the datagram indexes given by ``--drop-to-client`` /
   ``--drop-to-server`` are dropped, counted from 1 per flow and direction — the semantics of
   quic-network-simulator's ``droplist`` scenario (``--drops_to_client=1,3,4``), so its published
   scenarios carry over.  There (sim/scenarios/droplist/droplist-error-model.cc) one counter per
   direction counts every UDP packet reaching the far end of the link and the listed ones are
   discarded; its simulation holds one client and one server, so per direction is per flow.
   Two differences, both invisible when the queue overflows nowhere: the simulator counts after
   the link's queue (a tail drop does not advance its counter) and a listed packet has used the
   link's time; here the index is the datagram's arrival index (the ``datagram_index`` every
   record carries) and a listed datagram is dropped on arrival, costing the link nothing.
2. **Random loss** (``loss``): each datagram not on the drop list is lost with probability
   ``loss_percent``/100, drawn from a seeded generator — except that a datagram after ``burst``
   consecutive random losses is never lost (the run is counted over the datagrams random loss
   applies to; drop-listed ones neither extend nor break it).  The draw is made even then, so
   the pattern of draws, and so of losses, depends only on the seed and the datagram count.
3. **Delay and rate** — a serializer: a datagram reaches the bottleneck ``delay_ms`` after it
   arrived and leaves when the bottleneck is free, ``departure = max(arrival + delay, previous
   departure + previous transmission time)``, the transmission time being ``(size + overhead) ×
   8 / rate`` — ``overhead_bytes`` (default 0) being what the link carries per datagram besides
   its UDP payload: 28 for the IPv4 and UDP headers, which make an ACK-only QUIC datagram of ~34
   bytes a 62-byte packet on a real link (what a narrow return link's load is made of).
   A datagram leaves at the *start* of its transmission: on an idle link the added delay is
   exactly ``delay_ms`` whatever the size (a real link would add the datagram's own
   transmission time), and datagrams leave one after another at the rate, never in a burst.
4. **Queue** (``queue_full``): what waits at the bottleneck (admitted datagrams whose
   transmission has not started) is bounded in bytes and/or datagrams; a datagram that would
   have to wait and would make the queue exceed a bound is dropped.  One that need not wait is
   never dropped, whatever its size.  Without a rate limit nothing waits.
5. **Jitter**: a uniform draw in ±``jitter_ms`` (its own seeded generator) is added to the
   departure, which is then raised to the previous datagram's departure if it fell before it.
   So nothing is reordered — a path with one FIFO bottleneck never reorders, and the
   configuration names no reordering — and the added delay stays within [delay − J, delay + J]
   on an idle link (a datagram raised to its predecessor's departure leaves no later than that
   one's arrival + delay + J, hence within its own bound too).  The price: closely spaced
   datagrams are spread less than ±J apart.  Independent draws (netem's default) would reorder
   any two datagrams less than 2J apart, which a scenario that asks for jitter does not ask for.

Also here, because it is pure too: :func:`datagram_types` names the QUIC packets in a datagram
from their headers alone (no keys), as the relay records them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

from quicack.model import QuicackError

TO_SERVER = "to_server"
TO_CLIENT = "to_client"
DIRECTIONS = (TO_SERVER, TO_CLIENT)

DROP_LIST = "drop_list"
LOSS = "loss"
QUEUE_FULL = "queue_full"
#: why the core drops a datagram, in the order of the stages above
REASONS = (DROP_LIST, LOSS, QUEUE_FULL)


def option(direction: str, name: str) -> str:
    """The command-line option of a per-direction setting: ('to_client', 'rate', 'kbps') →
    ``--rate-to-client-kbps``."""
    base, _, unit = name.partition(":")
    return f"--{base}-{direction.replace('_', '-')}" + (f"-{unit}" if unit else "")


def parse_drops(text: str, name: str) -> frozenset[int]:
    """A drop list as quic-network-simulator writes it: ``1,3,4`` (datagram indexes from 1).
    An empty text is an empty list; anything else than positive integers is refused."""
    if not text.strip():
        return frozenset()
    indexes = []
    for item in text.split(","):
        item = item.strip()
        if not item.isascii() or not item.isdigit() or int(item) < 1:
            raise QuicackError(f"{name} {text!r}: expected datagram indexes counted from 1, "
                               f"separated by commas (e.g. 1,3,4); {item!r} is not one")
        indexes.append(int(item))
    return frozenset(indexes)


@dataclass(frozen=True)
class Impairment:
    """What one direction does to the datagrams it carries (see the module docstring)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    #: None: no rate limit
    rate_kbps: float | None = None
    #: bounds of what waits for the rate limit; None: unbounded
    queue_bytes: int | None = None
    queue_packets: int | None = None
    loss_percent: float = 0.0
    #: at most this many consecutive random losses; None: no bound
    burst: int | None = None
    #: datagram indexes (from 1, per flow) dropped on arrival
    drops: frozenset[int] = field(default_factory=frozenset)
    #: bytes per datagram the rate limit counts besides the UDP payload (IPv4 + UDP: 28)
    overhead_bytes: int = 0

    def check(self, direction: str) -> None:
        """Refuse settings that cannot be carried out, naming the option."""
        if self.delay_ms < 0:
            raise QuicackError(f"{option(direction, 'delay:ms')} {self.delay_ms:g}: a delay cannot be negative")
        if self.jitter_ms < 0:
            raise QuicackError(f"--jitter-ms {self.jitter_ms:g}: jitter cannot be negative")
        if self.jitter_ms > self.delay_ms:
            raise QuicackError(f"--jitter-ms {self.jitter_ms:g} exceeds the delay {direction} "
                               f"({self.delay_ms:g} ms): a datagram cannot leave before it arrived")
        if self.rate_kbps is not None and not self.rate_kbps > 0:
            raise QuicackError(f"{option(direction, 'rate:kbps')} {self.rate_kbps:g}: a rate must be positive")
        for name, bound in (("--queue-bytes", self.queue_bytes), ("--queue-packets", self.queue_packets)):
            if bound is not None and bound < 1:
                raise QuicackError(f"{name} {bound}: a queue bound must be at least 1")
        if self.overhead_bytes < 0:
            raise QuicackError(f"--rate-overhead-bytes {self.overhead_bytes}: cannot be negative")
        if not 0 <= self.loss_percent <= 100:
            raise QuicackError(f"{option(direction, 'loss')} {self.loss_percent:g}: a loss percentage "
                               "is from 0 to 100")
        if self.burst is not None and self.burst < 1:
            raise QuicackError(f"--burst {self.burst}: at least 1 consecutive loss (omit it for no bound)")

    def describe(self) -> dict:
        """The settings as JSON values (drop list sorted)."""
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "rate_kbps": self.rate_kbps,
                "queue_bytes": self.queue_bytes, "queue_packets": self.queue_packets,
                "loss_percent": self.loss_percent, "burst": self.burst, "drops": sorted(self.drops),
                "overhead_bytes": self.overhead_bytes}


class Verdict(NamedTuple):
    """The fate of one datagram: its index in its flow and direction (from 1) and either its
    departure time (ms, the clock of the arrival times) or the reason it was dropped."""

    index: int
    departure_ms: float | None
    reason: str | None


class Direction:
    """The state of one direction; :meth:`offer` every datagram in arrival order."""

    def __init__(self, impairment: Impairment, direction: str, seed: int = 0):
        impairment.check(direction)
        self.impairment = impairment
        self.direction = direction
        # str seeds are hashed with SHA-512: the same patterns on every platform and run
        self._loss_rng = random.Random(f"{seed}/{direction}/loss")
        self._jitter_rng = random.Random(f"{seed}/{direction}/jitter")
        self._counts: dict[Hashable, int] = {}
        self._loss_run = 0
        #: when the bottleneck is next free (departure + transmission time of the last admitted)
        self._free_ms = float("-inf")
        #: (transmission start, size) of admitted datagrams still waiting, in order
        self._waiting: deque[tuple[float, int]] = deque()
        self._waiting_bytes = 0
        self._clock_ms = float("-inf")
        self._last_departure_ms = float("-inf")

    def count(self, flow: Hashable) -> int:
        """The next datagram index of ``flow`` (from 1), taken without impairing anything (the
        relay counts so a datagram it cannot offer, e.g. one arriving while it stops)."""
        index = self._counts.get(flow, 0) + 1
        self._counts[flow] = index
        return index

    def offer(self, flow: Hashable, size_bytes: int, arrival_ms: float) -> Verdict:
        index = self.count(flow)
        imp = self.impairment
        if index in imp.drops:
            return Verdict(index, None, DROP_LIST)
        if imp.loss_percent and self._lost():
            return Verdict(index, None, LOSS)
        ready = arrival_ms + imp.delay_ms
        departure = self._serialize(ready, size_bytes)
        if departure is None:
            return Verdict(index, None, QUEUE_FULL)
        if imp.jitter_ms:
            departure += self._jitter_rng.uniform(-imp.jitter_ms, imp.jitter_ms)
        departure = max(departure, self._last_departure_ms)
        self._last_departure_ms = departure
        return Verdict(index, departure, None)

    def _lost(self) -> bool:
        lost = self._loss_rng.random() * 100.0 < self.impairment.loss_percent
        burst = self.impairment.burst
        if lost and (burst is None or self._loss_run < burst):
            self._loss_run += 1
            return True
        self._loss_run = 0
        return False

    def _serialize(self, ready: float, size: int) -> float | None:
        """Departure (before jitter) of a datagram reaching the bottleneck at ``ready``, or None
        when the queue has no room for it."""
        imp = self.impairment
        if imp.rate_kbps is None:
            return ready
        # a datagram read a little after one that arrived later (two sockets) keeps the clock
        self._clock_ms = clock = max(self._clock_ms, ready)
        waiting = self._waiting
        while waiting and waiting[0][0] <= clock:  # its transmission has started by now
            self._waiting_bytes -= waiting.popleft()[1]
        start = max(ready, self._free_ms)
        if start > ready:  # it has to wait
            if ((imp.queue_bytes is not None and self._waiting_bytes + size > imp.queue_bytes)
                    or (imp.queue_packets is not None and len(waiting) + 1 > imp.queue_packets)):
                return None
            waiting.append((start, size))
            self._waiting_bytes += size
        # bits / (kbit/s) = ms
        self._free_ms = start + (size + imp.overhead_bytes) * 8.0 / imp.rate_kbps
        return start


# --- QUIC packet types of a datagram, read without keys -------------------------------------

VERSION_NEGOTIATION = "version_negotiation"
UNKNOWN = "unknown"
V1 = 0x00000001
V2 = 0x6B3343CF
#: RFC 9000 §17.2, Table 5: "0x00 Initial, 0x01 0-RTT, 0x02 Handshake, 0x03 Retry" — the
#: "Long Packet Type: The next two bits (those with a mask of 0x30) of byte 0".  Names as in
#: ``packets.packet_type`` (qlog's).
V1_TYPES = ("initial", "0RTT", "handshake", "retry")
#: RFC 9369 §3.2: "Initial packets use a packet type field of 0b01. 0-RTT packets use a packet
#: type field of 0b10. Handshake packets use a packet type field of 0b11. Retry packets use a
#: packet type field of 0b00."
V2_TYPES = ("retry", "initial", "0RTT", "handshake")
#: RFC 9000 §17.2: "In QUIC version 1, this value [a connection ID length] MUST NOT exceed 20 bytes."
MAX_CID_BYTES = 20


def _types_of(version: int) -> tuple[str, ...] | None:
    if version == V1 or version >> 8 == 0xFF0000:  # IETF drafts have version 1's layout
        return V1_TYPES
    if version == V2:
        return V2_TYPES
    return None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """RFC 9000 §16: "The QUIC variable-length integer encoding reserves the two most
    significant bits of the first byte to encode the base-2 logarithm of the integer encoding
    length in bytes."  (value, position after it); IndexError when the data ends first."""
    first = data[pos]
    length = 1 << (first >> 6)
    if pos + length > len(data):
        raise IndexError
    return int.from_bytes(data[pos:pos + length], "big") & ((1 << (8 * length - 2)) - 1), pos + length


def datagram_types(payload: bytes) -> str:
    """The QUIC packets of a UDP payload, named from their headers: e.g. ``initial``,
    ``initial+handshake``, ``handshake+1RTT``, ``1RTT``, ``retry``, ``version_negotiation``;
    ``unknown`` for what cannot be read (an unknown version, a header cut short, not QUIC).
    Zero bytes after the last packet are padding, not a packet: they are not named."""
    names: list[str] = []
    pos, end = 0, len(payload)
    try:
        while pos < end:
            first = payload[pos]
            if not first and not payload[pos:].strip(b"\x00"):
                break  # zeros after the packets: padding outside them (aioquic pads so), no packet
            # RFC 9000 §17.2: "Header Form: The most significant bit (0x80) of byte 0 (the first
            # byte) is set to 1 for long headers."  §17.3.1, 1-RTT: "Fixed Bit: The next bit
            # (0x40) of byte 0 is set to 1."
            if not first & 0x80:
                names.append("1RTT" if first & 0x40 else UNKNOWN)
                break
            if pos + 6 > end:  # first byte, version (32 bits), destination CID length
                raise IndexError
            version = int.from_bytes(payload[pos + 1:pos + 5], "big")
            # RFC 9000 §17.2.1: a Version Negotiation packet is "identified ... based on the
            # Version field having a value of 0".
            if version == 0:
                names.append(VERSION_NEGOTIATION)
                break
            types = _types_of(version)
            dcid = payload[pos + 5]
            scid_at = pos + 6 + dcid
            if types is None or dcid > MAX_CID_BYTES or payload[scid_at] > MAX_CID_BYTES:
                names.append(UNKNOWN)
                break
            kind = types[(first & 0x30) >> 4]
            at = scid_at + 1 + payload[scid_at]
            if at > end:
                raise IndexError
            # RFC 9000 §12.2: "Retry packets (Section 17.2.5), Version Negotiation packets
            # (Section 17.2.1), and packets with a short header (Section 17.3) do not contain a
            # Length field and so cannot be followed by other packets in the same UDP datagram."
            if kind == "retry":
                names.append(kind)
                break
            if kind == "initial":  # §17.2.2: "Token Length: A variable-length integer ..."
                token, at = _varint(payload, at)
                at += token
            # §17.2.2: "Length: This is the length of the remainder of the packet (that is, the
            # Packet Number and Payload fields) in bytes, encoded as a variable-length integer"
            length, at = _varint(payload, at)
            if at + length > end:
                raise IndexError
            names.append(kind)
            pos = at + length
    except IndexError:
        names.append(UNKNOWN)
    return "+".join(names) or UNKNOWN


def destination_cid(payload: bytes) -> str | None:
    """The Destination Connection ID (hex) of a datagram whose first packet has a long header,
    else None: a client's first Initial names the connection (its original DCID) before any key.
    RFC 9000 §17.2: "Destination Connection ID Length: The byte following the version contains
    the length in bytes of the Destination Connection ID field"."""
    if len(payload) < 6 or not payload[0] & 0x80:
        return None
    length = payload[5]
    if length > MAX_CID_BYTES or len(payload) < 6 + length:
        return None
    return payload[6:6 + length].hex()
