"""Connection IDs that name their probe, so a capture of a scan joins back to each target.

Theory of operation: the client chooses both connection IDs of its first flight — its source
connection ID (which the server echoes as the destination of every packet it sends) and the
original destination connection ID.  Both are 8 bytes laid out as

    run tag (2 bytes) | target index (4 bytes, big-endian) | repetition (1 byte) | random (1 byte)

so any packet of the probe, in either direction, names the run, the target's position in its
list and the repetition.  Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import os
import struct

LAYOUT = struct.Struct(">HIB")
LENGTH = 8


def run_tag(run_name: str, shard: str = "") -> int:
    """A 16-bit tag for a run (stable across restarts of the same run)."""
    return int.from_bytes(hashlib.sha256(f"{run_name}\0{shard}".encode()).digest()[:2], "big")


def encode(run: int, target_index: int, repetition: int, random_byte: int | None = None) -> bytes:
    if not 0 <= target_index < 2**32 or not 0 <= repetition < 256:
        raise ValueError("target index must fit 32 bits and repetition 8 bits")
    last = os.urandom(1)[0] if random_byte is None else random_byte
    return LAYOUT.pack(run, target_index, repetition) + bytes([last])


def pair(run: int, target_index: int, repetition: int) -> tuple[bytes, bytes]:
    """(client source CID, original destination CID) for one probe; they differ in the last byte."""
    cid = encode(run, target_index, repetition)
    return cid, cid[:-1] + bytes([cid[-1] ^ 0x80])


def decode(cid: bytes | str) -> tuple[int, int, int] | None:
    """(run tag, target index, repetition) of a tagged connection ID, or None if it is not one."""
    raw = bytes.fromhex(cid.replace(":", "")) if isinstance(cid, str) else cid
    if len(raw) != LENGTH:
        return None
    return LAYOUT.unpack(raw[:LAYOUT.size])
