"""quicack.scan.speedups: each stand-in behaves as the aioquic helper it replaces (compared with the
original on the same inputs); a whole handshake through them is covered by test_serve/test_scan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aioquic import tls
from aioquic.buffer import Buffer
from aioquic.quic import connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.logger import QuicLogger

import quicack.scan.connection  # noqa: F401  (importing the scanner's connection applies the speedups)
from quicack.scan import speedups


def test_importing_the_connection_applies_them_once():
    assert tls.push_block is speedups.PushBlock and tls.pull_block is speedups.PullBlock
    assert connection.QuicConnection._handle_padding_frame is speedups.handle_padding_frame
    memo = connection.EPOCHS
    speedups.apply()
    assert connection.EPOCHS is memo


@pytest.mark.parametrize("shortcut", ["IH01", "IH1", "01", "1", "0"])
def test_epochs_are_aioquics_sets_built_once(shortcut):
    assert connection.EPOCHS(shortcut) == speedups.ORIGINAL["EPOCHS"](shortcut)
    assert connection.EPOCHS(shortcut) is connection.EPOCHS(shortcut)


@pytest.mark.parametrize("capacity, body", [(1, b""), (2, b"abc"), (3, bytes(300)), (2, bytes(65000))])
def test_push_block_writes_what_aioquics_writes(capacity, body):
    written = []
    for push_block in (speedups.ORIGINAL["push_block"], speedups.PushBlock):
        buf = Buffer(capacity=80000)
        buf.push_bytes(b"head")
        with push_block(buf, capacity):
            buf.push_bytes(body)
            with push_block(buf, 1):  # nested, as TLS extensions are
                buf.push_bytes(b"in")
        buf.push_bytes(b"tail")
        written.append(buf.data)
    assert written[0] == written[1]
    assert written[1][4:4 + capacity] == (len(body) + 3).to_bytes(capacity, "big")


@pytest.mark.parametrize("data, consume, alert", [
    (b"\x00\x03abcZ", 3, False),   # the block is read exactly
    (b"\x00\x03abcZ", 2, True),    # a byte left in the block: decode_error
    (b"\x00\x00Z", 0, False),      # an empty block
])
def test_pull_block_reads_and_checks_as_aioquics(data, consume, alert):
    outcomes = []
    for pull_block in (speedups.ORIGINAL["pull_block"], speedups.PullBlock):
        buf = Buffer(data=data)
        try:
            with pull_block(buf, 2) as length:
                got = buf.pull_bytes(consume)
            outcomes.append((length, got, buf.tell(), None))
        except tls.AlertDecodeError as e:
            outcomes.append((length, got, buf.tell(), str(e)))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[1][3] is not None) == alert


def test_an_error_inside_a_block_passes_through_unchanged():
    for pull_block in (speedups.ORIGINAL["pull_block"], speedups.PullBlock):
        buf = Buffer(data=b"\x00\x05ab")
        with pytest.raises(ValueError, match="inner"):
            with pull_block(buf, 2):
                raise ValueError("inner")


@pytest.mark.parametrize("after_frame_type", [bytes(1000) + b"\x01\x02", bytes(7), b"", b"\x01", b"\x00\x06\x00"])
def test_padding_is_stepped_over_exactly_as_aioquic_does(after_frame_type):
    # RFC 9000 §19.1: a PADDING frame is one 0x00 byte; runs of them are stepped over to the
    # next non-zero byte, the next frame's type (here after a packet's first PADDING frame)
    ends = []
    conn = connection.QuicConnection(configuration=QuicConfiguration(is_client=True, quic_logger=QuicLogger()))
    conn.connect(("127.0.0.2", 4433), now=0.0)
    for handle in (speedups.ORIGINAL["_handle_padding_frame"], connection.QuicConnection._handle_padding_frame):
        context = SimpleNamespace(quic_logger_frames=[])
        buf = Buffer(data=b"\x00" + after_frame_type)
        buf.seek(1)
        handle(conn, context, 0x00, buf)
        ends.append((buf.tell(), context.quic_logger_frames))
    zeros = len(after_frame_type) - len(after_frame_type.lstrip(b"\x00"))
    assert ends[0] == ends[1] == (1 + zeros, [{"frame_type": "padding"}])
