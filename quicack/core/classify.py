"""Handshake ACK classification: instant ACK (IACK) or wait-for-certificate (WFC), and why.

Theory of operation: :func:`classify` looks at the server's Initial packets of one connection, as
one vantage point saw them (client: received, server: sent, network: seen).  It finds two
packets — the first server Initial carrying an ACK frame and the first carrying the ServerHello
(the CRYPTO frame at offset 0 of the server's Initial crypto stream) — and reads the class off
their order, using a small table of rules (:data:`RULES`) over the facts it gathered
(:class:`Facts`).  ``iack`` means the ACK came first, ``wfc`` that both are the same packet
(ReACKed QUICer, IMC 2024).  Retry and Version Negotiation restart the handshake: the rules look
at the attempt after the last one and say so in the notes.  So does a HelloRetryRequest: it is a
ServerHello message (RFC 8446 §4.1.4), sent at once without a certificate, and the client answers
it with a second ClientHello — new bytes on its Initial crypto stream after the server's offset
0, which no handshake without one has.  The round after it (the ACK of the second ClientHello,
the real ServerHello) is classified.  Pure: packets in, result out.

Producers that do not log CRYPTO frames (quant) are handled by packet size: the first server
Initial of at least :data:`SERVER_HELLO_MIN_BYTES` bytes is taken as the ServerHello, and the
reason says so.  A capture that holds datagrams it could not read (UDP GSO super-frames) before
the ServerHello is not trusted with a class (``unknown``, reason ``gso_superframes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quicack.model import Frame, Packet

IACK = "iack"
IACK_PING = "iack_ping"
WFC = "wfc"
SH_BEFORE_ACK = "sh_before_ack"
NO_ACK = "no_ack"
RETRY = "retry"
VERSION_NEGOTIATION = "version_negotiation"
FAILED = "failed"
UNKNOWN = "unknown"
CLASSES = (IACK, IACK_PING, WFC, SH_BEFORE_ACK, NO_ACK, RETRY, VERSION_NEGOTIATION, FAILED, UNKNOWN)

#: An Initial with an ACK and nothing else is ~40-60 bytes; one with a ServerHello (~90 bytes of
#: CRYPTO at least) is larger.  Used only when the producer does not log CRYPTO frames.
SERVER_HELLO_MIN_BYTES = 100

#: RFC 9000 §20.1: "CRYPTO_ERROR (0x0100-0x01ff): The cryptographic handshake failed. A range of
#: 256 values is reserved for carrying error codes specific to the cryptographic handshake".
TLS_ALERT_CODES = range(0x100, 0x200)


@dataclass(frozen=True)
class Close:
    """The first CONNECTION_CLOSE of the connection."""

    time_ms: float
    sender: str
    error_code: str | None

    @property
    def tls_alert(self) -> bool:
        code = _error_number(self.error_code)
        if code is not None:
            return code in TLS_ALERT_CODES
        text = str(self.error_code or "").lower()
        return "crypto_error" in text or "tls" in text or "alert" in text


@dataclass(frozen=True)
class Facts:
    """What the rules look at, gathered once from the packets."""

    packets: int
    #: any Initial packet, from either side
    initial_packets: bool
    frames_logged: bool
    crypto_logged: bool
    server_packets: int
    #: server Initials in the last attempt
    server_initials: int
    #: the handshake ended at a Version Negotiation / Retry (no server Initial after the last one)
    version_negotiation: bool
    retry: bool
    #: first server Initial with an ACK frame (in the last attempt)
    ack: Packet | None
    #: first server Initial with the ServerHello (in the last attempt)
    server_hello: Packet | None
    handshake_completed: bool
    close: Close | None
    partial_clienthello: bool


@dataclass(frozen=True)
class Handshake:
    handshake_class: str
    reason: str
    notes: tuple[str, ...] = ()
    #: time_ms (trace time) of the client's first Initial as seen here; the figures below are
    #: relative to it
    client_initial_time_ms: float | None = None
    ack_time_ms: float | None = None
    server_hello_time_ms: float | None = None
    first_ack_event_index: int | None = None
    server_hello_event_index: int | None = None
    #: ServerHello time − first ACK time (0 for wfc, negative for sh_before_ack)
    ack_sh_gap_ms: float | None = None
    first_ack_delay_ms: float | None = None
    first_ack_packet_number: int | None = None
    first_ack_largest_acknowledged: int | None = None
    #: whether the first ACK acknowledges the client's first Initial (of the last attempt)
    first_ack_acknowledges_first_initial: bool | None = None
    #: frame types of the packet carrying the first ACK, e.g. 'ack', 'ack+ping', 'ack+crypto'
    first_ack_frames: str | None = None
    #: client Initials carrying ClientHello bytes no earlier one carried (>1: split ClientHello)
    clienthello_packets: int | None = None
    first_server_packet_ms: float | None = None
    server_hello_ms: float | None = None
    handshake_complete_ms: float | None = None


Rule = tuple[Callable[[Facts], bool], str, Callable[[Facts], str]]


def _const(text: str) -> Callable[[Facts], str]:
    return lambda _facts: text


def _failure(facts: Facts) -> str:
    if facts.close is not None:
        if facts.close.tls_alert:
            return "tls_alert"
        return f"connection_close_by_{facts.close.sender}"
    if facts.ack is not None:
        return "ack_without_server_hello"
    return "no_server_hello"


def _iack_reason(facts: Facts) -> str:
    return "partial_clienthello" if facts.partial_clienthello else "instant_ack"


def _ack_before_sh(facts: Facts) -> bool:
    return (facts.ack is not None and facts.server_hello is not None
            and facts.ack.event_index < facts.server_hello.event_index)


#: The rules, first match wins: (condition, class, reason).
RULES: list[Rule] = [
    (lambda f: f.packets == 0, UNKNOWN, _const("no_packets")),
    (lambda f: not f.initial_packets, UNKNOWN, _const("no_initial_packets")),
    (lambda f: f.server_packets == 0 and f.close is not None, FAILED, _failure),
    (lambda f: f.server_packets == 0, FAILED, _const("timeout")),
    (lambda f: not f.frames_logged, UNKNOWN, _const("frames_not_logged")),
    (lambda f: f.version_negotiation and f.server_hello is None and f.ack is None,
     VERSION_NEGOTIATION, _const("version_negotiation")),
    (lambda f: f.retry and f.server_hello is None and f.ack is None, RETRY, _const("retry_without_handshake")),
    (lambda f: not f.server_initials, UNKNOWN, _const("no_server_initial")),
    (lambda f: f.server_hello is None and f.handshake_completed, UNKNOWN, _const("server_hello_not_found")),
    (lambda f: f.server_hello is None, FAILED, _failure),
    (lambda f: f.ack is None and f.handshake_completed, NO_ACK, _const("no_initial_ack")),
    (lambda f: f.ack is None, UNKNOWN, _const("no_initial_ack_handshake_incomplete")),
    (lambda f: f.ack is f.server_hello, WFC, _const("ack_with_server_hello")),
    (lambda f: _ack_before_sh(f) and f.ack.has("ping"), IACK_PING, _iack_reason),
    (_ack_before_sh, IACK, _iack_reason),
    (lambda f: True, SH_BEFORE_ACK, _const("ack_after_server_hello")),
]


#: the reason when :func:`classify` distrusts what a capture shows (``unreadable_from_ms``)
GSO_SUPERFRAMES = "gso_superframes"


def classify(packets: Sequence[Packet], *, close: Close | None = None,
             unreadable_from_ms: float | None = None) -> Handshake:
    """Classify one connection from its packets in trace order (the handshake part suffices).

    ``unreadable_from_ms``: for a capture, the trace time of the first datagram it holds but
    could not read (a UDP GSO super-frame: several datagrams captured before segmentation, which
    tshark can neither split nor decrypt).  If that comes before the ServerHello, the visible
    packets may not be the server's first flight: the class is ``unknown`` (reason
    ``gso_superframes``) and the note ``visible_packets_say_<class>`` keeps what they said.
    """
    packets = list(packets)
    notes: list[str] = []
    attempt_start, after_restart, ended_at = _last_restart(packets, notes)
    attempt = packets[attempt_start:]
    frames_logged = any(p.frames for p in packets)
    crypto_logged = any(f.frame_type == "crypto" for p in packets for f in p.frames)

    server_initials = [p for p in attempt if p.sender == "server" and p.packet_type == "initial"]
    client_initials = [p for p in attempt if p.sender == "client" and p.packet_type == "initial"]
    ack, sh, client_initials = _ack_and_server_hello(attempt, server_initials, client_initials,
                                                     crypto_logged, notes)

    ch_packets = _clienthello_packets(client_initials, before=sh)
    partial = _partial_clienthello(ch_packets, ack)
    # (after a restart that led nowhere, the client's Initials before it are another attempt)
    if _retransmitted_before_answer([p for p in packets[after_restart:]
                                     if p.sender == "client" and p.packet_type == "initial"], server_initials):
        notes.append("client_initial_retransmitted")

    facts = Facts(
        packets=len(packets),
        initial_packets=any(p.packet_type == "initial" for p in packets),
        server_initials=len(server_initials),
        frames_logged=frames_logged,
        crypto_logged=crypto_logged,
        server_packets=sum(1 for p in packets if p.sender == "server"),
        # the handshake ended at a Version Negotiation / Retry: no server Initial after the last
        # one (after one that led somewhere, the attempt after it is classified)
        version_negotiation=ended_at == "version_negotiation",
        retry=ended_at == "retry",
        ack=ack,
        server_hello=sh,
        handshake_completed=_handshake_completed(attempt),
        close=close,
        partial_clienthello=partial,
    )
    for condition, klass, rule_reason in RULES:
        if condition(facts):
            reason = rule_reason(facts)
            break
    if unreadable_from_ms is not None and klass != UNKNOWN and (sh is None or unreadable_from_ms <= sh.time_ms):
        notes.append(f"visible_packets_say_{klass}")
        klass, reason = UNKNOWN, GSO_SUPERFRAMES

    return _handshake(klass, reason, notes, packets, attempt, client_initials, ch_packets, ack, sh)


def _ack_and_server_hello(attempt: list[Packet], server_initials: list[Packet], client_initials: list[Packet],
                          crypto_logged: bool, notes: list[str]):
    """(first server Initial with an ACK, the one with the ServerHello, the client's Initials of
    the round they answer): after a HelloRetryRequest, the round of the second ClientHello;
    without logged CRYPTO frames, the ServerHello is told by its packet's size."""
    second_hello = _second_clienthello(attempt) if crypto_logged else None
    if second_hello is not None:
        notes.append("after_hello_retry_request")
        return _round_after(attempt, second_hello)
    ack = next((p for p in server_initials if p.has("ack")), None)
    if crypto_logged:
        sh = next((p for p in server_initials if _carries_server_hello(p)), None)
    else:
        sh = next((p for p in server_initials
                   if p.size_bytes is not None and p.size_bytes >= SERVER_HELLO_MIN_BYTES), None)
        if sh is not None:
            notes.append("server_hello_by_size")
    return ack, sh, client_initials


