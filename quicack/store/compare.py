"""Cross-validation of two views of one connection (a capture and a qlog, or two qlogs).

Theory of operation: both inputs are ingested into one store (an in-memory one for ``quicack
compare``), their connections are paired by original destination connection ID, and the packets
of each pair are matched on (sender, packet number space, packet number) — the identity of a QUIC
packet on the wire.  For every packet the comparison reports what only one side has, a different
packet type, a different frame list (types in order; for ACK frames also the acknowledged ranges
and the decoded ACK delay within one encoding step; frames are compared only where both sides
have them — quinn's qlog has none, an undecrypted captured packet neither), and the time
difference.

Time: both views must use the same clock (same host).  A packet's time at its sender's qlog is
taken before the packet reaches the wire and should agree with a capture on that host within the
tolerance; a packet's receive time in a qlog is taken after the datagram was read, so it may lag
the capture by the receiver's scheduling delay (reported, and only an *earlier* receive time than
the capture is a difference).  ``strict`` applies the tolerance to both directions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from quicack.model import QuicackError


@dataclass
class PacketDiff:
    sender: str
    space: str | None
    packet_number: int | None
    kind: str  # 'only_a', 'only_b', 'type', 'frames', 'ack', 'time'
    detail: str


@dataclass
class PairResult:
    a_connection: int
    b_connection: int
    odcid: str | None
    a_vantage: str
    b_vantage: str
    matched: int
    only_a: int
    only_b: int
    #: per sender ('client'/'server'): (packets, median |Δt| ms, max |Δt| ms, median Δt (b − a) ms)
    time_stats: dict[str, tuple[int, float, float, float]]
    differences: list[PacketDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def _vantage_side(con, connection_id: int) -> str | None:
    """The endpoint whose own clock stamps sent packets: 'client'/'server' for qlog, None for network."""
    vantage = con.execute("SELECT vantage FROM connections WHERE connection_id = ?", [connection_id]).fetchall()[0][0]
    return vantage if vantage in ("client", "server") else None


def ingest_both(store, a, b, keylog=None, readers: tuple[str, str] = ("native", "native")) -> list:
    """Ingest ``a`` and ``b`` into ``store``, each read by its reader (staging.DISSECTORS); their
    results.  One capture read by two readers is two files here: the first is stored under its
    hash marked with its reader, so that the second is not taken for it unchanged."""
    first = store.ingest(a, keylog=keylog, dissector=readers[0])
    if readers[0] != readers[1] and first.file_id is not None:
        store.con.execute("UPDATE files SET content_sha256 = content_sha256 || ':' || ? WHERE file_id = ?",
                          [readers[0], first.file_id])
    return [first, store.ingest(b, keylog=keylog, dissector=readers[1])]


def pair_connections(con: duckdb.DuckDBPyConnection, file_a: int, file_b: int) -> list[tuple[int, int]]:
    """Connections of two files with the same ODCID (or the only one of each file, if one of them
    has no ODCID)."""
    pairs = con.execute("""
        SELECT a.connection_id, b.connection_id FROM connections a JOIN connections b USING (odcid)
        WHERE a.file_id = ? AND b.file_id = ? AND odcid IS NOT NULL ORDER BY 1, 2""", [file_a, file_b]).fetchall()
    if pairs:
        return pairs
    # A trace that does not know its ODCID (a capture that missed the handshake) can still be
    # compared when each file holds one connection.
    a = con.execute("SELECT connection_id, odcid FROM connections WHERE file_id = ?", [file_a]).fetchall()
    b = con.execute("SELECT connection_id, odcid FROM connections WHERE file_id = ?", [file_b]).fetchall()
    if len(a) == 1 and len(b) == 1 and (a[0][1] is None or b[0][1] is None):
        return [(a[0][0], b[0][0])]
    return []


def compare_connections(con: duckdb.DuckDBPyConnection, a: int, b: int, tolerance_ms: float = 1.0,
                        strict: bool = False) -> PairResult:
    """Compare connection ``a`` with connection ``b`` packet by packet."""
    rows = _paired_packets(con, a, b)
    side_a, side_b = _vantage_side(con, a), _vantage_side(con, b)
    info = con.execute("""SELECT a.odcid, a.vantage, b.vantage FROM connections a, connections b
                          WHERE a.connection_id = ? AND b.connection_id = ?""", [a, b]).fetchall()[0]
    diffs: list[PacketDiff] = []
    deltas: dict[str, list[float]] = {}
    matched = only_a = only_b = 0
    for (sender, space, pn, type_a, type_b, frames_a, frames_b, t_a, t_b, ranges_a, ranges_b,
         delays_a, delays_b, unit, count_a, count_b) in rows:
        def diff(kind: str, detail: str) -> None:
            diffs.append(PacketDiff(sender, space, pn, kind, detail))
        if type_a is None:
            only_b += 1
            diff("only_b", f"{type_b} packet only in B ({frames_b or 'no frames'})")
            continue
        if type_b is None:
            only_a += 1
            diff("only_a", f"{type_a} packet only in A ({frames_a or 'no frames'})")
            continue
        matched += 1
        if type_a != type_b:
            diff("type", f"packet type {type_a} in A, {type_b} in B")
        if count_a and count_b:  # (else one side has no frames for it: quinn logs none; not decrypted)
            for kind, detail in _frame_differences(frames_a, frames_b, ranges_a, ranges_b, delays_a, delays_b, unit):
                diff(kind, detail)
        if t_a is None or t_b is None:
            continue
        delta = t_b - t_a
        deltas.setdefault(sender, []).append(delta)
        # The receiving side of a qlog logs after the wire: only a receive *before* the wire is wrong.
        receiver_a = side_a is not None and side_a != sender
        receiver_b = side_b is not None and side_b != sender
        if strict or not (receiver_a or receiver_b):
            bad = abs(delta) > tolerance_ms
        elif receiver_b:
            bad = delta < -tolerance_ms
        else:
            bad = -delta < -tolerance_ms
        if bad:
            diff("time", f"time differs by {delta:+.3f} ms (B − A)")
    stats = {}
    for sender, values in sorted(deltas.items()):
        absolute = sorted(abs(v) for v in values)
        signed = sorted(values)
        stats[sender] = (len(values), absolute[len(absolute) // 2], absolute[-1], signed[len(signed) // 2])
    return PairResult(a, b, info[0], info[1], info[2], matched, only_a, only_b, stats, diffs)


def compare_files(con: duckdb.DuckDBPyConnection, file_a: int, file_b: int, tolerance_ms: float = 1.0,
                  strict: bool = False) -> list[PairResult]:
    pairs = pair_connections(con, file_a, file_b)
    if not pairs:
        raise QuicackError("no connection of the first file has the original destination connection ID "
                           "of one in the second file: nothing to compare")
    return [compare_connections(con, a, b, tolerance_ms, strict) for a, b in pairs]


def _paired_packets(con: duckdb.DuckDBPyConnection, a: int, b: int) -> list[tuple]:
    """Connection ``a``'s and ``b``'s packets side by side (FULL JOIN on sender, space, number
    and copy), in time order, with their frame lists, ACK ranges and delays."""
    # One row per packet: identity, type, time, and the frame list as text.
    con.execute("""CREATE OR REPLACE TEMP TABLE cmp_p AS
        SELECT p.connection_id, p.sender, p.packet_number_space AS space, p.packet_number,
               p.packet_type, p.epoch_ms, p.frame_count,
               coalesce(string_agg(f.frame_type, ',' ORDER BY f.position), '') AS frames,
               list([f.largest_acknowledged, f.position] ORDER BY f.position)
                   FILTER (WHERE f.frame_type = 'ack') AS ack_largest,
               -- ranges in ascending order: producers list them either way (aioquic descending, tshark ascending)
               list(list_sort(f.acked_ranges) ORDER BY f.position) FILTER (WHERE f.frame_type = 'ack') AS ack_ranges,
               list(f.ack_delay_ms ORDER BY f.position) FILTER (WHERE f.frame_type = 'ack') AS ack_delays,
               max(f.ack_delay_ms / nullif(f.ack_delay_raw, 0)) AS ack_delay_unit_ms,
               row_number() OVER (PARTITION BY p.connection_id, p.sender, p.packet_number_space, p.packet_number
                                  ORDER BY p.event_index) AS copy
        FROM packets p LEFT JOIN frames f USING (connection_id, event_index)
        WHERE p.connection_id IN (?, ?) AND p.packet_number IS NOT NULL
        GROUP BY p.connection_id, p.event_index, p.sender, p.packet_number_space, p.packet_number,
                 p.packet_type, p.epoch_ms, p.frame_count""", [a, b])
    rows = con.execute("""
        SELECT coalesce(x.sender, y.sender), coalesce(x.space, y.space), coalesce(x.packet_number, y.packet_number),
               x.packet_type, y.packet_type, x.frames, y.frames, x.epoch_ms, y.epoch_ms,
               x.ack_ranges, y.ack_ranges, x.ack_delays, y.ack_delays,
               coalesce(x.ack_delay_unit_ms, y.ack_delay_unit_ms), x.frame_count, y.frame_count
        FROM (SELECT * FROM cmp_p WHERE connection_id = ?) x
        FULL JOIN (SELECT * FROM cmp_p WHERE connection_id = ?) y
          ON x.sender = y.sender AND x.space IS NOT DISTINCT FROM y.space
         AND x.packet_number = y.packet_number AND x.copy = y.copy
        ORDER BY coalesce(x.epoch_ms, y.epoch_ms), 1, 2, 3""", [a, b]).fetchall()
    con.execute("DROP TABLE IF EXISTS cmp_p")

    return rows


def _frame_differences(frames_a, frames_b, ranges_a, ranges_b, delays_a, delays_b, unit):
    """(kind, detail) of the first way two copies of a packet's frames differ: the frame list,
    else the ACK ranges, else ACK delays further apart than one encoding step."""
    if frames_a != frames_b:
        return [("frames", f"frames [{frames_a}] in A, [{frames_b}] in B")]
    if ranges_a != ranges_b:
        return [("ack", f"acked ranges {ranges_a} in A, {ranges_b} in B")]
    if not (delays_a and delays_b):
        return []
    step = max(unit or 0.008, 0.001)
    return [("ack", f"ack_delay {da:.3f} ms in A, {db:.3f} ms in B (one encoding step: {step:.3f} ms)")
            for da, db in zip(delays_a, delays_b)
            if da is not None and db is not None and abs(da - db) > step + 1e-9]
