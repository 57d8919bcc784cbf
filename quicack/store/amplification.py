"""Address validation, the anti-amplification budget, PTOs per space and 0-RTT, per stored connection.

Theory of operation: after a file's rows are normalized and classified (same transaction),
:func:`analyze` works on every new connection in four steps:

1. ``datagrams``: each UDP datagram with its whole payload.  Captures have it already (the UDP
   length, written by :mod:`quicack.pcap.normalize`).  A qlog has packets, not datagrams: its
   packets are grouped by ``packets.datagram_id``; a received datagram takes the payload length of
   the ``datagrams_received`` event logged just before it (aioquic), which counts padding that is
   not inside a packet; else the sum of its packets, and a datagram holding an Initial packet
   sent by the client counts at least 1200 bytes ("Clients MUST ensure that UDP datagrams containing Initial packets
   have UDP payloads of at least 1200 bytes", RFC 9000 §14.1 — aioquic's client pads *after* its
   Initial packet and never logs the padding).  ``size_source`` says which.
2. Per datagram, what the budget needs: a client datagram holding a Handshake packet validates the
   client's address (RFC 9000 §8.1); a server datagram that is an ACK-only Initial is an instant
   ACK; a server datagram carrying CRYPTO bytes beyond those it sent before in that space, or more
   bytes of a stream it had started, carries new data.
3. :func:`quicack.core.amplification.replay_budget` walks them, in the server's order: a trace
   not taken at the server (a client's, a capture) is first reordered with the path's RTT: its
   smallest RTT sample less the ACK delay the server reported (``clock_shift_ms``; NULL and not
   reordered without a sample) (:func:`quicack.core.amplification.server_order`, ``clock_shift_ms``).  After a Retry the client's next
   Initial carries the Retry token, and the budget is taken as validated from then (the server
   issued the token, RFC 9000 §8.1.2).  Only the first datagrams matter: once the address is
   validated the budget is over, apart from a limit point still waiting for the server's next new
   bytes.  So the walk first gets, per connection validated in the trace and not retried, only
   the datagrams up to :data:`LOOK_PAST_MS` past validation in the server's order, with the frames
   of the packets up to them (``_FIRST_LOOK_SQL``: tens of datagrams, not the whole transfer);
   :func:`quicack.core.amplification.prefix_budget` says whether they settle it, and the
   connections they do not settle (never validated, retried, or still waiting) are walked whole.
4. SQL aggregates: PTO timers set and expired per packet number space (NULL when the trace logs no
   timers), whether a PTO was armed during the server's first blocked period (server traces with
   timers: RFC 9002 §6.2.2.1, "If no additional data can be sent, the server's PTO timer MUST NOT
   be armed until datagrams have been received from the client"), and the 0-RTT packets sent,
   received, acknowledged, lost and discarded with the outcome they imply.

One ``address_validation`` row per connection.  Exact from a server's trace or a capture; a
client's trace that does not log its datagrams counts coalesced packets it logged as separate
datagrams separately (see schemas/README.md).
"""

from __future__ import annotations

from collections import defaultdict

import duckdb

from quicack.core.amplification import (FULL_DATAGRAM_BYTES, Budget, Datagram, prefix_budget, replay_budget,
                                        server_order)
from quicack.store.rows import insert

