"""From staged qlog events (table ``ev``) to the normalized tables of ``schemas/store.sql``.

Theory of operation: ``quicack.reader`` leaves one row per event in the temporary table ``ev``
(canonical event name, time in ms, the event's ``data`` as JSON).  The statements below route
each event to its table — ``packet_sent``/``packet_received`` to ``packets`` and ``frames``,
``parameters_set`` to ``transport_parameters``, ``metrics_updated`` to ``logged_metrics``,
``packet_lost``/``packet_dropped``/timer events to their own tables and everything else to
``other_events`` — entirely inside DuckDB.  Per-trace constants (vantage, quirks) come from the
small table ``tr`` built from :class:`~quicack.model.TraceInfo`.

Field spellings differ between qlog generations; each column takes the first spelling present
(``coalesce``), newest first.  Frame names are the qlog names, lower case (``'ack'``, …).
"""

from __future__ import annotations

import re

import duckdb

from . import qlog
from .model import TraceInfo

PACKET_EVENTS = ("packet_sent", "packet_received")
#: events that have a table of their own; all others go to other_events
ROUTED_EVENTS = PACKET_EVENTS + ("parameters_set", "metrics_updated", "packet_lost",
                                 "packet_dropped", "loss_timer_updated", "timer_updated")

# Frame types that do not make a packet ack-eliciting (RFC 9002 §2: "Packets that contain
# ack-eliciting frames elicit an ACK from the receiver ... ACK, PADDING, and CONNECTION_CLOSE
# frames" are the exceptions).
NON_ACK_ELICITING = ("ack", "padding", "connection_close")

_PACKET_TYPE = """CASE replace(replace(lower({x}), '-', ''), '_', '')
    WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0rtt' THEN '0RTT' WHEN 'zerortt' THEN '0RTT' WHEN '0rttprotected' THEN '0RTT'
    WHEN '1rtt' THEN '1RTT' WHEN 'onertt' THEN '1RTT' WHEN 'short' THEN '1RTT'
    WHEN '1rttprotected' THEN '1RTT' WHEN 'protected' THEN '1RTT'
    WHEN 'retry' THEN 'retry' WHEN 'versionnegotiation' THEN 'version_negotiation'
    WHEN 'statelessreset' THEN 'stateless_reset'
    ELSE coalesce(lower({x}), 'unknown') END"""

_SPACE = """CASE {t} WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0RTT' THEN 'application_data' WHEN '1RTT' THEN 'application_data' END"""


_JSON_PATH = re.compile(r"\b([A-Za-z_][\w.]*(?:\s*->>?\s*'[^']*')+)")


def paren_json(sql: str) -> str:
    """Parenthesize every ``x->'a'->>'b'`` chain: DuckDB's -> and ->> bind looser than || and IS."""
    return _JSON_PATH.sub(r"(\1)", sql)


def _num(expr: str, kind: str = "DOUBLE") -> str:
    return f"TRY_CAST({expr} AS {kind})"


_PACKET_NUMBER = _num("coalesce(data->'header'->>'packet_number', data->>'packet_number')", "BIGINT")


def _packet_type(data: str) -> str:
    raw = (f"coalesce({data}->'header'->>'packet_type', {data}->>'packet_type', "
           f"{data}->'header'->>'type', CASE WHEN {data}->'header'->>'form' = 'short' THEN '1RTT' END)")
    return _PACKET_TYPE.format(x=raw)


def load_traces(con: duckdb.DuckDBPyConnection, traces: list[TraceInfo]) -> None:
    con.execute("DROP TABLE IF EXISTS tr")
    con.execute("""CREATE TEMP TABLE tr (trace_index INTEGER, vantage VARCHAR, flow VARCHAR,
        implementation VARCHAR, odcid VARCHAR, title VARCHAR, time_format VARCHAR,
        reference_epoch_ms DOUBLE, time_scale_ms DOUBLE, ack_delay_encoding VARCHAR,
        metric_scale_ms DOUBLE, missing_ack_delay_is_zero BOOLEAN, sender_from_cids BOOLEAN,
        quirks VARCHAR[], vantage_from_first_packet BOOLEAN, rx_datagram_events_first BOOLEAN,
        latest_rtt_zero_is_unset BOOLEAN, server_group_id_is_client_scid BOOLEAN)""")
    con.executemany("INSERT INTO tr VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
        (t.trace_index, t.vantage.value, t.flow, t.implementation, t.odcid, t.title, t.time_format,
         t.reference_epoch_ms, t.time_scale_ms, t.ack_delay_encoding.value, t.metric_scale_ms,
         t.missing_ack_delay_is_zero, t.sender_from_cids, list(t.quirks),
         t.vantage_from_first_packet, t.rx_datagram_events_first, t.latest_rtt_zero_is_unset,
         t.server_group_id_is_client_scid)
        for t in traces])


