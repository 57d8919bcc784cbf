"""From staged qlog events (table ``ev``, one slice at a time) to the tables of ``schemas/store.sql``.

Theory of operation: ``quicack.reader`` stages a file slice by slice into the temporary table
``ev`` (canonical name, time in ms, the record as JSON text).  :class:`Normalizer` routes each
slice's events to their tables — ``packet_sent``/``packet_received`` to ``packets`` and
``frames``, ``metrics_updated`` to ``logged_metrics``, ``packet_lost``/``packet_dropped``/timer
events to their own tables and everything else to ``other_events`` — inside DuckDB, except the
datagram each packet belongs to, derived from the slice's packets with Arrow compute
(:func:`_datagram_ids`).  Each routed event's record is parsed by ``json_transform`` into a
STRUCT holding every field spelling the columns need (a packet's twice: its header, then its
frames); the raw JSON is extracted only where a column keeps it (``other_events.data``,
``frames.details``, ``transport_parameters.parameters``).

What a slice needs from earlier slices is carried in small per-file tables: ``conn`` (connection
ids per (trace, group), event counts, time base, first and last times, the client's CID, the last
packet and datagram count for coalescing, the ODCID found so far) and ``tp_ev`` (every
``parameters_set`` event).  ``transport_parameters`` and ``connections`` are written by
:meth:`Normalizer.finish`, which also repairs the two things a slice cannot know yet: a time base
that a later slice undercuts (rows shifted so ``time_ms`` counts from the connection's earliest
event, as documented) and raw ACK delays decoded before the sender's final exponent was known.
A file that fits in one slice never needs either repair.

Field spellings differ between qlog generations; each column takes the first spelling present
(``coalesce``), newest first.  Frame names are the qlog names, lower case (``'ack'``, …).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from . import qlog
from .ackdelay import decoded_ms_sql, exponent_sql
from .model import QuicackError, TraceInfo
from .rows import insert as insert_rows
from .sqltext import quote

PACKET_EVENTS = ("packet_sent", "packet_received")
#: events that have a table of their own; all others go to other_events
ROUTED_EVENTS = PACKET_EVENTS + ("parameters_set", "metrics_updated", "packet_lost",
                                 "packet_dropped", "loss_timer_updated", "timer_updated")

# Frame types that do not make a packet ack-eliciting (RFC 9002 §2: "Packets that contain
# ack-eliciting frames elicit an ACK from the receiver ... ACK, PADDING, and CONNECTION_CLOSE
# frames" are the exceptions; draft-era qlogs name the application CONNECTION_CLOSE, 0x1d,
# APPLICATION_CLOSE).
NON_ACK_ELICITING = ("ack", "padding", "connection_close", "application_close")
#: rows per Arrow batch of per-slice scratch tables (several batches: scans run in parallel)
ARROW_BATCH_ROWS = 1 << 14
#: frame types whose every field has a column; others keep the logged frame in frames.details
FRAMES_WITH_COLUMNS = ("ack", "padding", "ping", "crypto", "stream")

_PACKET_TYPE = """CASE WHEN {x} IN ('initial', 'handshake', '1RTT', '0RTT', 'retry') THEN {x}
    ELSE CASE replace(replace(lower({x}), '-', ''), '_', '')
    WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0rtt' THEN '0RTT' WHEN 'zerortt' THEN '0RTT' WHEN '0rttprotected' THEN '0RTT'
    WHEN '1rtt' THEN '1RTT' WHEN 'onertt' THEN '1RTT' WHEN 'short' THEN '1RTT'
    WHEN '1rttprotected' THEN '1RTT' WHEN 'protected' THEN '1RTT'
    WHEN 'retry' THEN 'retry' WHEN 'versionnegotiation' THEN 'version_negotiation'
    WHEN 'versionnegotation' THEN 'version_negotiation'
    WHEN 'statelessreset' THEN 'stateless_reset'
    ELSE coalesce(lower({x}), {missing}) END END"""

_SPACE = """CASE {t} WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0RTT' THEN 'application_data' WHEN '1RTT' THEN 'application_data' END"""

_FRAME_TYPE = ("CASE WHEN f.frame_type IN ('ack', 'stream', 'padding', 'crypto', 'ping') THEN f.frame_type "
               "ELSE replace(lower(coalesce(f.frame_type, f.type, 'unknown')), ' ', '_') END")

# RFC 9000 §12.2 coalescing order: Initial, 0-RTT, Handshake, then 1-RTT last.
_RANK = "CASE {t} WHEN 'initial' THEN 0 WHEN '0RTT' THEN 1 WHEN 'handshake' THEN 2 WHEN '1RTT' THEN 3 ELSE 9 END"


V, D, B = "VARCHAR", "DOUBLE", "BIGINT"

# json_transform types.  Numbers are read as DOUBLE or BIGINT whether logged as numbers or as
# strings (draft-era producers write "296"); a value that is not a number becomes NULL, as
# TRY_CAST would make it.  Text fields are VARCHAR: a number there keeps its JSON text.
_HEADER = {"packet_type": V, "type": V, "form": V, "packet_number": B, "packet_size": B, "length": B,
           "datagram_id": B, "scid": V, "dcid": V}
