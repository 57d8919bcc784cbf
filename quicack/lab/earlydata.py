"""0-RTT packets that arrive before their keys, kept until the keys exist (``quicack serve``).

Theory of operation: a client resuming a session sends its request in 0-RTT packets coalesced
behind its Initial (RFC 9001 §4.6.1).  aioquic derives the 0-RTT keys while it processes the
ClientHello — but quicack's servers hold the ClientHello back (the certificate delay, the instant
ACK: :mod:`quicack.lab.serve`), so the 0-RTT packets behind it find no keys and aioquic drops them
(``packet_dropped`` ``key_unavailable``); the client's request then waits for its loss recovery.
RFC 9001 §4.7 allows the other way: "Endpoints could choose to buffer packets that they cannot
decrypt yet"; this mixin does.  A 0-RTT packet of a datagram after which the 0-RTT keys are
still missing is kept (up to :data:`MAX_HELD_BYTES`), and handed to the connection again as soon
as the released ClientHello has made the keys.  Its bytes were
already counted for the anti-amplification budget on arrival (RFC 9000 §8.1): they are not
counted twice.  The packets are processed, and acknowledged, later than they arrived: aioquic
measures its ACK delay from processing, so the client's RTT sample is inflated by the wait
(seed 002; ``address_validation``/``rtt_samples`` show it).  aioquic logs each datagram it is
handed as ``datagrams_received``; a packet handed again is no datagram, so its event is renamed
(:data:`RELEASED_EVENT`): the trace's datagrams, and the client's bytes the budget counts, stay
those that arrived.
"""

from __future__ import annotations

from aioquic.buffer import Buffer
from aioquic.quic.packet import QuicPacketType, pull_quic_header
from aioquic.tls import Epoch

#: what the qlog calls a kept packet handed to the connection again (not a datagram that arrived)
RELEASED_EVENT = "quicack:early_data_released"
#: 0-RTT bytes kept per connection at most (beyond them, dropped as aioquic would)
MAX_HELD_BYTES = 64 * 1024


def zero_rtt_packets(data: bytes, cid_length: int) -> list[bytes]:
    """The 0-RTT packets of a datagram (long headers carry their length: RFC 9000 §17.2)."""
    packets, buf = [], Buffer(data=data)
    while not buf.eof():
        start = buf.tell()
        try:
            header = pull_quic_header(buf, host_cid_length=cid_length)
        except ValueError:
            break  # padding or garbage after the packets
        end = start + header.packet_length
        if header.packet_type == QuicPacketType.ZERO_RTT:
            packets.append(data[start:end])
        if header.packet_type == QuicPacketType.ONE_RTT or end <= start:
            break  # a short header runs to the datagram's end
        buf.seek(end)
    return packets


class EarlyDataBuffer:
    """Mixin for a server ``QuicConnection``: keeps 0-RTT packets that came before their keys."""

    def _zero_rtt_ready(self) -> bool:
        crypto = getattr(self, "_cryptos", {}).get(Epoch.ZERO_RTT)
        return crypto is not None and crypto.recv.is_valid()

    def receive_datagram(self, data: bytes, addr, now: float) -> None:
        self._early_receiving = True
        try:
            super().receive_datagram(data, addr, now)
        finally:
            self._early_receiving = False
        if self._is_client or self._zero_rtt_ready():
            return
        held = self.__dict__.setdefault("_early_held", [])
        for packet in zero_rtt_packets(data, self._configuration.connection_id_length):
            if sum(len(p) for _, p in held) + len(packet) <= MAX_HELD_BYTES:
                held.append((addr, packet))

    def _handle_crypto_frame(self, context, frame_type: int, buf) -> None:
        """The held ClientHello reaches TLS here (the server's ``release``): once it made the
        0-RTT keys, the kept packets go in, with the time of that moment."""
        super()._handle_crypto_frame(context, frame_type, buf)
        held = self.__dict__.get("_early_held")
        if held and not self.__dict__.get("_early_receiving") and self._zero_rtt_ready():
            self._early_held = []
            for addr, packet in held:
                path = self._find_network_path(addr)
                validated = path.is_validated
                logged = len(self._quic_logger._events) if self._quic_logger is not None else 0
                self.receive_datagram(packet, addr, context.time)
                if not validated:
                    path.bytes_received -= len(packet)  # counted when its datagram arrived
                self._not_a_datagram(logged)

    def _not_a_datagram(self, since: int) -> None:
        """The re-fed packet is no datagram on the wire: its ``datagrams_received`` event (logged
        by ``receive_datagram``) is renamed, so a trace's datagrams stay those that arrived."""
        events = self._quic_logger._events if self._quic_logger is not None else []
        for event in list(events)[since:]:
            if event.get("name") == "transport:datagrams_received":
                event["name"] = RELEASED_EVENT
                break