_DATAGRAMS_SQL = f"""
    INSERT INTO datagrams
    WITH pk AS (
        SELECT connection_id, datagram_id, direction, min(time_ms) AS time_ms, min(event_index) AS first_event,
               any_value(sender) AS sender, sum(coalesce(size_bytes, 0))::INTEGER AS bytes, count(*)::INTEGER AS n,
               string_agg(packet_type, ',' ORDER BY event_index) AS types,
               bool_or(packet_type = 'initial') AS has_initial
        FROM packets
        WHERE connection_id >= $first
          AND connection_id NOT IN (SELECT connection_id FROM datagrams WHERE connection_id >= $first)
        GROUP BY connection_id, datagram_id, direction),
    ev AS (
        -- (quicack serve's early_data_released: a kept 0-RTT packet handed again, no datagram:
        -- 0 bytes, its bytes came with the datagram it arrived in; quicack/lab/earlydata.py)
        SELECT connection_id, event_index, event_name LIKE '%datagrams_sent' AS sent,
               CASE WHEN event_name LIKE '%early_data_released' THEN 0
                    ELSE TRY_CAST(data->'raw'->0->>'payload_length' AS INTEGER) END AS payload,
               TRY_CAST(data->'datagram_ids'->>0 AS BIGINT) AS logged_id,
               coalesce(json_array_length(data->'raw'), 0) AS entries
        FROM other_events
        WHERE connection_id >= $first AND (event_name LIKE '%datagrams_received' OR event_name LIKE '%datagrams_sent'
                                           OR event_name LIKE '%early_data_released')),
    matched AS (
        -- (received: the first datagram after each event, its packets come right after it)
        SELECT pk.*, ev.payload, ev.entries,
               row_number() OVER (PARTITION BY pk.connection_id, ev.event_index ORDER BY pk.first_event) AS nth
        FROM pk ASOF LEFT JOIN (SELECT * FROM ev WHERE NOT sent) ev
             ON pk.connection_id = ev.connection_id AND pk.first_event > ev.event_index
        WHERE pk.direction = 'received'
        UNION ALL
        -- (sent: the event naming the datagram, as quicack's scanner logs them)
        SELECT pk.*, ev.payload, ev.entries, 1
        FROM pk LEFT JOIN (SELECT * FROM ev WHERE sent AND logged_id IS NOT NULL) ev
             ON pk.connection_id = ev.connection_id AND pk.datagram_id = ev.logged_id
        WHERE pk.direction <> 'received')
    SELECT connection_id, datagram_id, time_ms, sender,
           CASE WHEN payload IS NOT NULL AND entries = 1 AND nth = 1 THEN payload
                WHEN has_initial AND sender = 'client' THEN greatest(bytes, {FULL_DATAGRAM_BYTES}) ELSE bytes END,
           n, types,
           CASE WHEN payload IS NOT NULL AND entries = 1 AND nth = 1 THEN 'datagram_event'
                WHEN has_initial AND sender = 'client' AND bytes < {FULL_DATAGRAM_BYTES} THEN 'packets_padded'
                ELSE 'packets' END
    FROM matched
"""