_FRAME = {"frame_type": V, "type": V, "ack_delay": D, "frame_type.ack.ack_delay": D, "acked_ranges": [[B]],
          "largest_acknowledged": B, "frame_type.ack.largest_acknowledged": B, "ce": B, "offset": B,
          "frame_type.crypto.offset": B, "stream.offset": B, "length": B, "raw": {"payload_length": B},
          "frame_type.crypto.length": B, "stream.length": B, "stream_id": B, "id": B, "stream.stream_id": B, "fin": V,
          "sequence_number": B, "ack_eliciting_threshold": B, "packet_tolerance": B, "request_max_ack_delay": D,
          "update_max_ack_delay": D, "max_ack_delay": D, "reordering_threshold": B, "reorder_threshold": B,
          "len": B}
_TYPES = {
    "packet": {"packet_type": V, "packet_number": B, "packet_size": B, "datagram_id": B,
               "datagram_payload_checksum": B, "header": _HEADER,
               "raw": {"length": B}, "frames": [{"frame_type": V, "type": V}]},
    "frames": {"frames": [_FRAME]},
    "parameters": {"owner": V, "initiator": V, "max_ack_delay": D, "ack_delay_exponent": B, "min_ack_delay": D,
                   "initial_max_data": B, "max_udp_payload_size": B, "max_packet_size": B, "max_idle_timeout": D,
                   "idle_timeout": D, "active_connection_id_limit": B},
    "started": {"original_destination_connection_id": V, "dst_cid": V, "dcid": V},
    "metrics": {"latest_rtt": D, "min_rtt": D, "smoothed_rtt": D, "rtt_variance": D, "rttvar": D, "rtt_var": D,
                "pto_count": B, "congestion_window": B, "cwnd": B, "bytes_in_flight": B},
    "lost": {"packet_type": V, "type": V, "packet_number": B, "trigger": V, "header": _HEADER},
    "dropped": {"packet_type": V, "packet_number": B, "packet_size": B, "trigger": V, "details": V,
                "header": _HEADER, "raw": {"length": B}},
    "timer": {"timer_type": V, "event_type": V, "type": V, "packet_number_space": V, "pn_space": V, "delta": D},
}


def slice_key(t: TraceInfo) -> tuple | None:
    """What staging (:func:`quicack.reader.stage`) and normalizing a trace's events depend on
    besides the events: whole traces with equal keys may share a slice, so a file of many small
    traces (a scan's batch of probes) costs a dozen statements, not a dozen per trace.  None:
    the trace never shares one (delta times carry a running sum per trace).  Whatever of
    :class:`TraceInfo` the SQL of :meth:`Normalizer.add` or of ``stage`` reads belongs here."""
    if t.time_format == "delta":
        return None
    return (t.vantage, t.flow, t.time_scale_ms, t.time_format,
            None if t.time_format == "absolute" else t.reference_epoch_ms, t.ack_delay_encoding,
            t.metric_scale_ms, t.missing_ack_delay_is_zero, t.layout, t.sender_from_cids,
            t.vantage_from_first_packet, t.rx_datagram_events_first, t.latest_rtt_zero_is_unset)


def _data(kind: str) -> str:
    """The event's data, parsed once into the STRUCT for ``kind``."""
    return f"json_transform(rec, '{json.dumps({'data': _TYPES[kind]})}').data"


def _num(expr: str, kind: str = "DOUBLE") -> str:
    return f"TRY_CAST({expr} AS {kind})"


def _raw_packet_type(d: str, *more: str) -> str:
    """The packet type as logged: the first spelling present, then ``more`` (aioquic's
    ``packet_lost`` says ``{"type": "1RTT", "packet_number": 7}``)."""
    return (f"coalesce({d}.header.packet_type, {d}.packet_type, {d}.header.type, {''.join(m + ', ' for m in more)}"
            f"CASE WHEN {d}.header.form = 'short' THEN '1RTT' END)")


def _packet_number(d: str) -> str:
    return _num(f"coalesce({d}.header.packet_number, {d}.packet_number)", "BIGINT")


