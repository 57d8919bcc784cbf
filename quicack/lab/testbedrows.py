"""The ``testbed_runs`` table: one row per connection attempt of an experiment, its figures from
the ingested qlogs.

Theory of operation: the runner (:mod:`quicack.lab.runner`) hands over what it knows of each
attempt — the matrix cell, the client's outcome, the relay's run and flow, and the store's
``connection_id`` of the client's and of the server's trace once both qlogs are ingested — and
:func:`insert` adds the figures in the same statement, from the rows the ingest wrote (so a
testbed run is measured exactly as any other trace):

- ``ttfb_ms``, ``handshake_ms``: the client connection's ``first_response_byte_ms`` and
  ``handshake_complete_ms`` (ms after the client sent its first Initial, in its own qlog);
- ``client_first_pto_ms``: its ``first_pto_ms`` (the RFC 9002 replay's PTO after the first RTT
  sample);
- ``client_pto_count`` / ``server_pto_count``: PTO expiries in each endpoint's qlog
  (``timers``: ``timer_type = 'pto'``, ``event_type = 'expired'``; quicack's client and servers
  log every one, :mod:`quicack.lab.ptolog`);
- ``client_retransmitted_packets`` / ``server_retransmitted_packets``: packets the endpoint sent
  that carry CRYPTO or STREAM bytes it had sent before — a frame whose offset lies below the end
  of what earlier frames of the same packet number space (CRYPTO) or stream (STREAM) carried.
  This counts what was sent again, whatever made the stack send it (PTO, loss detection); aioquic
  logs a PTO's retransmissions as ``packet_lost`` too, so lost-packet counts would mix causes.

Rows are keyed on (experiment, scenario, server, client, one_way_delay_ms, repetition): an
attempt is stored once, and the rows already there are what a resumed run skips
(:func:`stored`).  The columns are the contract (``schemas/README.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: what the runner gives per attempt, in DDL order (the figures follow in the DDL)
ATTEMPT_COLUMNS = ("experiment", "scenario", "server", "client", "one_way_delay_ms", "repetition",
                   "drop_to_client", "drop_to_server", "cert_chain_length", "cert_delay_ms",
                   "response_bytes", "outcome", "error_reason", "started_epoch_ms")
LINK_COLUMNS = ("certificates_received", "response_bytes_received", "client_connection_id",
                "server_connection_id", "relay_run_id", "relay_flow", "client_qlog_path",
                "server_qlog_path")
KEY = ("experiment", "scenario", "server", "client", "one_way_delay_ms", "repetition")
#: a cell's settings: a resumed run must find the rows it continues made with the same ones
SETTINGS = ("drop_to_client", "drop_to_server", "cert_chain_length", "cert_delay_ms", "response_bytes")

_TYPES = {"one_way_delay_ms": "DOUBLE", "repetition": "INTEGER", "cert_chain_length": "INTEGER",
          "cert_delay_ms": "DOUBLE", "response_bytes": "BIGINT", "started_epoch_ms": "DOUBLE",
          "certificates_received": "INTEGER", "response_bytes_received": "BIGINT",
          "client_connection_id": "BIGINT", "server_connection_id": "BIGINT", "relay_run_id": "BIGINT"}

_INSERT_SQL = """
WITH ours AS (
    SELECT client_connection_id AS connection_id FROM testbed_batch
    UNION SELECT server_connection_id FROM testbed_batch),
