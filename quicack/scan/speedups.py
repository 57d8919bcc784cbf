"""Faster stand-ins for a few of aioquic's pure-Python helpers, with the same behaviour.

Theory of operation: the scanner's CPU per probe is mostly aioquic's, and a handful of its small
helpers run dozens of times a probe.  :func:`apply` (called when :mod:`quicack.scan.connection`
loads) swaps each for an equivalent that does the same work with less interpreter overhead; each
swap is skipped if aioquic no longer has the helper, so a newer aioquic runs unchanged, only
slower.

- ``aioquic.quic.connection.EPOCHS``: every connection's frame-handler table calls it 33 times,
  each building a new frozenset; the sets are immutable, so one per shortcut serves all (~30 µs
  a probe).
- ``aioquic.tls.push_block`` / ``pull_block``: the length-prefixed blocks of TLS messages,
  entered ~75 times a probe (ClientHello, ServerHello, certificate …) as generator-based context
  managers; as classes they cost ~1 µs instead of ~3 µs each (~0.15 ms a probe).
- ``QuicConnection._handle_padding_frame``: steps over the padding a byte at a time in Python
  (~1000 bytes in a server's first Initial datagram); one ``lstrip`` finds the same end.
"""

from __future__ import annotations

import functools

from aioquic import tls
from aioquic.buffer import Buffer
from aioquic.quic import connection

#: aioquic's own helpers, as found before :func:`apply` (tests compare against them)
ORIGINAL = {"EPOCHS": getattr(connection, "EPOCHS", None),
            "push_block": getattr(tls, "push_block", None), "pull_block": getattr(tls, "pull_block", None),
            "_handle_padding_frame": getattr(connection.QuicConnection, "_handle_padding_frame", None)}


class PushBlock:
    """``with push_block(buf, capacity): ...`` — what the body pushes, prefixed by its length in
    ``capacity`` bytes (big-endian), as aioquic's ``tls.push_block``."""

    __slots__ = ("buf", "capacity", "start")

    def __init__(self, buf: Buffer, capacity: int):
        self.buf, self.capacity = buf, capacity
        self.start = buf.tell() + capacity
        buf.seek(self.start)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            buf = self.buf
            end = buf.tell()
            buf.seek(self.start - self.capacity)
            buf.push_bytes((end - self.start).to_bytes(self.capacity, byteorder="big"))
            buf.seek(end)
        return False


class PullBlock:
    """``with pull_block(buf, capacity) as length: ...`` — a block of ``length`` bytes the body
    must consume exactly (else TLS's decode_error alert), as aioquic's ``tls.pull_block``."""

    __slots__ = ("buf", "length", "end")

    def __init__(self, buf: Buffer, capacity: int):
        self.buf = buf
        self.length = int.from_bytes(buf.pull_bytes(capacity), byteorder="big")
        self.end = buf.tell() + self.length

    def __enter__(self) -> int:
        return self.length

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None and self.buf.tell() != self.end:
            # There was trailing garbage or our parsing was bad.
            raise tls.AlertDecodeError("extra bytes at the end of a block")
        return False


def handle_padding_frame(self, context, frame_type: int, buf: Buffer) -> None:
    """RFC 9000 §19.1: PADDING frames are single 0x00 bytes; the run ends at the next non-zero
    byte (the next frame's type), as aioquic's ``_handle_padding_frame`` has it."""
    rest = buf.data_slice(buf.tell(), buf.capacity)
    buf.seek(buf.capacity - len(rest.lstrip(b"\x00")))
    if self._quic_logger is not None:
        context.quic_logger_frames.append(self._quic_logger.encode_padding_frame())


def apply() -> None:
    """Swap in the stand-ins (idempotent)."""
    if ORIGINAL["EPOCHS"] is not None and connection.EPOCHS is ORIGINAL["EPOCHS"]:
        connection.EPOCHS = functools.lru_cache(maxsize=None)(ORIGINAL["EPOCHS"])
    if ORIGINAL["push_block"] is not None and hasattr(tls, "AlertDecodeError"):
        tls.push_block = PushBlock
    if ORIGINAL["pull_block"] is not None and hasattr(tls, "AlertDecodeError"):
        tls.pull_block = PullBlock
    if ORIGINAL["_handle_padding_frame"] is not None:
        connection.QuicConnection._handle_padding_frame = handle_padding_frame
