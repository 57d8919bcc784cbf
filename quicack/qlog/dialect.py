"""qlog dialects: which generation a file is, how its events are laid out, and producer quirks.

Theory of operation: a qlog file is a header plus events.  Everything that differs between
generations and producers — where the time, name and data of an event sit, the time unit, what
the reference time is, how ``ack_delay`` is scaled — is decided here, once per trace, from the
header alone, and returned as a :class:`TraceInfo`.  The events themselves are
never touched in Python: the native core (``native/``, through ``quicack.qlog.normalize``) turns them
into rows using these per-trace constants (KNOWLEDGE §8: a per-event Python loop cannot keep up).

Generations handled (``schemas/README.md`` lists the mapping of every event):

=================  ===========================================================================
draft-00/01/02     ``traces[].event_fields`` + array events, ``relative_time``/``delta_time``,
                   ``configuration.time_units``, numbers often strings
0.1                root ``fields``/``events``, ``starttime`` (s), upper-case categories/types
0.2/0.3/0.4        object events ``{time, name: "transport:packet_sent", data}``, JSON or JSON-SEQ
main-schema ≥10    ``file_schema`` URN, struct ``reference_time``, ``quic:`` event names
=================  ===========================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from quicack.model import QuicackError, Vantage


class AckDelayEncoding(StrEnum):
    """How a producer writes an ACK frame's ``ack_delay`` in qlog."""

    MS = "ms"  # what the qlog schema says: milliseconds
    US = "us"  # microseconds
    RAW = "raw"  # the encoded ACK Delay field; decode with 2^ack_delay_exponent microseconds
    RAW_MS = "raw_ms"  # the encoded field / 1000 (quiche)


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


# Producer names recognised in a trace header (vantage point name, title, description, code
# version), most specific first.
KNOWN_PRODUCERS = (
    "aioquic", "quic-go", "quiche", "ngtcp2", "picoquic", "mvfst", "neqo", "quinn",
    "lsquic", "msquic", "s2n-quic", "pcap2qlog", "go-x-net", "tquic",
)
#: Producers that name themselves otherwise in the header: text → producer.  Go's
#: golang.org/x/net/quic writes vantage_point name "go quic" (quic/qlog.go logConnectionStarted).
PRODUCER_ALIASES = {"go quic": "go-x-net"}

#: Per-producer quirks: name → (what it does, how the reader compensates).  Each has a test in
#: tests/qlog/test_qlog_quirks.py.
QUIRKS: dict[str, dict[str, Any]] = {
    # picoquic logs the encoded ACK Delay field (checked on picoquic's own reference trace: an
    # ACK sent 1594 µs after its largest acknowledged packet arrived says ack_delay 199 = 1592/8).
    "picoquic": {"ack_delay_encoding": AckDelayEncoding.RAW},
    # pcap2qlog copies tshark's quic.ack.ack_delay, the raw field.
    "pcap2qlog": {"ack_delay_encoding": AckDelayEncoding.RAW},
    # neqo logs the encoded field as well.
    # quiche logs the encoded field divided by 1000 (src/frame.rs to_qlog: `ack_delay as f32 /
    # 1000.0`), i.e. as if it were µs: an ACK sent 368 µs after its packet arrived says 0.046.
    "quiche": {"ack_delay_encoding": AckDelayEncoding.RAW_MS},
    # TQUIC (a quiche descendant) too (src/frame.rs to_qlog: `*ack_delay as f32 / 1000.0`).
    "tquic": {"ack_delay_encoding": AckDelayEncoding.RAW_MS},
    "neqo": {"ack_delay_encoding": AckDelayEncoding.RAW},
    # mvfst logs ack_delay in microseconds and names its metrics event recovery:metric_update.
    "mvfst": {"ack_delay_encoding": AckDelayEncoding.US},
    # quinn 0.11 logs RTTs in seconds in recovery:metrics_updated, and tags each event with the
    # group_id of its connection's `orig_rem_cid` (quinn-proto src/connection/qlog.rs): on a
    # server the client's initial source connection ID, not the ODCID.
    "quinn": {"metric_scale_ms": 1000.0, "server_group_id_is_client_scid": True},
    # quic-go leaves ack_delay out when it is zero, and logs packet_received only after it has
    # handled the packet's frames (connection.go handleFrames), so the metrics_updated an ACK
    # causes comes before the packet that carried it.
    "quic-go": {"missing_ack_delay_is_zero": True, "metrics_before_packet_received": True},
    # ngtcp2 0.12 logs "latest_rtt": 0 (and no min_rtt) in every metrics_updated before its
    # first RTT sample (seen in gtlsserver's qlog: smoothed_rtt 333, rtt_variance 166).
    "ngtcp2": {"latest_rtt_zero_is_unset": True},
    # aioquic logs transport:datagrams_received before the packets of that datagram, and each
    # packet_received at the time it was processed, so coalesced packets differ in time.
    "aioquic": {"rx_datagram_events_first": True},
}