resent AS (  -- CRYPTO/STREAM frames sent, with the end of what the same space or stream carried before
    SELECT f.connection_id, f.event_index, f.offset_bytes,
           max(f.offset_bytes + f.length_bytes) OVER (
               PARTITION BY f.connection_id, p.packet_number_space, f.frame_type, f.stream_id
               ORDER BY f.event_index, f.position
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS sent_before
    FROM frames f JOIN packets p USING (connection_id, event_index)
    WHERE f.connection_id IN (SELECT connection_id FROM ours) AND p.direction = 'sent'
      AND f.frame_type IN ('crypto', 'stream') AND f.offset_bytes IS NOT NULL AND f.length_bytes > 0),
retransmitted AS (
    SELECT connection_id, count(DISTINCT event_index) AS packets FROM resent
    WHERE offset_bytes < sent_before GROUP BY connection_id),
ptos AS (
    SELECT connection_id, count(*) AS expiries FROM timers
    WHERE connection_id IN (SELECT connection_id FROM ours)
      AND timer_type = 'pto' AND event_type = 'expired' GROUP BY connection_id)
SELECT {attempt}, cc.first_response_byte_ms, cc.handshake_complete_ms, cc.first_pto_ms,
       CASE WHEN cc.connection_id IS NOT NULL THEN coalesce(cp.expiries, 0) END,
       CASE WHEN sc.connection_id IS NOT NULL THEN coalesce(sp.expiries, 0) END,
       CASE WHEN cc.connection_id IS NOT NULL THEN coalesce(cr.packets, 0) END,
       CASE WHEN sc.connection_id IS NOT NULL THEN coalesce(sr.packets, 0) END,
       {links}
FROM testbed_batch b
LEFT JOIN connections cc ON cc.connection_id = b.client_connection_id
LEFT JOIN connections sc ON sc.connection_id = b.server_connection_id
LEFT JOIN ptos cp ON cp.connection_id = b.client_connection_id
LEFT JOIN ptos sp ON sp.connection_id = b.server_connection_id
LEFT JOIN retransmitted cr ON cr.connection_id = b.client_connection_id
LEFT JOIN retransmitted sr ON sr.connection_id = b.server_connection_id
"""
FIGURE_COLUMNS = ("ttfb_ms", "handshake_ms", "client_first_pto_ms", "client_pto_count",
                  "server_pto_count", "client_retransmitted_packets", "server_retransmitted_packets")
COLUMNS = ATTEMPT_COLUMNS + FIGURE_COLUMNS + LINK_COLUMNS


def insert(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Insert attempt rows (dicts keyed by ATTEMPT_COLUMNS and LINK_COLUMNS) with their figures,
    in one transaction; returns how many."""
    import pyarrow as pa

    if not rows:
        return 0
    given = ATTEMPT_COLUMNS + LINK_COLUMNS
    batch = pa.Table.from_pydict({c: [r.get(c) for r in rows] for c in given})
    casts = ", ".join(f"b.{c}::{_TYPES.get(c, 'VARCHAR')}" for c in ATTEMPT_COLUMNS)
    links = ", ".join(f"b.{c}::{_TYPES.get(c, 'VARCHAR')}" for c in LINK_COLUMNS)
    con.register("testbed_batch", batch)
    con.execute("BEGIN")
    try:
        con.execute(f"INSERT INTO testbed_runs ({', '.join(COLUMNS)}) "
                    + _INSERT_SQL.format(attempt=casts, links=links))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        con.unregister("testbed_batch")
    return len(rows)


def stored(con: duckdb.DuckDBPyConnection, experiment: str) -> dict[tuple, dict]:
    """The experiment's rows already stored: (scenario, server, client, one_way_delay_ms) →
    {"repetitions": set, SETTINGS…: the settings of its rows (one value each, or a list when
    they differ)}."""
    found = con.execute(f"""
        SELECT scenario, server, client, one_way_delay_ms, list(DISTINCT repetition),
               {', '.join(f'list(DISTINCT {c})' for c in SETTINGS)}
        FROM testbed_runs WHERE experiment = ? GROUP BY ALL""", [experiment]).fetchall()
    out = {}
    for scenario, server, client, delay, repetitions, *settings in found:
        cell = {"repetitions": set(repetitions)}
        for name, values in zip(SETTINGS, settings):
            cell[name] = values[0] if len(values) == 1 else values
        out[(scenario, server, client, delay)] = cell
    return out


def medians(con: duckdb.DuckDBPyConnection, experiment: str,
            scenarios: list[str] = ()) -> tuple[list[str], list[tuple]]:
    """Median TTFB and client first PTO (ms) of the completed attempts per scenario, delay and
    server, with the attempts behind each median: (columns, rows), scenarios in the order given
    (others after them, by name)."""
    relation = con.sql("""
        SELECT scenario, one_way_delay_ms, server, count(*) FILTER (WHERE outcome = 'ok') AS ok,
               count(*) AS attempts, median(ttfb_ms) FILTER (WHERE outcome = 'ok') AS median_ttfb_ms,
               median(client_first_pto_ms) FILTER (WHERE outcome = 'ok') AS median_client_first_pto_ms
        FROM testbed_runs WHERE experiment = $experiment
        GROUP BY scenario, one_way_delay_ms, server
        ORDER BY coalesce(nullif(list_position($order, scenario), 0), 1 << 30), scenario,
                 one_way_delay_ms, server""",
                        params={"experiment": experiment, "order": list(scenarios)})
    return relation.columns, relation.fetchall()
