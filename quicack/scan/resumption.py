"""A resumption probe (``quicack scan --resumption``): a full handshake, then a resumed one offering 0-RTT.

Theory of operation: the first connection is an ordinary probe (:func:`quicack.scan.probe.run`)
that keeps what the server hands out for later — the TLS NewSessionTicket (RFC 8446 §4.6.1: its
lifetime and, in the early_data extension, max_early_data_size) and any QUIC NEW_TOKEN (RFC 9000
§8.1.3).  As soon as it ends, the second connection resumes the session with that ticket and
sends the token in its Initial; when the ticket allows early data it sends the same GET in 0-RTT
packets, in its first flight (RFC 9001 §4.6.1), before the handshake completes.  Its TLS handshake
says whether the session was resumed and whether the server accepted the early data
(EncryptedExtensions' early_data extension, RFC 8446 §4.2.10): ``zero_rtt`` is ``not_offered``
(no ticket, or one without early data), ``accepted`` or ``rejected``; a rejected GET is sent again
in 1-RTT packets.  The second connection's connection IDs carry the repetition + 128
(:mod:`quicack.core.cidtag`), so a capture tells the two apart.

The pair is one ``probes`` row: the columns of an ordinary probe (and its qlog) describe the first
connection; ``resumed_*`` and the ticket, token and 0-RTT columns the second.  The second's own
trace goes to a batch file of its own (``qlog/resumed/``, :mod:`quicack.scan.writer`), named by
``resumed_qlog_path`` and ``resumed_qlog_trace_index``; once ingested, ``resumed_connection_id``
points at it.  A probe never raises: a failed first connection
leaves the second unattempted (``resumed_outcome`` NULL).
"""

from __future__ import annotations

import dataclasses
import os

import orjson

from quicack.core import cidtag
from quicack.scan import probe

#: The repetition byte of the resumed connection's IDs: the first connection's + this.
RESUMED_TAG = 128
#: the row key carrying the resumed connection's serialized trace from the probe to the writer
RESUMED_TRACE = "resumed_trace"


def resumed_cids(run_tag: int, target_index: int, repetition: int) -> tuple[bytes, bytes]:
    """The second connection's (source CID, original destination CID): tagged as repetition +
    128 when that fits the tag's byte, else random."""
    if repetition + RESUMED_TAG < 256:
        return cidtag.pair(run_tag, target_index, repetition + RESUMED_TAG)
    return os.urandom(cidtag.LENGTH), os.urandom(cidtag.LENGTH)


async def run_pair(spec: probe.ProbeSpec, cids: tuple[bytes, bytes]) -> tuple[probe.ProbeResult, dict]:
    """Both connections: the first's result and the resumption columns of the row."""
    first = await probe.run(spec)
    columns = ticket_columns(first)
    if first.session_ticket is None and not first.token:
        return first, columns
    second_spec = dataclasses.replace(spec, cid=cids[0], odcid=cids[1], keep_qlog=spec.keep_qlog,
                                      session_ticket=first.session_ticket, token=first.token)
    second = await probe.run(second_spec)
    first.keylog += second.keylog  # the key log covers both (a capture of the pair decrypts)
    columns.update(resumed_columns(second), token_used=bool(first.token))
    if second.trace is not None:  # (the scan's writer stores it in a file of its own)
        columns[RESUMED_TRACE] = orjson.dumps(second.trace)
    return first, columns


def ticket_columns(first: probe.ProbeResult) -> dict:
    """What the first connection received for later."""
    ticket = first.session_ticket
    return {"ticket_received": ticket is not None,
            "ticket_lifetime_s": getattr(ticket, "not_valid_after", None) and _lifetime_s(ticket),
            "ticket_max_early_data": getattr(ticket, "max_early_data_size", None),
            "token_received": bool(first.token), "token_used": False, "zero_rtt": "not_offered"}


def _lifetime_s(ticket) -> int | None:
    """RFC 8446 §4.6.1 ticket_lifetime, seconds (aioquic keeps it as not_valid_after − not_valid_before)."""
    try:
        return int((ticket.not_valid_after - ticket.not_valid_before).total_seconds())
    except (AttributeError, TypeError):
        return None


def resumed_columns(second: probe.ProbeResult) -> dict:
    """The second connection's row columns."""
    if not second.early_data_offered:
        zero_rtt = "not_offered"
    elif second.early_data_accepted is None:
        zero_rtt = None  # the handshake never completed: the server's answer is unknown
    else:
        zero_rtt = "accepted" if second.early_data_accepted else "rejected"
    return {"zero_rtt": zero_rtt,
            "session_resumed": second.session_resumed, "resumed_outcome": second.outcome,
            "resumed_cid_tag": second.cid_tag, "resumed_handshake_ms": second.handshake_ms,
            "resumed_ttfb_ms": second.ttfb_ms, "resumed_http_status": second.http_status,
            "resumed_response_bytes": second.response_bytes}
