"""QUIC version numbers seen on the wire, for telling a user why a capture holds no QUIC packets.

Theory of operation: RFC 8999 (QUIC invariants) §5.1: "A QUIC packet with a long header has the
high bit of the first byte of the packet set to 1 ... Version (32)" follows in bytes 1–4, for
every QUIC version past and future.  So the first five bytes of a UDP payload tell whether it
looks like a QUIC long-header packet and of which version, even where tshark's QUIC dissector
cannot read it: IETF drafts before draft-21 (Wireshark's packet-quic.c: "Currently supported
QUIC version(s): draft-21, …, draft-34, v1, v2"), Google QUIC, or a version it does not know.
Pure: payload prefixes in, counts and words out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

#: the oldest IETF draft tshark's QUIC dissector reads (Wireshark 3.x/4.x)
TSHARK_MIN_DRAFT = 21


def long_header_version(payload: bytes) -> int | None:
    """The version of a payload that begins like a QUIC long-header packet, or None."""
    if len(payload) < 5 or not payload[0] & 0x80:
        return None
    return int.from_bytes(payload[1:5], "big")


def name(version: int) -> str:
    """``0xff00000f`` → 'draft-15 (0xff00000f)', 1 → 'v1 (0x00000001)', …"""
    hexed = f"0x{version:08x}"
    if version == 0:
        return f"version negotiation ({hexed})"
    if version == 1:
        return f"v1 ({hexed})"
    if version == 0x6B3343CF:
        return f"v2 ({hexed})"
    if version >> 8 == 0xFF0000:
        return f"draft-{version & 0xFF} ({hexed})"
    if version & 0x0F0F0F0F == 0x0A0A0A0A:
        return f"a reserved greasing version ({hexed})"
    if version >> 24 in (0x51, 0x54):  # 'Q' / 'T' + three digits
        text = version.to_bytes(4, "big").decode("ascii", "replace")
        return f"Google QUIC {text} ({hexed})"
    if version >> 4 == 0xFACEB00:
        return f"mvfst's {hexed}"
    return hexed


def unreadable(version: int) -> bool:
    """Whether tshark cannot read packets of ``version`` as IETF QUIC."""
    if version >> 8 == 0xFF0000:
        return (version & 0xFF) < TSHARK_MIN_DRAFT
    return version >> 24 in (0x51, 0x54)


def explain(payloads: Iterable[bytes], tshark_version: str) -> str | None:
    """Why none of ``payloads`` (UDP payload prefixes) was dissected as QUIC, if their versions
    say: e.g. '6 of them begin like QUIC long-header packets of draft-15 (0xff00000f), which
    tshark 4.0.17 does not read (it reads IETF QUIC from draft-21 on)'; None if they do not."""
    versions = Counter(v for v in map(long_header_version, payloads) if v is not None)
    old = {v: n for v, n in versions.items() if unreadable(v)}
    if not old:
        return None
    named = ", ".join(f"{name(v)}" if len(old) == 1 else f"{name(v)} ×{n}"
                      for v, n in sorted(old.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"{sum(old.values())} of them begin like QUIC long-header packets of {named}, which tshark "
            f"{tshark_version} does not read (it reads IETF QUIC from draft-{TSHARK_MIN_DRAFT} on)")
