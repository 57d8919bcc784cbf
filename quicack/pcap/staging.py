"""Staging a capture: tshark's rows into temporary tables of datagrams, packets and frames.

Theory of operation: :func:`stage` has quicack's own reader read the capture
(:mod:`quicack.pcap.nativepath`, the default: it fills the same tables) or, with
``dissector='tshark'`` or for what the native reader leaves to it, has tshark dissect it (:mod:`quicack.pcap.tshark`)
and stages its rows batch by batch while tshark still runs (this thread, DuckDB on one thread;
tshark on the other core): :class:`Staging` cuts every captured UDP datagram into its QUIC
packets and every packet into its frames, with Arrow compute for datagrams of one packet
(:mod:`quicack.pcap.fastpath`) and SQL for the others (:mod:`quicack.pcap.generalpath`), into
``c_dgram``, ``c_tp``, ``c_pkt`` and ``c_frame`` (:func:`begin`).  Each QUIC packet's
``event_index`` (its position in the capture) is numbered as its batch arrives.  When tshark
has ended, :func:`stage` decides once whether to run it again: tshark's heuristics only
recognise the short-header packets of connections they saw start, so UDP on a port that also
carried a ClientHello is decoded as QUIC (``-d udp.port==…,quic``) in a second run that replaces
the first (:func:`ports_to_force`).  A capture in which nothing was read as QUIC is refused here,
saying why (QUIC versions tshark does not read: :mod:`quicack.core.quicversion`).  The tables
are then turned into the store's rows by :mod:`quicack.pcap.normalize`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from quicack.core import quicversion
from quicack.model import QuicackError
from quicack.pcap import fastpath, generalpath, nativepath, source, tshark
from quicack.pcap.fields import PARAMETER_FIELDS
from quicack.store import settings


@dataclass
class StagedCapture:
    path: str
    format: str  # 'pcap' or 'pcapng'
    tshark_version: str
    secrets: str  # 'keylog', 'dsb', 'keylog+dsb' or 'none'
    keylog: str | None
    keylog_sha256: str | None
    decode_as_ports: list[int]
    frames: int = 0  # captured frames (rows tshark wrote)
    warnings: list[str] = field(default_factory=list)
    events: int = 0  # QUIC packets stored (set by quicack.pcap.normalize.normalize)
    qlog_version: str | None = None  # for the files row: captures have none

    @classmethod
    def read(cls, path: Path, fmt: str, version: str, keylog: Path | None, ports: list[int], frames: int,
             warnings: list[str]) -> "StagedCapture":
        """A capture read by ``version`` (tshark's, or the native reader's) with ``keylog``."""
        return cls(str(path), fmt, version, source.secrets(path, fmt, keylog), str(keylog) if keylog else None,
                   source.secrets_fingerprint(path, keylog) if keylog else None, ports, frames, warnings)


#: The readers of captures: quicack's own (the default) and tshark (the reference and fallback).
DISSECTORS = ("native", "tshark")


def stage(con, path: Path, keylog: Path | None = None, quic_ports: list[int] | tuple[int, ...] = (),
          dissection: tshark.Dissection | None = None, dissector: str = "native",
          stop: Callable[[], object] | None = None) -> StagedCapture | None:
    """Stage the rows of ``path`` read by ``dissector``: the native reader
    (:mod:`quicack.pcap.nativepath`), which leaves to tshark what it does not read (the reason
    becomes a warning), or tshark (or its running ``dissection``, which this closes; the rows:
    :class:`Staging`).  Raise QuicackError if the capture is unreadable or holds no QUIC packet.
    ``stop``: asked between the native reader's batches; None is returned when it says to stop."""
    name = str(path)
    try:
        fmt = source.required_format(path)
    except QuicackError:
        if dissection is not None:
            dissection.close()
        raise
    fallback = None
    if dissector == "native":
        if dissection is not None:
            dissection.close()
            dissection = None
        try:
            return _stage_native(con, path, fmt, keylog, quic_ports, stop)
        except nativepath.Unsupported as e:
            fallback = f"{name}: read by tshark: {e}"
    staged = _stage_tshark(con, path, fmt, keylog, quic_ports, dissection)
    if fallback:
        staged.warnings.insert(0, fallback)
    return staged


