"""Per-connection analyses run inside the store: handshake classification and the RFC 9002 replay.

Theory of operation: after a file's rows are normalized (same transaction),
:func:`classify_and_replay` reads each new connection back out of DuckDB — the first :data:`HANDSHAKE_WINDOW` packets with their
frames for :func:`quicack.core.classify.classify`, and the endpoint's sent packets, received ACK frames,
losses, PTO expiries and confirmation for the RFC 9002 replay (the native core's, for every
connection at once; :mod:`quicack.core.recovery` is its Python face) — runs the pure code, and writes
the results back: columns of ``connections`` and rows of ``rtt_samples``, each sample next to the
metrics the implementation logged right after the same ACK.  Careful Resume phase events are
read out of ``other_events`` into their own table (:mod:`quicack.store.resumephases`).

Whose view is replayed: the vantage point's (client or server).  A network capture is replayed as
the client's view (its ``flow``, 'client' unless the trace says otherwise): exact when captured at
the client host, as scanners and browsers' captures are.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from quicack.core import native
from quicack.core import recovery
from quicack.store import resumephases
from quicack.store.rows import arrow_table
from quicack.core.classify import IACK, IACK_PING, WFC, Close, Handshake, classify
from quicack.model import Frame, Packet

#: Packets per connection the classifier looks at; the handshake is long over by then.
HANDSHAKE_WINDOW = 400

_HANDSHAKE_COLUMNS = (
    "handshake_class", "handshake_reason", "handshake_notes", "ack_sh_gap_ms", "first_ack_event_index",
    "server_hello_event_index", "first_ack_packet_number", "first_ack_frames",
    "first_ack_largest_acknowledged", "first_ack_acknowledges_first_initial", "first_ack_delay_ms",
    "clienthello_packets", "first_server_packet_ms", "server_hello_ms", "handshake_complete_ms",
)
_REPLAY_COLUMNS = ("replay_endpoint", "replay_samples", "first_rtt_sample_ms", "first_pto_ms",
                   "counterfactual_first_pto_ms", "replay_notes")
_RP_TYPES = tuple(zip(_REPLAY_COLUMNS, ("VARCHAR", "INTEGER", "DOUBLE", "DOUBLE", "DOUBLE", "VARCHAR[]")))


def classify_and_replay(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> None:
    """Classify and replay every connection with id ≥ ``first_connection_id`` (caller holds the
    transaction).  Both run in Python; their columns go into ``connections`` with one UPDATE
    (each statement costs DuckDB milliseconds whatever its rows), then the figures cheaper in SQL."""
    ids = [cid for (cid,) in con.execute(
        "SELECT connection_id FROM connections WHERE connection_id >= ? ORDER BY 1",
        [first_connection_id]).fetchall()]
    if not ids:
        return
    closes = _first_closes(con, first_connection_id)
    unreadable = _unreadable_from(con, first_connection_id)
    handshakes = {cid: classify(packets, close=closes.get(cid), unreadable_from_ms=unreadable.get(cid))
                  for cid, packets in _handshake_inputs(con, first_connection_id, ids)}
    replayed = {row[0]: row[1:] for row in _replay_all(con, first_connection_id, handshakes)}
    _update_connections(con, handshakes, replayed)
    _fill_sql_figures(con, first_connection_id)
    resumephases.fill(con, first_connection_id)


def _update_connections(con, handshakes: dict[int, Handshake], replayed: dict[int, tuple]) -> None:
    """Each connection's handshake columns and replay columns (NULL if not replayed), from one
    Arrow table in one UPDATE."""
    columns = [("connection_id", "BIGINT"), *_hs_types(), *_RP_TYPES]
    unreplayed = (None,) * len(_REPLAY_COLUMNS)
    rows = [(cid, *_handshake_values(h), *replayed.get(cid, unreplayed)) for cid, h in handshakes.items()]
    quicack_analysis = arrow_table(columns, rows)  # noqa: F841
    # read by DuckDB's replacement scan of this frame's local (no register/unregister: ~2 ms)
    con.execute(f"""UPDATE connections c SET {', '.join(f'{col} = a.{col}' for col, _ in columns[1:])}
        FROM quicack_analysis a WHERE c.connection_id = a.connection_id""")


# --- handshake classification -------------------------------------------------------------------

def _hs_types() -> list[tuple[str, str]]:
    types = {"handshake_notes": "VARCHAR[]", "first_ack_acknowledges_first_initial": "BOOLEAN",
             "handshake_class": "VARCHAR", "handshake_reason": "VARCHAR", "first_ack_frames": "VARCHAR"}
    ints = ("first_ack_event_index", "server_hello_event_index", "first_ack_packet_number",
            "first_ack_largest_acknowledged", "clienthello_packets")
    return [(c, types.get(c, "BIGINT" if c in ints else "DOUBLE")) for c in _HANDSHAKE_COLUMNS]


def _handshake_values(h: Handshake) -> tuple:
    return (h.handshake_class, h.reason, list(h.notes), h.ack_sh_gap_ms, h.first_ack_event_index,
            h.server_hello_event_index, h.first_ack_packet_number, h.first_ack_frames,
            h.first_ack_largest_acknowledged, h.first_ack_acknowledges_first_initial,
            h.first_ack_delay_ms, h.clienthello_packets, h.first_server_packet_ms, h.server_hello_ms,
            h.handshake_complete_ms)


def _first_closes(con, first_id: int) -> dict[int, Close]:
    """Each new connection's first CONNECTION_CLOSE (anywhere in it, not only in the window)."""
    return {cid: Close(t, sender, code) for cid, t, sender, code in con.execute("""
        SELECT f.connection_id, arg_min(p.time_ms, p.event_index), arg_min(p.sender, p.event_index),
               arg_min(coalesce(f.details->>'error_code', f.details->>'raw_error_code',
                                f.details->>'error_space'), p.event_index)
        FROM frames f JOIN packets p USING (connection_id, event_index)
        WHERE f.connection_id >= ? AND f.frame_type = 'connection_close'
        GROUP BY f.connection_id""", [first_id]).fetchall()}