#: per datagram of the connections in ``av_scope``, up to its bounds: validates / instant ACK / new
#: data (module docstring, step 2)
_FLAGS_SQL = """
    WITH fr AS (
        SELECT p.connection_id, p.datagram_id, p.event_index, p.time_ms, p.sender, p.packet_type,
               p.size_bytes AS packet_bytes,
               p.packet_number_space AS space, f.position, f.frame_type, f.stream_id,
               f.offset_bytes, f.offset_bytes + f.length_bytes AS end_bytes
        FROM (SELECT p.* FROM packets p JOIN av_scope s USING (connection_id)
              WHERE s.last_event IS NULL OR p.event_index <= s.last_event) p
        LEFT JOIN frames f USING (connection_id, event_index)),
    nd AS (
        SELECT *, max(end_bytes) OVER (PARTITION BY connection_id, sender, space, frame_type, stream_id
                                      ORDER BY event_index, position
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before,
               min(time_ms) OVER (PARTITION BY connection_id, sender, space, frame_type, stream_id) AS first_ms
        FROM fr),
    -- new data: CRYPTO bytes of the handshake beyond those sent, or more bytes of a stream begun
    nw AS (
        SELECT *, coalesce((frame_type = 'crypto' AND space IN ('initial', 'handshake')
                            AND end_bytes > coalesce(before, 0))
                           OR (frame_type = 'stream' AND end_bytes > before), false) AS new
        FROM nd),
    np AS (  -- per datagram: new data, its bytes, and when the earliest of its streams (or CRYPTO space) began
        SELECT connection_id, datagram_id, sender, bool_or(new) AS new_data,
               sum(end_bytes - greatest(offset_bytes, coalesce(before, 0))) FILTER (WHERE new)::INTEGER AS new_bytes,
               min(first_ms) FILTER (WHERE new) AS started_ms
        FROM nw GROUP BY ALL)
    SELECT d.connection_id, d.datagram_id, d.time_ms, d.sender, d.size_bytes, d.size_source,
           coalesce(bool_or(nd.packet_type = 'handshake'), false) AS validates,
           coalesce(bool_and(nd.packet_type = 'initial') AND bool_or(nd.frame_type = 'ack')
                    AND bool_and(nd.frame_type IS NULL OR nd.frame_type IN ('ack', 'padding')), false) AS ack_only,
           coalesce(any_value(np.new_data), false) AS new_data,
           coalesce(bool_or(nd.packet_type = 'retry'), false) AS retry, any_value(np.new_bytes) AS new_bytes,
           any_value(np.started_ms) AS started_ms,
           -- a request: STREAM bytes on a bidirectional stream the client opened (id % 4 = 0)
           coalesce(bool_or(nd.frame_type = 'stream' AND nd.stream_id % 4 = 0), false) AS request
    FROM (SELECT d.* FROM datagrams d JOIN av_scope s USING (connection_id)
          WHERE s.last_ms IS NULL OR d.time_ms <= s.last_ms) d
    LEFT JOIN nd USING (connection_id, datagram_id, sender)
    LEFT JOIN np USING (connection_id, datagram_id, sender)
    GROUP BY ALL
    ORDER BY d.connection_id, d.time_ms, d.datagram_id
"""

#: the path's RTT as the trace shows it at its tightest: an RTT sample less the ACK delay the
#: server reported (its own turnaround); what moves a client-side view into the server's order
_PATH_RTT_SQL = """
    SELECT connection_id, greatest(min(latest_rtt_ms - coalesce(ack_delay_ms, 0)), 0) AS shift
    FROM rtt_samples WHERE connection_id >= $first GROUP BY connection_id
"""

#: how far past the client's validating datagram the first look at a connection reaches (ms, the
#: server's time): what the budget still needs after validation comes about a round trip later
LOOK_PAST_MS = 50.0

#: the first look: per connection validated in the trace (and not retried: its Retry token
#: validates it, and the datagrams before the Retry are dropped), the datagrams up to
#: ``LOOK_PAST_MS`` past validation in the server's order (a client-side view's server datagrams
#: are moved one RTT earlier: up to one RTT more in the trace's time, and twice the margin against
#: rounding), with every packet event up to the last of them (frames of earlier packets count)
_FIRST_LOOK_SQL = f"""
    CREATE OR REPLACE TEMP TABLE av_scope AS
    WITH v AS (  -- the client's first datagram holding a Handshake packet (RFC 9000 §8.1)
        SELECT d.connection_id, min(d.time_ms) AS validated_ms
        FROM datagrams d JOIN packets p USING (connection_id, datagram_id, sender)
        WHERE d.connection_id >= $first AND d.sender = 'client' AND p.packet_type = 'handshake'
        GROUP BY 1),
    rtt AS ({_PATH_RTT_SQL.strip()}),
    c AS (
        SELECT v.connection_id, v.validated_ms + 2 * $past
               + CASE WHEN c.vantage = 'server' THEN 0 ELSE coalesce(rtt.shift, 0) END AS last_ms
        FROM v JOIN connections c USING (connection_id) LEFT JOIN rtt USING (connection_id)
        WHERE v.connection_id NOT IN (SELECT connection_id FROM packets
                                      WHERE connection_id >= $first AND packet_type = 'retry'))
    SELECT c.connection_id, max(p.event_index) AS last_event, any_value(c.last_ms) AS last_ms
    FROM c JOIN packets p USING (connection_id) LEFT JOIN datagrams d USING (connection_id, datagram_id, sender)
    WHERE p.time_ms <= c.last_ms OR d.time_ms <= c.last_ms
    GROUP BY 1
"""