def _stage_native(con, path: Path, fmt: str, keylog, quic_ports, stop=None) -> StagedCapture | None:
    """Stage ``path`` read by the native reader (None: ``stop`` said to stop);
    nativepath.Unsupported if tshark must read it."""
    keylog = source.keylog_for(path, keylog)
    ports = sorted(set(quic_ports))
    begin(con)
    with settings.changed(con, threads=1):
        read = nativepath.stage(con, path, keylog, ports, stop)
        if read is None:
            return None
        forced = sorted(set(ports_to_force(con)) - set(ports))
        if forced:  # QUIC whose headers did not show it on a server port: read again (as tshark is)
            ports = sorted(set(ports) | set(forced))
            begin(con)
            read = nativepath.stage(con, path, keylog, ports, stop)
            if read is None:
                return None
        frames, version, warnings = read
    staged = StagedCapture.read(path, fmt, version, keylog, ports, frames, warnings)
    _require_quic(con, staged)
    return staged


def _stage_tshark(con, path: Path, fmt: str, keylog, quic_ports, dissection) -> StagedCapture:
    """Dissect ``path`` with tshark (or its running ``dissection``) and stage its rows."""
    name = str(path)
    try:
        if dissection is None or not dissection.matches(path, keylog, quic_ports):
            if dissection is not None:
                dissection.close()
            dissection = tshark.Dissection(path, keylog, quic_ports)
        keylog, ports = dissection.keylog, dissection.ports
        with settings.changed(con, threads=1):
            frames, version, warnings, not_quic = _run(con, dissection)
            # (only UDP that tshark did not take for QUIC can be QUIC it missed)
            forced = sorted(set(ports_to_force(con)) - set(ports)) if not_quic else []
            if forced:  # tshark's heuristics missed QUIC on these ports: decode them as QUIC
                dissection.close()
                dissection = tshark.Dissection(path, keylog, sorted(set(ports) | set(forced)))
                ports = dissection.ports
                frames, version, warnings, _ = _run(con, dissection)
    finally:
        if dissection is not None:
            dissection.close()
    version = tshark.dissector_version(version, dissection.binary, name)
    staged = StagedCapture.read(path, fmt, version, keylog, ports, frames, warnings)
    _require_quic(con, staged)
    return staged


def _run(con, dissection: tshark.Dissection) -> tuple[int, str | None, list[str], int]:
    """Stage every block of tshark's rows while tshark still dissects, then what waited for
    tshark's end.  Return (frames, tshark version, warnings, UDP datagrams without QUIC); raise
    QuicackError if the capture cannot be read."""
    import pyarrow as pa

    path = dissection.path
    frames = 0
    bad_rows: list[int] = []
    staging = Staging(con, dissection.layout_file)
    try:
        for block in dissection.blocks(staging.idle):
            table = tshark.parse(block, bad_rows)
            frames += table.num_rows
            staging.add(table)
    except pa.ArrowInvalid as e:
        dissection.close()
        raise QuicackError(f"unreadable tshark output: {e}", str(path)) from None
    version, warnings = dissection.outcome(frames)
    staging.finish()  # tshark has ended: its layout file is complete
    if bad_rows:
        warnings.append(f"{path}: {len(bad_rows)} rows of tshark output unreadable and skipped")
    return frames, version, warnings, staging.not_quic


def _require_quic(con, staged: StagedCapture) -> None:
    """QuicackError if no QUIC packet was staged, saying what the UDP datagrams were instead."""
    if con.execute("SELECT count(*) FROM c_pkt").fetchall()[0][0]:
        return
    udp = con.execute("SELECT count(*) FROM c_dgram").fetchall()[0][0]
    why = None
    if udp and staged.tshark_version != nativepath.READER_VERSION:
        why = quicversion.explain(tshark.udp_payload_heads(Path(staged.path)), staged.tshark_version)
    raise QuicackError(f"no QUIC packets found: {staged.frames} frames, {udp} UDP datagrams, none dissected as "
                       f"QUIC{'; ' + why if why else ' (QUIC on an unusual port? try --quic-port PORT)'}",
                       staged.path)


