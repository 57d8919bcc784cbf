"""draft-ietf-quic-ack-frequency-12's wire formats (quicack/core/ackfrequency.py): varints against
RFC 9000's examples, the frames and the transport parameter round-tripped with the draft's field
values and read back by aioquic's own (independent) varint decoder."""

from __future__ import annotations

import pytest
from aioquic.buffer import Buffer

from quicack.core import ackfrequency as af
from quicack.model import QuicackError


@pytest.mark.parametrize("encoded, value", [
    # RFC 9000 Appendix A.1's sample variable-length integer decodings
    ("c2197c5eff14e88c", 151288809941952652),
    ("9d7f3e7d", 494878333),
    ("7bbd", 15293),
    ("25", 37),
])
def test_varints_of_rfc9000_appendix_a1(encoded, value):
    assert af.encode_varint(value).hex() == encoded
    assert af.decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_a_longer_encoding_decodes_to_the_same_value():
    assert af.decode_varint(bytes.fromhex("4025")) == (37, 2)  # RFC 9000 A.1: "as would 0x4025"


def test_varint_bounds():
    with pytest.raises(QuicackError):
        af.encode_varint(1 << 62)
    with pytest.raises(QuicackError):
        af.encode_varint(-1)
    with pytest.raises(QuicackError):
        af.decode_varint(bytes.fromhex("80ff"))  # four bytes announced, two there


def test_ack_frequency_frame_bytes():
    # quinn's defaults and custura's ratio: threshold 9 (an ACK per 10), 25 ms, RFC 9000's reordering 1
    frame = af.AckFrequency(sequence_number=0, ack_eliciting_threshold=9, requested_max_ack_delay_us=25_000,
                            reordering_threshold=1)
    assert frame.encode().hex() == "40af" "00" "09" "800061a8" "01"


@pytest.mark.parametrize("fields", [
    (0, 1, 25_000, 1),          # RFC 9000's behaviour, said explicitly
    (1, 9, 150_000, 3),         # 1:10, a quarter of a 600 ms RTT, RFC 9002's packet threshold
    (7, 0, 1_000, 0),           # ACK every packet, 1 ms, ignore reordering
    (2 ** 30, 2 ** 20, 16_383_999, 255),  # large values: four- and eight-byte varints
])
def test_ack_frequency_round_trip(fields):
    frame = af.AckFrequency(*fields)
    data = frame.encode()
    buf = Buffer(data=data)
    assert buf.pull_uint_var() == af.ACK_FREQUENCY_TYPE
    assert [buf.pull_uint_var() for _ in range(4)] == list(fields)  # aioquic's decoder agrees
    assert buf.eof()
    decoded, end = af.decode_ack_frequency(data, 2)
    assert (decoded, end) == (frame, len(data))


def test_ack_frequency_cut_short():
    data = af.AckFrequency(3, 9, 25_000, 1).encode()
    with pytest.raises(QuicackError):
        af.decode_ack_frequency(data[:-1], 2)


@pytest.mark.parametrize("delay_us, min_us, valid", [
    (1_000, 1_000, True),                # equal to the advertised min_ack_delay
    (999, 1_000, False),                 # "smaller than the min_ack_delay ... invalid"
    ((1 << 14) * 1000 - 1, None, True),
    ((1 << 14) * 1000, None, False),     # "2^14 milliseconds or greater are invalid"
])
def test_requested_max_ack_delay_validity(delay_us, min_us, valid):
    frame = af.AckFrequency(0, 1, delay_us, 1)
    if valid:
        frame.check(min_us)
    else:
        with pytest.raises(QuicackError):
            frame.check(min_us)


def test_immediate_ack_is_its_type_alone():
    assert af.encode_immediate_ack() == b"\x1f"


def test_min_ack_delay_parameter():
    encoded = af.encode_min_ack_delay(1000)
    assert encoded.hex() == "c0000000ff04de1b" "02" "43e8"  # id (8-byte varint), length 2, 1000
    # among other parameters: max_ack_delay (0x0b) = 25, then ours
    params = bytes.fromhex("0b0119") + encoded
    assert af.transport_parameters(params) == {0x0B: b"\x19", af.MIN_ACK_DELAY_PARAMETER: bytes.fromhex("43e8")}
    assert af.min_ack_delay(params) == 1000
    assert af.min_ack_delay(bytes.fromhex("0b0119")) is None


def test_min_ack_delay_above_max_ack_delay_is_refused():
    with pytest.raises(QuicackError, match="greater than max_ack_delay"):
        af.min_ack_delay(af.encode_min_ack_delay(25_001), max_ack_delay_ms=25)
    assert af.min_ack_delay(af.encode_min_ack_delay(25_000), max_ack_delay_ms=25) == 25_000


def test_transport_parameters_cut_short():
    with pytest.raises(QuicackError):
        af.transport_parameters(af.encode_min_ack_delay(1000)[:-1])
