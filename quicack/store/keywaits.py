"""Packets that waited for keys (``key_waits``) and the peer's RTT samples they inflated.

Theory of operation: after a file is normalized (same transaction), :func:`analyze` reads each new
connection's ``packet_buffered`` events (``other_events``; quic-go logs them), its received
packets and the ACK frames it sent, and :func:`quicack.core.keywait.match_waits` pairs each
buffered packet with its processing and its first ACK; one ``key_waits`` row each (``source``
``packet_buffered``).  A capture logs no buffering: for its connections (vantage ``network``) the
handshake's packets with their CRYPTO frames and both sides' ACKs go to
:func:`quicack.core.keywait.capture_waits`, which finds the packets that arrived before their
receiver could have its keys (``source`` ``capture``; meaningful for a capture taken next to
that receiver, as the one of a testbed group's relay leg); only packets that came before the
connection's last keys can have waited, so only the handshake's packets and those are read, and
the ACKs and packet numbers only of connections where one waited.  The receiver's
max_ack_delay (its own transport parameter, default 25 ms, RFC 9000 §18.2) bounds what the peer
may subtract.  :func:`inflated_samples` then sets, for a connection whose peer's trace is in the
store too (the same original destination connection ID, the other vantage point), each wait next
to the peer's replayed RTT sample for that ACK (``rtt_samples``) and the sample the RFC 9002
replay gives when the ACK delay counts from receipt.
"""

from __future__ import annotations

from collections import defaultdict

import duckdb

from quicack.core.keywait import (SPACES, AckSent, Buffered, Captured, Received, capture_waits, key_ready,
                                  match_waits)
from quicack.store.rows import insert

#: RFC 9000 §18.2: max_ack_delay when the transport parameter is absent
DEFAULT_MAX_ACK_DELAY_MS = 25.0


