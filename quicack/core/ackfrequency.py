"""The wire formats of draft-ietf-quic-ack-frequency-12: two frames and a transport parameter.

Theory of operation: the extension lets a data sender tell its peer how often to acknowledge.
A data receiver announces that it understands the frames with the ``min_ack_delay`` transport
parameter; the sender may then send ACK_FREQUENCY (a threshold, a max_ack_delay and a
reordering threshold, numbered so that reordered frames can be ignored) and IMMEDIATE_ACK.
This module only encodes and decodes them — bytes in, values out, nothing sent — and checks the
values the draft calls invalid; what a receiver does with them is
:mod:`quicack.core.ackschedule`.  Every field is a QUIC variable-length integer (RFC 9000 §16),
and so is the frame type (0xaf takes two bytes on the wire: ``40 af``).

Revision: draft-ietf-quic-ack-frequency-12 (October 2025; quicwg/ack-frequency tag
``draft-ietf-quic-ack-frequency-12``).  Earlier revisions differ: up to -03 the transport
parameter was 0xff03de1a, IMMEDIATE_ACK 0xac and the reordering field one byte (drafts -02/-03
"Ignore Order"); quinn 0.11 follows -04, whose codepoints and field layout are those of -12.
"""

from __future__ import annotations

from dataclasses import dataclass

from quicack.model import QuicackError

#: §3: "min_ack_delay (0xff04de1b): A variable-length integer representing the minimum amount of
#: time, in microseconds, that the endpoint sending this value is willing to delay an
#: acknowledgment."
MIN_ACK_DELAY_PARAMETER = 0xFF04DE1B
#: §4 and §5 (IANA, §10.2)
ACK_FREQUENCY_TYPE = 0xAF
IMMEDIATE_ACK_TYPE = 0x1F
#: RFC 9000 §18.2: "Values of 2^14 or greater are invalid" (max_ack_delay, milliseconds)
MAX_ACK_DELAY_LIMIT_US = (1 << 14) * 1000
#: RFC 9000 §16: the largest value a variable-length integer holds
VARINT_MAX = (1 << 62) - 1


def encode_varint(value: int) -> bytes:
    """RFC 9000 §16: the shortest of the 1, 2, 4 or 8 byte encodings of ``value``."""
    if value < 0 or value > VARINT_MAX:
        raise QuicackError(f"{value}: not a QUIC variable-length integer (0 to 2^62-1)")
    for length, prefix in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * length - 2):
            out = bytearray(value.to_bytes(length, "big"))
            out[0] |= prefix
            return bytes(out)
    raise AssertionError("unreachable")


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """RFC 9000 §16: "The QUIC variable-length integer encoding reserves the two most
    significant bits of the first byte to encode the base-2 logarithm of the integer encoding
    length in bytes."  (value, position after it); QuicackError when the data ends first."""
    if pos >= len(data):
        raise QuicackError("a variable-length integer is cut short")
    length = 1 << (data[pos] >> 6)
    if pos + length > len(data):
        raise QuicackError("a variable-length integer is cut short")
    value = int.from_bytes(data[pos:pos + length], "big") & ((1 << (8 * length - 2)) - 1)
    return value, pos + length


