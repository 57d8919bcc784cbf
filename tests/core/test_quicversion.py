"""QUIC versions read off UDP payloads (quicack/core/quicversion.py): the reason a capture holds no
packets tshark reads as QUIC.  Real payloads in tests/pcap/test_pcap.py (pcap2qlog's draft-15 capture)."""

from __future__ import annotations

import pytest

from quicack.core.quicversion import explain, long_header_version, name, unreadable


@pytest.mark.parametrize("payload, version", [
    (bytes.fromhex("ffff00000ffe"), 0xFF00000F),  # draft-15 Initial (pcap2qlog's capture)
    (bytes.fromhex("c00000000108"), 1),            # v1 Initial
    (bytes.fromhex("c36b3343cf08"), 0x6B3343CF),   # v2
    (bytes.fromhex("8000000000"), 0),              # version negotiation
    (bytes.fromhex("300e8ac117cd"), None),         # a short header: no version
    (bytes.fromhex("ffff0000"), None),             # too short to hold one
    (b"", None),
])
def test_long_header_version(payload, version):
    assert long_header_version(payload) == version


@pytest.mark.parametrize("version, text, old", [
    (0xFF00000F, "draft-15 (0xff00000f)", True),
    (0xFF000014, "draft-20 (0xff000014)", True),
    (0xFF000015, "draft-21 (0xff000015)", False),   # the first tshark reads
    (0xFF00001D, "draft-29 (0xff00001d)", False),
    (1, "v1 (0x00000001)", False),
    (0x6B3343CF, "v2 (0x6b3343cf)", False),
    (0x51303433, "Google QUIC Q043 (0x51303433)", True),
    (0x54303530, "Google QUIC T050 (0x54303530)", True),
    (0x1A2A3A4A, "a reserved greasing version (0x1a2a3a4a)", False),
    (0xFACEB002, "mvfst's 0xfaceb002", False),
    (0x12345678, "0x12345678", False),
])
def test_names_and_what_tshark_cannot_read(version, text, old):
    assert (name(version), unreadable(version)) == (text, old)


def test_explain_counts_the_unreadable_versions():
    draft15 = bytes.fromhex("ffff00000ffe")
    q043 = bytes.fromhex("c95130343301")
    v1 = bytes.fromhex("c00000000108")
    short = bytes.fromhex("300e8ac117cd")
    assert explain([draft15] * 6 + [short] * 4, "4.0.17") == (
        "6 of them begin like QUIC long-header packets of draft-15 (0xff00000f), which tshark 4.0.17 "
        "does not read (it reads IETF QUIC from draft-21 on)")
    assert explain([q043, draft15, draft15, v1], "4.0.17") == (
        "3 of them begin like QUIC long-header packets of draft-15 (0xff00000f) ×2, Google QUIC Q043 "
        "(0x51303433) ×1, which tshark 4.0.17 does not read (it reads IETF QUIC from draft-21 on)")
    assert explain([v1, short], "4.0.17") is None  # readable: the port must be the reason
    assert explain([], "4.0.17") is None