#: Held-back datagrams (see :class:`Staging`) are staged once this many wait, or when the reader
#: waits for tshark and the general path has not run for IDLE_GENERAL_S.
HELD_ROWS = 4096
IDLE_GENERAL_S = 0.25


def begin(con: duckdb.DuckDBPyConnection) -> None:
    """Create (empty) the temporary tables :class:`Staging` fills."""
    con.execute("""CREATE OR REPLACE TEMP TABLE c_dgram (
        frame_number BIGINT, epoch_ns BIGINT, src_ep VARCHAR, dst_ep VARCHAR,
        src_port INTEGER, dst_port INTEGER, udp_payload_bytes INTEGER, tshark_connection INTEGER,
        server_name VARCHAR, packets INTEGER, split_ok BOOLEAN, starts BOOLEAN, has_server_hello BOOLEAN,
        has_client_hello BOOLEAN, has_initial BOOLEAN, gso BOOLEAN, parsed INTEGER, decrypted INTEGER,
        malformed BOOLEAN)""")
    # The few datagrams carrying transport parameters (a ClientHello, EncryptedExtensions).
    params = ", ".join(f"tp_{n} VARCHAR" for n in PARAMETER_FIELDS)
    con.execute(f"CREATE OR REPLACE TEMP TABLE c_tp (frame_number BIGINT, {params})")
    con.execute("""CREATE OR REPLACE TEMP TABLE c_pkt (
        frame_number BIGINT, idx BIGINT, packet_type VARCHAR, header_form INTEGER,
        size_bytes INTEGER, version BIGINT, version_text VARCHAR, dcid VARCHAR, packet_number BIGINT,
        decryption_failed BOOLEAN, frame_count INTEGER, undecrypted BOOLEAN, eliciting BOOLEAN,
        event_index BIGINT)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE c_frame (
        frame_number BIGINT, idx BIGINT, packet_type VARCHAR, position INTEGER,
        frame_type VARCHAR, largest BIGINT, ack_delay_raw BIGINT, ranges BIGINT[][], ecn_ce BIGINT,
        offset_bytes BIGINT, length_bytes BIGINT, stream_id BIGINT, fin BOOLEAN, sequence_number BIGINT,
        ack_eliciting_threshold BIGINT, request_max_ack_delay_ms DOUBLE, details JSON)""")