def analyze(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> None:
    """Fill ``key_waits`` for every connection with id ≥ ``first_connection_id`` that logged a
    buffered packet, or whose capture shows packets that came before their keys (caller holds
    the transaction)."""
    insert(con, "key_waits", _logged(con, first_connection_id) + _captured(con, first_connection_id))


def _logged(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> list[tuple]:
    """Rows from qlog ``packet_buffered`` events."""
    params = {"first": first_connection_id}
    buffered: dict[int, list[Buffered]] = defaultdict(list)
    for cid, *row in con.execute("""
            SELECT connection_id, event_index, time_ms, lower(data->'header'->>'packet_type'),
                   TRY_CAST(coalesce(data->'raw'->>'length', data->>'packet_size') AS INTEGER)
            FROM other_events WHERE connection_id >= $first AND event_name LIKE '%packet_buffered'
              AND time_ms IS NOT NULL  -- (an untimed event, kept in other_events, cannot be placed)
            ORDER BY connection_id, event_index""", params).fetchall():
        buffered[cid].append(Buffered(row[0], row[1], _type(row[2]), row[3]))
    if not buffered:
        return []
    ids = sorted(buffered)
    received: dict[int, list[Received]] = defaultdict(list)
    for cid, *row in con.execute("""
            SELECT connection_id, event_index, time_ms, packet_type, size_bytes, packet_number, packet_number_space
            FROM packets WHERE connection_id IN (SELECT unnest($ids)) AND direction = 'received'
            ORDER BY connection_id, event_index""", {"ids": ids}).fetchall():
        received[cid].append(Received(*row))
    acks = {cid: by_side.get("sent", []) for cid, by_side in _acks(con, ids, "p.direction").items()}
    own = dict(con.execute("""
        SELECT tp.connection_id, any_value(tp.max_ack_delay_ms)
        FROM transport_parameters tp JOIN connections c USING (connection_id)
        WHERE tp.connection_id IN (SELECT unnest($ids)) AND tp.endpoint = c.vantage GROUP BY 1""",
                       {"ids": ids}).fetchall())
    vantage = dict(con.execute("SELECT connection_id, vantage FROM connections WHERE connection_id IN "
                               "(SELECT unnest($ids))", {"ids": ids}).fetchall())
    rows = []
    for cid in ids:
        cap = own.get(cid) or DEFAULT_MAX_ACK_DELAY_MS
        for w in match_waits(buffered[cid], received[cid], acks.get(cid, []), cap):
            rows.append(_row(cid, w, cap, vantage.get(cid), "packet_buffered"))
    return rows


def _acks(con: duckdb.DuckDBPyConnection, ids: list[int], side: str) -> dict[int, dict[str, list[AckSent]]]:
    """The ACK frames of the connections ``ids``, per connection and ``side`` (an expression:
    ``p.direction`` or ``p.sender``), in trace order."""
    out: dict[int, dict[str, list[AckSent]]] = defaultdict(lambda: defaultdict(list))
    for cid, key, event, t, space, largest, ranges, delay in con.execute(f"""
            SELECT p.connection_id, {side}, p.event_index, p.time_ms, p.packet_number_space,
                   f.largest_acknowledged, f.acked_ranges, f.ack_delay_ms
            FROM packets p JOIN frames f USING (connection_id, event_index)
            WHERE p.connection_id IN (SELECT unnest($ids)) AND f.frame_type = 'ack'
            ORDER BY p.connection_id, p.event_index""", {"ids": ids}).fetchall():
        pairs = tuple((r[0], r[1]) for r in ranges or () if r and len(r) == 2 and r[0] is not None)
        out[cid][key].append(AckSent(event, t, space, largest, pairs or ((largest, largest),), delay))
    return out


#: a capture's packets with their CRYPTO frames (``{which}``: which packets)
_CAPTURED_SQL = """
    SELECT p.connection_id, p.event_index, p.time_ms, p.sender, p.packet_type, p.packet_number, p.size_bytes,
           p.packet_number_space,
           list((f.offset_bytes, f.length_bytes) ORDER BY f.position)
               FILTER (WHERE f.frame_type = 'crypto' AND f.offset_bytes IS NOT NULL AND f.length_bytes > 0)
    FROM ({which}) p LEFT JOIN frames f USING (connection_id, event_index)
    GROUP BY ALL ORDER BY 1, 2"""

#: what tells when each side had its keys (:func:`quicack.core.keywait.key_ready`): the Initial
#: and Handshake packets, and each side's first 1-RTT packet, of the captures' connections
_HANDSHAKE_PACKETS = """
    WITH c AS (SELECT connection_id FROM connections WHERE connection_id >= $first AND vantage = 'network'),
    first_1rtt AS (SELECT connection_id, min(event_index) AS event_index, true AS first
                   FROM packets JOIN c USING (connection_id) WHERE packet_type = '1RTT' GROUP BY connection_id, sender)
    SELECT p.* FROM packets p JOIN c USING (connection_id) LEFT JOIN first_1rtt f USING (connection_id, event_index)
    WHERE p.packet_type IN ('initial', 'handshake') OR f.first"""

#: the packets that came before the last keys (``$until`` per connection of ``$ids``)
_BEFORE_KEYS = """
    SELECT p.* FROM packets p JOIN (SELECT unnest($ids) AS connection_id, unnest($until) AS until) u
    USING (connection_id) WHERE p.time_ms < u.until"""


def _captured(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> list[tuple]:
    """Rows from captures (vantage ``network``): packets that arrived before their receiver could
    have its keys (:func:`quicack.core.keywait.capture_waits`).  Only a packet that came before
    the last of its connection's keys can have waited: the handshake's packets tell when the keys
    came, then only the packets before that are read, and the ACKs and packet numbers only of
    connections where one waited."""
    packets = _captured_packets(con, _CAPTURED_SQL.format(which=_HANDSHAKE_PACKETS), {"first": first_connection_id})
    until = {cid: max(t for t, _ in ready.values()) for cid, ps in packets.items() if (ready := key_ready(ps))}
    if not until:
        return []
    ids = sorted(until)
    before = _captured_packets(con, _CAPTURED_SQL.format(which=_BEFORE_KEYS),
                               {"ids": ids, "until": [until[cid] for cid in ids]})
    waiting: dict[int, bool] = {}  # connection → whether a packet it could not decrypt waited
    for cid in ids:
        merged = {p.event_index: p for p in packets[cid] + before.get(cid, [])}
        packets[cid] = [merged[e] for e in sorted(merged)]
        ready = key_ready(packets[cid])
        late = [p for p in packets[cid]  # (as capture_waits: the receiver is the side that did not send it)
                if p.time_ms < ready.get(("client" if p.sender == "server" else "server", p.packet_type),
                                         (p.time_ms,))[0]]
        if late:
            waiting[cid] = any(p.packet_number is None for p in late)
    if not waiting:
        return []
    ids = sorted(waiting)
    acks = _acks(con, ids, "p.sender")
    numbers: dict[int, dict[tuple[str, str], set[int]]] = defaultdict(dict)
    for cid, sender, packet_type, space, found in con.execute("""
            SELECT connection_id, sender, packet_type, packet_number_space, list(packet_number) FROM packets
            WHERE connection_id IN (SELECT unnest($ids)) AND packet_number IS NOT NULL GROUP BY ALL""",
                                                              {"ids": [c for c in ids if waiting[c]]}).fetchall():
        numbers[cid].setdefault((sender, SPACES.get(packet_type, space)), set()).update(found)
    caps: dict[int, dict[str, float]] = defaultdict(dict)
    for cid, endpoint, value in con.execute("""
            SELECT connection_id, endpoint, any_value(max_ack_delay_ms) FROM transport_parameters
            WHERE connection_id IN (SELECT unnest($ids)) GROUP BY 1, 2""", {"ids": ids}).fetchall():
        caps[cid][endpoint] = value
    rows = []
    for cid in ids:
        cap = {side: caps[cid].get(side) or DEFAULT_MAX_ACK_DELAY_MS for side in ("client", "server")}
        for receiver, w in capture_waits(packets[cid], acks.get(cid, {}), cap, numbers.get(cid, {})):
            rows.append(_row(cid, w, cap[receiver], receiver, "capture"))
    return rows


def _captured_packets(con: duckdb.DuckDBPyConnection, sql: str, params: dict) -> dict[int, list[Captured]]:
    packets: dict[int, list[Captured]] = defaultdict(list)
    for cid, *row, crypto in con.execute(sql, params).fetchall():
        packets[cid].append(Captured(*row, tuple((c[0], c[1]) for c in crypto or ())))
    return packets


def _row(cid: int, w, cap: float, receiver: str | None, source: str) -> tuple:
    r, a = w.received, w.ack
    return (cid, w.buffered.event_index, w.buffered.time_ms, w.buffered.packet_type, w.buffered.size_bytes,
            r and r.event_index, r and r.time_ms, r and r.packet_number, r and r.space, w.wait_ms,
            a and a.event_index, a and a.time_ms, a and a.largest, a and a.ack_delay_ms,
            w.ack_delay_from_receipt_ms, w.uncovered_ms, cap, w.sample_inflation_ms, receiver, source)


def _type(name: str | None) -> str:
    """qlog's packet type names as ``packets.packet_type`` has them."""
    return {"1rtt": "1RTT", "0rtt": "0RTT"}.get(name or "", name or "unknown")


def inflated_samples(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Each key wait whose ACK gave the peer an RTT sample, next to that sample as the peer's
    trace replays (RFC 9002, ``rtt_samples``) and the sample with the ACK delay counted from
    receipt (latest_rtt − ack_delay_from_receipt_ms, uncapped): what the wait cost the estimator."""
    cur = con.execute("""
        SELECT w.connection_id AS receiver_connection_id, s.connection_id AS sampler_connection_id,
               w.packet_type, w.packet_number, w.wait_ms, w.ack_delay_ms, w.ack_delay_from_receipt_ms,
               w.sample_inflation_ms, s.latest_rtt_ms, s.ack_delay_used_ms, s.adjusted_rtt_ms,
               s.latest_rtt_ms - w.ack_delay_from_receipt_ms AS from_receipt_rtt_ms,
               s.smoothed_rtt_ms, s.pto_ms
        FROM key_waits w
        JOIN connections r ON r.connection_id = w.connection_id
        JOIN connections o ON o.odcid = r.odcid
             AND o.vantage = CASE coalesce(w.receiver, r.vantage) WHEN 'client' THEN 'server' ELSE 'client' END
        JOIN rtt_samples s ON s.connection_id = o.connection_id AND s.packet_number_space = w.space
             AND s.largest_acknowledged = w.packet_number
        WHERE w.sample_inflation_ms IS NOT NULL
        ORDER BY 1, w.buffered_event_index""")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]
