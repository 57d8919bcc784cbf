"""The trace model: names, versions and the one error class users see.

Theory of operation: every input (qlog of any generation, later pcap) is mapped onto the same
normalized rows — one connection per (file, trace, vantage), packets, frames, transport
parameters, logged metrics and side tables (see ``schemas/README.md``).  The string values of
the enums below are the qlog wire strings, so a row can be compared with a qlog file by eye.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

#: Bumped whenever the mapping from input to rows changes; a store re-ingests a file only when
#: asked (``--reanalyze``) or when the file was ingested by another analysis version.  4: a
#: ``quicack export --qlog`` file is not rescaled by its producer's quirks, delta-time traces
#: whose first event holds the epoch time keep it, no producer is guessed from a header's shape;
#: handshakes: a failed attempt after a restart is that failure, a ClientHello retransmitted with
#: its CRYPTO frames reordered is one packet, a partial ClientHello needs logged packet numbers.
#: 5: after a HelloRetryRequest, the round of the second ClientHello is classified; raw ACK
#: delays of a sender whose ack_delay_exponent is invalid (above 20) are not decoded; a document
#: cut short keeps no part of an event after one holding an "events" key.  6: the native core —
#: other_events.data and frames.details keep the JSON text as logged (without blanks) rather than
#: DuckDB's re-serialization, delta times are summed on across slices, a raw ACK Delay beyond 64
#: bits is NULL rather than refusing the file, JSON-SEQ records are split at every RS, an untimed
#: metrics, loss, drop or timer event refuses the file.
ANALYSIS_VERSION = 6

#: Version of ``schemas/store.sql``; recorded in ``store_meta``.  3 added ``runs`` and ``probes``.
SCHEMA_VERSION = 3

#: The scanner's HTTP ``user-agent`` (quicack.scan.probe) and the ACK behaviours of quicack's own test
#: servers (quicack.lab.serve).  Kept here, with no import cost, because the command line shows them
#: in ``--help`` without loading aioquic.
USER_AGENT = "quicack/0.1 (QUIC ACK measurement research scanner)"
SERVE_MODES = ("wfc", "iack", "iack-ping", "silent", "garbage", "close", "alert", "retry", "vn")


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
    #: the header names no vantage (quinn writes type "unknown"): take it from the connection's
    #: first packet event if that is an Initial (sent → client, received → server)
    vantage_from_first_packet: bool = False
    #: a datagrams_received event precedes the packets of each received datagram (aioquic):
    #: packets received after one such event share a datagram
    rx_datagram_events_first: bool = False
    #: latest_rtt 0 in metrics_updated without a min_rtt means "no RTT sample yet" (ngtcp2)
    latest_rtt_zero_is_unset: bool = False
    #: a server trace's per-event group_id is the client's initial source connection ID, not the
    #: ODCID (quinn: ``orig_rem_cid``); a client trace's is the ODCID
    server_group_id_is_client_scid: bool = False
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
    #: the file's row in ``files`` (ingested now or before); None when refused
    file_id: int | None = None


@dataclass
class Summary:
    files: list[FileResult] = field(default_factory=list)
    #: Connections of these files per handshake class (quicack.store.database.Store.handshake_class_rows).
    handshake_classes: tuple[list[str], list[tuple]] = ((), ())

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