def _handshake_inputs(con, first_id: int, ids: list[int]) -> Iterator[tuple[int, list[Packet]]]:
    """Per new connection (``ids``: all of them, ascending): its first :data:`HANDSHAKE_WINDOW`
    packets with their frames, in trace order.

    Packets and frames come as two flat Arrow tables sorted alike and are merged here: a
    per-packet ``list(struct)`` aggregate in SQL and its conversion to Python dicts cost three
    times as much (a scan's batch of 1000 short connections: ~0.25 s)."""
    first = int(first_id)
    window = f"""SELECT connection_id, event_index, time_ms, direction, sender, packet_type, packet_number,
                        size_bytes, datagram_id
                 FROM packets WHERE connection_id >= {first}
                 QUALIFY row_number() OVER (PARTITION BY connection_id ORDER BY event_index) <= {HANDSHAKE_WINDOW}"""
    packets = con.sql(f"{window} ORDER BY connection_id, event_index").to_arrow_table()
    # (the window's last packet per connection read off the fetched table, by DuckDB's
    # replacement scan of this local: the window is not computed twice)
    quicack_hs_packets = packets  # noqa: F841
    frames = con.sql("""
        SELECT f.connection_id, f.event_index, f.frame_type, f.ack_delay_ms, f.largest_acknowledged,
               f.acked_ranges, f.offset_bytes, f.length_bytes, f.stream_id,
               CASE WHEN f.details IS NOT NULL
                    THEN coalesce(f.details->>'error_code', f.details->>'raw_error_code') END
        FROM frames f JOIN (SELECT connection_id, max(event_index) AS last FROM quicack_hs_packets
                            GROUP BY ALL) w
             ON f.connection_id = w.connection_id AND f.event_index <= w.last
        ORDER BY f.connection_id, f.event_index, f.position""").to_arrow_table()
    f_cid, f_event, *f_values = (c.to_pylist() for c in frames.columns)
    # (tuple.__new__ straight from each row: a named tuple's own __new__ is a Python call with
    # its arguments bound one by one, twice the cost for ~25 frames and ~10 packets a probe)
    frame_objects = [_new_frame((kind, delay, largest, _ranges(ranges, largest), offset, length, stream, code))
                     for kind, delay, largest, ranges, offset, length, stream, code in zip(*f_values)]
    k, n_frames = 0, len(frame_objects)
    current, out = None, []
    for row in zip(*(c.to_pylist() for c in packets.columns)):
        cid, event = row[0], row[1]
        if cid != current:
            if current is not None:
                yield current, out
            current, out = cid, []
        # frames of packets before this one in the same order (none expected) are skipped
        while k < n_frames and (f_cid[k], f_event[k]) < (cid, event):
            k += 1
        j = k
        while j < n_frames and f_event[j] == event and f_cid[j] == cid:
            j += 1
        out.append(_new_packet((*row[1:], tuple(frame_objects[k:j]))))
        k = j
    if current is not None:
        yield current, out
    # connections without any packet still get a class
    seen = set(packets.column(0).unique().to_pylist())
    for cid in ids:
        if cid not in seen:
            yield cid, []


