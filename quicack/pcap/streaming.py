"""The native reader's batches turned into the store's rows as they come: memory flat whatever the
capture's size.

Theory of operation: the whole-capture way (:mod:`quicack.pcap.staging`, then
:mod:`quicack.pcap.normalize`) stages every datagram, packet and frame in temporary tables, then
works out the connections over them.  Here each batch of the native reader
(:func:`quicack.pcap.nativepath.read_ahead`) is made into rows of ``packets``, ``frames``,
``datagrams`` and ``capture_issues`` at once, by the same statements
(:func:`quicack.pcap.normalize.insert_events` and its siblings) run on the batch and on a small
map of its connections; what the connections need from the whole capture is kept per connection
in :class:`Connections`, a few values each.  The rules are those of
:mod:`quicack.pcap.connections`, in capture order:

- a tshark connection (the reader's connection number, connection IDs followed) that starts
  with the first CRYPTO bytes of an Initial is a connection; one that does not continues the
  connection that started last before it on the same 4-tuple, else is one — so connections
  are numbered in the order their first datagram comes, as the whole-capture numbering does;
- the sender of a datagram is known once the connection's first ServerHello (or Retry, Version
  Negotiation) has come: the datagrams before it (the client's first flight) wait in small
  temporary tables (``p_dgram``, ``p_pkt``, ``p_frame``) and are made into rows at the end, when
  the other rules (ClientHello, first Initial, ports) decide for connections without one;
- times count from the connection's first packet, ACK delays are decoded with the exponent of
  the first transport parameters its sender sent — both known by the time the connection's
  rows are made, in a capture whose records are in time order.

What would make a row made early differ from the whole-capture one raises :class:`Unstreamable`
(the caller rolls the transaction back and stages the capture whole): a packet earlier than the
first of a connection whose rows were made, transport parameters coming after ACK frames that
needed them, a QUIC datagram without a connection number, QUIC on a port that must be read again
(``staging.ports_to_force``), and what the native reader leaves to tshark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from quicack.model import QuicackError
from quicack.pcap import nativepath, normalize, source
from quicack.pcap.connections import SENDER
from quicack.pcap.staging import StagedCapture, begin

#: (frame number, packet index) as one key: ``idx`` is below this in any datagram
_IDX = 4096

#: the temporary tables made here, dropped at the end
_TABLES = ("p_dgram", "p_tp", "p_pkt", "p_frame", "s_tpd", "ck", "cstart", "cf")


class Unstreamable(Exception):
    """The capture must be staged whole (the message says why)."""


@dataclass
class _Connection:
    connection_id: int
    root: int  # the tshark connection it is numbered by
    server: tuple[int, str] | None = None  # (frame, endpoint) of the first ServerHello/Retry/VN
    client: tuple[int, str] | None = None  # … of the first ClientHello (or 0-RTT)
    initial: tuple[int, str] | None = None  # … of the first Initial
    first_ns: int | None = None  # kept packets: first and last time, counts
    last_ns: int | None = None
    packets: int = 0
    datagrams: int = 0
    not_decrypted: int = 0
    superframes: int = 0
    server_name: tuple[int, str] | None = None
    version: tuple[int, str] | None = None
    endpoints: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # src → (frame, ports)
    odcid: dict[str, tuple[int, str]] = field(default_factory=dict)  # src → first Initial's DCID
    parameters: list[tuple[int, str, int, int, str | None]] = field(default_factory=list)  # tp datagrams
    made: bool = False  # rows made with first_ns

    def sender(self, src: str, src_port: int, dst_port: int) -> str:
        """connections.SENDER"""
        for seen, side in ((self.server, "server"), (self.client, "client"), (self.initial, "client")):
            if seen is not None:
                return side if src == seen[1] else ("client" if side == "server" else "server")
        return "client" if src_port > dst_port else "server"

    def exponents(self) -> dict[str, str | None]:
        """Sender → the ack_delay_exponent text of its first transport parameters."""
        found: dict[str, str | None] = {}
        for _, src, src_port, dst_port, exponent in sorted(self.parameters):
            found.setdefault(self.sender(src, src_port, dst_port), exponent)
        return found


class Connections:
    """Per tshark connection and per connection, what the rules need (module docstring)."""

    def __init__(self, first_connection_id: int):
        self.first_connection_id = first_connection_id
        self.by_tshark: dict[int, _Connection] = {}
        self.ordered: list[_Connection] = []
        self.latest_start: dict[str, _Connection] = {}  # 4-tuple → connection started last on it
        self.without_parameters: set[tuple[int, str]] = set()  # ACK delays decoded with the default

    def add(self, tshark: int, first_frame: int, src: str, dst: str, starts: bool) -> None:
        """A tshark connection met for the first time (in capture order)."""
        key = f"{min(src, dst)} {max(src, dst)}"
        root = None if starts else self.latest_start.get(key)
        if root is None:
            root = _Connection(self.first_connection_id + len(self.ordered), tshark)
            self.ordered.append(root)
        if starts:
            self.latest_start[key] = root
        self.by_tshark[tshark] = root


def ingest(con, path: Path, keylog: Path | None, quic_ports, file_id: int, first_connection_id: int,
           stop: Callable[[], object] | None = None) -> StagedCapture | None:
    """Read ``path`` with the native reader and insert its rows into the store tables (the caller
    holds the transaction); None if ``stop()`` said to stop.  :class:`Unstreamable` if it must be
    staged whole (the caller rolls back), QuicackError if it is no capture or holds no QUIC."""
    name = str(path)
    fmt = source.required_format(path)
    keylog = source.keylog_for(path, keylog)
    ports = sorted(set(quic_ports))
    begin(con)
    for table in ("c_dgram", "c_tp", "c_pkt", "c_frame"):  # (the held rows' tables: the same columns)
        con.execute(f"ALTER TABLE {table} RENAME TO p_{table[2:]}")
    con.execute("ALTER TABLE p_dgram ADD COLUMN packet_types VARCHAR")
    con.execute("CREATE OR REPLACE TEMP TABLE s_tpd (frame_number BIGINT, tshark_connection INTEGER, "
                "src_ep VARCHAR, src_port INTEGER, dst_port INTEGER, epoch_ns BIGINT)")
    run = _Run(con, file_id, Connections(first_connection_id))
    reader = nativepath.open_reader(path, keylog, ports)
    batches = nativepath.read_ahead(reader)
    try:
        for batch in batches:
            if stop is not None and stop():
                return None
            run.batch(*batch)
    finally:
        batches.close()
    try:
        frames, version, warnings = nativepath.outcome(reader, path)
    except nativepath.Unsupported as e:
        raise Unstreamable(str(e)) from None
    forced = sorted(run.servers & run.not_quic_ports)[:16]
    if sorted(set(forced) - set(ports)):
        raise Unstreamable("QUIC on a port to read again")
    staged = StagedCapture.read(path, fmt, version, keylog, ports, frames, warnings)
    if not run.quic_packets:
        raise QuicackError(f"no QUIC packets found: {frames} frames, {run.udp} UDP datagrams, none dissected as "
                           "QUIC (QUIC on an unusual port? try --quic-port PORT)", name)
    run.finish(staged)
    con.execute("; ".join(f"DROP TABLE IF EXISTS {table}" for table in _TABLES))
    return staged


class _Run:
    """One capture's batches made into rows (:func:`ingest`)."""

    def __init__(self, con, file_id: int, connections: Connections):
        self.con = con
        self.file_id = file_id
        self.connections = connections
        self.udp = 0
        self.quic_packets = 0
        self.servers: set[int] = set()  # ports a ClientHello was sent to
        self.not_quic_ports: set[int] = set()  # ports of UDP datagrams not read as QUIC
        self.gso = [0, None, set()]  # GSO super-frames: how many, the largest, their senders
        self.malformed = 0
        self.not_decrypted: dict[str, int] = {}  # packet type → packets
        self.versions: set[str] = set()
        self._issues = True  # (the batch has GSO super-frames, malformed or undecrypted datagrams)

    def batch(self, dgram: pa.Table, tp: pa.Table, pkt: pa.Table, frame: pa.Table) -> None:
        """Make one batch's rows, those of connections whose sender is not known yet held back."""
        self.quic_packets += pkt.num_rows
        # (read by name by the statements below; not registered: in a transaction a registered
        # table would be kept until the commit)
        b_dgram, b_tp, b_pkt, b_frame = dgram, tp, pkt, frame  # noqa: F841
        present = self._learn(tp.num_rows)
        waiting = [t for t in present if self.connections.by_tshark[t].server is None]
        if waiting:
            self._hold(waiting)
        if len(waiting) < len(present):
            self._make("b", [t for t in present if self.connections.by_tshark[t].server is not None],
                       issues=self._issues)

    def _learn(self, parameters: int) -> list[int]:
        """Take in what the batch tells of its connections; its tshark connections."""
        con, known = self.con, self.connections
        udp, null, gso, not_quic, malformed, not_decrypted = con.execute("""
            SELECT count(*), count(*) FILTER (WHERE packets > 0 AND split_ok AND tshark_connection IS NULL),
                   count(*) FILTER (WHERE gso), count(*) FILTER (WHERE packets = 0),
                   count(*) FILTER (WHERE malformed AND packets > 0 AND split_ok),
                   count(*) FILTER (WHERE packets > decrypted AND NOT gso)
            FROM b_dgram""").fetchall()[0]
        if null:
            raise Unstreamable("a QUIC datagram without a connection number")
        self._issues = bool(gso or malformed or not_decrypted)  # (capture_issues: none in most batches)
        self.udp += udp
        self.malformed += malformed
        if not_quic:
            self.not_quic_ports.update(p for (p,) in con.execute(
                "SELECT src_port FROM b_dgram WHERE packets = 0 UNION SELECT dst_port FROM b_dgram WHERE packets = 0"
            ).fetchall())
        if gso:
            largest, senders = con.execute("""SELECT max(udp_payload_bytes), list(DISTINCT replace(src_ep, '#', ' port '))
                                              FROM b_dgram WHERE gso""").fetchall()[0]
            self.gso = [self.gso[0] + gso, max(largest, self.gso[1] or 0), self.gso[2] | set(senders)]
        # (a packet is kept unless it is the undecrypted rest of a GSO super-frame)
        groups = con.execute("""
            SELECT tshark_connection, src_ep, min(frame_number), arg_min(dst_ep, frame_number),
                   arg_min(starts, frame_number), min(frame_number) FILTER (WHERE has_server_hello),
                   min(frame_number) FILTER (WHERE has_client_hello), min(frame_number) FILTER (WHERE has_initial),
                   min(frame_number) FILTER (WHERE server_name IS NOT NULL),
                   arg_min(server_name, frame_number) FILTER (WHERE server_name IS NOT NULL),
                   count(*) FILTER (WHERE gso), list(DISTINCT dst_port) FILTER (WHERE has_client_hello),
                   arg_min(src_port, frame_number), arg_min(dst_port, frame_number),
                   min(epoch_ns) FILTER (WHERE NOT gso OR decrypted > 0),
                   max(epoch_ns) FILTER (WHERE NOT gso OR decrypted > 0),
                   sum(CASE WHEN gso THEN decrypted ELSE packets END),
                   count(*) FILTER (WHERE NOT gso OR decrypted > 0),
                   coalesce(sum(packets - decrypted) FILTER (WHERE NOT gso), 0)
            FROM b_dgram WHERE packets > 0 AND split_ok GROUP BY ALL ORDER BY 3""").fetchall()
        present: dict[int, None] = {}  # (in the order of their first datagrams)
        for (tshark, src, first, dst, starts, sh, ch, initial, sn_frame, sn, superframes, servers,
             src_port, dst_port, first_ns, last_ns, packets, datagrams, undecrypted) in groups:
            if tshark not in known.by_tshark:
                known.add(tshark, first, src, dst, starts)
            present[tshark] = None
            c = known.by_tshark[tshark]
            for attr, frame in (("server", sh), ("client", ch), ("initial", initial)):
                if frame is not None and (getattr(c, attr) is None or frame < getattr(c, attr)[0]):
                    setattr(c, attr, (frame, src))
            if sn_frame is not None and (c.server_name is None or sn_frame < c.server_name[0]):
                c.server_name = (sn_frame, sn)
            if src not in c.endpoints or first < c.endpoints[src][0]:
                c.endpoints[src] = (first, src_port, dst_port)
            c.superframes += superframes
            self.servers.update(servers or [])
            if first_ns is not None:
                if c.first_ns is not None and first_ns < c.first_ns and c.made:
                    raise Unstreamable("a packet earlier than the first of its connection")
                c.first_ns = first_ns if c.first_ns is None else min(c.first_ns, first_ns)
                c.last_ns = last_ns if c.last_ns is None else max(c.last_ns, last_ns)
            c.packets += int(packets)
            c.datagrams += datagrams
            c.not_decrypted += int(undecrypted)
        long_headers = con.execute("SELECT count(*) FROM b_pkt WHERE header_form = 1").fetchall()[0][0]
        if long_headers or not_decrypted:
            self._learn_packets(not_decrypted)
        if parameters:
            self._learn_parameters()
        return list(present)

    def _learn_packets(self, not_decrypted: int) -> None:
        """First Initial DCIDs and versions per connection (long header packets); the types of the
        packets not decrypted (``not_decrypted``: datagrams with some)."""
        undecrypted = "OR p.undecrypted" if not_decrypted else ""
        rows = self.con.execute(f"""
            SELECT d.tshark_connection, d.src_ep,
                   min(p.frame_number * {_IDX} + p.idx) FILTER (WHERE p.packet_type = 'initial'),
                   arg_min(p.dcid, p.frame_number * {_IDX} + p.idx) FILTER (WHERE p.packet_type = 'initial'),
                   min(p.frame_number * {_IDX} + p.idx) FILTER (WHERE p.header_form = 1 AND p.version <> 0),
                   arg_min(p.version_text, p.frame_number * {_IDX} + p.idx) FILTER (WHERE p.header_form = 1 AND p.version <> 0),
                   list(DISTINCT p.version_text) FILTER (WHERE p.header_form = 1 AND p.version <> 0),
                   list(p.packet_type) FILTER (WHERE p.undecrypted AND NOT d.gso)
            FROM b_pkt p JOIN b_dgram d USING (frame_number)
            WHERE d.packets > 0 AND d.split_ok AND (p.header_form = 1 {undecrypted}) GROUP BY ALL""").fetchall()
        for tshark, src, initial_key, dcid, version_key, version, versions, types in rows:
            c = self.connections.by_tshark[tshark]
            if initial_key is not None and (src not in c.odcid or initial_key < c.odcid[src][0]):
                c.odcid[src] = (initial_key, dcid)
            if version_key is not None and (c.version is None or version_key < c.version[0]):
                c.version = (version_key, version)
            self.versions.update(versions or [])
            for kind in types or []:
                self.not_decrypted[kind] = self.not_decrypted.get(kind, 0) + 1

    def _learn_parameters(self) -> None:
        """The datagrams with transport parameters: kept (``p_tp``, ``s_tpd``) and told to their
        connection; transport parameters after ACK delays decoded without them cannot stream."""
        con = self.con
        con.execute("INSERT INTO p_tp SELECT t.* FROM b_tp t JOIN b_dgram d USING (frame_number) "
                    "WHERE d.packets > 0 AND d.split_ok")
        rows = con.execute("""
            INSERT INTO s_tpd SELECT d.frame_number, d.tshark_connection, d.src_ep, d.src_port, d.dst_port, d.epoch_ns
            FROM b_tp t JOIN b_dgram d USING (frame_number) WHERE d.packets > 0 AND d.split_ok
            RETURNING frame_number, tshark_connection, src_ep, src_port, dst_port""").fetchall()
        exponents = dict(con.execute("SELECT frame_number, tp_ack_delay_exponent FROM b_tp").fetchall())
        for frame, tshark, src, src_port, dst_port in rows:
            c = self.connections.by_tshark[tshark]
            c.parameters.append((frame, src, src_port, dst_port, exponents.get(frame)))
            if c.server is not None and (c.connection_id, c.sender(src, src_port, dst_port)) in \
                    self.connections.without_parameters:
                raise Unstreamable("transport parameters after the ACK frames they decode")

    def _hold(self, waiting: list[int]) -> None:
        """Keep the batch's rows of connections whose sender is not known yet."""
        con = self.con
        b_waiting = pa.table({"tshark_connection": pa.array(waiting, pa.int32())})  # noqa: F841 (read by name)
        held = "(SELECT frame_number FROM b_dgram WHERE tshark_connection IN (SELECT * FROM b_waiting))"
        for table in ("dgram", "pkt", "frame"):
            con.execute(f"INSERT INTO p_{table} SELECT * FROM b_{table} WHERE frame_number IN {held}")

    def _make(self, prefix: str, tsharks: list[int], issues: bool = True) -> None:
        """The rows of the datagrams in ``{prefix}_dgram`` etc. of the tshark connections
        ``tsharks`` (their senders known); ``issues``: whether some may be capture issues."""
        con, known = self.con, self.connections
        conns = {id(known.by_tshark[t]): known.by_tshark[t] for t in tsharks}.values()
        s_tc, s_conn = _tc_table(known, tsharks), _conn_table(conns)  # noqa: F841 (read by name)
        # (subqueries, not tables: a table made again for each batch would be kept until the commit)
        dmap = f"""(SELECT d.frame_number, m.connection_id, d.epoch_ns, d.src_ep, d.gso, {SENDER} AS sender
                   FROM {prefix}_dgram d JOIN s_tc m USING (tshark_connection) WHERE d.packets > 0 AND d.split_ok)"""
        pk = f"""(SELECT p.*, m.connection_id, m.sender, m.epoch_ns, m.gso
                 FROM {prefix}_pkt p JOIN {dmap} m USING (frame_number))"""
        lacking = [c for c in conns if len(c.exponents()) < 2]
        if lacking:
            self._note_default_exponents(prefix, pk, lacking)
        tp = ("(SELECT connection_id, 'client' AS endpoint, TRY_CAST(client_exponent AS INTEGER) "
              "AS ack_delay_exponent FROM s_conn WHERE client_tp UNION ALL SELECT connection_id, 'server', "
              "TRY_CAST(server_exponent AS INTEGER) FROM s_conn WHERE server_tp)")
        normalize.insert_events(con, pk=pk, frame=f"{prefix}_frame", cstart="s_conn", tp=tp)
        normalize.insert_datagrams(con, dgram=f"{prefix}_dgram", dmap=dmap, cstart="s_conn", pkt=None)
        if issues:
            normalize.insert_issues(con, self.file_id, dgram=f"{prefix}_dgram", dmap=dmap, pk=pk)
        for c in conns:
            c.made = True

    def _note_default_exponents(self, prefix: str, pk: str, lacking: list[_Connection]) -> None:
        """Remember the connections and senders whose ACK delays (after Initial packets) were
        decoded without their transport parameters."""
        ids = ", ".join(str(c.connection_id) for c in lacking)
        for connection_id, sender in self.con.execute(f"""
                SELECT DISTINCT p.connection_id, p.sender FROM {prefix}_frame f JOIN {pk} p USING (frame_number, idx)
                WHERE f.frame_type = 'ack' AND f.packet_type <> 'initial' AND p.connection_id IN ({ids})""").fetchall():
            c = next(c for c in lacking if c.connection_id == connection_id)
            if sender not in c.exponents():
                self.connections.without_parameters.add((connection_id, sender))

    def finish(self, staged: StagedCapture) -> None:
        """The held rows (every sender now decided), transport parameters, connections and the
        capture's row; the warnings."""
        con, known = self.con, self.connections
        if con.execute("SELECT count(*) FROM p_dgram").fetchall()[0][0]:
            self._make("p", list(known.by_tshark))
        _final_tables(con, known)
        s_tc = _tc_table(known, list(known.by_tshark))  # noqa: F841 (read by name)
        normalize.insert_parameters(con, tp="p_tp", dmap=f"""(
            SELECT d.frame_number, m.connection_id, {SENDER} AS sender, d.epoch_ns
            FROM s_tpd d JOIN s_tc m USING (tshark_connection))""")
        normalize.insert_connections(con, self.file_id, staged)
        normalize.insert_capture(con, self.file_id, staged, self.gso[0])
        by_type = sorted(self.not_decrypted.items(), key=lambda kv: (-kv[1], kv[0]))
        gso = (self.gso[0], self.gso[1], ", ".join(sorted(self.gso[2])))
        staged.warnings.extend(normalize.warnings(staged, 0, self.malformed, gso, by_type,
                                                  ", ".join(sorted(self.versions)) or None))


