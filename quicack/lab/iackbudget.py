"""A server mode whose instant ACK does not count against the anti-amplification budget.

Theory of operation: RFC 9000 §8.1 counts every byte a server sends before it has validated the
client's address — "servers MUST NOT send more than three times as many bytes as the number of
bytes they have received" — so an instant ACK (an ACK-only Initial sent before the ServerHello,
``quicack serve --mode iack``) spends part of the 3× budget the certificate chain needs.  Seed 002
and seed 000 ask what that costs; the mode ``iack-uncounted`` answers by breaking the rule on
purpose: the datagram carrying the instant ACK is taken off aioquic's count of bytes sent on the
path (``QuicNetworkPath.bytes_sent``) right after it is built, so the rest of the first flight
may use the whole 3×.  A trace of it shows ``address_validation.limit_exceeded`` with
``max_excess_bytes`` at most the ACK's size.  For experiments only.
"""

from __future__ import annotations

#: the mode (quicack.lab.modes) whose instant ACK is not counted
UNCOUNTED_MODE = "iack-uncounted"


class UncountedInstantAck:
    """Mixin for quicack's ``ServerConnection``: un-count the instant ACK's datagram."""

    def datagrams_to_send(self, now: float):
        datagrams = super().datagrams_to_send(now)
        spec = getattr(self, "_spec", None)
        if (spec is not None and spec.mode == UNCOUNTED_MODE and datagrams and self.instant_ack_sent
                and not self.__dict__.get("_iack_uncounted") and self._holding):
            self._iack_uncounted = True  # the first datagrams while the ClientHello is held: the ACK
            path = self._network_paths[0]
            if not path.is_validated:
                path.bytes_sent -= sum(len(data) for data, _ in datagrams)
        return datagrams
