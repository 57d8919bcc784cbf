"""Capture files and their secrets, read without tshark.

Theory of operation: a file is a capture if its first bytes are a pcap or pcapng magic number
(also inside gzip), or, for saying why it cannot be read, if its name ends like one
(:data:`CAPTURE_SUFFIXES`).  The secrets that decrypt it are a TLS key log and a pcapng
Decryption Secrets Block, which tshark uses by itself.  The key log is ``--keylog FILE``; else
one beside the capture (``<name>.keys``, ``<name>.keylog``, ``keys.log``, ``sslkeylog``,
``sslkeylog.log``, ``sslkeylogfile``, or the only ``*.keys`` of the folder).  Initial packets
decrypt without any secret (their keys derive from the client's first destination connection
ID).  The key log's SHA-256 is recorded with the capture, so a capture ingested again with other
secrets is read again.  Only the file system and the first blocks of a file are read here.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from quicack.model import QuicackError

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")
_MAGIC = {b"\xa1\xb2\xc3\xd4": "pcap", b"\xd4\xc3\xb2\xa1": "pcap", b"\xa1\xb2\x3c\x4d": "pcap",
          b"\x4d\x3c\xb2\xa1": "pcap", b"\x0a\x0d\x0d\x0a": "pcapng"}
KEYLOG_NAMES = ("keys.log", "sslkeylog", "sslkeylog.log", "sslkeylogfile", "sslkeylogfile.txt",
                "keylog.txt")


def capture_format(path: Path) -> str | None:
    """'pcap' or 'pcapng' (also gzip-compressed) by magic number; None if not a capture."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(4)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return _MAGIC.get(head)


def required_format(path: Path) -> str:
    """:func:`capture_format`, QuicackError naming byte 0 if ``path`` is no capture."""
    fmt = capture_format(path)
    if fmt is None:
        raise QuicackError("not a pcap or pcapng capture (unknown magic number)", str(path), "byte 0")
    return fmt


def is_capture(path: Path) -> bool:
    return capture_format(path) is not None or path.name.lower().endswith(CAPTURE_SUFFIXES)


def find_keylog(path: Path) -> Path | None:
    """The TLS key log lying beside a capture, if there is one (see the module docstring)."""
    folder = path.parent
    stem = path.name
    for suffix in (".gz", ".pcapng", ".pcap", ".cap"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    for name in (f"{stem}.keys", f"{stem}.keylog", f"{stem}.keys.log", *KEYLOG_NAMES):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    others = sorted(folder.glob("*.keys"))
    return others[0] if len(others) == 1 else None


def keylog_for(path: Path, keylog: Path | str | None) -> Path | None:
    """The key log to decrypt ``path`` with: the one given (QuicackError if it does not exist),
    else the one beside it, if any."""
    if keylog is not None and not Path(keylog).is_file():
        raise QuicackError("no such key log file", str(keylog))
    return Path(keylog) if keylog is not None else find_keylog(path)


def secrets_fingerprint(path: Path, keylog: Path | None) -> str | None:
    """SHA-256 of the key log that would decrypt ``path`` (None when there is none)."""
    keylog = keylog or find_keylog(path)
    if keylog is None:
        return None
    try:
        with open(keylog, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def secrets(path: Path, fmt: str, keylog: Path | None) -> str:
    """The secrets a capture of format ``fmt`` was decrypted with: 'keylog', 'dsb', 'keylog+dsb'
    or 'none'."""
    dsb = fmt == "pcapng" and has_dsb(path)
    return "+".join(s for s, present in (("keylog", keylog is not None), ("dsb", dsb)) if present) or "none"


def has_dsb(path: Path) -> bool:
    """Whether a pcapng holds a Decryption Secrets Block (type 0x0000000A) before its packets."""
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as f:
            head = f.read(12)
            if head[:4] != b"\x0a\x0d\x0d\x0a":
                return False
            order = "little" if head[8:12] == b"\x4d\x3c\x2b\x1a" else "big"
            f.seek(0)
            for _ in range(64):  # secrets come before the packets that need them
                header = f.read(8)
                if len(header) < 8:
                    return False
                block_type = int.from_bytes(header[:4], order)
                length = int.from_bytes(header[4:], order)
                if block_type == 0x0000000A:
                    return True
                if block_type in (3, 6) or length < 12:  # packets started
                    return False
                f.seek(length - 8, 1)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return False
