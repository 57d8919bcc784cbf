"""The testbed's resumed attempts: a full connection that keeps the session, then the timed
connection resuming it with the same GET in 0-RTT.

Theory of operation: a scenario with ``resumption = true`` makes each attempt a pair through the
same relay, as ``quicack scan --resumption`` does (:mod:`quicack.scan.resumption`).  The first,
full connection keeps the TLS NewSessionTicket (RFC 8446 §4.6.1) and any NEW_TOKEN (RFC 9000
§8.1.3); the second resumes the session, sends the token in its Initial and, when the ticket
allows early data, its GET in 0-RTT packets of its first flight (RFC 9001 §4.6.1).  The second
connection is the attempt: its row in ``testbed_runs`` holds its TTFB, handshake time, traces and
relay flow; the first connection's trace is ingested too and linked
(``full_client_connection_id``), its TTFB beside (``full_ttfb_ms``), so a row compares the two.

Clients that can do this:

- quicack's (aioquic): :func:`quicack_pair`; the ticket and token are the probe's
  (``session_ticket_handler``, ``token_handler``) and it reports the server's answer to its early
  data itself (EncryptedExtensions' early_data, RFC 8446 §4.2.10).
- ngtcp2's ``gtlsclient``: :func:`stack_pair` runs it twice with the same ``--session-file`` and
  ``--tp-file`` (the first run writes the session and the server's transport parameters, the
  second reads them and sends its request as early data).
- the quic-go peer's client (``-get``): :func:`stack_pair` runs it twice with the same
  ``-session`` file (tests/peers/quic-go keeps the TLS session there, quic-go's transport
  parameters inside, and resumes it with a ``GET`` in 0-RTT where the session allows early data).

A real client's 0-RTT outcome is read from the traces (``address_validation.zero_rtt`` of the
client's trace, else of the server's).

A pair whose first connection received no ticket still makes the second connection (a second
full handshake, 0-RTT ``not_offered``), so every attempt is one connection measured the same way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from quicack.lab import endpoints, stackclients
from quicack.model import QuicackError
from quicack.scan import resumption

#: the real clients that can resume a session and send 0-RTT here (module docstring)
STACK_CLIENTS = ("ngtcp2", "quic-go")


def check_client(client: str) -> None:
    """Refuse a client that cannot make a resumed connection."""
    if client != "quicack" and client not in STACK_CLIENTS:
        raise QuicackError(f"client {client!r} cannot resume a session in the testbed; "
                           f"resumption = true takes: quicack, {', '.join(STACK_CLIENTS)}")


async def quicack_pair(full: tuple[str, int], timed: tuple[str, int], path: str, timeout_s: float,
                       index: int = 0, repetition: int = 0, receive_window: int | None = None,
                       ack_policy: str = "aioquic") -> tuple[endpoints.Attempt, endpoints.Attempt, dict]:
    """quicack's client: the full connection to ``full`` (address, port), the resumed one to
    ``timed`` (the same server, maybe through another relay), and the resumed one's
    ``zero_rtt`` and ``session_resumed``."""
    options = {"receive_window": receive_window, "ack_policy": ack_policy}
    first = await endpoints.attempt(*full, path, timeout_s, index, repetition, **options)
    second = await endpoints.attempt(*timed, path, timeout_s, index, repetition, **options,
                                     session_ticket=first.result.session_ticket, token=first.result.token)
    columns = resumption.resumed_columns(second.result)
    return first, second, {"zero_rtt": columns["zero_rtt"], "session_resumed": columns["session_resumed"]}


def stack_pair(name: str, program: Path, full: tuple[str, int], timed: tuple[str, int], path: str,
               timeout_s: float, folder: Path, ca: Path | None = None
               ) -> tuple[stackclients.StackAttempt, stackclients.StackAttempt]:
    """A real client (:data:`STACK_CLIENTS`): the full run to ``full`` and the resumed run to
    ``timed``, in ``folder``'s ``full/`` and ``resumed/``, sharing the session files in
    ``session/``."""
    check_client(name)
    shutil.rmtree(folder, ignore_errors=True)
    session = folder / "session"
    session.mkdir(parents=True)
    first = stackclients.attempt(name, program, *full, path, timeout_s, folder / "full", ca, session)
    second = stackclients.attempt(name, program, *timed, path, timeout_s, folder / "resumed", ca, session)
    return first, second