_new_frame = functools.partial(tuple.__new__, Frame)
_new_packet = functools.partial(tuple.__new__, Packet)


def _ranges(ranges, largest) -> tuple[tuple[int, int], ...]:
    """ACK ranges as pairs; producers that log only the largest acknowledged (pcap2qlog 0.1)
    get that one packet as their only range."""
    if not ranges:  # (most frames are not ACKs)
        return () if largest is None else ((largest, largest),)
    pairs = tuple((r[0], r[1]) for r in ranges if r and len(r) == 2 and r[0] is not None)
    if not pairs and largest is not None:
        return ((largest, largest),)
    return pairs


def _fill_sql_figures(con, first_id: int) -> None:
    """Figures cheaper in SQL: HANDSHAKE_DONE, first response byte, server transport parameters,
    the exponent the first ACK delay was decoded with."""
    # HANDSHAKE_DONE and the first response byte relative to the client's first Initial, as the
    # classifier's figures are (NULL without it).  RFC 9000 §19.3 / KNOWLEDGE §2: an ACK Delay
    # field we decoded ourselves (the producer logged the raw field) in an Initial packet used
    # the default exponent 3: the sender's transport parameters are not known yet.
    con.execute("""UPDATE connections c SET
            handshake_done_ms = x.done_ms - t0.t, first_response_byte_ms = x.response_ms - t0.t,
            first_ack_delay_exponent = CASE WHEN a.raw_delay THEN 3 ELSE c.first_ack_delay_exponent END
        FROM (SELECT connection_id FROM connections WHERE connection_id >= $first) ids
        LEFT JOIN (SELECT p.connection_id,
                          min(p.time_ms) FILTER (WHERE f.frame_type = 'handshake_done') AS done_ms,
                          min(p.time_ms) FILTER (WHERE f.frame_type = 'stream' AND p.sender = 'server'
                                                 AND f.stream_id % 4 = 0 AND coalesce(f.length_bytes, 1) > 0)
                              AS response_ms
                   FROM packets p JOIN frames f USING (connection_id, event_index)
                   WHERE p.connection_id >= $first AND f.frame_type IN ('handshake_done', 'stream')
                   GROUP BY p.connection_id) x USING (connection_id)
        LEFT JOIN (SELECT connection_id, min(time_ms) AS t FROM packets
                   WHERE connection_id >= $first AND sender = 'client' AND packet_type = 'initial'
                   GROUP BY connection_id) t0 USING (connection_id)
        LEFT JOIN (SELECT DISTINCT f.connection_id, true AS raw_delay
                   FROM frames f JOIN connections k
                     ON f.connection_id = k.connection_id AND f.event_index = k.first_ack_event_index
                   WHERE k.connection_id >= $first AND f.frame_type = 'ack' AND f.ack_delay_raw IS NOT NULL) a
          USING (connection_id)
        WHERE c.connection_id = ids.connection_id""", {"first": first_id})
    con.execute("""UPDATE connections c SET
            server_max_ack_delay_ms = tp.max_ack_delay_ms, server_ack_delay_exponent = tp.ack_delay_exponent,
            server_min_ack_delay_ms = tp.min_ack_delay_ms,
            ack_frequency_supported = tp.min_ack_delay_ms IS NOT NULL
        FROM (SELECT * FROM transport_parameters WHERE connection_id >= ? AND endpoint = 'server'
              -- one row: qlog's owners are 'local' and 'remote', one row each; a trace naming
              -- other owners has more, and the one taken must not depend on DuckDB's plan
              QUALIFY row_number() OVER (PARTITION BY connection_id
                                         ORDER BY owner IN ('local', 'remote') DESC, time_ms DESC, owner) = 1) tp
        WHERE tp.connection_id = c.connection_id""",
                [first_id])