#: Quirks about the *order* of a producer's events.  quicack's own export keeps the stored event
#: order, so these still hold for it; every other quirk rescales a value the store has already
#: normalized (ack_delay in ms, metrics in ms) and must not be applied twice.
ORDER_QUIRKS = frozenset({"metrics_before_packet_received", "rx_datagram_events_first"})

#: Header title and trace configuration key that ``quicack export --qlog`` writes.
EXPORT_TITLE = "exported by quicack"
EXPORT_KEY = "quicack_export"

_TIME_KEYS = {"relative_time": "relative", "time": "relative", "delta_time": "delta",
              "absolute_time": "absolute"}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def member(container: dict, key: str) -> dict:
    """A header member that must be a JSON object (common_fields, configuration, …): {} if it is
    missing or is something else (a producer's odd header is read as if it had none)."""
    value = container.get(key)
    return value if isinstance(value, dict) else {}


def event_fields(trace: dict) -> Any:
    """The column names of a draft trace's array events (qlog draft-00…02, 0.1), as logged."""
    return trace.get("event_fields") or trace.get("fields") or member(trace, "common_fields").get("event_fields")


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def generation(header: dict) -> str:
    """The qlog generation of a file header: 'draft-00', '0.3', 'main-schema', …"""
    version = _text(header.get("qlog_version"))
    if version is not None:
        return version  # quic-go writes file_schema *and* qlog_version 0.3: its events are 0.3
    if "file_schema" in header:
        return "main-schema"
    if "traces" in header or "trace" in header:
        return "unknown"
    raise QuicackError("not a qlog file: no qlog_version, file_schema or traces")


def _epoch_ms_from_reference(value: Any) -> float | None:
    """A reference_time in seconds, ms or µs since the epoch (producers differ), as epoch ms."""
    number = _number(value)
    if number is None or number <= 0:
        return None
    for scale in (1000.0, 1.0, 0.001):  # seconds, ms, µs
        ms = number * scale
        if 946_684_800_000 <= ms <= 4_102_444_800_000:  # 2000 … 2100
            return ms
    return None


def _rfc3339_ms(text: Any) -> float | None:
    if not isinstance(text, str) or text == "unknown":
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000.0
    except ValueError:
        return None


def _implementation(header: dict, trace: dict) -> str:
    vantage = member(trace, "vantage_point")
    config = member(trace, "configuration")
    places = [vantage.get("name"), trace.get("title"),
              trace.get("description"), config.get("code_version"), header.get("title"),
              header.get("description")]
    text = " ".join(str(p) for p in places if p).lower()
    for name in KNOWN_PRODUCERS:
        if name in text:
            return name
    for alias, name in PRODUCER_ALIASES.items():
        if alias in text:
            return name
    if header.get("qlog_version") == "0.1" and str(trace.get("vantagepoint", "")).upper() == "NETWORK":
        return "pcap2qlog"  # the only producer of 0.1 network traces
    uris = config.get("original_uris")
    uris = " ".join(str(u) for u in uris) if isinstance(uris, list) else str(uris) if isinstance(uris, str) else ""
    if uris.endswith(".json") or "pcap2qlog" in uris:
        return "pcap2qlog"
    # (no guess from the header's shape: aioquic, the only 0.3 producer writing an ODCID and no
    # reference time, names itself in vantage_point.name, and so does quicack's export)
    return "unknown"


def is_quicack_export(header: dict, trace: dict) -> bool:
    """Whether a trace was written by ``quicack export --qlog``: its values are already in ms."""
    return EXPORT_KEY in member(trace, "configuration") or header.get("title") == EXPORT_TITLE


def _layout(fields: list[str], where: str) -> tuple[tuple, str]:
    names = [str(f).lower() for f in fields]
    time_key = next((k for k in names if k in _TIME_KEYS), None)
    event_key = next((k for k in ("event", "event_type", "type", "name") if k in names), None)
    if time_key is None or event_key is None or "data" not in names:
        raise QuicackError(f"event_fields {names} lack a time, event or data column", position=where)
    layout = (names.index(time_key),
              names.index("category") if "category" in names else -1,
              names.index(event_key),
              names.index("data"),
              names.index("group_id") if "group_id" in names else -1)
    return layout, _TIME_KEYS[time_key]


