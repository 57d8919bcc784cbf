"""The trace model: names, versions and the one error class users see.

Theory of operation: every input (qlog of any generation, later pcap) is mapped onto the same
normalized rows — one connection per (file, trace, vantage), packets, frames, transport
parameters, logged metrics and side tables (see ``schemas/README.md``).  The string values of
the enums below are the qlog wire strings, so a row can be compared with a qlog file by eye.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

#: Bumped whenever the mapping from input to rows changes; a store re-ingests a file only when
#: asked (``--reanalyze``) or when the file was ingested by another analysis version.
ANALYSIS_VERSION = 1

#: Version of ``schemas/store.sql``; recorded in ``store_meta``.  2 added ``runs`` and ``probes``.
SCHEMA_VERSION = 2


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


class AckDelayEncoding(StrEnum):
    """How a producer writes an ACK frame's ``ack_delay`` in qlog."""

    MS = "ms"  # what the qlog schema says: milliseconds
    US = "us"  # microseconds
    RAW = "raw"  # the encoded ACK Delay field; decode with 2^ack_delay_exponent microseconds


@dataclass(frozen=True)
class TraceInfo:
    """What a trace header tells us, after the producer's quirks are applied."""

    trace_index: int
    vantage: Vantage
    flow: str | None
    implementation: str
    odcid: str | None
    title: str | None
    #: raw event time × time_scale_ms = milliseconds
    time_scale_ms: float
    #: 'relative' (to reference_time), 'delta' (to the previous event) or 'absolute' (epoch)
    time_format: str
    reference_epoch_ms: float | None
    ack_delay_encoding: AckDelayEncoding
    #: multiplier bringing logged RTT metrics to milliseconds (besides time_scale_ms)
    metric_scale_ms: float
    #: quic-go omits ack_delay when it is zero
    missing_ack_delay_is_zero: bool
    #: ('object',) or the indexes of (time, category, event, data, group_id) in array events
    layout: tuple
    #: network traces that log every packet alike (pcap2qlog 0.1: all PACKET_RX): tell the
    #: sender by connection IDs instead of by event name
    sender_from_cids: bool = False
    quirks: tuple[str, ...] = ()


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


@dataclass
class Summary:
    files: list[FileResult] = field(default_factory=list)

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
    def skipped_events(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for f in self.files:
            for name, n in f.skipped_events.items():
                total[name] = total.get(name, 0) + n
        return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