def _lit(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{float(value)!r}::DOUBLE"
    return quote(value)


def _in(names: list[str]) -> str:
    return "(" + ", ".join(_lit(n) for n in names) + ")" if names else "(NULL)"


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
        self._groups: set[tuple[int, str]] = set()  # (trace, group) of each connection so far
        # conn rows whose has_packet / odcid is set: once every row has it, later slices skip the
        # statement that looks for it (a long trace of one connection, after its first slice)
        self._with_packet = 0
        self._with_odcid = 0
        self._scratch: dict = {}
        self._e = ""
        self.seen: dict[int, int] = {}  # events per trace staged so far
        self.slices: dict[int, int] = {}  # slices per trace
        con.execute("""CREATE OR REPLACE TEMP TABLE conn (trace_index INTEGER, group_key VARCHAR,
            connection_id BIGINT, first_event BIGINT, events BIGINT, base_ms DOUBLE, first_ms DOUBLE,
            last_ms DOUBLE, vantage VARCHAR, flow VARCHAR, has_packet BOOLEAN, client_cid VARCHAR,
            first_sent BIGINT, last_direction VARCHAR, last_t DOUBLE, last_rank INTEGER, last_checksum BIGINT,
            last_rx_seq BIGINT, datagrams BIGINT, rx_datagrams BIGINT, odcid VARCHAR)""")
        con.execute("""CREATE OR REPLACE TEMP TABLE tp_ev (connection_id BIGINT, event_index BIGINT,
            owner VARCHAR, t_ms DOUBLE, max_ack_delay DOUBLE, ack_delay_exponent INTEGER,
            min_ack_delay DOUBLE, initial_max_data BIGINT, max_udp_payload_size BIGINT,
            max_idle_timeout DOUBLE, active_connection_id_limit BIGINT, data JSON)""")

    # --- one slice ------------------------------------------------------------------------------

    def add(self, trace_index: int, ev, traces: tuple[tuple[int, int], ...] = ()) -> None:
        """Normalize one staged slice: ``ev``, an Arrow table from :func:`quicack.reader.stage`
        (events of trace ``trace_index``, in file order; or of several whole traces alike in
        :func:`slice_key`, ``traces`` naming them with their event counts)."""
        t = self.traces[trace_index]
        offset = self.seen.get(trace_index, 0)
        n = ev.num_rows
        for index, count in traces or ((trace_index, n),):
            if traces and index in self.seen:
                raise ValueError(f"trace {index} shares a slice but is not whole")
            self.seen[index] = self.seen.get(index, 0) + count
            self.slices[index] = self.slices.get(index, 0) + 1
        if not n:
            return
        self._scratch = {"slice_events": ev}

        # Canonical event names: few distinct names, mapped by the one Python rule.
        by_event: dict[str, list[str]] = {}
        for (name,) in self._exec("SELECT DISTINCT name FROM slice_events").fetchall():
            by_event.setdefault(qlog.canonical_event(name), []).append(name)

        def named(*events: str) -> list[str]:
            return [n for e in events for n in by_event.get(e, [])]

        if ev.column("t_ms").null_count:
            _refuse_untimed_packets(ev, named(*PACKET_EVENTS), offset)

        # One connection per (trace, group): quinn writes all connections into one stream, told
        # apart by group_id.  A group first seen in this slice gets the next id, in file order.
        # (A slice of several traces holds each whole, one after the other: "row" counts within
        # its trace, ``offset`` is then 0.)
        self._keep("slice_groups", """
            SELECT trace_index, group_key, min("row") AS first_row, count(*) AS n, min(t_ms) AS lo, max(t_ms) AS hi
            FROM slice_events GROUP BY trace_index, group_key""")
        groups = self._scratch["slice_groups"]
        found = set(zip(groups.column("trace_index").to_pylist(), groups.column("group_key").to_pylist()))
        new = found - self._groups
        next_id = self.allocate(len(new))
        self._groups |= found
        if self.first_connection_id is None:
            self.first_connection_id = next_id
        if new:
            self._exec(f"""INSERT INTO conn
                SELECT trace_index, group_key, {next_id} - 1 + row_number() OVER (ORDER BY trace_index, first_row),
                       {offset} + first_row, 0, lo, lo, hi, {_lit(t.vantage.value)}, {_lit(t.flow)}, false, NULL,
                       NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL
                FROM slice_groups g WHERE NOT EXISTS (SELECT 1 FROM conn c WHERE c.trace_index = g.trace_index
                                                                             AND c.group_key = g.group_key)""")
        self._exec("""UPDATE conn SET events = conn.events + g.n, first_ms = least(conn.first_ms, g.lo),
                               last_ms = greatest(conn.last_ms, g.hi)
            FROM slice_groups g WHERE conn.trace_index = g.trace_index AND conn.group_key = g.group_key""")

        # The events with their connection: ``e`` below is this query.  Times count from the
        # connection's time base: the earliest time of the slice it first appeared in (finish()
        # shifts the rows if a later slice holds an earlier event).
        epoch = "t_ms" if t.time_format == "absolute" else f"{_lit(t.reference_epoch_ms)} + t_ms"
        one = self._exec("""SELECT any_value(c.connection_id), any_value(c.base_ms), count(*) FROM slice_groups g
            JOIN conn c ON c.trace_index = g.trace_index AND c.group_key = g.group_key""").fetchall()[0]
        if one[2] == 1:  # the common case: the whole slice is one connection
            self._e = f"""(SELECT {one[0]}::BIGINT AS connection_id, {offset} + "row" AS event_index, name, rec,
                                 t_ms, t_ms - {_lit(one[1])} AS time_ms, {epoch} AS epoch_ms FROM slice_events) e"""
        else:
            self._e = f"""(SELECT c.connection_id, {offset} + ev."row" AS event_index, ev.name, ev.rec, ev.t_ms,
                                 ev.t_ms - c.base_ms AS time_ms, {epoch} AS epoch_ms
                          FROM slice_events ev JOIN conn c ON c.trace_index = ev.trace_index
                                                          AND c.group_key = ev.group_key) e"""

        self._parameters(named("parameters_set"))
        self._packets(named("packet_sent"), named(*PACKET_EVENTS), t, named)
        self._events(t, named)
        self._odcid(named("parameters_set"), named("connection_started"))
        self._scratch = {}
        pa.default_memory_pool().release_unused()  # (what _datagram_ids computed: Arrow's allocator keeps it)

    def _exec(self, sql: str):
        """Run ``sql`` with this slice's Arrow tables (``slice_events``, ``slice_groups``,
        ``slice_packets``, ``slice_datagrams``) visible by name.

        Scratch data lives in Python, not in temporary tables: a table replaced inside a
        transaction keeps its old rows (and at least one block) until the transaction ends, so
        per-slice tables would make memory grow with the file.  DuckDB finds the Arrow tables by
        the names of the local variables of the frame that runs the query (its replacement scan
        of Python objects), hence the locals below; keep the query in this frame.
        """
        slice_events = self._scratch.get("slice_events")  # noqa: F841 - read by DuckDB
        slice_groups = self._scratch.get("slice_groups")  # noqa: F841
        slice_packets = self._scratch.get("slice_packets")  # noqa: F841
        slice_datagrams = self._scratch.get("slice_datagrams")  # noqa: F841
        return self.con.execute(sql)

    def _keep(self, name: str, sql: str) -> None:
        """Run a query (as :meth:`_exec` does) and keep its result as the slice's Arrow table ``name``."""
        slice_events = self._scratch.get("slice_events")  # noqa: F841 - read by DuckDB
        slice_groups = self._scratch.get("slice_groups")  # noqa: F841
        slice_packets = self._scratch.get("slice_packets")  # noqa: F841
        slice_datagrams = self._scratch.get("slice_datagrams")  # noqa: F841
        self._scratch[name] = self.con.sql(sql).to_arrow_table(ARROW_BATCH_ROWS)

    def _parameters(self, names: list[str]) -> None:
        if not names:
            return
        d = "d"
        self._exec(f"""INSERT INTO tp_ev
            SELECT connection_id, event_index, owner,
                   t_ms, {_num(f"{d}.max_ack_delay")}, {_num(f"{d}.ack_delay_exponent", "INTEGER")},
                   {_num(f"{d}.min_ack_delay")} / 1000.0, {_num(f"{d}.initial_max_data", "BIGINT")},
                   {_num(f"coalesce({d}.max_udp_payload_size, {d}.max_packet_size)", "BIGINT")},
                   {_num(f"coalesce({d}.max_idle_timeout, {d}.idle_timeout)")},
                   {_num(f"{d}.active_connection_id_limit", "BIGINT")}, json_extract(rec, '$.data')
            FROM (SELECT *, coalesce(lower(d.owner), lower(d.initiator), 'local') AS owner
                  FROM (SELECT *, {_data("parameters")} AS d FROM {self._e} WHERE name IN {_in(names)}))""")

    def _packets(self, sent: list[str], packet_names: list[str], t: TraceInfo, named) -> None:
        # aioquic logs datagrams_received before the packets of each datagram: count them.
        received = named("datagrams_received") if t.rx_datagram_events_first else []
        if not packet_names:
            self._keep("slice_datagrams", "SELECT NULL::BIGINT AS connection_id, NULL::BIGINT AS event_index, "
                       "NULL::VARCHAR AS sender, NULL::VARCHAR AS direction, NULL::VARCHAR AS packet_type, "
                       "NULL::VARCHAR AS dcid WHERE false")
            self._count_received(received)
            return
        if received:
            rows = f"""(SELECT * FROM (
                SELECT *, count(*) FILTER (WHERE name IN {_in(received)}) OVER (PARTITION BY connection_id
                              ORDER BY event_index ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS rx_in_slice
                FROM {self._e} WHERE name IN {_in(packet_names + received)}) WHERE name IN {_in(packet_names)})"""
        else:
            none = "0" if t.rx_datagram_events_first else "NULL"  # no datagrams_received in this slice
            rows = f"(SELECT *, {none}::BIGINT AS rx_in_slice FROM {self._e} WHERE name IN {_in(packet_names)})"
        self._keep("slice_packets", f"""
            SELECT connection_id, event_index, time_ms, epoch_ms, t_ms, name IN {_in(sent)} AS is_sent,
                   packet_type, {_RANK.format(t='packet_type')} AS rank, packet_number, size_bytes,
                   logged_datagram_id, checksum, rx_in_slice, scid, dcid,
                   coalesce(len(frames), 0)::INTEGER AS frame_count,
                   len(list_filter(frames, lambda f: {_FRAME_TYPE} NOT IN {_in(list(NON_ACK_ELICITING))})) > 0
                       AS eliciting
            FROM (SELECT * EXCLUDE (raw_type),
                         {_PACKET_TYPE.format(x='raw_type', missing="'unknown'")} AS packet_type
            FROM (SELECT connection_id, event_index, time_ms, epoch_ms, t_ms, name, rx_in_slice,
                         {_raw_packet_type('d')} AS raw_type, {_packet_number('d')} AS packet_number,
                         {_num("coalesce(d.raw.length, d.header.packet_size, d.packet_size, d.header.length)",
                               "INTEGER")} AS size_bytes,
                         {_num("coalesce(d.datagram_id, d.header.datagram_id)", "BIGINT")} AS logged_datagram_id,
                         d.datagram_payload_checksum AS checksum,
                         d.header.scid AS scid, d.header.dcid AS dcid, d.frames AS frames
                  FROM (SELECT *, {_data("packet")} AS d FROM {rows})))""")

        # A trace without a vantage point (quinn) takes it from each connection's first packet
        # event if that is an Initial: a client's first packet is one it sends, a server's one it
        # receives.
        if self._with_packet < len(self._groups):
            self._with_packet += self._exec(f"""UPDATE conn SET has_packet = true,
                    vantage = CASE WHEN {_lit(t.vantage_from_first_packet)} AND f.first_type = 'initial'
                                   THEN f.side ELSE conn.vantage END
                FROM (SELECT connection_id, arg_min(packet_type, event_index) AS first_type,
                             arg_min(CASE WHEN is_sent THEN 'client' ELSE 'server' END, event_index) AS side
                      FROM slice_packets GROUP BY connection_id) f
                WHERE conn.connection_id = f.connection_id AND NOT conn.has_packet""").fetchone()[0]

        # Who sent a packet: the vantage point for 'sent', its peer for 'received'; a network
        # observer takes the side named by its flow ('client' unless it says otherwise).
        local, peer = _local_side("c.vantage", "c.flow"), _peer_side("c.vantage", "c.flow")
        if t.sender_from_cids:
            # Without direction in the events, a long header's source CID equal to the first one
            # logged (the client's first Initial) marks a client packet, and a short header whose
            # destination CID is that one marks a server packet.
            client_cid = """coalesce(c.client_cid, first_value(p.scid IGNORE NULLS) OVER (PARTITION BY p.connection_id
                                ORDER BY p.event_index ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))"""
            sender = f"""CASE WHEN p.scid IS NOT NULL
                              THEN CASE WHEN p.scid = {client_cid} THEN 'client' ELSE 'server' END
                              ELSE CASE WHEN p.dcid = {client_cid} THEN 'server' ELSE 'client' END END"""
            direction = f"CASE WHEN ({sender}) = ({local}) THEN 'sent' ELSE 'received' END"
        else:
            sender = f"CASE WHEN p.is_sent THEN {local} ELSE {peer} END"
            direction = "CASE WHEN p.is_sent THEN 'sent' ELSE 'received' END"

        # Datagrams (see _datagram_ids): each packet with its columns, what decides whether it
        # shares the datagram of the packet before it, and what the connection carried from
        # earlier slices.  The packets' rows are then inserted from this one table.
        self._keep("slice_datagrams", f"""
            SELECT p.event_index, p.connection_id, {direction} AS direction, {sender} AS sender, p.packet_type,
                   p.dcid, p.t_ms, p.rank, p.checksum, c.rx_datagrams + p.rx_in_slice AS rx_seq,
                   p.time_ms, p.epoch_ms, p.packet_number, p.size_bytes, p.logged_datagram_id, p.eliciting,
                   p.frame_count, c.datagrams,
                   c.last_direction, c.last_t, c.last_rank, c.last_checksum, c.last_rx_seq
            FROM slice_packets p JOIN conn c USING (connection_id)""")
        self._scratch["slice_datagrams"] = _datagram_ids(self._scratch["slice_datagrams"])
        self._exec(f"""INSERT INTO packets
            SELECT connection_id, event_index, time_ms, epoch_ms, direction, sender, packet_type,
                   {_SPACE.format(t='packet_type')}, packet_number, size_bytes,
                   coalesce(logged_datagram_id, derived_datagram_id),
                   CASE WHEN frame_count > 0 THEN eliciting END, frame_count
            FROM slice_datagrams""")
        self._exec("""UPDATE conn SET last_direction = l.direction, last_t = l.t_ms, last_rank = l.rank,
                               last_checksum = l.checksum, last_rx_seq = l.rx_seq,
                               datagrams = conn.datagrams + l.starts,
                               first_sent = coalesce(conn.first_sent, l.first_sent),
                               client_cid = coalesce(conn.client_cid, s.cid)
            FROM (SELECT connection_id, arg_max_null(direction, event_index) AS direction,
                         arg_max_null(t_ms, event_index) AS t_ms, arg_max_null(rank, event_index) AS rank,
                         arg_max_null(checksum, event_index) AS checksum, arg_max_null(rx_seq, event_index) AS rx_seq,
                         sum(starts) AS starts, min(event_index) FILTER (WHERE direction = 'sent') AS first_sent
                  FROM slice_datagrams GROUP BY connection_id) l
            LEFT JOIN (SELECT connection_id, first(scid ORDER BY event_index) FILTER (WHERE scid IS NOT NULL) AS cid
                       FROM slice_packets GROUP BY connection_id) s USING (connection_id)
            WHERE conn.connection_id = l.connection_id""")
        self._count_received(received)
        self._frames(t, packet_names)

    def _count_received(self, received: list[str]) -> None:
        if received:
            self._exec(f"""UPDATE conn SET rx_datagrams = conn.rx_datagrams + r.n
                FROM (SELECT connection_id, count(*) AS n FROM {self._e} WHERE name IN {_in(received)}
                      GROUP BY connection_id) r
                WHERE conn.connection_id = r.connection_id""")

    def _frames(self, t: TraceInfo, packet_names: list[str]) -> None:
        # RFC 9000 §19.3, quicack.ackdelay: 2 to the power of the sender's ack_delay_exponent; 3 in
        # Initial packets (before any transport parameter) and when none was announced.
        value = "TRY_CAST(coalesce(f.ack_delay, f.\"frame_type.ack.ack_delay\") AS DOUBLE)"
        tp_join = ""
        if t.ack_delay_encoding.value == "ms":
            missing = " , 0.0" if t.missing_ack_delay_is_zero else ""
            decoded = f"coalesce({value}{missing}) * {_lit(t.time_scale_ms)}"
        elif t.ack_delay_encoding.value == "us":
            decoded = f"{value} / 1000.0"
        else:
            decoded = decoded_ms_sql(value, "tp.ack_delay_exponent", "p.packet_type")
            tp_join = f"""JOIN slice_datagrams p USING (connection_id, event_index)
                          LEFT JOIN ({_TP_EXPONENT}) tp
                          ON tp.connection_id = ft.connection_id AND tp.endpoint = p.sender"""
        with_columns = _in(list(FRAMES_WITH_COLUMNS))
        self._exec(f"""INSERT INTO frames
            WITH fl AS (
                SELECT connection_id, event_index, rec, unnest(frames) AS f,
                       generate_subscripts(frames, 1) - 1 AS position
                FROM (SELECT connection_id, event_index, rec, {_data("frames")}.frames AS frames
                      FROM {self._e} WHERE name IN {_in(packet_names)})),
            ft AS (
                SELECT fl.*, {_FRAME_TYPE} AS frame_type,
                       list_transform(f.acked_ranges, lambda r: [r[1], coalesce(r[2], r[1])]) AS ranges
                FROM fl)
            SELECT ft.connection_id, ft.event_index, ft.position::INTEGER, ft.frame_type,
                   CASE WHEN ft.frame_type = 'ack' THEN {decoded} END,
                   {f"CASE WHEN ft.frame_type = 'ack' THEN {value}::BIGINT END" if t.ack_delay_encoding.value == 'raw'
                    else 'NULL'},
                   coalesce(list_max(list_transform(ft.ranges, lambda r: r[2])),
                            {_num("f.largest_acknowledged", "BIGINT")},
                            {_num('f."frame_type.ack.largest_acknowledged"', "BIGINT")}),
                   ft.ranges,
                   {_num("f.ce", "BIGINT")},
                   CASE WHEN ft.frame_type IN ('crypto', 'stream') THEN
                       {_num('coalesce(f.offset, f."frame_type.crypto.offset", f."stream.offset")', "BIGINT")} END,
                   -- (a NEW_CONNECTION_ID's or NEW_TOKEN's "length" is that of its CID or token)
                   CASE WHEN ft.frame_type IN ('crypto', 'stream', 'datagram', 'padding') THEN
                       {_num('coalesce(f.length, f.len, f.raw.payload_length, f."frame_type.crypto.length", '
                             'f."stream.length")', "BIGINT")} END,
                   {_num('coalesce(f.stream_id, f."stream.stream_id", f.id)', "BIGINT")},
                   CASE WHEN ft.frame_type = 'stream' THEN coalesce(TRY_CAST(f.fin AS BOOLEAN), false) END,
                   {_num("f.sequence_number", "BIGINT")},
                   {_num("coalesce(f.ack_eliciting_threshold, f.packet_tolerance)", "BIGINT")},
                   {_num("coalesce(f.request_max_ack_delay, f.update_max_ack_delay, f.max_ack_delay)")}
                       * {_lit(t.time_scale_ms)},
                   {_num("coalesce(f.reordering_threshold, f.reorder_threshold)", "BIGINT")},
                   CASE WHEN ft.frame_type NOT IN {with_columns}
                        THEN json_extract(ft.rec, '$.data.frames[' || ft.position || ']') END
            FROM ft
            {tp_join}""")

    def _events(self, t: TraceInfo, named) -> None:
        scale = _lit(t.time_scale_ms)
        rtt = f"* {scale} * {_lit(t.metric_scale_ms)}"
        metrics = named("metrics_updated")
        if metrics:
            # RFC 9002 §5.1: an RTT sample needs an ACK of a packet the endpoint sent, so latest_rtt
            # and min_rtt logged before its first packet_sent are initial values, not samples
            # (quinn logs its 333 ms initial RTT as both in a connection's first event).  A later
            # slice can only move that first packet earlier than "never": finish() clears the
            # values logged before a first packet_sent found in a later slice.
            unset = "(d.min_rtt IS NULL AND d.latest_rtt = 0)" if t.latest_rtt_zero_is_unset else "false"
            before = "coalesce(event_index < c.first_sent, false)"
            self._exec(f"""INSERT INTO logged_metrics
                SELECT connection_id, event_index, time_ms,
                       CASE WHEN NOT {unset} AND NOT {before} THEN {_num("d.latest_rtt")} {rtt} END,
                       CASE WHEN NOT {before} THEN {_num("d.min_rtt")} {rtt} END, {_num("d.smoothed_rtt")} {rtt},
                       {_num("coalesce(d.rtt_variance, d.rttvar, d.rtt_var)")} {rtt},
                       {_num("d.pto_count", "INTEGER")}, {_num("coalesce(d.congestion_window, d.cwnd)", "BIGINT")},
                       {_num("d.bytes_in_flight", "BIGINT")}
                FROM (SELECT *, {_data("metrics")} AS d FROM {self._e} WHERE name IN {_in(metrics)})
                JOIN conn c USING (connection_id)""")
        lost = named("packet_lost")
        if lost:
            # (the packet type's CASE applied to a column computed below it: DuckDB plans the
            # nested CASE of the space in ~100 ms when it is spelled out twice, and the type's
            # CASE over the struct fields in ~13 ms, over a column in ~1 ms)
            self._exec(f"""INSERT INTO lost_packets
                SELECT connection_id, event_index, time_ms, packet_type, {_SPACE.format(t='packet_type')},
                       packet_number, trigger
                FROM (SELECT * EXCLUDE (raw_type),
                             {_PACKET_TYPE.format(x='raw_type', missing='NULL')} AS packet_type
                FROM (SELECT connection_id, event_index, time_ms, {_raw_packet_type('d', 'd.type')} AS raw_type,
                             {_packet_number('d')} AS packet_number, d.trigger AS trigger
                      FROM (SELECT *, {_data("lost")} AS d FROM {self._e} WHERE name IN {_in(lost)})))""")
        dropped = named("packet_dropped")
        if dropped:
            self._exec(f"""INSERT INTO dropped_packets
                SELECT connection_id, event_index, time_ms, {_PACKET_TYPE.format(x='raw_type', missing='NULL')},
                       packet_number, size_bytes, trigger
                FROM (SELECT connection_id, event_index, time_ms, {_raw_packet_type('d')} AS raw_type,
                             {_packet_number('d')} AS packet_number,
                             {_num("coalesce(d.raw.length, d.packet_size, d.header.packet_size)", "INTEGER")}
                                 AS size_bytes, coalesce(d.trigger, d.details) AS trigger
                      FROM (SELECT *, {_data("dropped")} AS d FROM {self._e} WHERE name IN {_in(dropped)}))""")
        timers = named("loss_timer_updated", "timer_updated")
        if timers:
            self._exec(f"""INSERT INTO timers
                SELECT connection_id, event_index, time_ms, d.timer_type, coalesce(d.event_type, d.type),
                       coalesce(d.packet_number_space, d.pn_space), {_num("d.delta")} * {scale}
                FROM (SELECT *, {_data("timer")} AS d FROM {self._e} WHERE name IN {_in(timers)})""")
        routed = named(*ROUTED_EVENTS)
        self._exec(f"""INSERT INTO other_events
            SELECT connection_id, event_index, time_ms, name,
                   -- (a record without a name, not an event object at all maybe, is kept whole)
                   CASE WHEN name = '' THEN json(rec) ELSE json_extract(rec, '$.data') END
            FROM {self._e} WHERE {f"name NOT IN {_in(routed)}" if routed else "true"}""")

    def _odcid(self, parameters: list[str], started: list[str]) -> None:
        """The first ODCID candidate in file order: a server's original_destination_connection_id,
        connection_started's destination CID, or the DCID of the client's first Initial."""
        if self._with_odcid == len(self._groups):
            return  # every connection has one
        candidates = ["SELECT connection_id, event_index, dcid AS odcid FROM slice_datagrams "
                      "WHERE sender = 'client' AND packet_type = 'initial'"]
        if parameters:
            candidates.append(f"""SELECT connection_id, event_index,
                json_transform(rec, '{{"data": {{"original_destination_connection_id": "VARCHAR"}}}}')
                    .data.original_destination_connection_id
                FROM {self._e} WHERE name IN {_in(parameters)}""")
        if started:
            candidates.append(f"""SELECT connection_id, event_index,
                       coalesce(d.original_destination_connection_id, d.dst_cid, d.dcid)
                FROM (SELECT *, {_data("started")} AS d FROM {self._e} WHERE name IN {_in(started)})""")
        self._with_odcid += self._exec(f"""UPDATE conn SET odcid = o.odcid
            FROM (SELECT connection_id, arg_min(odcid, event_index) AS odcid
                  FROM ({' UNION ALL '.join(candidates)}) WHERE odcid IS NOT NULL GROUP BY connection_id) o
            WHERE conn.connection_id = o.connection_id AND conn.odcid IS NULL""").fetchone()[0]

    # --- after the last slice -------------------------------------------------------------------

    def finish(self) -> None:
        """Write transport_parameters and connections; repair what slices could not know."""
        con = self.con
        con.execute("""CREATE OR REPLACE TEMP TABLE tr (trace_index INTEGER, vantage VARCHAR, flow VARCHAR,
            implementation VARCHAR, odcid VARCHAR, title VARCHAR, time_format VARCHAR,
            reference_epoch_ms DOUBLE, ack_delay_encoding VARCHAR, quirks VARCHAR[],
            server_group_id_is_client_scid BOOLEAN)""")
        insert_rows(con, "tr", [
            (t.trace_index, t.vantage.value, t.flow, t.implementation, t.odcid, t.title, t.time_format,
             t.reference_epoch_ms, t.ack_delay_encoding.value, list(t.quirks), t.server_group_id_is_client_scid)
            for t in self.traces])

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

        con.execute(f"""INSERT INTO transport_parameters
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

        # Raw ACK Delay fields decoded in an earlier slice than the sender's last parameters_set:
        # decode again with the exponent that holds for the whole file.
        if any(self.slices.get(t.trace_index, 0) > 1 and t.ack_delay_encoding.value == "raw" for t in self.traces):
            con.execute(f"""UPDATE frames SET ack_delay_ms = frames.ack_delay_raw * pow(2, x.exponent) / 1000.0
                FROM (SELECT f.connection_id, f.event_index, f.position,
                             {exponent_sql("tp.ack_delay_exponent", "p.packet_type")} AS exponent
                      FROM frames f JOIN packets p USING (connection_id, event_index)
                      JOIN conn c ON c.connection_id = f.connection_id
                      JOIN tr ON tr.trace_index = c.trace_index AND tr.ack_delay_encoding = 'raw'
                      LEFT JOIN ({_TP_EXPONENT}) tp ON tp.connection_id = f.connection_id AND tp.endpoint = p.sender
                      WHERE f.frame_type = 'ack' AND f.ack_delay_raw IS NOT NULL) x
                WHERE frames.connection_id >= {self.first_connection_id}
                  AND frames.connection_id = x.connection_id AND frames.event_index = x.event_index
                  AND frames.position = x.position
                  AND frames.ack_delay_ms IS DISTINCT FROM frames.ack_delay_raw * pow(2, x.exponent) / 1000.0""")

        # The connection row last: its ODCID may come from the events (a client's first Initial is
        # sent to the ODCID; a server logs original_destination_connection_id).
        con.execute(f"""INSERT INTO connections (connection_id, file_id, trace_index, group_id, vantage,
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
        self.drop()

    def drop(self) -> None:
        self._scratch = {}
        for table in ("conn", "tp_ev", "tr"):
            self.con.execute(f"DROP TABLE IF EXISTS {table}")


def _refuse_untimed_packets(ev: pa.Table, packet_names: list[str], offset: int) -> None:
    """Refuse a packet event without a time: ``packets.time_ms`` needs one, and every qlog draft
    requires ``time`` on every event (another event without one is kept, its time_ms NULL)."""
    untimed = ev.filter(pc.and_(pc.is_null(ev.column("t_ms")),
                                pc.is_in(ev.column("name"), pa.array(packet_names, pa.string()))))
    if untimed.num_rows:
        first = untimed.slice(0, 1).to_pylist()[0]
        raise QuicackError(f"{first['name']} event without a time (qlog requires one on every event)", None,
                           f"trace {first['trace_index']} event {offset + first['row'] + 1}")


def _datagram_ids(rows: pa.Table) -> pa.Table:
    """Datagrams of the packets ``rows`` (the columns of ``slice_datagrams`` plus what their
    connection carried: ``datagrams`` counted so far and the ``last_*`` figures of its previous
    packet), in (connection, event) order, with ``starts`` (1: the packet starts a datagram) and
    ``derived_datagram_id`` (the connection's datagrams counted from 0, in event order).

    A packet starts a new datagram unless it follows, in the same direction, a packet of the same
    datagram: one logged at the same time with an earlier coalescing order (RFC 9000 §12.2:
    Initial, 0-RTT, Handshake, then 1-RTT last), one with the same datagram_payload_checksum
    (quic-go), or — received, in traces that log datagrams_received before their packets
    (aioquic) — one after the same datagrams_received event (only once the trace logged one: the
    scanner's probes leave them out and are grouped by equal times).  The packet before a
    connection's first one in this slice is the last one of the previous slice (``last_*``).
    Comparisons follow SQL: one with a missing value holds nothing.  (Arrow compute rather than
    SQL window functions, which sorted the slice twice: ~5× the time.)
    """
    n = rows.num_rows
    rows = rows.sort_by([("connection_id", "ascending"), ("event_index", "ascending")]).combine_chunks()

    def col(name: str) -> pa.Array:
        return rows.column(name).chunk(0) if rows.column(name).num_chunks else pa.array([], rows.schema.field(name).type)

    cid = col("connection_id")
    first = pa.concat_arrays([pa.array([True] * min(n, 1), pa.bool_()), pc.not_equal(cid.slice(1), cid.slice(0, max(n - 1, 0)))])

    def prev(column: str, carried: str) -> pa.Array:
        """The column's value of the previous packet of the same connection."""
        value = col(column)
        shifted = pa.concat_arrays([pa.nulls(min(n, 1), value.type), value.slice(0, max(n - 1, 0))])
        return pc.if_else(first, col(carried).cast(value.type), shifted)

    direction = col("direction")
    same_time_later_rank = pc.and_kleene(pc.equal(prev("t_ms", "last_t"), col("t_ms")),
                                         pc.less(prev("rank", "last_rank"), col("rank")))
    same_checksum = pc.equal(prev("checksum", "last_checksum"), col("checksum"))
    same_rx = pc.and_kleene(pc.and_kleene(pc.equal(direction, "received"), pc.greater(col("rx_seq"), 0)),
                            pc.equal(prev("rx_seq", "last_rx_seq"), col("rx_seq")))
    follows = pc.and_kleene(pc.equal(prev("direction", "last_direction"), direction),
                            pc.or_kleene(pc.or_kleene(same_time_later_rank, same_checksum), same_rx))
    starts = pc.if_else(pc.fill_null(follows, False), 0, 1).cast(pa.int32())
    counted = pc.cumulative_sum(starts.cast(pa.int64()))
    # the count before each connection's first packet, spread over its packets
    before = pc.take(pc.filter(pc.subtract(counted, starts.cast(pa.int64())), first),
                     pc.subtract(pc.cumulative_sum(first.cast(pa.int64())), 1))
    derived = pc.subtract(pc.add(col("datagrams"), pc.subtract(counted, before)), 1)
    rows = rows.drop_columns(["datagrams", "last_direction", "last_t", "last_rank", "last_checksum", "last_rx_seq"])
    return rows.append_column("starts", starts).append_column("derived_datagram_id", derived)


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
