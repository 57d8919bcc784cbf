"""Session tickets for ``quicack serve``: resumption and 0-RTT on by default.

Theory of operation: aioquic's server issues a TLS NewSessionTicket after the handshake only when
it has somewhere to keep it (``session_ticket_handler``), and resumes a session when its
``session_ticket_fetcher`` finds the ticket a ClientHello offers.  Its tickets always allow early
data (max_early_data_size 0xffffffff, RFC 9001 §4.6.1) and it accepts the 0-RTT data of every
resumed session, so "0-RTT off" here means no tickets at all (no resumption either): a client
then has nothing to send early data with.  Tickets live in memory, per listener, and each is
used once (RFC 8446 §8.1 recommends single-use tickets against replayed 0-RTT data).
"""

from __future__ import annotations

from aioquic.tls import SessionTicket


class TicketStore:
    """A listener's issued tickets, by ticket bytes; each one resumes one connection."""

    def __init__(self) -> None:
        self._tickets: dict[bytes, SessionTicket] = {}

    def add(self, ticket: SessionTicket) -> None:
        self._tickets[ticket.ticket] = ticket

    def pop(self, label: bytes) -> SessionTicket | None:
        return self._tickets.pop(label, None)

    def __len__(self) -> int:
        return len(self._tickets)


def handlers(zero_rtt: bool) -> dict:
    """The keyword arguments of aioquic's ``QuicServer`` for a listener: a fresh ticket store when
    resumption and 0-RTT are on, nothing when off."""
    if not zero_rtt:
        return {}
    store = TicketStore()
    return {"session_ticket_fetcher": store.pop, "session_ticket_handler": store.add}