def _unreadable_from(con, first_id: int) -> dict[int, float]:
    """Per new connection of a capture with UDP GSO super-frames (``capture_issues``): the trace
    time of the first one (``time_ms`` counts from ``first_event_epoch_ms``), for
    :func:`quicack.core.classify.classify`."""
    return dict(con.execute("""
        SELECT i.connection_id, min(i.epoch_ms) - any_value(c.first_event_epoch_ms)
        FROM capture_issues i JOIN connections c USING (connection_id)
        WHERE i.connection_id >= ? AND i.kind = 'gso_superframe' AND c.first_event_epoch_ms IS NOT NULL
        GROUP BY ALL""", [first_id]).fetchall())


# --- RFC 9002 replay ------------------------------------------------------------------------------
# All new connections at once: a handful of statements per file, not per connection (a scan's
# batch holds thousands of small connections).  Temp table ``rv`` says whose view each replays.

_VIEWS_SQL = """
    CREATE OR REPLACE TEMP TABLE rv AS
    SELECT connection_id,
           CASE WHEN vantage IN ('client', 'server') THEN vantage
                WHEN flow IN ('client', 'server') THEN flow ELSE 'client' END AS me,
           EXISTS (SELECT 1 FROM timers t WHERE t.connection_id = c.connection_id)
           OR EXISTS (SELECT 1 FROM lost_packets l WHERE l.connection_id = c.connection_id
                      AND lower(l.trigger) LIKE '%pto%') AS pto_observable,
           -- quic-go logs packet_received after handling its frames: the metrics an ACK caused
           -- come before the packet that carried it
           coalesce(array_to_string(quirks, ',') LIKE '%metrics_before_packet_received%', false)
               AS metrics_before_packet
    FROM connections c WHERE connection_id >= $first AND vantage IN ('client', 'server', 'network')
"""

#: the RTT values the implementation logged (rows with none are congestion-window updates, ~90 %
#: of an aioquic transfer's) and the packets the endpoint received: what sets each replayed
#: sample beside what the implementation logged after the same ACK
_METRICS_SQL = """
    SELECT connection_id, event_index, latest_rtt_ms, min_rtt_ms, smoothed_rtt_ms, rtt_variance_ms
    FROM logged_metrics JOIN rv USING (connection_id)
    WHERE connection_id >= $first AND (latest_rtt_ms IS NOT NULL OR min_rtt_ms IS NOT NULL
          OR smoothed_rtt_ms IS NOT NULL OR rtt_variance_ms IS NOT NULL)
    ORDER BY connection_id, event_index
"""
_RECEIVED_SQL = """
    SELECT connection_id, event_index FROM packets JOIN rv USING (connection_id)
    WHERE connection_id >= $first AND direction = 'received'
    ORDER BY connection_id, event_index
"""

#: packet number spaces as the native replay numbers them
_SPACE = "(CASE {} WHEN 'initial' THEN 0 WHEN 'handshake' THEN 1 WHEN 'application_data' THEN 2 END)::BIGINT"

_SENT_SQL = f"""
    SELECT p.connection_id, {_SPACE.format("p.packet_number_space")} AS space, p.packet_number, p.time_ms,
           coalesce(p.ack_eliciting, true) AS eliciting, p.event_index
    FROM packets p JOIN rv USING (connection_id)
    WHERE p.connection_id >= $first AND p.sender = rv.me AND p.packet_number IS NOT NULL
          AND p.packet_number_space IS NOT NULL
"""  # (in any order: the replay sorts each space's packets if they are not in packet number order)

