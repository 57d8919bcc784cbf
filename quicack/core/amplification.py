"""The server's anti-amplification budget before address validation, replayed datagram by datagram.

Theory of operation: a connection's datagrams (both directions, in trace order, each with its whole
UDP payload size) are walked once.  Until the server has validated the client's address, every
client datagram adds three times its payload to the server's budget and every server datagram
spends its payload.  A server datagram after which less than a full-size datagram
(:data:`FULL_DATAGRAM_BYTES`) is left puts the server *at the limit*; it was *blocked* there when a
later datagram of its own carries data it had not sent before (CRYPTO bytes of the handshake
beyond those sent, or more bytes of a response it had begun by then): it had more to say and
waited.  A client datagram that carries a request ends no block (before the server's next new
bytes, at or after the block's end): the server's next bytes may
answer it (the response, HTTP/3's QPACK bytes for it) rather than have waited — and a client sends
a 1-RTT request only once it has the server's whole handshake flight.  Nor does a stream begun
after the block start count, nor data the budget left would have held (packets smaller than
what remained: the server did not have them then), nor data sent only after a request came.
The instant ACK *caused* the block when the budget it spent would have carried what the server
waited to send (the packets with that data) or a full datagram.  The blocked period ends at
the next client datagram (it raises the budget, or validates).  Times are the server's: a client's
trace or a capture at the client's host is first put in the server's order by
:func:`server_order` (each server datagram moved one RTT earlier).  Once the address is validated
nothing more is counted; only a limit point still waiting for the server's next new bytes looks
further, so :func:`prefix_budget` can tell from a connection's first datagrams that the rest
would not change the result.

RFC 9000 §8.1 (Address Validation during Connection Establishment) decides what counts:

    "Prior to validating the client address, servers MUST NOT send more than three times as many
    bytes as the number of bytes they have received. [...] servers MUST count all of the payload
    bytes received in datagrams that are uniquely attributed to a single connection. This
    includes datagrams that contain packets that are successfully processed and datagrams that
    contain packets that are all discarded."

so sizes are UDP payloads, padding and every coalesced packet included; and when validation
happens:

    "Once the server has successfully processed a Handshake packet from the client, it can
    consider the client address to have been validated."

or earlier, by a token: "a server MAY consider the client address to be validated" when an
Initial packet carries a token it issued (a NEW_TOKEN or Retry token), which a trace shows as
``validated_by='token'`` only when the caller says so.  Pure: no I/O, times passed in.
"""

from __future__ import annotations

from typing import NamedTuple

#: RFC 9000 §8.1: the factor.
AMPLIFICATION_FACTOR = 3
#: RFC 9000 §14.1: the smallest datagram that carries a client's (and, padded, a server's) Initial;
#: a server left with less budget than this cannot send a full-size datagram.
FULL_DATAGRAM_BYTES = 1200
#: the least a packet adds around a frame's data: a short header (1 B, an 8-byte connection ID,
#: a 2-byte packet number), the AEAD tag (16 B, RFC 9001 §5.3) and a STREAM frame's type, stream ID,
#: offset and length (about 6 B) — what a server needs beyond the data to send it at all
PACKET_OVERHEAD_BYTES = 33


class Datagram(NamedTuple):
    """One UDP datagram of the connection as the trace saw it."""
    time_ms: float
    sender: str  # 'client' or 'server'
    size_bytes: int  # UDP payload: every coalesced packet and any padding
    validates: bool = False  # a client datagram holding a Handshake packet (RFC 9000 §8.1)
    ack_only_initial: bool = False  # a server datagram holding only an Initial with ACK (+ PADDING)
    new_data: bool = False  # a server datagram carrying CRYPTO/STREAM bytes it had not sent before
    new_bytes: int = 0  # how many such bytes (CRYPTO/STREAM payload; 0: unknown)
    #: when the earliest stream (or CRYPTO space) of that new data began (None: unknown, taken as
    #: before any block); data of a stream begun after a block was not waiting in it
    data_started_ms: float | None = None
    #: a client datagram carrying a request (STREAM bytes on a stream it opened): what the server
    #: sends next may answer it rather than have waited
    request: bool = False


class Block(NamedTuple):
    """A period in which the server was at its limit with more to send."""
    start_ms: float  # the server datagram that left less than a full datagram of budget
    end_ms: float | None  # the next client datagram (None: none came: the trace ends blocked)
    sent_bytes: int  # server bytes sent before validation, at the start
    received_bytes: int  # client bytes received before validation, at the start
    remaining_bytes: int  # budget left at the start
    ended_by: str | None  # 'validation', 'client_datagram' or None
    #: the new bytes of the first server datagram with new data after the block, plus the least
    #: packet around them (:data:`PACKET_OVERHEAD_BYTES`): what it had waited to send; 0 unknown
    pending_bytes: int = 0