def _handshake(klass: str, reason: str, notes: list[str], packets: list[Packet], attempt: list[Packet],
               client_initials: list[Packet], ch_packets: list[Packet], ack: Packet | None,
               sh: Packet | None) -> Handshake:
    """The classification with the figures read off the packets it was made from."""
    t0 = next((p.time_ms for p in packets if p.sender == "client" and p.packet_type == "initial"), None)
    first_ack = ack.first("ack") if ack is not None else None
    first_initial = client_initials[0].packet_number if client_initials else None
    if ack is not None and sh is not None and sh.datagram_id == ack.datagram_id and ack is not sh:
        notes.append("ack_and_server_hello_in_one_datagram")
    complete = next((p for p in attempt if p.sender == "client" and p.packet_type == "handshake"
                     and p.has("crypto")), None)
    first_server = next((p for p in packets if p.sender == "server"), None)
    return Handshake(
        handshake_class=klass,
        reason=reason,
        notes=tuple(notes),
        client_initial_time_ms=t0,
        ack_time_ms=ack.time_ms if ack else None,
        server_hello_time_ms=sh.time_ms if sh else None,
        first_ack_event_index=ack.event_index if ack else None,
        server_hello_event_index=sh.event_index if sh else None,
        ack_sh_gap_ms=(sh.time_ms - ack.time_ms) if ack and sh else None,
        first_ack_delay_ms=first_ack.ack_delay_ms if first_ack else None,
        first_ack_packet_number=ack.packet_number if ack else None,
        first_ack_largest_acknowledged=_largest(first_ack),
        first_ack_acknowledges_first_initial=(_acknowledges(first_ack, first_initial)
                                              if first_ack and first_initial is not None else None),
        first_ack_frames="+".join(f.frame_type for f in ack.frames) if ack else None,
        clienthello_packets=len(ch_packets) if ch_packets else None,
        first_server_packet_ms=_since(first_server, t0),
        server_hello_ms=_since(sh, t0),
        handshake_complete_ms=_since(complete, t0),
    )