_PTO_SQL = """
    SELECT connection_id, list((time_ms, ev, space, delta_ms, pto) ORDER BY event_index) FILTER (WHERE pto OR untyped)
    FROM (SELECT connection_id, event_index, time_ms, lower(event_type) AS ev, delta_ms,
                 lower(coalesce(timer_type, '')) IN ('pto', 'probe') AS pto,
                 -- quic-go names no timer when it cancels its one loss timer (ACK or PTO)
                 coalesce(timer_type, '') = '' AS untyped,
                 CASE lower(packet_number_space) WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
                      WHEN 'application_data' THEN 'application_data' END AS space
          FROM timers WHERE connection_id >= $first)
    GROUP BY connection_id
"""

#: anything 0-RTT among the new connections (most traces have none: the query below is skipped)
_ANY_ZERO_RTT_SQL = """
    SELECT EXISTS (SELECT 1 FROM packets WHERE connection_id >= $first AND packet_type = '0RTT')
        OR EXISTS (SELECT 1 FROM lost_packets WHERE connection_id >= $first AND packet_type = '0RTT')
        OR EXISTS (SELECT 1 FROM dropped_packets WHERE connection_id >= $first AND packet_type = '0RTT')
"""

_ZERO_RTT_SQL = """
    WITH z AS (SELECT connection_id, direction, packet_number FROM packets
               WHERE connection_id >= $first AND packet_type = '0RTT'),
    acked AS (SELECT z.connection_id, count(DISTINCT z.packet_number) AS n
              FROM z JOIN (SELECT f.connection_id, unnest(f.acked_ranges) AS r
                           FROM frames f JOIN packets p USING (connection_id, event_index)
                           WHERE f.connection_id >= $first AND f.frame_type = 'ack' AND p.sender = 'server'
                             AND p.packet_number_space = 'application_data') a
                ON a.connection_id = z.connection_id AND z.packet_number BETWEEN a.r[1] AND a.r[2]
              WHERE z.direction = 'sent' GROUP BY 1)
    SELECT c.connection_id, coalesce(zs.sent, 0), coalesce(zs.received, 0), coalesce(acked.n, 0),
           coalesce(l.n, 0), coalesce(d.n, 0), o.connection_id IS NOT NULL
    FROM (SELECT connection_id FROM connections WHERE connection_id >= $first) c
    LEFT JOIN (SELECT connection_id, count(*) FILTER (WHERE direction = 'sent') AS sent,
                      count(*) FILTER (WHERE direction = 'received') AS received FROM z GROUP BY 1) zs USING (connection_id)
    LEFT JOIN acked USING (connection_id)
    LEFT JOIN (SELECT connection_id, count(*) AS n FROM lost_packets
               WHERE connection_id >= $first AND packet_type = '0RTT' GROUP BY 1) l USING (connection_id)
    LEFT JOIN (SELECT connection_id, count(*) AS n FROM dropped_packets
               WHERE connection_id >= $first AND packet_type = '0RTT' GROUP BY 1) d USING (connection_id)
    LEFT JOIN (SELECT DISTINCT connection_id FROM packets
               WHERE connection_id >= $first AND sender = 'server' AND packet_type = '1RTT') o USING (connection_id)
"""


