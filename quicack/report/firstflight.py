"""What each probe's first server flight looked like, read back from the store.

Theory of operation: a probe's client qlog, once ingested, holds the server's Initial packets
as the client received them (kernel receive times).  Per probe: the frames of the first server
Initial, the time of the first one carrying an ACK and of the first carrying CRYPTO (the
ServerHello), and their difference, next to the class the ingest classifier gave the probe's
connection (``connections.handshake_class``).  The demo prints them per server.
"""

from __future__ import annotations

import duckdb

PER_PROBE = """
    WITH server_initial AS (
        SELECT p.run_id, p.target_index, p.repetition, p.address, p.port, k.time_ms,
               bool_or(f.frame_type = 'ack') AS has_ack,
               bool_or(f.frame_type = 'crypto') AS has_crypto,
               coalesce(string_agg(f.frame_type, '+' ORDER BY f.position)
                        FILTER (WHERE f.frame_type <> 'padding'), '') AS frames
        FROM probes p JOIN packets k USING (connection_id) JOIN frames f USING (connection_id, event_index)
        WHERE p.run_id = $run AND k.sender = 'server' AND k.direction = 'received'
          AND k.packet_type = 'initial'
        GROUP BY ALL)
    SELECT run_id, target_index, repetition, address, port,
           arg_min(frames, time_ms) AS first_frames,
           min(time_ms) FILTER (WHERE has_ack) AS ack_ms,
           min(time_ms) FILTER (WHERE has_crypto) AS server_hello_ms,
           min(time_ms) FILTER (WHERE has_crypto) - min(time_ms) FILTER (WHERE has_ack) AS gap_ms
    FROM server_initial GROUP BY ALL
"""


def per_server(con: duckdb.DuckDBPyConnection, run_id: int) -> list[dict]:
    """One row per server address: probes, the most common first-Initial frames and the median
    ACK→ServerHello gap and first-ACK time (ms after the client's first Initial was sent)."""
    rows = con.execute(f"""
        WITH per_probe AS ({PER_PROBE})
        SELECT pp.address || ':' || pp.port AS server, count(*) AS probes,
               mode(pp.first_frames) AS first_frames, mode(c.handshake_class) AS handshake_class,
               median(pp.gap_ms) AS gap_ms, median(p.first_ack_ms) AS first_ack_ms
        FROM per_probe pp JOIN probes p USING (run_id, target_index, repetition)
        LEFT JOIN connections c USING (connection_id)
        GROUP BY ALL ORDER BY server""", {"run": run_id}).fetchall()
    names = ("server", "probes", "first_frames", "handshake_class", "gap_ms", "first_ack_ms")
    return [dict(zip(names, r)) for r in rows]


#: The server's Initial packets of the traces shipped with the demo, as each side logged them.
SHIPPED_HANDSHAKE = """
    SELECT c.vantage, p.direction, p.packet_type, p.packet_number, p.time_ms,
           string_agg(f.frame_type, '+' ORDER BY f.position) AS frames
    FROM packets p JOIN connections c USING (connection_id)
    JOIN frames f USING (connection_id, event_index)
    WHERE p.sender = 'server' AND p.packet_type = 'initial' AND c.file_id IN
          (SELECT file_id FROM files WHERE path LIKE '%client.qlog' OR path LIKE '%server.qlog')
    GROUP BY ALL ORDER BY c.vantage, p.time_ms LIMIT 4"""


def shipped_handshake(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """The first server Initial packets of the demo's client and server qlogs, each side's view."""
    relation = con.sql(SHIPPED_HANDSHAKE)
    return [dict(zip(relation.columns, row)) for row in relation.fetchall()]