def describe_trace(header: dict, trace: dict, index: int, first_time: float | None = None) -> TraceInfo:
    """Decide how to read one trace.  ``first_time`` is the first event's raw time, if known."""
    generation(header)  # refuses what is not qlog
    vantage_point = trace.get("vantage_point") or header.get("vantage_point") or {}
    quirks: list[str] = []  # in the order the decisions below are taken
    vantage, flow, sender_from_cids = _vantage(trace, vantage_point, quirks)

    fields = event_fields(trace)
    if fields is not None and not isinstance(fields, list):
        raise QuicackError(f"event_fields is {type(fields).__name__}, not a list of column names",
                           position=f"trace {index}")
    if fields:
        layout, time_format = _layout(fields, f"trace {index}")
    else:
        layout, time_format = ("object",), "relative"
    time_scale_ms, time_format, reference_epoch_ms = _clock(trace, time_format, first_time, quirks)

    # quinn 0.11 writes vantage_point type "unknown" (its qlog stream is per endpoint config).
    vantage_from_first_packet = vantage is Vantage.UNKNOWN
    if vantage_from_first_packet:
        quirks.append("vantage_from_first_packet")

    implementation, quirk = _producer_quirks(header, trace, vantage_point, quirks)
    # (not qlog 0.1's root "connectionid": pcap2qlog wrote the client's source CID there; the
    # normalizer takes the destination CID of the client's first Initial)
    common = member(trace, "common_fields")
    odcid = common.get("ODCID") or common.get("odcid") or common.get("group_id")
    return TraceInfo(
        trace_index=index,
        vantage=vantage,
        flow=flow,
        implementation=implementation,
        odcid=_text(odcid),
        title=_text(trace.get("title") or header.get("title")),
        time_scale_ms=time_scale_ms,
        time_format=time_format,
        reference_epoch_ms=reference_epoch_ms,
        ack_delay_encoding=quirk.get("ack_delay_encoding", AckDelayEncoding.MS),
        metric_scale_ms=quirk.get("metric_scale_ms", 1.0),
        missing_ack_delay_is_zero=quirk.get("missing_ack_delay_is_zero", False),
        layout=layout,
        sender_from_cids=sender_from_cids,
        vantage_from_first_packet=vantage_from_first_packet,
        rx_datagram_events_first=quirk.get("rx_datagram_events_first", False),
        latest_rtt_zero_is_unset=quirk.get("latest_rtt_zero_is_unset", False),
        server_group_id_is_client_scid=quirk.get("server_group_id_is_client_scid", False),
        quirks=tuple(quirks),
    )


def _vantage(trace: dict, vantage_point: Any, quirks: list[str]) -> tuple[Vantage, str | None, bool]:
    """The trace's vantage point, its flow, and whether packets' senders are told by their
    connection IDs."""
    if isinstance(vantage_point, dict):
        vtype = str(vantage_point.get("type") or "unknown").lower()
        flow = _text(vantage_point.get("flow"))
    else:
        vtype, flow = "unknown", None
    if "vantagepoint" in trace:  # 0.1
        vtype = str(trace["vantagepoint"]).lower()
    vantage = Vantage(vtype) if vtype in Vantage._value2member_map_ else Vantage.UNKNOWN
    if "vantagepoint" in trace and vantage is Vantage.NETWORK:
        # pcap2qlog 0.1 logs every packet of both sides as PACKET_RX: the sender is told by the
        # connection IDs (the client's first Initial names its source CID).
        quirks.append("sender_from_connection_ids")
        return vantage, "client", True
    return vantage, flow, False


