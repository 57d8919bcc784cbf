"""From staged qlog slices to the tables of ``schemas/store.sql``.

Theory of operation: ``quicack.qlog.reader`` stages a file slice by slice (the native core parses
each slice and takes every event's columns out, :func:`quicack._native.stage`).
:class:`Normalizer` hands each staged slice to the native normalizer, which routes its events
to their tables — ``packet_sent``/``packet_received`` to ``packets`` and ``frames``,
``metrics_updated`` to ``logged_metrics``, ``packet_lost``/``packet_dropped``/timer events to
their own tables and everything else to ``other_events`` — keeping what a slice needs from the
earlier ones (connection ids, time bases, the last packet of each connection for coalescing,
the client's CID, every ``parameters_set``), and inserts the rows it returns as Arrow tables.
Field spellings differ between qlog generations; each column takes the first spelling present,
newest first (``native/src/event.rs``).  Frame names are the qlog names, lower case (``'ack'``, …).

``transport_parameters`` and ``connections`` are written by :meth:`Normalizer.finish`, in SQL
over the per-connection state the native normalizer hands over (tables ``conn`` and
``tp_ev``), which also repairs the two things a slice cannot know yet: a time base that a later
slice undercuts (rows shifted so ``time_ms`` counts from the connection's earliest event, as
documented) and raw ACK delays decoded before the sender's final exponent was known.  A file
that fits in one slice never needs either repair.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import pyarrow as pa

from quicack.core import native
from quicack.core.ackdelay import exponent_sql
from quicack.model import QuicackError
from quicack.qlog.dialect import TraceInfo
from quicack.store.rows import insert as insert_rows


def slice_key(t: TraceInfo) -> tuple | None:
    """What staging (:func:`quicack.qlog.slicing.stage`) and normalizing a trace's events depend on
    besides the events: whole traces with equal keys may share a slice, so a file of many small
    traces (a scan's batch of probes) costs a dozen statements, not a dozen per trace.  None:
    the trace never shares one (delta times carry a running sum per trace).  Whatever of
    :class:`TraceInfo` :meth:`Normalizer.rows` or ``stage`` reads belongs here."""
    if t.time_format == "delta":
        return None
    return (t.vantage, t.flow, t.time_scale_ms, t.time_format,
            None if t.time_format == "absolute" else t.reference_epoch_ms, t.ack_delay_encoding,
            t.metric_scale_ms, t.missing_ack_delay_is_zero, t.layout, t.sender_from_cids,
            t.vantage_from_first_packet, t.rx_datagram_events_first, t.latest_rtt_zero_is_unset)


class Normalizer:
    """Normalizes one file, slice after slice, inside the caller's transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, traces: list[TraceInfo], file_id: int,
                 allocate: Callable[[int], int]):
        """Connection ids come from ``allocate(n)``, the first of ``n`` new ids, asked for as each
        slice finds connections (other files may be ingested at the same time); the first one is
        ``first_connection_id``."""
        self.con = con
        self.traces = traces
        self.file_id = file_id
        self.allocate = allocate
        self.first_connection_id: int | None = None
        self.seen: dict[int, int] = {}  # events per trace staged so far
        self.slices: dict[int, int] = {}  # slices per trace
        self._native = native.Normalizer()

    def rows(self, trace_index: int, ev: native.Staged, traces: tuple[tuple[int, int], ...] = (),
             offset_of: Callable[[int], int | None] = lambda pos: None,
             unit: str = "byte") -> list[tuple[str, pa.Table]]:
        """The rows of one staged slice, table by table: ``ev``, from :func:`quicack.qlog.slicing.stage`
        (events of trace ``trace_index``, in file order; or of several whole traces alike in
        :func:`slice_key`, ``traces`` naming them with their event counts).  Slices come in file
        order; the store is not touched (this may run in the thread that stages slices).
        ``offset_of(pos)``: the file position (in ``unit``) of byte ``pos`` of the slice, if known
        (:meth:`quicack.qlog.slicing.Slice.offset`), for messages."""
        t = self.traces[trace_index]
        offset = self.seen.get(trace_index, 0)
        n = ev.num_rows
        for index, count in traces or ((trace_index, n),):
            if traces and index in self.seen:
                raise ValueError(f"trace {index} shares a slice but is not whole")
            self.seen[index] = self.seen.get(index, 0) + count
            self.slices[index] = self.slices.get(index, 0) + 1
        if not n:
            return []

        def allocate(k: int) -> int:
            first = self.allocate(k)
            if self.first_connection_id is None:
                self.first_connection_id = first
            return first

        try:
            tables = self._native.add(
                ev, offset, allocate, vantage=t.vantage.value, flow=t.flow, absolute=t.time_format == "absolute",
                reference_epoch_ms=t.reference_epoch_ms, ack_delay_encoding=t.ack_delay_encoding.value,
                missing_ack_delay_is_zero=t.missing_ack_delay_is_zero, time_scale_ms=t.time_scale_ms,
                metric_scale_ms=t.metric_scale_ms, latest_rtt_zero_is_unset=t.latest_rtt_zero_is_unset,
                sender_from_cids=t.sender_from_cids, vantage_from_first_packet=t.vantage_from_first_packet,
                rx_datagram_events_first=t.rx_datagram_events_first)
        except native.UntimedPacket as e:
            # the time_ms of packets, frames' packets, logged_metrics, … needs one, and every qlog
            # draft requires ``time`` on every event (an event for other_events is kept without)
            name, trace, event, _, time = e.args
            if time is None:
                raise QuicackError(f"{name} event without a time (qlog requires one on every event)", None,
                                   f"trace {trace} event {event}") from None
            pos, text = time
            at = offset_of(pos)
            raise QuicackError(f"{name} event's time {text} is no time (a finite number; field time of trace {trace} "
                               f"event {event})", None, f"trace {trace} event {event}" if at is None else f"{unit} {at}"
                               ) from None
        return [(name, native.table(columns)) for name, columns in tables]

    def insert(self, tables: list[tuple[str, pa.Table]]) -> None:
        """Store the rows of one slice (:meth:`rows`)."""
        for name, rows in tables:  # noqa: B007 - ``rows`` is read by DuckDB (replacement scan of this frame)
            self.con.execute(f"INSERT INTO {name} SELECT * FROM rows")

    # --- after the last slice -------------------------------------------------------------------

    def finish(self) -> None:
        """Write transport_parameters and connections; repair what slices could not know."""
        self._state_tables()
        self._repair_slices()
        self._insert_transport_parameters()
        self._decode_raw_ack_delays()
        self._insert_connections()
        self.drop()

    def _state_tables(self) -> None:
        """The per-connection state the native normalizer kept (``conn``), every parameters_set
        (``tp_ev``) and the traces' headers (``tr``), as temporary tables."""
        con = self.con
        conn_rows = native.table(self._native.conn_table())  # noqa: F841 - read by DuckDB
        con.execute("CREATE OR REPLACE TEMP TABLE conn AS SELECT * FROM conn_rows")
        con.execute("""CREATE OR REPLACE TEMP TABLE tp_ev (connection_id BIGINT, event_index BIGINT,
            owner VARCHAR, t_ms DOUBLE, max_ack_delay DOUBLE, ack_delay_exponent INTEGER,
            min_ack_delay DOUBLE, initial_max_data BIGINT, max_udp_payload_size BIGINT,
            max_idle_timeout DOUBLE, active_connection_id_limit BIGINT, data JSON)""")
        tp_rows = native.table(self._native.tp_table())  # noqa: F841
        con.execute("INSERT INTO tp_ev SELECT * FROM tp_rows")
        con.execute("""CREATE OR REPLACE TEMP TABLE tr (trace_index INTEGER, vantage VARCHAR, flow VARCHAR,
            implementation VARCHAR, odcid VARCHAR, title VARCHAR, time_format VARCHAR,
            reference_epoch_ms DOUBLE, ack_delay_encoding VARCHAR, quirks VARCHAR[],
            server_group_id_is_client_scid BOOLEAN)""")
        insert_rows(con, "tr", [
            (t.trace_index, t.vantage.value, t.flow, t.implementation, t.odcid, t.title, t.time_format,
             t.reference_epoch_ms, t.ack_delay_encoding.value, list(t.quirks), t.server_group_id_is_client_scid)
            for t in self.traces])

    def _repair_slices(self) -> None:
        """What a slice could not know when its rows were made: a later slice's earlier time base,
        a later first packet_sent."""
        con = self.con
        # A later slice held an event earlier than the time base: shift that connection's rows so
        # time_ms counts from its earliest event.
        shifted = con.execute("SELECT count(*) FROM conn WHERE first_ms < base_ms").fetchall()[0][0]
        if shifted:
            for table in ("packets", "logged_metrics", "lost_packets", "dropped_packets", "timers", "other_events"):
                con.execute(f"""UPDATE {table} SET time_ms = time_ms + (c.base_ms - c.first_ms)
                    FROM conn c WHERE {table}.connection_id >= {self.first_connection_id}
                      AND {table}.connection_id = c.connection_id AND c.first_ms < c.base_ms""")

        # RTT values logged before a connection's first packet_sent found only in a later slice
        # (one slice: _events saw it already).
        if any(n > 1 for n in self.slices.values()):
            con.execute(f"""UPDATE logged_metrics SET latest_rtt_ms = NULL, min_rtt_ms = NULL FROM conn c
                WHERE logged_metrics.connection_id >= {self.first_connection_id}
                  AND logged_metrics.connection_id = c.connection_id AND logged_metrics.event_index < c.first_sent
                  AND (latest_rtt_ms IS NOT NULL OR min_rtt_ms IS NOT NULL)""")

    def _insert_transport_parameters(self) -> None:
        """One row per connection and owner: each parameter's last logged value, at the earliest
        time its parameters_set events give (an owner none of whose events has one: refused, as
        every qlog draft requires a time on every event)."""
        untimed = self.con.execute("""SELECT c.trace_index, min(tp.event_index) FROM tp_ev tp
            JOIN conn c USING (connection_id) GROUP BY tp.connection_id, owner, c.trace_index
            HAVING count(t_ms) = 0 ORDER BY 1, 2 LIMIT 1""").fetchall()
        if untimed:
            trace, event = untimed[0]
            raise QuicackError("transport:parameters_set event without a time that is a finite number "
                               "(qlog requires one on every event)", None, f"trace {trace} event {event + 1}")
        self.con.execute(f"""INSERT INTO transport_parameters
            SELECT tp.connection_id, owner,
                   CASE WHEN owner = 'local' THEN any_value({_local_side("c.vantage", "c.flow")})
                        ELSE any_value({_peer_side("c.vantage", "c.flow")}) END,
                   min(t_ms) - any_value(c.first_ms),
                   arg_max(max_ack_delay, event_index) FILTER (WHERE max_ack_delay IS NOT NULL),
                   arg_max(ack_delay_exponent, event_index) FILTER (WHERE ack_delay_exponent IS NOT NULL),
                   arg_max(min_ack_delay, event_index) FILTER (WHERE min_ack_delay IS NOT NULL),
                   arg_max(initial_max_data, event_index) FILTER (WHERE initial_max_data IS NOT NULL),
                   arg_max(max_udp_payload_size, event_index) FILTER (WHERE max_udp_payload_size IS NOT NULL),
                   arg_max(max_idle_timeout, event_index) FILTER (WHERE max_idle_timeout IS NOT NULL),
                   arg_max(active_connection_id_limit, event_index)
                       FILTER (WHERE active_connection_id_limit IS NOT NULL),
                   to_json(list(data ORDER BY event_index))
            FROM tp_ev tp JOIN conn c USING (connection_id)
            GROUP BY tp.connection_id, owner""")

    def _decode_raw_ack_delays(self) -> None:
        """Raw ACK Delay fields decoded in an earlier slice than the sender's last parameters_set:
        decoded again with the exponent that holds for the whole file."""
        if any(self.slices.get(t.trace_index, 0) > 1 and t.ack_delay_encoding.value in ("raw", "raw_ms") for t in self.traces):
            self.con.execute(f"""UPDATE frames SET ack_delay_ms = frames.ack_delay_raw * pow(2, x.exponent) / 1000.0
                FROM (SELECT f.connection_id, f.event_index, f.position,
                             {exponent_sql("tp.ack_delay_exponent", "p.packet_type")} AS exponent
                      FROM frames f JOIN packets p USING (connection_id, event_index)
                      JOIN conn c ON c.connection_id = f.connection_id
                      JOIN tr ON tr.trace_index = c.trace_index AND tr.ack_delay_encoding IN ('raw', 'raw_ms')
                      LEFT JOIN ({_TP_EXPONENT}) tp ON tp.connection_id = f.connection_id AND tp.endpoint = p.sender
                      WHERE f.frame_type = 'ack' AND f.ack_delay_raw IS NOT NULL) x
                WHERE frames.connection_id >= {self.first_connection_id}
                  AND frames.connection_id = x.connection_id AND frames.event_index = x.event_index
                  AND frames.position = x.position
                  AND frames.ack_delay_ms IS DISTINCT FROM frames.ack_delay_raw * pow(2, x.exponent) / 1000.0""")

    def _insert_connections(self) -> None:
        """The connection rows, last: an ODCID may come from the events (a client's first Initial
        is sent to the ODCID; a server logs original_destination_connection_id)."""
        self.con.execute(f"""INSERT INTO connections (connection_id, file_id, trace_index, group_id, vantage,
                flow, implementation, odcid, title, reference_epoch_ms, first_event_epoch_ms, duration_ms,
                events, quirks)
            SELECT c.connection_id, {self.file_id}, c.trace_index, nullif(c.group_key, ''), c.vantage,
                   tr.flow, tr.implementation,
                   -- quinn tags a server's events with the client's source CID, not the ODCID
                   coalesce(tr.odcid, CASE WHEN NOT (tr.server_group_id_is_client_scid AND c.vantage = 'server')
                                           THEN nullif(c.group_key, '') END, c.odcid),
                   tr.title, tr.reference_epoch_ms,
                   CASE WHEN tr.time_format = 'absolute' THEN c.first_ms ELSE tr.reference_epoch_ms + c.first_ms END,
                   c.last_ms - c.first_ms, c.events, tr.quirks
            FROM conn c JOIN tr USING (trace_index) ORDER BY c.connection_id""")

    def drop(self) -> None:
        for table in ("conn", "tp_ev", "tr"):
            self.con.execute(f"DROP TABLE IF EXISTS {table}")


def _local_side(vantage: str, flow: str) -> str:
    """The side of the vantage point; a network observer takes the side named by its flow."""
    return (f"CASE WHEN {vantage} = 'server' OR ({vantage} = 'network' AND {flow} = 'server') "
            "THEN 'server' ELSE 'client' END")


def _peer_side(vantage: str, flow: str) -> str:
    return f"CASE WHEN ({_local_side(vantage, flow)}) = 'server' THEN 'client' ELSE 'server' END"


#: The ack_delay_exponent each endpoint of a connection announced so far (last value wins).
_TP_EXPONENT = f"""SELECT tp.connection_id,
        CASE WHEN owner = 'local' THEN {_local_side("c.vantage", "c.flow")}
             ELSE {_peer_side("c.vantage", "c.flow")} END AS endpoint,
        arg_max(ack_delay_exponent, event_index) FILTER (WHERE ack_delay_exponent IS NOT NULL) AS ack_delay_exponent
    FROM tp_ev tp JOIN conn c USING (connection_id) GROUP BY ALL"""
