"""Stored connections back out as qlog 0.3 JSON, the dialect qvis reads.

Theory of operation: one trace per connection, its events rebuilt from the normalized tables —
packets with their frames (``transport:packet_sent`` / ``packet_received``), the transport
parameters (``transport:parameters_set``), logged metrics (``recovery:metrics_updated``), losses
(``recovery:packet_lost``) and the events kept in ``other_events`` as they were — in trace order,
with ``time`` in ms relative to the connection's first event (``reference_time`` in
``common_fields`` when the wall-clock start is known).  A pcap-derived connection becomes a
network-vantage trace.  The producer's name stays in ``vantage_point.name``; a
``configuration.quicack_export`` key tells the reader the values are already in ms, so it does
not rescale them again (picoquic's raw ack_delay, quinn's RTTs in seconds).
"""

from __future__ import annotations

import json
from typing import Any

from quicack.qlog.dialect import EXPORT_KEY, EXPORT_TITLE
from quicack.store.database import Store

QLOG_VERSION = "0.3"


def connection_trace(store: Store, connection_id: int) -> dict[str, Any]:
    """The qlog 0.3 trace of one stored connection."""
    found = store.sql("SELECT * FROM connections WHERE connection_id = $c", {"c": connection_id})
    if found.height == 0:
        from quicack.model import QuicackError
        raise QuicackError(f"no connection {connection_id}", store.path)
    c = found.row(0, named=True)
    events: list[tuple[int, dict]] = []
    frames: dict[int, list[dict]] = {}
    for f in store.sql("""SELECT * FROM frames WHERE connection_id = $c ORDER BY event_index, position""",
                       {"c": connection_id}).iter_rows(named=True):
        frames.setdefault(f["event_index"], []).append(_frame(f))
    for p in store.sql("SELECT * FROM packets WHERE connection_id = $c", {"c": connection_id}).iter_rows(named=True):
        header = {"packet_type": p["packet_type"]}
        if p["packet_number"] is not None:
            header["packet_number"] = p["packet_number"]
        data: dict[str, Any] = {"header": header, "frames": frames.get(p["event_index"], [])}
        if p["size_bytes"] is not None:
            data["raw"] = {"length": p["size_bytes"]}
        data["datagram_id"] = p["datagram_id"]
        name = "transport:packet_sent" if p["direction"] == "sent" else "transport:packet_received"
        events.append((p["event_index"], {"time": p["time_ms"], "name": name, "data": data}))
    for tp in store.sql("SELECT * FROM transport_parameters WHERE connection_id = $c", {"c": connection_id}).iter_rows(named=True):
        for data in json.loads(tp["parameters"]):
            events.append((-1, {"time": tp["time_ms"], "name": "transport:parameters_set", "data": data}))
    for m in store.sql("SELECT * FROM logged_metrics WHERE connection_id = $c", {"c": connection_id}).iter_rows(named=True):
        data = {k: m[f"{k}_ms"] for k in ("latest_rtt", "min_rtt", "smoothed_rtt") if m[f"{k}_ms"] is not None}
        if m["rtt_variance_ms"] is not None:
            data["rtt_variance"] = m["rtt_variance_ms"]
        for key, column in (("pto_count", "pto_count"), ("congestion_window", "congestion_window_bytes"),
                            ("bytes_in_flight", "bytes_in_flight_bytes")):
            if m[column] is not None:
                data[key] = m[column]
        events.append((m["event_index"], {"time": m["time_ms"], "name": "recovery:metrics_updated", "data": data}))
    for lost in store.sql("SELECT * FROM lost_packets WHERE connection_id = $c", {"c": connection_id}).iter_rows(named=True):
        data = {"header": {k: lost[k] for k in ("packet_type", "packet_number") if lost[k] is not None}}
        if lost["trigger"]:
            data["trigger"] = lost["trigger"]
        events.append((lost["event_index"], {"time": lost["time_ms"], "name": "recovery:packet_lost", "data": data}))
    for o in store.sql("SELECT * FROM other_events WHERE connection_id = $c", {"c": connection_id}).iter_rows(named=True):
        events.append((o["event_index"], {"time": o["time_ms"], "name": o["event_name"],
                                          "data": json.loads(o["data"]) if o["data"] else {}}))
    events.sort(key=lambda e: (e[0], e[1]["time"] if e[1]["time"] is not None else 0.0))
    vantage = c["vantage"] if c["vantage"] in ("client", "server", "network") else "unknown"
    common: dict[str, Any] = {"time_format": "relative", "protocol_type": ["QUIC"]}
    if c["odcid"]:
        common["ODCID"] = c["odcid"]
    if c["first_event_epoch_ms"] is not None:
        common["reference_time"] = c["first_event_epoch_ms"]
    vantage_point: dict[str, Any] = {"type": vantage, "name": c["implementation"]}
    if vantage == "network":
        vantage_point["flow"] = c["flow"] or "client"
    return {"title": f"quicack connection {connection_id}",
            "description": f"{c['implementation']} {vantage} view; handshake {c['handshake_class']}",
            "vantage_point": vantage_point, "common_fields": common,
            # read back by quicack.qlog.dialect: the values below are already normalized (ms), so the
            # producer's scaling quirks must not be applied a second time
            "configuration": {EXPORT_KEY: {"connection_id": connection_id}},
            "events": [e for _, e in events]}


def qlog_document(store: Store, connection_ids: list[int]) -> dict[str, Any]:
    return {"qlog_version": QLOG_VERSION, "qlog_format": "JSON", "title": EXPORT_TITLE,
            "traces": [connection_trace(store, cid) for cid in connection_ids]}


def _frame(f: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"frame_type": f["frame_type"]}
    if f["details"]:
        out.update(json.loads(f["details"]))
        out["frame_type"] = f["frame_type"]
    if f["frame_type"] == "ack":
        if f["ack_delay_ms"] is not None:
            out["ack_delay"] = f["ack_delay_ms"]
        if f["acked_ranges"]:
            out["acked_ranges"] = [list(r) for r in f["acked_ranges"]]
    for key, column in (("offset", "offset_bytes"), ("length", "length_bytes"), ("stream_id", "stream_id"),
                        ("fin", "fin")):
        if f[column] is not None:
            out[key] = f[column]
    return out
