"""The ``testbed_runs`` table: one row per connection attempt of an experiment, its figures from
the ingested qlogs.

Theory of operation: the runner (:mod:`quicack.lab.runner`) hands over what it knows of each
attempt — the matrix cell, the client's outcome, the relay's run and flow, and the store's
``connection_id`` of the client's and of the server's trace once both qlogs are ingested — and
:func:`insert` adds the figures in the same statement, from the rows the ingest wrote (so a
testbed run is measured exactly as any other trace):

- ``ttfb_ms``, ``handshake_ms``: the client connection's ``first_response_byte_ms`` and
  ``handshake_complete_ms`` (ms after the client sent its first Initial, in its own qlog); for a
  client whose qlog logs no frames (quinn 0.11) the times its own clock measured
  (``client_ttfb_ms``, ``client_handshake_ms`` of the runner's rows);
- ``client_first_pto_ms``: its ``first_pto_ms`` (the RFC 9002 replay's PTO after the first RTT
  sample);
- ``client_pto_count`` / ``server_pto_count``: PTO expiries in each endpoint's qlog, where the
  stack logs them (the runner's ``client_pto_source`` / ``server_pto_source``): ``timers`` —
  expired PTO timer events (``timer_type = 'pto'``, ``event_type = 'expired'``; quicack's client
  and servers log every one, :mod:`quicack.lab.ptolog`, quic-go too); ``metrics`` — the rises of
  the ``pto_count`` it logs in ``metrics_updated`` (ngtcp2, quinn's server); otherwise NULL;
- ``client_retransmitted_packets`` / ``server_retransmitted_packets``: packets the endpoint sent
  that carry CRYPTO or STREAM bytes it had sent before — a frame whose offset lies below the end
  of what earlier frames of the same packet number space (CRYPTO) or stream (STREAM) carried.
  This counts what was sent again, whatever made the stack send it (PTO, loss detection); aioquic
  logs a PTO's retransmissions as ``packet_lost`` too, so lost-packet counts would mix causes.
  NULL when the endpoint's qlog logs no frames for the connection (quinn 0.11);
- resumed attempts (``resumption``, :mod:`quicack.lab.resumed`): the row is the resumed
  connection; ``zero_rtt`` is what quicack's client saw of its early data, else the
  ``address_validation.zero_rtt`` of the client's trace, else of the server's;
  ``full_ttfb_ms``, ``full_handshake_ms`` are the full connection's, as ``ttfb_ms`` and
  ``handshake_ms`` (its trace: ``full_client_connection_id``);
- ``ttlb_ms``: the time to last byte quicack's client measured itself (its first Initial sent →
  the response's end of stream read, on its event loop's clock; NULL for a real client).

Rows are keyed on (experiment, scenario, server, client, one_way_delay_ms, repetition): an
attempt is stored once, and the rows already there are what a resumed run skips
(:func:`stored`).  The columns are the contract (``schemas/README.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: what the runner may give per attempt besides, used for the figures and not stored: a client's
#: own TTFB and handshake time, and where each end's PTO expiries come from (module docstring)
HELPER_COLUMNS = ("client_ttfb_ms", "client_handshake_ms", "client_pto_source", "server_pto_source",
                  "client_zero_rtt", "full_client_ttfb_ms", "full_client_handshake_ms")
#: what the runner gives per attempt, in DDL order (the figures follow in the DDL)
ATTEMPT_COLUMNS = ("experiment", "scenario", "server", "client", "one_way_delay_ms", "repetition",
                   "drop_to_client", "drop_to_server", "cert_chain_length", "cert_delay_ms",
                   "response_bytes", "outcome", "error_reason", "started_epoch_ms")
LINK_COLUMNS = ("certificates_received", "response_bytes_received", "client_connection_id",
                "server_connection_id", "relay_run_id", "relay_flow", "client_qlog_path",
                "server_qlog_path", "ttlb_ms", "prime_bytes", "prime_rate_to_client_kbps",
                "receive_window_bytes", "resumption", "session_resumed", "full_client_connection_id",
                "capture_connection_id")
KEY = ("experiment", "scenario", "server", "client", "one_way_delay_ms", "repetition")
#: a cell's settings: a resumed run must find the rows it continues made with the same ones
SETTINGS = ("drop_to_client", "drop_to_server", "cert_chain_length", "cert_delay_ms", "response_bytes",
            "prime_bytes", "prime_rate_to_client_kbps", "receive_window_bytes", "resumption")
#: how a setting is read back (rows stored before schema 9 have no resumption: false)
_STORED = {"resumption": "coalesce(resumption, false)"}

_TYPES = {"one_way_delay_ms": "DOUBLE", "repetition": "INTEGER", "cert_chain_length": "INTEGER",
          "cert_delay_ms": "DOUBLE", "response_bytes": "BIGINT", "started_epoch_ms": "DOUBLE",
          "certificates_received": "INTEGER", "response_bytes_received": "BIGINT",
          "client_connection_id": "BIGINT", "server_connection_id": "BIGINT", "relay_run_id": "BIGINT",
          "ttlb_ms": "DOUBLE", "prime_bytes": "BIGINT", "prime_rate_to_client_kbps": "DOUBLE",
          "receive_window_bytes": "BIGINT", "resumption": "BOOLEAN", "session_resumed": "BOOLEAN",
          "full_client_connection_id": "BIGINT", "capture_connection_id": "BIGINT"}

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
framed AS (SELECT DISTINCT connection_id FROM frames WHERE connection_id IN (SELECT connection_id FROM ours)),
expired AS (
    SELECT connection_id, count(*) AS n FROM timers
    WHERE connection_id IN (SELECT connection_id FROM ours)
      AND timer_type = 'pto' AND event_type = 'expired' GROUP BY connection_id),
logged AS (  -- the logged pto_count, step by step (stacks log it only when it changed, or always)
    SELECT connection_id, pto_count - lag(pto_count, 1, 0) OVER (
               PARTITION BY connection_id ORDER BY event_index) AS rise
    FROM logged_metrics WHERE connection_id IN (SELECT connection_id FROM ours) AND pto_count IS NOT NULL),
risen AS (SELECT connection_id, sum(greatest(rise, 0))::BIGINT AS n FROM logged GROUP BY connection_id)
SELECT {attempt}, coalesce(cc.first_response_byte_ms, b.client_ttfb_ms),
       coalesce(cc.handshake_complete_ms, b.client_handshake_ms), cc.first_pto_ms,
       CASE WHEN cc.connection_id IS NOT NULL THEN CASE b.client_pto_source
           WHEN 'timers' THEN coalesce(ce.n, 0) WHEN 'metrics' THEN coalesce(cm.n, 0) END END,
       CASE WHEN sc.connection_id IS NOT NULL THEN CASE b.server_pto_source
           WHEN 'timers' THEN coalesce(se.n, 0) WHEN 'metrics' THEN coalesce(sm.n, 0) END END,
       CASE WHEN cf.connection_id IS NOT NULL THEN coalesce(cr.packets, 0) END,
       CASE WHEN sf.connection_id IS NOT NULL THEN coalesce(sr.packets, 0) END,
       CASE WHEN b.resumption::BOOLEAN THEN coalesce(b.client_zero_rtt, cav.zero_rtt, sav.zero_rtt) END,
       coalesce(fc.first_response_byte_ms, b.full_client_ttfb_ms),
       coalesce(fc.handshake_complete_ms, b.full_client_handshake_ms),
       {links}
FROM testbed_batch b
LEFT JOIN connections cc ON cc.connection_id = b.client_connection_id
LEFT JOIN connections sc ON sc.connection_id = b.server_connection_id
LEFT JOIN expired ce ON ce.connection_id = b.client_connection_id
LEFT JOIN expired se ON se.connection_id = b.server_connection_id
LEFT JOIN risen cm ON cm.connection_id = b.client_connection_id
LEFT JOIN risen sm ON sm.connection_id = b.server_connection_id
LEFT JOIN framed cf ON cf.connection_id = b.client_connection_id
LEFT JOIN framed sf ON sf.connection_id = b.server_connection_id
LEFT JOIN retransmitted cr ON cr.connection_id = b.client_connection_id
LEFT JOIN retransmitted sr ON sr.connection_id = b.server_connection_id
LEFT JOIN connections fc ON fc.connection_id = b.full_client_connection_id
LEFT JOIN address_validation cav ON cav.connection_id = b.client_connection_id
LEFT JOIN address_validation sav ON sav.connection_id = b.server_connection_id
"""
FIGURE_COLUMNS = ("ttfb_ms", "handshake_ms", "client_first_pto_ms", "client_pto_count",
                  "server_pto_count", "client_retransmitted_packets", "server_retransmitted_packets",
                  "zero_rtt", "full_ttfb_ms", "full_handshake_ms")