@dataclass(frozen=True)
class AckFrequency:
    """One ACK_FREQUENCY frame (§4)::

        ACK_FREQUENCY Frame {
          Type (i) = 0xaf,
          Sequence Number (i),
          Ack-Eliciting Threshold (i),
          Requested Max Ack Delay (i),
          Reordering Threshold (i),
        }
    """

    sequence_number: int
    #: "the maximum number of ack-eliciting packets the recipient of this frame receives without
    #: sending an acknowledgment" (1: an ACK every other packet, RFC 9000's default)
    ack_eliciting_threshold: int
    #: "in microseconds, unlike the max_ack_delay transport parameter, which is in milliseconds"
    requested_max_ack_delay_us: int
    #: "the maximum packet reordering before eliciting an immediate ACK" (1: RFC 9000's default;
    #: 0: out-of-order packets do not elicit an immediate ACK)
    reordering_threshold: int = 1

    def encode(self) -> bytes:
        """The frame, its type included."""
        return encode_varint(ACK_FREQUENCY_TYPE) + self.encode_fields()

    def encode_fields(self) -> bytes:
        """The frame's fields after its type."""
        return b"".join(encode_varint(v) for v in (
            self.sequence_number, self.ack_eliciting_threshold, self.requested_max_ack_delay_us,
            self.reordering_threshold))

    def check(self, min_ack_delay_us: int | None) -> None:
        """§4: "values of 2^14 milliseconds or greater are invalid for max_ack_delay ... A value
        smaller than the min_ack_delay advertised by the peer is also invalid.  Receipt of an
        invalid value MUST be treated as a connection error of type PROTOCOL_VIOLATION."
        (QuicackError when invalid; ``min_ack_delay_us``: what the receiver advertised.)"""
        delay = self.requested_max_ack_delay_us
        if delay >= MAX_ACK_DELAY_LIMIT_US:
            raise QuicackError(f"Requested Max Ack Delay {delay} µs: 2^14 ms or more")
        if min_ack_delay_us is not None and delay < min_ack_delay_us:
            raise QuicackError(f"Requested Max Ack Delay {delay} µs: below min_ack_delay {min_ack_delay_us} µs")


def decode_ack_frequency(data: bytes, pos: int = 0) -> tuple[AckFrequency, int]:
    """The frame's fields after its type, read from ``pos`` (the position after the type);
    (frame, position after it).  QuicackError when the data ends first."""
    fields = []
    for _ in range(4):
        value, pos = decode_varint(data, pos)
        fields.append(value)
    return AckFrequency(*fields), pos


def encode_immediate_ack() -> bytes:
    """§5: "IMMEDIATE_ACK Frame { Type (i) = 0x1f, }" — a type and nothing else."""
    return encode_varint(IMMEDIATE_ACK_TYPE)


def encode_min_ack_delay(min_ack_delay_us: int) -> bytes:
    """The ``min_ack_delay`` transport parameter as RFC 9000 §18 encodes one: "Transport
    Parameter { Transport Parameter ID (i), Transport Parameter Length (i), Transport Parameter
    Value (..) }" — appended to the other parameters of a TLS quic_transport_parameters
    extension."""
    value = encode_varint(min_ack_delay_us)
    return encode_varint(MIN_ACK_DELAY_PARAMETER) + encode_varint(len(value)) + value


def transport_parameters(data: bytes) -> dict[int, bytes]:
    """Every parameter of an encoded list (RFC 9000 §18): id → raw value; QuicackError when it
    is cut short."""
    out: dict[int, bytes] = {}
    pos = 0
    while pos < len(data):
        ident, pos = decode_varint(data, pos)
        length, pos = decode_varint(data, pos)
        if pos + length > len(data):
            raise QuicackError(f"transport parameter {ident:#x} is cut short")
        out[ident] = data[pos:pos + length]
        pos += length
    return out


def min_ack_delay(data: bytes, max_ack_delay_ms: int = 25) -> int | None:
    """The peer's ``min_ack_delay`` (µs) in its encoded transport parameters, None when absent.

    §3: "An endpoint's min_ack_delay MUST NOT be greater than its max_ack_delay.  Endpoints that
    support this extension MUST treat receipt of a min_ack_delay that is greater than the
    max_ack_delay as a connection error of type TRANSPORT_PARAMETER_ERROR" (QuicackError);
    ``max_ack_delay_ms``: the peer's, RFC 9000's default 25 when it sent none."""
    raw = transport_parameters(data).get(MIN_ACK_DELAY_PARAMETER)
    if raw is None:
        return None
    value, end = decode_varint(raw)
    if end != len(raw):
        raise QuicackError("min_ack_delay: its length is not that of one variable-length integer")
    if value > max_ack_delay_ms * 1000:
        raise QuicackError(f"min_ack_delay {value} µs is greater than max_ack_delay {max_ack_delay_ms} ms")
    return value