def _tc_table(known: Connections, tsharks: list[int]) -> pa.Table:
    """tshark connection → connection and the endpoints its senders are told by (connections.SENDER)."""
    rows = [known.by_tshark[t] for t in tsharks]
    ep = lambda seen: seen[1] if seen else None  # noqa: E731
    return pa.table({
        "tshark_connection": pa.array(tsharks, pa.int32()),
        "connection_id": pa.array([c.connection_id for c in rows], pa.int64()),
        "server_ep": pa.array([ep(c.server) for c in rows], pa.string()),
        "client_ep": pa.array([ep(c.client) for c in rows], pa.string()),
        "first_initial_ep": pa.array([ep(c.initial) for c in rows], pa.string())})


def _conn_table(conns) -> pa.Table:
    """Per connection (with kept packets): its first time and the exponents its senders announced."""
    rows = [c for c in conns if c.first_ns is not None]
    exponents = [c.exponents() for c in rows]
    return pa.table({
        "connection_id": pa.array([c.connection_id for c in rows], pa.int64()),
        "first_ns": pa.array([c.first_ns for c in rows], pa.int64()),
        "client_tp": pa.array(["client" in e for e in exponents], pa.bool_()),
        "client_exponent": pa.array([e.get("client") for e in exponents], pa.string()),
        "server_tp": pa.array(["server" in e for e in exponents], pa.bool_()),
        "server_exponent": pa.array([e.get("server") for e in exponents], pa.string())})