def _clock(trace: dict, time_format: str, first_time: float | None,
           quirks: list[str]) -> tuple[float, str, float | None]:
    """How the trace's event times read: (raw time × this = ms, 'relative', 'delta' or
    'absolute', the reference time in epoch ms or None); ``time_format`` is what the event
    layout implies."""
    common = member(trace, "common_fields")
    config = member(trace, "configuration")
    units = str(config.get("time_units") or common.get("time_units") or "ms").lower()
    time_scale_ms = {"ms": 1.0, "us": 0.001, "ns": 1e-6, "s": 1000.0}.get(units, 1.0)

    fmt = str(common.get("time_format") or trace.get("time_format") or "")
    if fmt in ("delta", "relative_to_previous_event"):
        time_format = "delta"
    elif fmt == "absolute":
        time_format = "absolute"

    reference = common.get("reference_time", trace.get("reference_time"))
    if isinstance(reference, dict):  # main-schema ReferenceTime
        epoch = _rfc3339_ms(reference.get("epoch"))
        reference_epoch_ms = epoch if epoch is not None else _rfc3339_ms(reference.get("wall_clock_time"))
    elif reference is not None:
        reference_epoch_ms = _epoch_ms_from_reference(reference)
        if reference_epoch_ms is None:
            quirks.append("reference_time_not_epoch")
    elif "starttime" in trace:  # 0.1, seconds
        reference_epoch_ms = _epoch_ms_from_reference(trace["starttime"])
    else:
        reference_epoch_ms = None

    first_is_epoch = (reference_epoch_ms is None and first_time is not None
                      and _epoch_ms_from_reference(first_time * time_scale_ms) == first_time * time_scale_ms)
    if time_format == "relative" and first_is_epoch:
        # aioquic 0.3 and others: event times are epoch milliseconds themselves.
        time_format = "absolute"
        quirks.append("absolute_epoch_times")
    elif time_format == "delta" and first_is_epoch:
        # draft-marx-qlog-main-schema, time_format: "Delta: Delta-encode each time value on the
        # previously logged value. The first event in a trace typically logs the full absolute
        # timestamp."  The running sum is then an epoch time: the reference is the epoch itself,
        # as in main-schema's relative_to_previous_event example (epoch 1970-01-01T00:00:00Z).
        reference_epoch_ms = 0.0
        quirks.append("delta_times_from_epoch")
    return time_scale_ms, time_format, reference_epoch_ms


def _producer_quirks(header: dict, trace: dict, vantage_point: Any,
                     quirks: list[str]) -> tuple[str, dict[str, Any]]:
    """The trace's producer and the quirks of it that apply (:data:`QUIRKS`)."""
    implementation = _implementation(header, trace)
    exported = is_quicack_export(header, trace)
    if exported and isinstance(vantage_point, dict) and vantage_point.get("name"):
        implementation = str(vantage_point["name"])  # written by the export as stored ('tshark', …)
    quirk = QUIRKS.get(implementation, {})
    if exported:
        # the producer's name is kept, its value quirks were applied when the store read the
        # original trace (an exported picoquic ack_delay of 11.152 ms is not a raw 11.152)
        quirk = {k: v for k, v in quirk.items() if k in ORDER_QUIRKS}
        quirks.append("quicack_export")
    if quirk:
        quirks.append(f"{implementation}:" + ",".join(sorted(quirk)))
    return implementation, quirk


def traces_of(header: dict) -> list[dict]:
    """The trace headers of a JSON file (0.1 files are one trace at the root)."""
    if isinstance(header.get("traces"), list):
        traces = [t for t in header["traces"] if isinstance(t, dict)]
        if not traces:
            raise QuicackError("qlog file has no traces")
        # a TraceError entry ("we tried to find/convert a file for inclusion in the aggregated
        # qlog, but there was an error", draft-marx-qlog-main-schema) stands for a missing trace
        errors = [t for t in traces if "error_description" in t and "events" not in t]
        if len(errors) == len(traces):
            raise QuicackError(f"qlog file has no traces, only {len(errors)} error "
                               f"entr{'y' if len(errors) == 1 else 'ies'}: {str(errors[0]['error_description'])[:200]!r}")
        return traces
    if isinstance(header.get("trace"), dict):
        return [header["trace"]]
    if "events" in header:
        return [header]
    raise QuicackError("not a qlog file: no traces, trace or events")


# --- canonical event and frame names ---------------------------------------------------------

#: qlog event names across generations → the name used for routing rows.
EVENT_ALIASES = {
    "packet_tx": "packet_sent",
    "packet_rx": "packet_received",
    "metric_update": "metrics_updated",
    "recovery_metrics_updated": "metrics_updated",
    "transport_parameters_set": "parameters_set",
    "loss_timer_set": "loss_timer_updated",
    "loss_timer_expired": "loss_timer_updated",
    "recovery_loss_timer_updated": "loss_timer_updated",
    "packet_dropped": "packet_dropped",
    "packet_lost": "packet_lost",
}


def canonical_event(name: str) -> str:
    """'transport:packet_sent', 'quic:packet_sent', 'PACKET_SENT' → 'packet_sent'."""
    base = re.sub(r"^.*:", "", name.strip().lower()).replace(" ", "_")
    return EVENT_ALIASES.get(base, base)