class Budget(NamedTuple):
    """What the server's budget did in one connection."""
    validated_ms: float | None  # when the client's address was validated (None: never in the trace)
    validated_by: str | None  # 'handshake', 'token' or None
    client_bytes: int  # client payload bytes before validation (the validating datagram excluded)
    server_bytes: int  # server payload bytes before validation
    client_datagrams: int
    server_datagrams: int
    factor: float | None  # server_bytes / client_bytes
    limit_reached: bool  # some server datagram left less than a full datagram of budget
    limit_exceeded: bool  # the server sent more than three times what it had received
    max_excess_bytes: int  # by how much at most (0 if never)
    blocks: tuple[Block, ...]
    iack_bytes: int | None  # the first server datagram, when it is an ACK-only Initial
    iack_caused_block: bool  # without the instant ACK's bytes the first block would not have happened

    @property
    def blocked_ms(self) -> float | None:
        """Total time blocked (None when a block never ended in the trace)."""
        if any(b.end_ms is None for b in self.blocks):
            return None
        return sum(b.end_ms - b.start_ms for b in self.blocks)


def server_order(datagrams: list[Datagram], rtt_ms: float) -> list[Datagram]:
    """A client-side view in the order the server lived it.  With one-way delays d each way
    (RTT 2d), a client datagram sent at t arrives at t + d and a server datagram received at u was
    sent at u − d: the client's came first exactly when t < u − 2d.  So server datagrams move one
    RTT earlier (ties: the client's first); every time is then the server's clock minus d, and
    durations are the server's.  ``rtt_ms``: the path's RTT without the server's delays (the caller's
estimate: the smallest RTT sample less its ACK delay)."""
    moved = [d._replace(time_ms=d.time_ms - rtt_ms,
                        data_started_ms=None if d.data_started_ms is None else d.data_started_ms - rtt_ms)
             if d.sender == "server" else d for d in datagrams]
    return sorted(moved, key=lambda d: (d.time_ms, d.sender == "server"))


def replay_budget(datagrams: list[Datagram], token_validated: bool = False) -> Budget:
    """Walk ``datagrams`` (trace order) and account the server's budget (module docstring)."""
    return _walk(datagrams, token_validated)[0]


def prefix_budget(datagrams: list[Datagram], token_validated: bool = False) -> Budget | None:
    """The budget from the first datagrams of a connection only (server order, a prefix of them all),
    or None when the datagrams after them could still change it.  Once the address is validated
    nothing counts any more (RFC 9000 §8.1: the limit applies "prior to validating the client
    address"); only a limit point still waiting for the server's next new bytes (a block not yet
    shown, or a request that clears it) looks further.  Without either, the rest cannot change
    the result: it equals :func:`replay_budget` of all of them."""
    budget, pending = _walk(datagrams, token_validated)
    return budget if budget.validated_ms is not None and pending is None else None


def _walk(datagrams: list[Datagram], token_validated: bool) -> tuple[Budget, Block | None]:
    """The budget, and the limit point still open at the end (None when none is)."""
    received = sent = client_n = server_n = max_excess = 0
    validated_ms = datagrams[0].time_ms if token_validated and datagrams else None
    validated_by = "token" if validated_ms is not None else None
    limit_reached = False
    at_limit: Block | None = None  # the last limit point, a block once the server sends new data
    blocks: list[Block] = []
    iack_bytes = None
    for d in datagrams:
        if d.sender == "client":
            if at_limit is not None and d.request:
                at_limit = None  # what the server sends next may answer the request
            elif at_limit is not None and at_limit.end_ms is None and validated_ms is None:
                at_limit = at_limit._replace(end_ms=d.time_ms,
                                             ended_by="validation" if d.validates else "client_datagram")
            if validated_ms is None and d.validates:
                validated_ms, validated_by = d.time_ms, "handshake"
            elif validated_ms is None:
                received += d.size_bytes
                client_n += 1
            continue
        if (at_limit is not None and at_limit.end_ms is not None and d.new_data
                and (d.data_started_ms is None or d.data_started_ms <= at_limit.start_ms)
                and (not d.new_bytes or d.new_bytes + PACKET_OVERHEAD_BYTES > at_limit.remaining_bytes)):
            # it had more and sent it once the client spoke
            blocks.append(at_limit._replace(pending_bytes=d.new_bytes and d.new_bytes + PACKET_OVERHEAD_BYTES))
            at_limit = None
        if validated_ms is not None:
            continue
        if server_n == 0 and d.ack_only_initial:
            iack_bytes = d.size_bytes
        sent += d.size_bytes
        server_n += 1
        budget = AMPLIFICATION_FACTOR * received
        max_excess = max(max_excess, sent - budget)
        if budget - sent < FULL_DATAGRAM_BYTES:
            limit_reached = True
            # (from the last datagram the server could send: a smaller one may still have fit)
            at_limit = Block(d.time_ms, None, sent, received, budget - sent, None)
    if at_limit is not None and at_limit.end_ms is None and validated_ms is None:
        blocks.append(at_limit)  # the trace ends at the limit: nothing more came from the client
    factor = sent / received if received else None
    # without the instant ACK the budget left would have been larger by its size: the block was
    # the ACK's doing when that would have held a full datagram, or what the server waited to send
    caused = bool(blocks and iack_bytes is not None
                  and blocks[0].remaining_bytes + iack_bytes >= min(FULL_DATAGRAM_BYTES,
                                                                    blocks[0].pending_bytes or FULL_DATAGRAM_BYTES))
    return Budget(validated_ms, validated_by, received, sent, client_n, server_n, factor, limit_reached,
                  max_excess > 0, max_excess, tuple(blocks), iack_bytes, caused), at_limit