def normalize(con: duckdb.DuckDBPyConnection, file_id: int, first_connection_id: int) -> None:
    """Insert the rows of the staged file into the store tables (caller holds the transaction)."""
    con = _Parenthesizing(con)
    non_eliciting = ", ".join(f"'{f}'" for f in NON_ACK_ELICITING)

    # Canonical event names: few distinct names, mapped by the one Python rule.
    names = [n for (n,) in con.execute("SELECT DISTINCT name FROM ev").fetchall()]
    by_event: dict[str, list[str]] = {}
    for n in names:
        by_event.setdefault(qlog.canonical_event(n), []).append(n)

    def named(*events: str, negate: bool = False) -> str:
        """A filter on the raw names (pushed into the scan of ev) selecting these events."""
        wanted = [n for ev_name in events for n in by_event.get(ev_name, [])]
        if not wanted:
            return "true" if negate else "false"
        listed = ", ".join("'" + n.replace("'", "''") + "'" for n in wanted)
        return f"name {'NOT IN' if negate else 'IN'} ({listed})"

    # One connection per (trace, group): quinn writes all connections into one stream, told
    # apart by group_id.  Times are made relative to the connection's first event.  A trace
    # without a vantage point (quinn) takes it from its first packet event if that is an
    # Initial: a client's first packet is one it sends, a server's one it receives.
    first_side = (f"arg_min(CASE WHEN {named('packet_sent')} THEN 'client' ELSE 'server' END, ev.rowid) "
                  f"FILTER (WHERE {named(*PACKET_EVENTS)})")
    first_type = f"arg_min({_packet_type('ev.data')}, ev.rowid) FILTER (WHERE {named(*PACKET_EVENTS)})"
    con.execute("""CREATE OR REPLACE TEMP TABLE first_row AS
        SELECT trace_index, min(rowid) AS first_rowid FROM ev GROUP BY trace_index""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE conn AS
        SELECT g.*, {first_connection_id} - 1 + row_number() OVER (ORDER BY trace_index, first_event)
                    AS connection_id
        FROM (SELECT trace_index, group_key, min(ev.rowid - f.first_rowid) AS first_event, count(*) AS events,
                     min(t_ms) AS first_ms, max(t_ms) AS last_ms,
                     CASE WHEN {first_type} = 'initial' THEN {first_side} END AS first_packet_side
              FROM ev JOIN first_row f USING (trace_index) GROUP BY trace_index, group_key) g""")
    con.execute("""CREATE OR REPLACE TEMP VIEW e AS
        SELECT c.connection_id, ev.rowid - f.first_rowid AS event_index, ev.name, ev.data,
               ev.t_ms - c.first_ms AS time_ms,
               CASE WHEN tr.time_format = 'absolute' THEN ev.t_ms
                    ELSE tr.reference_epoch_ms + ev.t_ms END AS epoch_ms,
               CASE WHEN tr.vantage_from_first_packet THEN coalesce(c.first_packet_side, tr.vantage)
                    ELSE tr.vantage END AS vantage,
               tr.flow, tr.time_scale_ms, tr.metric_scale_ms, tr.ack_delay_encoding,
               tr.missing_ack_delay_is_zero, tr.sender_from_cids, tr.rx_datagram_events_first,
               tr.latest_rtt_zero_is_unset
        FROM ev JOIN first_row f USING (trace_index)
        JOIN conn c USING (trace_index, group_key) JOIN tr USING (trace_index)""")

    # Who sent a packet: the vantage point for 'sent', its peer for 'received'; a network
    # observer takes the side named by its flow ('client' unless it says otherwise).
    local_side = "CASE WHEN vantage = 'server' OR (vantage = 'network' AND flow = 'server') THEN 'server' ELSE 'client' END"
    peer_side = f"CASE WHEN ({local_side}) = 'server' THEN 'client' ELSE 'server' END"

    # Without direction in the events, a long header's source CID equal to the one of the
    # client's first Initial marks a client packet, and a short header whose destination CID is
    # that one marks a server packet.
    by_cids = """CASE WHEN data->'header'->>'scid' IS NOT NULL
                      THEN CASE WHEN data->'header'->>'scid' = client_cid THEN 'client' ELSE 'server' END
                      ELSE CASE WHEN data->'header'->>'dcid' = client_cid THEN 'server' ELSE 'client' END END"""
    sent = named("packet_sent")
    sender = f"CASE WHEN {sent} THEN {local_side} ELSE {peer_side} END"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE p AS
        SELECT connection_id, event_index, time_ms, epoch_ms,
               CASE WHEN sender_from_cids THEN (CASE WHEN ({by_cids}) = {local_side} THEN 'sent' ELSE 'received' END)
                    WHEN {sent} THEN 'sent' ELSE 'received' END AS direction,
               CASE WHEN sender_from_cids THEN {by_cids} ELSE {sender} END AS sender,
               {local_side} AS local_side, {peer_side} AS peer_side,
               {_packet_type('data')} AS packet_type,
               {_PACKET_NUMBER} AS packet_number,
               {_num("coalesce(data->'raw'->>'length', data->'header'->>'packet_size', data->>'packet_size', data->'header'->>'length')", 'INTEGER')} AS size_bytes,
               {_num("coalesce(data->>'datagram_id', data->'header'->>'datagram_id')", 'BIGINT')} AS logged_datagram_id,
               data->'header'->>'dcid' AS dcid,
               {_num("data->>'datagram_payload_checksum'", 'BIGINT')} AS datagram_checksum,
               -- only where the trace logs datagrams_received at all (the scanner's probes
               -- leave them out: their received packets are grouped by equal times)
               CASE WHEN rx_datagram_events_first AND rx_datagrams > 0 THEN rx_datagrams END AS rx_datagram_seq,
               time_scale_ms, ack_delay_encoding, missing_ack_delay_is_zero
        FROM (SELECT *, first_value(data->'header'->>'scid' IGNORE NULLS) OVER w AS client_cid,
                     count(*) FILTER (WHERE {named('datagrams_received')}) OVER w AS rx_datagrams
              FROM e WHERE {named(*PACKET_EVENTS, 'datagrams_received')}
              WINDOW w AS (PARTITION BY connection_id ORDER BY event_index
                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
        WHERE {named(*PACKET_EVENTS)}""")

    con.execute(f"""CREATE OR REPLACE TEMP TABLE fl AS
        SELECT connection_id, event_index, unnest(l) AS f, generate_subscripts(l, 1) - 1 AS position
        FROM (SELECT connection_id, event_index,
                     from_json(data->'frames', '["JSON"]') AS l FROM e WHERE {named(*PACKET_EVENTS)})""")

    # Transport parameters first: raw ACK Delay fields are decoded with the sender's exponent.
    con.execute(f"""INSERT INTO transport_parameters
        SELECT connection_id, owner,
               CASE WHEN owner = 'local' THEN any_value(local_side) ELSE any_value(peer_side) END,
               min(time_ms),
               arg_max({_num("data->>'max_ack_delay'")}, event_index) FILTER (WHERE data->>'max_ack_delay' IS NOT NULL),
               arg_max({_num("data->>'ack_delay_exponent'", 'INTEGER')}, event_index) FILTER (WHERE data->>'ack_delay_exponent' IS NOT NULL),
               arg_max({_num("data->>'min_ack_delay'")} / 1000.0, event_index) FILTER (WHERE data->>'min_ack_delay' IS NOT NULL),
               arg_max({_num("data->>'initial_max_data'", 'BIGINT')}, event_index) FILTER (WHERE data->>'initial_max_data' IS NOT NULL),
               arg_max({_num("coalesce(data->>'max_udp_payload_size', data->>'max_packet_size')", 'BIGINT')}, event_index)
                   FILTER (WHERE coalesce(data->>'max_udp_payload_size', data->>'max_packet_size') IS NOT NULL),
               arg_max({_num("coalesce(data->>'max_idle_timeout', data->>'idle_timeout')")}, event_index)
                   FILTER (WHERE coalesce(data->>'max_idle_timeout', data->>'idle_timeout') IS NOT NULL),
               arg_max({_num("data->>'active_connection_id_limit'", 'BIGINT')}, event_index)
                   FILTER (WHERE data->>'active_connection_id_limit' IS NOT NULL),
               to_json(list(data ORDER BY event_index))
        FROM (SELECT *, coalesce(lower(data->>'owner'), 'local') AS owner,
                     {local_side} AS local_side, {peer_side} AS peer_side
              FROM e WHERE {named('parameters_set')})
        GROUP BY connection_id, owner""")

    # RFC 9000 §19.3: "ACK Delay: ... decoded by multiplying the value in the field by 2 to the
    # power of the ack_delay_exponent transport parameter sent by the sender of the ACK frame".
    # The first server ACK (Initial) arrives before any transport parameter: default exponent 3.
    ack_delay_value = "TRY_CAST(coalesce(f->>'ack_delay', f->>'frame_type.ack.ack_delay') AS DOUBLE)"
    con.execute(f"""INSERT INTO frames
        WITH ft AS (
            SELECT fl.*,
                   replace(lower(coalesce(f->>'frame_type', f->>'type', 'unknown')), ' ', '_') AS frame_type,
                   {ack_delay_value} AS ack_delay_value,
                   list_transform(from_json(f->'acked_ranges', '[["VARCHAR"]]'),
                                  lambda r: [TRY_CAST(r[1] AS BIGINT), TRY_CAST(coalesce(r[2], r[1]) AS BIGINT)])
                       AS ranges
            FROM fl)
        SELECT ft.connection_id, ft.event_index, ft.position::INTEGER, ft.frame_type,
               CASE WHEN ft.frame_type = 'ack' THEN
                 CASE p.ack_delay_encoding
                   WHEN 'ms' THEN coalesce(ft.ack_delay_value, CASE WHEN p.missing_ack_delay_is_zero THEN 0.0 END)
                                  * p.time_scale_ms
                   WHEN 'us' THEN ft.ack_delay_value / 1000.0
                   ELSE ft.ack_delay_value * pow(2, CASE WHEN p.packet_type = 'initial' THEN 3
                                                        ELSE coalesce(tp.ack_delay_exponent, 3) END) / 1000.0
                 END END,
               CASE WHEN ft.frame_type = 'ack' AND p.ack_delay_encoding = 'raw' THEN ft.ack_delay_value::BIGINT END,
               coalesce(list_max(list_transform(ft.ranges, lambda r: r[2])),
                        {_num("f->>'largest_acknowledged'", 'BIGINT')},
                        {_num("f->>'frame_type.ack.largest_acknowledged'", 'BIGINT')}),
               ft.ranges,
               {_num("f->>'ce'", 'BIGINT')},
               {_num("coalesce(f->>'offset', f->>'frame_type.crypto.offset', f->>'frame_type.stream.offset')", 'BIGINT')},
               {_num("coalesce(f->>'length', f->'raw'->>'payload_length', f->>'frame_type.crypto.length', f->>'frame_type.stream.length')", 'BIGINT')},
               {_num("f->>'stream_id'", 'BIGINT')},
               TRY_CAST(f->>'fin' AS BOOLEAN),
               {_num("f->>'sequence_number'", 'BIGINT')},
               {_num("coalesce(f->>'ack_eliciting_threshold', f->>'packet_tolerance')", 'BIGINT')},
               {_num("coalesce(f->>'request_max_ack_delay', f->>'update_max_ack_delay', f->>'max_ack_delay')")} * p.time_scale_ms,
               {_num("f->>'reordering_threshold'", 'BIGINT')},
               CASE WHEN ft.frame_type NOT IN ('ack', 'padding', 'ping', 'crypto', 'stream') THEN f END
        FROM ft
        JOIN p ON p.connection_id = ft.connection_id AND p.event_index = ft.event_index
        LEFT JOIN transport_parameters tp
          ON tp.connection_id = ft.connection_id AND tp.endpoint = p.sender""")

    # Datagrams: the logged datagram_id when there is one; otherwise a packet starts a new
    # datagram unless it follows, in the same direction, a packet of the same datagram: one
    # logged at the same time with an earlier coalescing order (RFC 9000 §12.2: Initial, 0-RTT,
    # Handshake, then 1-RTT last), one with the same datagram_payload_checksum (quic-go), or —
    # received, in traces that log datagrams_received before their packets (aioquic) — one
    # after the same datagrams_received event.
    con.execute(f"""INSERT INTO packets
        SELECT p.connection_id, p.event_index, p.time_ms, p.epoch_ms, p.direction, p.sender,
               p.packet_type,
               {_SPACE.format(t='p.packet_type')},
               p.packet_number, p.size_bytes,
               coalesce(p.logged_datagram_id,
                        sum(CASE WHEN p.prev_direction = p.direction
                                  AND ((p.prev_time = p.time_ms AND p.prev_rank < p.rank)
                                       OR p.prev_checksum = p.datagram_checksum
                                       OR (p.direction = 'received' AND p.prev_rx_seq = p.rx_datagram_seq))
                                 THEN 0 ELSE 1 END)
                          OVER (PARTITION BY p.connection_id ORDER BY p.event_index
                                ROWS UNBOUNDED PRECEDING) - 1),
               CASE WHEN fc.frame_count > 0 THEN fc.eliciting END,
               coalesce(fc.frame_count, 0)
        FROM (SELECT *,
                     lag(direction) OVER w AS prev_direction, lag(time_ms) OVER w AS prev_time,
                     lag(rank) OVER w AS prev_rank, lag(datagram_checksum) OVER w AS prev_checksum,
                     lag(rx_datagram_seq) OVER w AS prev_rx_seq
              FROM (SELECT *, CASE packet_type WHEN 'initial' THEN 0 WHEN '0RTT' THEN 1
                                   WHEN 'handshake' THEN 2 WHEN '1RTT' THEN 3 ELSE 9 END AS rank FROM p)
              WINDOW w AS (PARTITION BY connection_id ORDER BY event_index)) p
        LEFT JOIN (SELECT connection_id, event_index, count(*)::INTEGER AS frame_count,
                          bool_or(frame_type NOT IN ({non_eliciting})) AS eliciting
                   FROM frames f WHERE f.connection_id >= {first_connection_id}
                   GROUP BY connection_id, event_index) fc
          USING (connection_id, event_index)""")

    # RFC 9002 §5.1: an RTT sample needs an ACK of a packet the endpoint sent, so latest_rtt and
    # min_rtt logged before its first packet_sent are initial values, not samples (quinn logs
    # its 333 ms initial RTT as both in the first event of a connection).
    con.execute(f"""INSERT INTO logged_metrics
        SELECT connection_id, event_index, time_ms,
               CASE WHEN NOT (latest_rtt_zero_is_unset AND data->>'min_rtt' IS NULL
                              AND {_num("data->>'latest_rtt'")} = 0)
                         AND NOT coalesce(event_index < first_sent, false)
                    THEN {_num("data->>'latest_rtt'")} * time_scale_ms * metric_scale_ms END,
               CASE WHEN NOT coalesce(event_index < first_sent, false)
                    THEN {_num("data->>'min_rtt'")} * time_scale_ms * metric_scale_ms END,
               {_num("data->>'smoothed_rtt'")} * time_scale_ms * metric_scale_ms,
               {_num("coalesce(data->>'rtt_variance', data->>'rttvar', data->>'rtt_var')")} * time_scale_ms * metric_scale_ms,
               {_num("data->>'pto_count'", 'INTEGER')},
               {_num("coalesce(data->>'congestion_window', data->>'cwnd')", 'BIGINT')},
               {_num("data->>'bytes_in_flight'", 'BIGINT')}
        FROM e LEFT JOIN (SELECT connection_id, min(event_index) AS first_sent FROM p
                          WHERE direction = 'sent' GROUP BY connection_id) s USING (connection_id)
        WHERE {named('metrics_updated')}""")

    con.execute(f"""INSERT INTO lost_packets
        SELECT connection_id, event_index, time_ms, {_packet_type('data')},
               {_SPACE.format(t=_packet_type('data'))},
               {_PACKET_NUMBER},
               data->>'trigger'
        FROM e WHERE {named('packet_lost')}""")

    con.execute(f"""INSERT INTO dropped_packets
        SELECT connection_id, event_index, time_ms, {_packet_type('data')},
               {_PACKET_NUMBER},
               {_num("coalesce(data->'raw'->>'length', data->>'packet_size', data->'header'->>'packet_size')", 'INTEGER')},
               coalesce(data->>'trigger', data->>'details')
        FROM e WHERE {named('packet_dropped')}""")

    con.execute(f"""INSERT INTO timers
        SELECT connection_id, event_index, time_ms, data->>'timer_type',
               coalesce(data->>'event_type', data->>'type'),
               coalesce(data->>'packet_number_space', data->>'pn_space'),
               {_num("data->>'delta'")} * time_scale_ms
        FROM e WHERE {named('loss_timer_updated', 'timer_updated')}""")

    con.execute(f"""INSERT INTO other_events
        SELECT connection_id, event_index, time_ms, coalesce(name, ''), data
        FROM e WHERE {named(*ROUTED_EVENTS, negate=True)}""")

    # The connection row last: its ODCID may come from the events (a client's first Initial is
    # sent to the ODCID; a server logs original_destination_connection_id).
    con.execute(f"""INSERT INTO connections (connection_id, file_id, trace_index, group_id, vantage,
            flow, implementation, odcid, title, reference_epoch_ms, first_event_epoch_ms, duration_ms,
            events, quirks)
        SELECT c.connection_id, {file_id}, c.trace_index, nullif(c.group_key, ''), c.vantage,
               tr.flow, tr.implementation,
               coalesce(tr.odcid, CASE WHEN NOT (tr.server_group_id_is_client_scid AND c.vantage = 'server')
                                       THEN nullif(c.group_key, '') END, od.odcid),
               tr.title, tr.reference_epoch_ms,
               CASE WHEN tr.time_format = 'absolute' THEN c.first_ms ELSE tr.reference_epoch_ms + c.first_ms END,
               c.last_ms - c.first_ms, c.events, tr.quirks
        FROM (SELECT conn.*, CASE WHEN tr.vantage_from_first_packet THEN coalesce(conn.first_packet_side, tr.vantage)
                                  ELSE tr.vantage END AS vantage
              FROM conn JOIN tr USING (trace_index)) c JOIN tr USING (trace_index)
        LEFT JOIN (
            SELECT connection_id, arg_min(odcid, event_index) AS odcid FROM (
                SELECT connection_id, event_index,
                       coalesce(data->>'original_destination_connection_id',
                                CASE WHEN {named('connection_started')} THEN coalesce(data->>'dst_cid', data->>'dcid') END)
                       AS odcid FROM e WHERE {named('parameters_set', 'connection_started')}
                UNION ALL
                SELECT connection_id, event_index, dcid FROM p
                WHERE sender = 'client' AND packet_type = 'initial'
            ) WHERE odcid IS NOT NULL GROUP BY connection_id
        ) od USING (connection_id)""")

    con.execute("DROP VIEW IF EXISTS e")
    for table in ("conn", "p", "fl", "ev", "tr", "names", "first_row"):
        con.execute(f"DROP TABLE IF EXISTS {table}")


class _Parenthesizing:
    """A connection whose execute() parenthesizes JSON path chains first."""

    def __init__(self, con):
        self._con = con

    def execute(self, sql: str, *args):
        return self._con.execute(paren_json(sql), *args)

    def executemany(self, sql: str, rows):
        return self._con.executemany(sql, rows)