def _since(packet: Packet | None, t0: float | None) -> float | None:
    if packet is None or t0 is None:
        return None
    return packet.time_ms - t0


def _last_restart(packets: list[Packet], notes: list[str]) -> tuple[int, int, str | None]:
    """Where the attempt to classify starts: the first packet after the last Retry / Version
    Negotiation, or 0 if there is none or it led nowhere (no server Initial after it); then the
    first packet after the last restart anyway, and the restart the handshake ended at (the
    last one's packet type, if it led nowhere; the rules see it)."""
    start = 0
    last = None
    restarts: list[str] = []
    for i, p in enumerate(packets):
        if p.sender == "server" and p.packet_type in ("retry", "version_negotiation"):
            start, last = i + 1, p.packet_type
            note = "after_retry" if p.packet_type == "retry" else "after_version_negotiation"
            if note not in restarts:
                restarts.append(note)
    if start and not any(p.sender == "server" and p.packet_type == "initial" for p in packets[start:]):
        return 0, start, last  # the restart led nowhere: classify what there is
    notes.extend(restarts)
    return start, start, None


def _carries_server_hello(p: Packet) -> bool:
    # The ServerHello is the first message of the server's Initial crypto stream (RFC 9001
    # §4.1.3), so a CRYPTO frame at offset 0 in a server Initial carries (the start of) it.
    return any(f.frame_type == "crypto" and (f.offset_bytes or 0) == 0 for f in p.frames)