_EVENT_SQL = """
    -- kind order within one event: 1 ACK, 2 lost, 3 PTO, 4 discard, 5 confirmed, 6 peer TP, 7 Retry
    SELECT connection_id, event_index, k::BIGINT, time_ms, """ + _SPACE.format("space") + """, pn, ranges, value
    FROM (
    SELECT f.connection_id, f.event_index, 1 AS k, p.time_ms, p.packet_number_space AS space,
           f.largest_acknowledged AS pn, flatten(f.acked_ranges) AS ranges, f.ack_delay_ms AS value
    FROM frames f JOIN packets p USING (connection_id, event_index) JOIN rv USING (connection_id)
    WHERE f.connection_id >= $first AND f.frame_type = 'ack' AND p.sender <> rv.me
          AND p.packet_number_space IS NOT NULL
    UNION ALL
    SELECT l.connection_id, l.event_index, 2, l.time_ms, l.packet_number_space, l.packet_number, NULL, NULL
    FROM lost_packets l JOIN rv USING (connection_id)
    WHERE l.connection_id >= $first AND l.packet_number IS NOT NULL AND l.packet_number_space IS NOT NULL
    UNION ALL
    SELECT connection_id, min(event_index), 3, time_ms, NULL, NULL, NULL, NULL FROM (
        SELECT t.connection_id, t.event_index, t.time_ms FROM timers t JOIN rv USING (connection_id)
        WHERE t.connection_id >= $first AND lower(coalesce(t.timer_type, '')) IN ('pto', 'probe')
              AND lower(t.event_type) = 'expired'
        UNION ALL
        SELECT l.connection_id, l.event_index, l.time_ms FROM lost_packets l JOIN rv USING (connection_id)
        WHERE l.connection_id >= $first AND lower(l.trigger) LIKE '%pto%'
              AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.connection_id = l.connection_id))
    GROUP BY connection_id, time_ms
    UNION ALL
    -- RFC 9001 §4.9.1: "a client MUST discard Initial keys when it first sends a Handshake packet
    -- and a server MUST discard Initial keys when it first successfully processes a Handshake
    -- packet": for both, the first Handshake packet of the client
    SELECT p.connection_id, min(p.event_index), 4, arg_min(p.time_ms, p.event_index), 'initial', NULL, NULL, NULL
    FROM packets p JOIN rv USING (connection_id)
    WHERE p.connection_id >= $first AND p.packet_type = 'handshake' AND p.sender = 'client'
    GROUP BY p.connection_id
    UNION ALL
    -- Handshake confirmed (RFC 9001 §4.1.2): the client on receiving HANDSHAKE_DONE, the server
    -- when its handshake completes (the client's Finished arrives in a Handshake packet)
    SELECT p.connection_id, min(p.event_index), 5, arg_min(p.time_ms, p.event_index), NULL, NULL, NULL, NULL
    FROM packets p JOIN frames f USING (connection_id, event_index) JOIN rv USING (connection_id)
    WHERE p.connection_id >= $first AND p.sender <> rv.me
      AND ((rv.me = 'client' AND f.frame_type = 'handshake_done')
           OR (rv.me = 'server' AND p.packet_type = 'handshake' AND f.frame_type = 'crypto'))
    GROUP BY p.connection_id
    UNION ALL
    SELECT tp.connection_id, -1, 6, tp.time_ms, NULL, NULL, NULL, tp.max_ack_delay_ms
    FROM transport_parameters tp JOIN rv USING (connection_id)
    WHERE tp.connection_id >= $first AND tp.endpoint <> rv.me AND tp.max_ack_delay_ms IS NOT NULL
    UNION ALL
    SELECT p.connection_id, p.event_index, 7, p.time_ms, NULL, NULL, NULL, NULL
    FROM packets p JOIN rv USING (connection_id)
    WHERE p.connection_id >= $first AND p.packet_type = 'retry' AND rv.me = 'client')
    ORDER BY 1, 2, 3
"""


def _replay_all(con, first_id: int, handshakes: dict[int, Handshake]) -> list[tuple]:
    """Replay every new connection, store its samples in rtt_samples and return its rp row."""
    con.execute(_VIEWS_SQL, {"first": first_id})
    try:
        views = con.execute("SELECT connection_id, me, pto_observable, metrics_before_packet FROM rv "
                            "ORDER BY 1").fetchall()
        if not views:
            return []
        samples, stats = _replayed(con, first_id, views)
    finally:
        con.execute("DROP TABLE IF EXISTS rv")
    if samples.num_rows:
        rtt_samples_arrow = samples  # noqa: F841  (read by DuckDB's replacement scan of this frame's locals)
        con.execute("INSERT INTO rtt_samples SELECT * FROM rtt_samples_arrow")
    rows = []
    for (cid, me, _, _), (_, count, without, unknown, lowest, first_row) in zip(views, stats):
        first = [] if first_row is None else recovery.samples_of(samples.slice(first_row, 1))
        result = recovery.Replay(samples=first, acks_without_sample=without, acks_of_unknown_packets=unknown,
                                 sample_count=count, lowest_min_rtt_ms=lowest)
        rows.append(_replay_row(cid, me, result, handshakes.get(cid)))
    return rows