def _final_tables(con, known: Connections) -> None:
    """``ck``, ``cstart`` and ``cf`` (normalize.insert_connections) from what was kept per connection."""
    conns = known.ordered
    kept = [c for c in conns if c.first_ns is not None]

    def first_of(c: _Connection, side: str) -> str | None:
        eps = [(frame, src) for src, (frame, sp, dp) in c.endpoints.items() if c.sender(src, sp, dp) == side]
        return min(eps)[1] if eps else None

    def odcid(c: _Connection) -> str | None:
        found = [(key, dcid) for src, (key, dcid) in c.odcid.items()
                 if src in c.endpoints and c.sender(src, *c.endpoints[src][1:]) == "client"]
        return min(found)[1] if found else None

    tables = {
        "ck": pa.table({"connection_id": pa.array([c.connection_id for c in conns], pa.int64()),
                        "trace_index": pa.array([c.connection_id - known.first_connection_id for c in conns], pa.int64()),
                        "tshark_connection": pa.array([c.root for c in conns], pa.int32())}),
        "cstart": pa.table({"connection_id": pa.array([c.connection_id for c in kept], pa.int64()),
                            "first_ns": pa.array([c.first_ns for c in kept], pa.int64()),
                            "last_ns": pa.array([c.last_ns for c in kept], pa.int64()),
                            "packets": pa.array([c.packets for c in kept], pa.int64()),
                            "datagrams": pa.array([c.datagrams for c in kept], pa.int64()),
                            "not_decrypted": pa.array([c.not_decrypted for c in kept], pa.int64())}),
        "cf": pa.table({"connection_id": pa.array([c.connection_id for c in conns], pa.int64()),
                        "odcid": pa.array([odcid(c) for c in conns], pa.string()),
                        "server_name": pa.array([c.server_name[1] if c.server_name else None for c in conns],
                                                pa.string()),
                        "client_ep": pa.array([first_of(c, "client") for c in conns], pa.string()),
                        "server_ep": pa.array([first_of(c, "server") for c in conns], pa.string()),
                        "superframes": pa.array([c.superframes for c in conns], pa.int64()),
                        "version_text": pa.array([c.version[1] if c.version else None for c in conns], pa.string())}),
    }
    for name, s_final in tables.items():  # (s_final read by name)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM s_final")