def analyze(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> None:
    """Fill ``datagrams`` (qlogs) and ``address_validation`` for every connection with id ≥
    ``first_connection_id`` (caller holds the transaction)."""
    params = {"first": first_connection_id}
    con.execute(_DATAGRAMS_SQL, params)
    vantage = dict(con.execute("SELECT connection_id, vantage FROM connections WHERE connection_id >= ?",
                               [first_connection_id]).fetchall())
    if not vantage:
        return
    rtts = dict(con.execute(_PATH_RTT_SQL, params).fetchall())
    shifts = {cid: 0.0 if v == "server" else rtts.get(cid) for cid, v in vantage.items()}
    budgets = _budgets(con, first_connection_id, shifts)
    sources: dict[int, set] = defaultdict(set)
    for cid, source in con.execute("SELECT DISTINCT connection_id, size_source FROM datagrams "
                                   "WHERE connection_id >= $first", params).fetchall():
        sources[cid].add(source)
    ptos = {cid: [tuple(e.values()) if isinstance(e, dict) else tuple(e) for e in events or ()]
            for cid, events in con.execute(_PTO_SQL, params).fetchall()}
    zero = ({row[0]: row[1:] for row in con.execute(_ZERO_RTT_SQL, params).fetchall()}
            if con.execute(_ANY_ZERO_RTT_SQL, params).fetchall()[0][0] else {})
    rows = []
    for cid in sorted(vantage):
        budget = budgets[cid]
        timers = ptos.get(cid)
        armed = (_pto_armed_while_blocked(budget, [(t, ev) for t, ev, *_ in timers])
                 if timers is not None and vantage[cid] == "server" else None)
        rows.append((cid, shifts[cid], *_budget_values(budget), armed, *pto_counts(timers),
                     *_zero_rtt_values(zero.get(cid)), sorted(sources.get(cid, ()))))
    insert(con, "address_validation", rows)


def _budgets(con: duckdb.DuckDBPyConnection, first: int, shifts: dict[int, float | None]) -> dict[int, Budget]:
    """Each connection's budget (module docstring, step 3): first from its datagrams up to a little
    past validation (``_FIRST_LOOK_SQL``), whole for those it does not settle."""
    budgets: dict[int, Budget] = {}
    con.execute(_FIRST_LOOK_SQL, {"first": first, "past": LOOK_PAST_MS})
    for cid, rows in _flag_rows(con).items():
        datagrams, token = _ordered(rows, shifts[cid])
        validated = next((d.time_ms for d in datagrams if d.validates), None)
        if validated is not None:  # (the prefix in the server's order that the first look holds whole)
            datagrams = [d for d in datagrams if d.time_ms <= validated + LOOK_PAST_MS]
        budget = prefix_budget(datagrams, token)
        if budget is not None:
            budgets[cid] = budget
    rest = sorted(set(shifts) - set(budgets))
    con.execute("CREATE OR REPLACE TEMP TABLE av_scope AS SELECT unnest($ids::BIGINT[]) AS connection_id, "
                "NULL::BIGINT AS last_event, NULL::DOUBLE AS last_ms", {"ids": rest})
    whole = _flag_rows(con) if rest else {}
    for cid in rest:
        budgets[cid] = replay_budget(*_ordered(whole.get(cid, []), shifts[cid]))
    con.execute("DROP TABLE av_scope")
    return budgets


def _flag_rows(con: duckdb.DuckDBPyConnection) -> dict[int, list[tuple]]:
    per_connection: dict[int, list[tuple]] = defaultdict(list)
    for row in con.execute(_FLAGS_SQL).fetchall():
        per_connection[row[0]].append(row[1:])
    return per_connection


def _ordered(rows: list[tuple], shift: float | None) -> tuple[list[Datagram], bool]:
    """The budget's input in the server's order (a client-side view moved by the path's RTT)."""
    datagrams, token = _datagrams(rows)
    return (server_order(datagrams, shift) if shift else datagrams), token


def _datagrams(rows: list[tuple]) -> tuple[list[Datagram], bool]:
    """The budget's input from _FLAGS_SQL rows (datagram_id, time, sender, size, source, validates,
    ack_only, new_data, retry, new_bytes, started_ms, request); after a Retry only what follows it,
    validated by its token."""
    retry_at = max((i for i, r in enumerate(rows) if r[8]), default=None)
    if retry_at is not None:
        rows = rows[retry_at + 1:]
    datagrams = [Datagram(t, sender, size, validates and sender == "client", ack_only and sender == "server",
                          new_data and sender == "server", new_bytes or 0, started, request and sender == "client")
                 for _, t, sender, size, _, validates, ack_only, new_data, _, new_bytes, started, request in rows]
    return datagrams, retry_at is not None


def _budget_values(b: Budget) -> tuple:
    first = b.blocks[0] if b.blocks else None
    return (b.validated_ms, b.validated_by, b.client_bytes, b.server_bytes, b.client_datagrams,
            b.server_datagrams, b.factor, b.limit_reached, b.limit_exceeded, b.max_excess_bytes,
            len(b.blocks), first.start_ms if first else None, first.sent_bytes if first else None,
            first.received_bytes if first else None, b.blocked_ms,
            bool(b.blocks and b.blocks[-1].end_ms is None), b.iack_bytes, b.iack_caused_block)


#: a re-arming this close after a PTO's deadline means the timer expired (ms; times are logged
#: with µs precision, the timer fires a little late)
EXPIRY_TOLERANCE_MS = 1.0
_SPACES = ("initial", "handshake", "application_data")


def pto_counts(timers: list[tuple] | None) -> tuple:
    """(set, set, set, fired, fired, fired) per space (Initial, Handshake, application) from the
    trace's timer events (time, event, space, delta, is_pto), in order; all None without timer
    events.  A PTO fired when an ``expired`` event says so, or — quic-go v0.65 logs no expiry,
    only the next ``set`` — when a PTO timer event comes at or after the deadline of the PTO
    armed before it (set time + delta), with no cancellation in between: one expiry in that
    PTO's space."""
    if timers is None:
        return (None,) * 6
    armed_space, deadline = None, None
    sets, fired = dict.fromkeys(_SPACES, 0), dict.fromkeys(_SPACES, 0)
    for t, ev, space, delta, pto in timers:
        if deadline is not None and t >= deadline - EXPIRY_TOLERANCE_MS and ev != "expired" \
                and armed_space in fired:
            fired[armed_space] += 1  # inferred: the armed PTO ran out before this event
        armed_space, deadline = None, None
        if not pto:
            continue  # an untyped cancellation: nothing armed any more
        if ev == "expired" and space in fired:
            fired[space] += 1
        elif ev == "set" and space in sets:
            sets[space] += 1
            if delta is not None:
                armed_space, deadline = space, t + delta
    return (*(sets[s] for s in _SPACES), *(fired[s] for s in _SPACES))


def _pto_armed_while_blocked(b: Budget, timers: list | None) -> bool | None:
    """Whether a PTO timer was armed during the first blocked period: the last PTO timer event at
    or before its start was a 'set', or one was set inside it.  None without a block."""
    if not b.blocks or timers is None:
        return None
    start, end = b.blocks[0].start_ms, b.blocks[0].end_ms
    state = None
    for entry in timers:
        t, ev = entry["time_ms"] if isinstance(entry, dict) else entry[0], \
            entry["ev"] if isinstance(entry, dict) else entry[1]
        if t <= start:
            state = ev
        elif end is None or t < end:
            if ev == "set":
                return True
    return state == "set"


def _zero_rtt_values(z: tuple | None) -> tuple:
    """(sent, received, acked, lost, discarded, outcome): 'accepted' when the server processed or
    acknowledged a 0-RTT packet, 'rejected' when it discarded them or finished the handshake
    without acknowledging any, 'not_offered' without any; NULL when the trace cannot tell."""
    sent, received, acked, lost, discarded, one_rtt = z if z else (0, 0, 0, 0, 0, False)
    if not (sent or received or lost or discarded):
        outcome = "not_offered"
    elif acked or received:
        outcome = "accepted"
    elif discarded or one_rtt:
        outcome = "rejected"
    else:
        outcome = None
    return sent, received, acked, lost, discarded, outcome