def _replayed(con, first_id: int, views: list[tuple]) -> tuple[pa.Table, list[tuple]]:
    """The native replay (:class:`quicack._native.Replayer`) of the connections ``views`` (rows of
    ``rv``): every endpoint's sent packets, other events, logged RTT metrics and received packets
    handed over as Arrow columns, a record batch at a time (a long connection's half million
    packets are never held as an Arrow table beside the replay's own columns).  Returns the
    samples (the columns of ``rtt_samples``) and, per view, (connection_id, samples, ACKs without
    a sample, ACKs of packets not in the trace, lowest min_rtt, the row of its first sample)."""
    replayer = native.Replayer([(cid, me == "client", bool(observable), bool(before))
                                for cid, me, observable, before in views])
    # (received packets before the metrics: only the metrics rows next to them are kept)
    for sql, add in ((_SENT_SQL, replayer.add_sent), (_EVENT_SQL, replayer.add_events),
                     (_RECEIVED_SQL, replayer.add_received), (_METRICS_SQL, replayer.add_metrics)):
        for batch in con.sql(sql, params={"first": first_id}).to_arrow_reader(REPLAY_BATCH_ROWS):
            add(tuple(native.column(c) for c in batch.columns))
    pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed memory otherwise
    table, stats = replayer.run(True)
    return native.table(table), stats


#: rows of the replay's input handed over at a time
REPLAY_BATCH_ROWS = 65536


def _replay_row(cid: int, endpoint: str, result: recovery.Replay, handshake: Handshake | None) -> tuple:
    """The connection's replay columns (``_REPLAY_COLUMNS``)."""
    notes = []
    if result.acks_of_unknown_packets:
        notes.append(f"acks_of_packets_not_in_trace:{result.acks_of_unknown_packets}")
    first = result.samples[0] if result.samples else None
    counterfactual = None
    if first is not None and handshake is not None and endpoint == "client":
        counterfactual = counterfactual_first_pto_ms(handshake, first, result.lowest_min_rtt_ms)
    return (cid, endpoint, result.sample_count, first.latest_rtt_ms if first else None,
            result.first_pto_ms, counterfactual, notes)


def counterfactual_first_pto_ms(h: Handshake, first: recovery.Sample, later_min_rtt_ms: float) -> float | None:
    """The client's first PTO had the server answered the other way (issue 3, item 4).

    iack: with WFC the first ACK would have come with the ServerHello, ``ack_sh_gap_ms`` later:
    sample' = first sample + gap.  wfc: with an instant ACK the sample would have lacked the time
    the server held its ACK, which it reports as the ACK delay: sample' = first sample − first
    ack_delay, never below the later min_rtt.  Both in the first sample's (Initial) space.
    """
    if h.first_ack_event_index is None or first.event_index != h.first_ack_event_index:
        return None  # the first sample did not come from the first ACK
    if h.handshake_class in (IACK, IACK_PING) and h.ack_sh_gap_ms is not None:
        return recovery.first_pto_after(first.latest_rtt_ms + h.ack_sh_gap_ms, first.space)
    if h.handshake_class == WFC and h.first_ack_delay_ms is not None:
        sample = max(first.latest_rtt_ms - h.first_ack_delay_ms, later_min_rtt_ms)
        return recovery.first_pto_after(sample, first.space)
    return None


def replay_view(con: duckdb.DuckDBPyConnection, connection_id: int, endpoint: str) -> recovery.Replay:
    """The RFC 9002 replay of one stored connection from ``endpoint``'s side ('client' or
    'server'), returned and not stored — e.g. a capture taken on the server's host replayed as the
    server, next to what the server logged.  Only temp tables are written (read-only stores work)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE rv AS
        SELECT ?::BIGINT AS connection_id, ?::VARCHAR AS me, false AS pto_observable,
               false AS metrics_before_packet""",
                [connection_id, endpoint])
    try:
        samples, [(_, count, without, unknown, lowest, _)] = _replayed(
            con, connection_id, [(connection_id, endpoint, False, False)])
    finally:
        con.execute("DROP TABLE IF EXISTS rv")
    return recovery.Replay(samples=recovery.samples_of(samples), acks_without_sample=without,
                           acks_of_unknown_packets=unknown, sample_count=count, lowest_min_rtt_ms=lowest)