def _second_clienthello(attempt: list[Packet]) -> int | None:
    """The position in ``attempt`` of the first client Initial carrying a second ClientHello:
    Initial crypto bytes the client had not sent before, after a server Initial carried offset 0.

    RFC 8446 §4.1.4: "If a client receives a HelloRetryRequest ... the client MUST respond with
    ... ClientHello".  The client's Initial crypto stream holds nothing but ClientHellos (its
    Finished goes in Handshake packets), and the server can send its first message only once
    the whole ClientHello arrived: new client bytes after it are a second ClientHello."""
    sent: list[tuple[int, int]] = []
    answered = False
    for i, p in enumerate(attempt):
        if p.packet_type != "initial":
            continue
        if p.sender == "server":
            answered = answered or _carries_server_hello(p)
        elif p.sender == "client":
            ranges = _crypto_ranges(p)
            # (beyond every byte sent before: a piece of the first the trace missed is not it)
            if answered and sent and any(low >= max(high for _, high in sent) for low, _ in ranges):
                return i
            sent.extend(ranges)
    return None


def _round_after(attempt: list[Packet], second: int) -> tuple[Packet | None, Packet | None, list[Packet]]:
    """The first ACK of the second ClientHello, the real ServerHello (server Initial crypto bytes
    no server Initial before the second ClientHello carried) and the client Initials from the
    second ClientHello on.  A server ACK that acknowledges no Initial of the second ClientHello
    (a late one of the first) is not its answer; without packet numbers any ACK after it is."""
    before, after = attempt[:second], attempt[second:]
    client_initials = [p for p in after if p.sender == "client" and p.packet_type == "initial"]
    numbers = [p.packet_number for p in client_initials if p.packet_number is not None]
    server_sent = [r for p in before if p.sender == "server" and p.packet_type == "initial"
                   for r in _crypto_ranges(p)]
    ack = sh = None
    for p in after:
        if p.sender != "server" or p.packet_type != "initial":
            continue
        frame = p.first("ack")
        if ack is None and frame is not None and (
                not numbers or not frame.acked_ranges or any(_acknowledges(frame, n) for n in numbers)):
            ack = p
        if sh is None and any(not _covered(server_sent, low, high) for low, high in _crypto_ranges(p)):
            sh = p
    return ack, sh, client_initials