COLUMNS = ATTEMPT_COLUMNS + FIGURE_COLUMNS + LINK_COLUMNS


def insert(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Insert attempt rows (dicts keyed by ATTEMPT_COLUMNS and LINK_COLUMNS, and HELPER_COLUMNS:
    the PTO sources default to ``timers``, quicack's own endpoints) with their figures, in one
    transaction; returns how many."""
    import pyarrow as pa

    if not rows:
        return 0
    given = ATTEMPT_COLUMNS + LINK_COLUMNS
    helpers = {"client_ttfb_ms": pa.float64(), "client_handshake_ms": pa.float64(),
               "client_pto_source": pa.string(), "server_pto_source": pa.string(),
               "client_zero_rtt": pa.string(), "full_client_ttfb_ms": pa.float64(),
               "full_client_handshake_ms": pa.float64()}
    batch = pa.Table.from_pydict(
        {**{c: [r.get(c) for r in rows] for c in given},
         **{c: pa.array([r.get(c, "timers" if c.endswith("_source") else None) for r in rows], kind)
            for c, kind in helpers.items()}})
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
               {', '.join(f'list(DISTINCT {_STORED.get(c, c)})' for c in SETTINGS)}
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
    """Median TTFB and client first PTO (ms) of the completed attempts per scenario, delay,
    client and server, with the attempts behind each median: (columns, rows), scenarios in the
    order given (others after them, by name)."""
    relation = con.sql("""
        SELECT scenario, one_way_delay_ms, client, server, count(*) FILTER (WHERE outcome = 'ok') AS ok,
               count(*) AS attempts, median(ttfb_ms) FILTER (WHERE outcome = 'ok') AS median_ttfb_ms,
               median(client_first_pto_ms) FILTER (WHERE outcome = 'ok') AS median_client_first_pto_ms
        FROM testbed_runs WHERE experiment = $experiment
        GROUP BY scenario, one_way_delay_ms, client, server
        ORDER BY coalesce(nullif(list_position($order, scenario), 0), 1 << 30), scenario,
                 one_way_delay_ms, client, server""",
                        params={"experiment": experiment, "order": list(scenarios)})
    return relation.columns, relation.fetchall()