class Staging:
    """The temporary tables of one tshark run, filled batch by batch (:meth:`add`, then
    :meth:`finish` once tshark has ended).

    Nearly every datagram of a transfer holds one QUIC packet whose per-frame fields hold one
    value each (an ACK frame's ranges aside): the fast path (:mod:`quicack.pcap.fastpath`, Arrow)
    makes their rows.  The others are held back (Arrow tables) for the general path
    (:mod:`quicack.pcap.generalpath`, DuckDB), which cuts every list, and whose statements cost
    tens of milliseconds whatever their rows: held datagrams are staged while tshark runs when the reader waits for tshark
    (:meth:`idle`, at most every ``IDLE_GENERAL_S``) or when ``HELD_ROWS`` wait, and what is left
    at the end.  A datagram with several QUIC packets is cut by the per-packet field counts the
    Lua tap writes to ``layout_file`` (frame number, counts) as tshark dissects it; it waits
    until its line is there.  ``fast=False`` sends every datagram through the general path
    (tests compare the two)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, layout_file=None, fast: bool = True):
        self.con = con
        self.layout_file = layout_file
        self.fast = fast
        self.held = 0  # rows held back
        self._held: list = []  # their Arrow tables (tshark's columns)
        self._layouts: dict[int, str] = {}  # frame number → layout, the lines read so far
        self._layout_offset = 0
        self._last_general = time.monotonic()
        self._events = 0  # QUIC packets of the rows added so far
        self.not_quic = 0  # UDP datagrams staged without a QUIC packet
        begin(con)

    def add(self, batch) -> None:
        """Stage one batch of tshark rows (an Arrow table, every column text; whole datagrams).

        The Arrow tables are read by DuckDB's replacement scan of this frame's local
        ``quicack_rows`` (registering each table would cost milliseconds more a batch)."""
        con = self.con
        batch, self._events = fastpath.number_packets(batch, self._events)
        if self.fast:
            rows = fastpath.split(batch)
            parts = [(rows.datagrams, "c_dgram"), (rows.parameters, "c_tp"), (rows.packets, "c_pkt"),
                     (rows.frames, "c_frame")]
            for quicack_rows, table in parts:
                if quicack_rows.num_rows:
                    con.execute(f"INSERT INTO {table} SELECT * FROM quicack_rows")
            self.not_quic += rows.datagrams.num_rows - rows.packets.num_rows
            held = rows.held
        else:
            held = batch.filter(fastpath.udp(batch))
        if held.num_rows:
            self._held.append(held)
            self.held += held.num_rows
        if self.held >= HELD_ROWS:
            self._stage_held(final=False)

    def idle(self) -> None:
        """Stage held datagrams, if any and the general path has not run for a while."""
        if self.held and time.monotonic() - self._last_general >= IDLE_GENERAL_S:
            self._stage_held(final=False)

    def finish(self) -> None:
        """Stage every datagram still held back (tshark has ended: the layout file is complete)."""
        if self.held:
            self._stage_held(final=True)
        generalpath.drop(self.con)

    def _stage_held(self, final: bool) -> None:
        """The general path over the held datagrams that can be cut: with one QUIC packet, or
        with their layout read (all of them when ``final``).  Held rows stay in Arrow (a few,
        usually: the datagrams of a handshake's coalesced packets) until the general path takes
        them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        con = self.con
        self._read_layouts()
        held = pa.concat_tables(self._held).combine_chunks() if len(self._held) > 1 else self._held[0]
        layouts = [self._layouts.get(_frame_number(f)) for f in held.column("frame_number").to_pylist()]
        several = [bool(h) and "," in h for h in held.column("quic_header_form").to_pylist()]
        ready = pa.array([final or not s or layout is not None for s, layout in zip(several, layouts)])
        self._held = [held.filter(pc.invert(ready))] if not final else []
        self.held = self._held[0].num_rows if self._held else 0
        taken = held.append_column("quicack_layout", pa.array(layouts, pa.string())).filter(ready)
        self._last_general = time.monotonic()
        if not taken.num_rows:
            return
        con.register("quicack_ready", taken)
        try:
            self.not_quic += generalpath.stage(con, "SELECT * FROM quicack_ready", taken.num_rows)
        finally:
            con.unregister("quicack_ready")
        self._last_general = time.monotonic()

    def _read_layouts(self) -> None:
        """The complete lines the Lua tap added to the layout file since the last read."""
        if self.layout_file is None:
            return
        try:
            with open(self.layout_file, "rb") as f:
                f.seek(self._layout_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        for line in data[:end].split(b"\n"):
            if line.strip():
                frame, layout = line.split(b"\t", 1)
                self._layouts[int(frame)] = layout.decode()
        self._layout_offset += end


def _frame_number(text: str | None) -> int | None:
    """tshark's frame number (TRY_CAST: NULL if it is not one)."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def ports_to_force(con: duckdb.DuckDBPyConnection) -> list[int]:
    """QUIC server ports (a ClientHello was sent to them) that also carry UDP datagrams tshark did
    not take for QUIC — e.g. a connection whose handshake the capture missed: tshark's heuristics
    only recognise short-header packets of connections they saw start."""
    rows = con.execute("""
        WITH servers AS (SELECT DISTINCT dst_port AS port FROM c_dgram WHERE has_client_hello)
        SELECT DISTINCT port FROM servers
        WHERE port IN (SELECT src_port FROM c_dgram WHERE packets = 0
                       UNION ALL SELECT dst_port FROM c_dgram WHERE packets = 0)
        ORDER BY 1 LIMIT 16""").fetchall()
    return [r[0] for r in rows]
