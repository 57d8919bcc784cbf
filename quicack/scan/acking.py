"""quicack's aioquic client acknowledging application data by a chosen schedule.

Theory of operation: aioquic 1.7 decides when to acknowledge in one place — after a packet is
processed, ``if is_ack_eliciting and space.ack_at is None: space.ack_at = now + self._ack_delay``
(1 ms) — and sends whatever ACK is due whenever it builds a packet (``ack_at <= now``) or its
timer fires (``get_timer`` includes ``ack_at``).  :class:`ScheduledAcks` is a mixin for the
client connection that leaves all of that in place and only rewrites the 1-RTT space's
``ack_at`` after each datagram from the :class:`quicack.core.ackschedule.AckSchedule` it was given
(``ack_schedule``; None: aioquic's own behaviour, untouched):

- the packet number a 1-RTT packet had is noted by the space's duplicate window (its ``add``,
  called once per new packet: :class:`_NotingWindow`), whether it was ack-eliciting by
  ``_payload_received`` (a datagram holds at most one 1-RTT packet: a short header runs to its end);
- each ACK written for the space is told to the schedule (``_write_ack_frame``);
- the schedule gets the connection's min_rtt (``custura`` needs it);
- Initial and Handshake packets keep aioquic's rule (RFC 9000 §13.2.1: "MUST acknowledge all
  ack-eliciting Initial and Handshake packets immediately").

With the ``ack-frequency`` schedule the client advertises ``min_ack_delay`` (appended to its
transport parameters) and understands ACK_FREQUENCY and IMMEDIATE_ACK in 1-RTT packets
(draft-ietf-quic-ack-frequency-12 §3: "ACK_FREQUENCY and IMMEDIATE_ACK frames cannot be sent in
0-RTT packets"); any other schedule advertises nothing, so a frame of the extension stays an
unknown frame type, which closes the connection (RFC 9000 §12.4), as aioquic does.  Both frames
are logged in the qlog (``ack_frequency``, ``immediate_ack``), so a trace shows what the sender
asked for.
"""

from __future__ import annotations

from aioquic.buffer import Buffer
from aioquic.quic.connection import QuicConnectionError, QuicReceiveContext
from aioquic.quic.packet import QuicErrorCode
from aioquic.quic.recovery import QuicPacketNumberWindow
from aioquic.tls import Epoch

from quicack.core import ackfrequency
from quicack.core.ackschedule import AckSchedule, FrequencySchedule
from quicack.model import QuicackError
from quicack.scan.connection import ScanConnection


class _NotingWindow(QuicPacketNumberWindow):
    """aioquic's duplicate window of a packet number space, noting the last packet number added."""

    last: int | None = None

    def add(self, packet_number: int) -> None:
        self.last = packet_number
        super().add(packet_number)


class ScheduledAcks:
    """Mixin (before ``QuicConnection`` in the bases): the 1-RTT ACKs follow ``ack_schedule``."""

    ack_schedule: AckSchedule | None = None
    _one_rtt_eliciting = False

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        if self.ack_schedule is None:
            return
        self._spaces[Epoch.ONE_RTT].received_packets = _NotingWindow()
        if self.ack_schedule.advertises_min_ack_delay:
            handlers = self._QuicConnection__frame_handlers
            handlers[ackfrequency.ACK_FREQUENCY_TYPE] = (self._handle_ack_frequency_frame, [Epoch.ONE_RTT])
            handlers[ackfrequency.IMMEDIATE_ACK_TYPE] = (self._handle_immediate_ack_frame, [Epoch.ONE_RTT])

    def _serialize_transport_parameters(self) -> bytes:
        data = super()._serialize_transport_parameters()
        schedule = self.ack_schedule
        if isinstance(schedule, FrequencySchedule):
            # §3: "Endpoints advertise their support for receiving ACK_FREQUENCY and
            # IMMEDIATE_ACK frames ... by sending the following transport parameter"
            data += ackfrequency.encode_min_ack_delay(schedule.min_ack_delay_us)
            if self._quic_logger is not None:
                self._quic_logger.log_event(category="transport", event="parameters_set", data={
                    "owner": "local", "min_ack_delay": schedule.min_ack_delay_us})
        return data

    # --- receive path -------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr, now: float) -> None:
        schedule = self.ack_schedule
        if schedule is None or not self._spaces:
            return super().receive_datagram(data, addr, now)
        window = self._spaces[Epoch.ONE_RTT].received_packets
        window.last = None
        super().receive_datagram(data, addr, now)
        space = self._spaces[Epoch.ONE_RTT]
        if window.last is None or space.discarded:
            return
        rtt_min = self._loss._rtt_min
        schedule.min_rtt_s = rtt_min if rtt_min is not None and rtt_min != float("inf") else None
        space.ack_at = schedule.on_packet(now, window.last, self._one_rtt_eliciting)

    def _payload_received(self, context: QuicReceiveContext, plain: bytes, crypto_frame_required: bool = False):
        result = super()._payload_received(context, plain, crypto_frame_required=crypto_frame_required)
        if context.epoch == Epoch.ONE_RTT:
            self._one_rtt_eliciting = result[0]
        return result

    def _handle_ack_frequency_frame(self, context: QuicReceiveContext, frame_type: int, buf: Buffer) -> None:
        fields = [buf.pull_uint_var() for _ in range(4)]
        frame = ackfrequency.AckFrequency(*fields)
        if context.quic_logger_frames is not None and self._quic_logger is not None:
            context.quic_logger_frames.append({
                "frame_type": "ack_frequency", "sequence_number": frame.sequence_number,
                "ack_eliciting_threshold": frame.ack_eliciting_threshold,
                "request_max_ack_delay": frame.requested_max_ack_delay_us / 1000.0,
                "reordering_threshold": frame.reordering_threshold})
        try:
            self.ack_schedule.on_ack_frequency(frame, context.time)
        except QuicackError as e:
            # §4: "Receipt of an invalid value MUST be treated as a connection error of type
            # PROTOCOL_VIOLATION."
            raise QuicConnectionError(error_code=QuicErrorCode.PROTOCOL_VIOLATION, frame_type=frame_type,
                                      reason_phrase=e.message) from None

    def _handle_immediate_ack_frame(self, context: QuicReceiveContext, frame_type: int, buf: Buffer) -> None:
        if context.quic_logger_frames is not None and self._quic_logger is not None:
            context.quic_logger_frames.append({"frame_type": "immediate_ack"})
        self.ack_schedule.on_immediate_ack(context.time)

    def ack_due(self, now: float) -> bool:
        """Whether a 1-RTT ACK is due by ``now`` (the caller then transmits before reading on:
        draft-ietf-quic-ack-frequency-12 §6.4 allows an ACK per batch of datagrams read, but the
        schedule, not the size of the socket's backlog, is what is measured)."""
        space = self._spaces.get(Epoch.ONE_RTT) if self._spaces else None
        return space is not None and space.ack_at is not None and space.ack_at <= now

    # --- send path ----------------------------------------------------------------------------

    def _write_ack_frame(self, builder, space, now: float) -> None:
        super()._write_ack_frame(builder=builder, space=space, now=now)
        if self.ack_schedule is not None and space is self._spaces.get(Epoch.ONE_RTT):
            self.ack_schedule.on_ack_sent(now)



class ScheduledConnection(ScheduledAcks, ScanConnection):
    """The scanner's connection, its 1-RTT ACKs by a schedule."""


def connection_class(policy: str) -> type[ScanConnection]:
    """The client connection class for ``policy`` (aioquic's own: the scanner's plain one)."""
    return ScanConnection if policy == "aioquic" else ScheduledConnection
