"""quicack serve asking its client for an ACK frequency (``--request-ack-frequency N,MAX_DELAY_MS``).

Theory of operation: draft-ietf-quic-ack-frequency-12 lets a data sender ask the receiver for
fewer ACKs.  :class:`AckFrequencyRequest` is a mixin for the server's aioquic connection: when
the client advertised ``min_ack_delay`` (§3; read from its transport parameters,
:func:`quicack.core.ackfrequency.min_ack_delay`), the server's HANDSHAKE_DONE packet also
carries one ACK_FREQUENCY frame (sequence number 0) asking for one ACK per N ack-eliciting
packets (Ack-Eliciting Threshold N − 1: §4, "the maximum number of ack-eliciting packets the
recipient of this frame receives without sending an acknowledgment") and a max_ack_delay of
MAX_DELAY ms, with RFC 9000's reordering threshold 1.  The frame rides in the same packet as
HANDSHAKE_DONE, whose loss aioquic repairs by sending HANDSHAKE_DONE again: the frame goes with
it, under the same sequence number, which a receiver ignores the second time (§4).  A client
that did not advertise the parameter gets no frame (§3: the parameter "is a unilateral
indication of support for receiving ACK_FREQUENCY frames"): it is recorded as not supporting the
extension (``client_min_ack_delay_us`` None; the server's qlog logs the client's ``min_ack_delay``
as a remote ``parameters_set`` when it came, which aioquic would leave out).  The qlog logs the
frame as sent.

§7: "Until the frame is acknowledged, the endpoint MUST use the greater of the current
max_ack_delay and the value that is in flight when computing the PTO period."  The server only
ever sends one request, so it uses the greater of the two from then on.
"""

from __future__ import annotations

from aioquic.quic.connection import QuicConnectionError
from aioquic.quic.packet import QuicErrorCode, QuicFrameType, pull_quic_transport_parameters
from aioquic.buffer import Buffer

from quicack.core import ackfrequency
from quicack.model import QuicackError

#: the frame's largest encoding: its type (2 bytes) and four 8-byte varints
FRAME_CAPACITY = 2 + 4 * 8


def parse(text: str) -> tuple[int, float]:
    """``N,MAX_DELAY_MS`` → (N, max delay ms); QuicackError naming the option."""
    parts = text.split(",")
    try:
        n, delay = int(parts[0]), float(parts[1])
    except (ValueError, IndexError):
        raise QuicackError(f"--request-ack-frequency {text!r}: expected N,MAX_DELAY_MS, e.g. 10,25") from None
    check((n, delay))
    return n, delay


def check(request, where: str | None = None) -> None:
    """(N, max delay ms): N from 1, the delay from 1 ms (aioquic's timer granularity) to below
    2^14 ms (RFC 9000 §18.2)."""
    if request is None:
        return
    if (not isinstance(request, (tuple, list)) or len(request) != 2
            or not isinstance(request[0], int) or not 1 <= request[0] <= 1 << 20
            or not isinstance(request[1], (int, float)) or not 1 <= request[1] < 1 << 14):
        raise QuicackError(f"request_ack_frequency {request!r}: expected [N, MAX_DELAY_MS] with N ≥ 1 "
                           "and 1 ≤ MAX_DELAY_MS < 16384", where)


class AckFrequencyRequest:
    """Mixin (before ``QuicConnection``): sends the ACK_FREQUENCY of ``self._spec.request_ack_frequency``."""

    client_min_ack_delay_us: int | None = None
    ack_frequency_sent = 0

    def _parse_transport_parameters(self, data: bytes, from_session_ticket: bool = False) -> None:
        super()._parse_transport_parameters(data, from_session_ticket)
        if from_session_ticket:
            return  # §3: "Endpoints MUST NOT remember the value of the min_ack_delay"
        params = pull_quic_transport_parameters(Buffer(data=data))
        max_ack_delay = params.max_ack_delay if params.max_ack_delay is not None else 25
        try:
            self.client_min_ack_delay_us = ackfrequency.min_ack_delay(data, max_ack_delay)
        except QuicackError as e:
            raise QuicConnectionError(error_code=QuicErrorCode.TRANSPORT_PARAMETER_ERROR,
                                      frame_type=QuicFrameType.CRYPTO, reason_phrase=e.message) from None
        if self.client_min_ack_delay_us is not None and self._quic_logger is not None:
            # aioquic logs only the parameters it knows: the store learns the client's support here
            self._quic_logger.log_event(category="transport", event="parameters_set", data={
                "owner": "remote", "min_ack_delay": self.client_min_ack_delay_us})

    def _write_handshake_done_frame(self, builder) -> None:
        request = getattr(self._spec, "request_ack_frequency", None)
        if request is not None and self.client_min_ack_delay_us is not None:
            # written first: if the packet has no room, neither frame is, and both go in the next
            n, delay_ms = request
            frame = ackfrequency.AckFrequency(0, n - 1, max(int(delay_ms * 1000), self.client_min_ack_delay_us), 1)
            buf = builder.start_frame(ackfrequency.ACK_FREQUENCY_TYPE, capacity=FRAME_CAPACITY)
            buf.push_bytes(frame.encode_fields())  # start_frame wrote the type
            self.ack_frequency_sent += 1
            self._loss.max_ack_delay = max(self._loss.max_ack_delay, frame.requested_max_ack_delay_us / 1e6)
            if self._quic_logger is not None:
                builder.quic_logger_frames.append({
                    "frame_type": "ack_frequency", "sequence_number": frame.sequence_number,
                    "ack_eliciting_threshold": frame.ack_eliciting_threshold,
                    "request_max_ack_delay": frame.requested_max_ack_delay_us / 1000.0,
                    "reordering_threshold": frame.reordering_threshold})
        super()._write_handshake_done_frame(builder)
