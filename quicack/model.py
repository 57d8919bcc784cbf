"""The trace model: the error class users see, ingest results, packets as the analyses see them.

Theory of operation: every input (qlog of any generation, later pcap) is mapped onto the same
normalized rows — one connection per (file, trace, vantage), packets, frames, transport
parameters, logged metrics and side tables (see ``schemas/README.md``).  The string values of
the enums below are the qlog wire strings, so a row can be compared with a qlog file by eye.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class QuicackError(Exception):
    """The one error class for users: a message naming the file and the position."""

    def __init__(self, message: str, path: str | None = None, position: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.position = position

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = self.path + (f" at {self.position}" if self.position else "") + ": "
        return where + self.message


class Vantage(StrEnum):
    CLIENT = "client"
    SERVER = "server"
    NETWORK = "network"
    UNKNOWN = "unknown"


@dataclass
class FileResult:
    path: str
    status: str  # 'ingested', 'unchanged', 'refused'
    connections: int = 0
    packets: int = 0
    events: int = 0
    skipped_events: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    #: the file's row in ``files`` (ingested now or before); None when refused
    file_id: int | None = None


@dataclass
class Summary:
    files: list[FileResult] = field(default_factory=list)
    #: Connections of these files per handshake class (quicack.store.database.Store.handshake_class_rows).
    handshake_classes: tuple[list[str], list[tuple]] = ((), ())
    #: files in the folders named that were not read, by why (quicack.store.ingest.expand)
    skipped: dict[str, int] = field(default_factory=dict)
    #: bytes of the store's file that hold no rows (quicack.store.database.Store.unused_bytes)
    store_unused_bytes: int = 0

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)

    @property
    def connections(self) -> int:
        return sum(f.connections for f in self.files)

    @property
    def packets(self) -> int:
        return sum(f.packets for f in self.files)

    @property
    def events(self) -> int:
        return sum(f.events for f in self.files)

    @property
    def file_ids(self) -> list[int]:
        return [f.file_id for f in self.files if f.file_id is not None]

    @property
    def skipped_events(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for f in self.files:
            for name, n in f.skipped_events.items():
                total[name] = total.get(name, 0) + n
        return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


# --- one connection's packets, as the pure analyses (classify, recovery) see them -------------

class Frame(NamedTuple):
    # (named tuples, not dataclasses: the analysis builds one per frame of every connection's
    # handshake window, and a frozen dataclass costs several times as much to create)
    frame_type: str
    ack_delay_ms: float | None = None
    largest_acknowledged: int | None = None
    #: ACK: inclusive [low, high] ranges
    acked_ranges: tuple[tuple[int, int], ...] = ()
    offset_bytes: int | None = None
    length_bytes: int | None = None
    stream_id: int | None = None
    #: CONNECTION_CLOSE: the error code as logged (number or name)
    error_code: str | None = None


class Packet(NamedTuple):
    event_index: int
    time_ms: float
    direction: str  # 'sent' / 'received' from the vantage point
    sender: str  # 'client' / 'server'
    packet_type: str
    packet_number: int | None
    size_bytes: int | None
    datagram_id: int
    frames: tuple[Frame, ...] = ()

    def has(self, frame_type: str) -> bool:
        for f in self.frames:
            if f.frame_type == frame_type:
                return True
        return False

    def first(self, frame_type: str) -> Frame | None:
        for f in self.frames:
            if f.frame_type == frame_type:
                return f
        return None