def _crypto_ranges(p: Packet) -> list[tuple[int, int]]:
    """The [start, end) byte ranges of the crypto stream a packet's CRYPTO frames carry (a frame
    whose length is not logged counts as its first byte)."""
    return [((f.offset_bytes or 0), (f.offset_bytes or 0) + max(f.length_bytes or 1, 1))
            for f in p.frames if f.frame_type == "crypto"]


def _covered(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) lies within the union of ``ranges``."""
    for low, high in sorted(ranges):
        if low > start:
            return False
        start = max(start, high)
        if start >= end:
            return True
    return False


def _clienthello_packets(client_initials: list[Packet], before: Packet | None) -> list[Packet]:
    """Client Initials carrying ClientHello bytes no earlier Initial carried (first sends).  A
    retransmission carries the same bytes, perhaps in other CRYPTO frames in another order
    (Chrome shuffles them): it is not another ClientHello packet."""
    sent: list[tuple[int, int]] = []
    out = []
    for p in client_initials:
        if before is not None and p.event_index > before.event_index:
            break
        ranges = _crypto_ranges(p)
        if any(not _covered(sent, low, high) for low, high in ranges):
            out.append(p)
        sent.extend(ranges)
    return out


def _partial_clienthello(ch_packets: list[Packet], ack: Packet | None) -> bool:
    """A ClientHello split over several Initials of which the first ACK leaves one out (a packet
    whose number the trace does not give is no evidence either way)."""
    if ack is None or len(ch_packets) < 2:
        return False
    frame = ack.first("ack")
    if frame is None or not frame.acked_ranges:
        return False
    return any(p.packet_number is not None and not _acknowledges(frame, p.packet_number)
               for p in ch_packets)


def _retransmitted_before_answer(client_initials: list[Packet], server_initials: list[Packet]) -> bool:
    """Whether a client Initial re-sent ClientHello bytes before the server's first Initial."""
    first_answer = server_initials[0].event_index if server_initials else None
    sent: list[tuple[int, int]] = []
    for p in client_initials:
        if first_answer is not None and p.event_index > first_answer:
            break
        ranges = _crypto_ranges(p)
        if any(_covered(sent, low, low + 1) for low, _ in ranges):
            return True
        sent.extend(ranges)
    return False


def _handshake_completed(attempt: list[Packet]) -> bool:
    """The client sent its Finished (a Handshake packet with CRYPTO), or HANDSHAKE_DONE came."""
    return any((p.sender == "client" and p.packet_type == "handshake" and p.has("crypto"))
               or p.has("handshake_done") for p in attempt)


def _largest(frame: Frame | None) -> int | None:
    if frame is None:
        return None
    if frame.largest_acknowledged is not None:
        return frame.largest_acknowledged
    return max((high for _, high in frame.acked_ranges), default=None)


def _acknowledges(frame: Frame, packet_number: int) -> bool:
    return any(low <= packet_number <= high for low, high in frame.acked_ranges)


def _error_number(code: str | None) -> int | None:
    """'298', '0x12a', 'crypto_error_0x12a', 'CRYPTO_ERROR(0x12a)' → 298; names → None."""
    if code is None:
        return None
    text = str(code).strip().lower()
    try:
        return int(text, 0)
    except ValueError:
        pass
    if "0x" in text:
        digits = text[text.index("0x") + 2:]
        hexpart = ""
        for ch in digits:
            if ch in "0123456789abcdef":
                hexpart += ch
            else:
                break
        if hexpart:
            return int(hexpart, 16)
    return None


