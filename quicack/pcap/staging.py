"""From tshark's rows (see :mod:`quicack.pcap.tshark`) to the normalized tables.

Theory of operation: a capture is a network vantage point.  Every captured UDP datagram is cut
into its QUIC packets and every packet into its frames, batch by batch while tshark still runs
(:class:`Staging`: Arrow compute in :mod:`quicack.pcap.fastpath` for datagrams of one packet, the SQL
here for the others); then connections are found over the whole capture, at datagram
granularity, and the store tables filled (:func:`normalize`):

1. *Datagrams* (``c_dgram``): addresses, ports, time, what the datagram tells about who is
   client and server, GSO suspicion, transport parameters.
2. *Packets* (``c_pkt``): datagram × packet index.  A datagram with one packet has one value per
   field.  With several, a field's value for packet *i* sits after the occurrences of the packets
   before it, counted by the Lua layout.  ``event_index`` is the packet's position in the
   capture.
3. *Frames* (``c_frame``): packet × frame index.  Per-frame fields (ACK, CRYPTO, STREAM, …) are
   lists in frame order over the whole datagram, so the k-th ACK frame of a datagram takes the
   k-th ``largest_acknowledged``; ACK ranges take ``ack_range_count`` gap/range pairs each.
4. *Connections*: tshark's connection number (it follows connection IDs, including new ones
   and Retry), else the connection already seen on the same address/port 4-tuple, else one
   connection per 4-tuple.  The server is the side that sends the ServerHello or a Retry (else
   the one not sending the ClientHello, else the one not sending the first Initial, else the
   lower port); rows follow the qlog network convention with ``flow = 'client'``: client
   packets are ``sent``, server packets ``received``.

ACK delays are decoded by :mod:`quicack.core.ackdelay` (RFC 9000 §19.3: 2 to the power of the sender's
ack_delay_exponent; 3 in Initial packets, sent before any transport parameter is known).

UDP GSO: a sender that hands the kernel one buffer of several equal-size datagrams is captured on
loopback as one "super-frame".  tshark can split the long-header packets by their Length field
but a short-header packet swallows the rest, and its decryption fails.  A datagram larger than a
1500-byte MTU allows (UDP payload > 1472 bytes) holding a packet that did not decrypt (or two
long-header packets of one type) is reported as a GSO super-frame: the packets tshark parsed are
kept, the unparsable rest is left out of ``packets`` and listed in ``capture_issues``.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from quicack.core import quicversion
from quicack.core.ackdelay import decoded_ms_sql
from quicack.model import QuicackError
from quicack.pcap.tshark import (FRAME_FIELDS, PACKET_FIELDS, PARAMETER_FIELDS, StagedCapture, column, udp_payload_heads)

#: Largest UDP payload of one datagram on a 1500-byte MTU path (IPv4: 1500 − 20 − 8).
MAX_SINGLE_DATAGRAM_PAYLOAD = 1472

GSO_REMEDY = ("capture again with segmentation offload off at the sender: quic-go "
              "QUIC_GO_DISABLE_GSO=true, quinn enable_segmentation_offload(false), ngtcp2 "
              "--max-gso-dgrams=1, or `ethtool -K lo tx-udp-segmentation off` on the capturing host")

#: RFC 9000 §12.4 / §19 frame type → qlog frame name (quic-events: QuicFrame types).
FRAME_NAMES = {
    0x00: "padding", 0x01: "ping", 0x02: "ack", 0x03: "ack", 0x04: "reset_stream",
    0x05: "stop_sending", 0x06: "crypto", 0x07: "new_token",
    **{t: "stream" for t in range(0x08, 0x10)},
    0x10: "max_data", 0x11: "max_stream_data", 0x12: "max_streams", 0x13: "max_streams",
    0x14: "data_blocked", 0x15: "stream_data_blocked", 0x16: "streams_blocked",
    0x17: "streams_blocked", 0x18: "new_connection_id", 0x19: "retire_connection_id",
    0x1a: "path_challenge", 0x1b: "path_response", 0x1c: "connection_close",
    0x1d: "connection_close", 0x1e: "handshake_done",
    0x1f: "immediate_ack",  # draft-ietf-quic-ack-frequency
    0x30: "datagram", 0x31: "datagram",  # RFC 9221
    0xaf: "ack_frequency",  # draft-ietf-quic-ack-frequency
}

#: Long header packet types: RFC 9000 §17.2 (v1 and the drafts) and RFC 9369 §3.2 (v2).
LONG_TYPES_V1 = {0: "initial", 1: "0RTT", 2: "handshake", 3: "retry"}
LONG_TYPES_V2 = {1: "initial", 2: "0RTT", 3: "handshake", 0: "retry"}


def _case(value: str, names: dict[int, str]) -> str:
    return f"CASE {value} {' '.join(f'WHEN {k} THEN {chr(39)}{v}{chr(39)}' for k, v in names.items())} END"


_LONG_TYPE = f"""CASE WHEN header_form = 0 THEN '1RTT'
    WHEN version = 0 THEN 'version_negotiation'
    WHEN long_type IS NOT NULL THEN {_case('long_type', LONG_TYPES_V1)}
    WHEN long_type_v2 IS NOT NULL THEN {_case('long_type_v2', LONG_TYPES_V2)}
    ELSE 'unknown' END"""

#: Frame families: the frame types that carry a given tshark field (the ACK fields: both ACK
#: types; the ECN counts: ACK_ECN; a STREAM frame's offset and length: the types with the OFF and
#: LEN bits, RFC 9000 §19.8).
FAMILIES = {
    "ack": (2, 3), "ecn": (3,), "crypto": (6,), "stream": tuple(range(8, 16)),
    "stream_off": tuple(t for t in range(8, 16) if t & 4), "stream_len": tuple(t for t in range(8, 16) if t & 2),
    "padding": (0,), "nci": (24,), "rci": (25,), "af": (175,), "cc": (28,), "cc_app": (29,),
}
_FAMILIES = {name: f"type_value IN {types}" if len(types) > 1 else f"type_value = {types[0]}"
             for name, types in FAMILIES.items()}

#: Frame types that do not elicit an ACK (RFC 9002 §2: ACK, PADDING, CONNECTION_CLOSE).
NOT_ELICITING = (0x00, 0x02, 0x03, 0x1c, 0x1d)

_SPACE = """CASE packet_type WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0RTT' THEN 'application_data' WHEN '1RTT' THEN 'application_data' END"""


def _epoch_ms(ns: str) -> str:
    """Nanoseconds since the epoch as milliseconds (DOUBLE: exact to its 0.24 µs resolution)."""
    return f"(({ns} // 1000000)::DOUBLE + ({ns} % 1000000) / 1e6)"


def _last(col: str) -> str:
    return f"list_last(string_split({col}, ','))"


#: Held-back datagrams (see :class:`Staging`) are staged once this many wait, or when the reader
#: waits for tshark and the general path has not run for IDLE_GENERAL_S.
HELD_ROWS = 4096
IDLE_GENERAL_S = 0.25

#: Datagrams quicack reads: UDP, not inside an ICMP error (quicack.pcap.fastpath.udp in Arrow).
_UDP = "udp_srcport IS NOT NULL AND icmp_type IS NULL AND icmpv6_type IS NULL"

#: A datagram with transport parameters (rows of c_tp).
_TP_ANY = " OR ".join(f"tp_{n} IS NOT NULL" for n in PARAMETER_FIELDS)

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
    makes their rows.  The others are held back (Arrow tables) for the general path here
    (DuckDB), which cuts every list, and whose statements cost tens of milliseconds whatever
    their rows: held datagrams are staged while tshark runs when the reader waits for tshark
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
        ``quicack_rows`` (register/unregister cost ~2 ms a table, ~5 ms a batch)."""
        from quicack.pcap import fastpath

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
            _general(con, "SELECT * FROM quicack_ready", taken.num_rows)
        finally:
            con.unregister("quicack_ready")
        self.not_quic += con.execute("SELECT count(*) FROM cd_b WHERE packets = 0").fetchall()[0][0]
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


#: The general path runs without DuckDB's optimizer over at most this many rows: planning its
#: dozen statements costs more than running them unoptimized over a handshake's few datagrams
#: (~30 of ~100 ms).
UNOPTIMIZED_ROWS = 256


def _general(con, rows: str, count: int | None = None) -> None:
    """The general path over ``rows`` (tshark's columns and ``quicack_layout``; ``count`` of them
    if known)."""
    unoptimized = count is not None and count <= UNOPTIMIZED_ROWS
    if unoptimized:
        unoptimized = con.execute("SELECT current_setting('enable_optimizer')").fetchall()[0][0]
    con.execute(f"CREATE OR REPLACE TEMP VIEW tshark_batch AS {rows}" +
                ("; SET enable_optimizer = false" if unoptimized else ""))
    try:
        _batch_datagrams(con)
        _batch_packets(con)
        _batch_frames(con)
        _batch_store(con)
    finally:
        con.execute("DROP VIEW IF EXISTS tshark_batch" + ("; SET enable_optimizer = true" if unoptimized else ""))


def _endpoint(side: str) -> str:
    return f"coalesce({_last(f'ipv6_{side}')}, {_last(f'ip_{side}')}, '?') || '#' || {_last(f'udp_{side}port')}"


def _datagram_columns() -> str:
    """Per-datagram columns of tshark's rows (several values: of the innermost header)."""
    params = ", ".join(f"list_first(string_split({column(f)}, ',')) AS tp_{name}"
                       for name, f in PARAMETER_FIELDS.items())
    return f"""frame_number::BIGINT AS frame_number,
               (frame_time_epoch::DECIMAL(20, 9) * 1000000000)::BIGINT AS epoch_ns,
               {_endpoint('src')} AS src_ep, {_endpoint('dst')} AS dst_ep,
               TRY_CAST({_last('udp_srcport')} AS INTEGER) AS src_port,
               TRY_CAST({_last('udp_dstport')} AS INTEGER) AS dst_port,
               TRY_CAST({_last('udp_length')} AS INTEGER) - 8 AS udp_payload_bytes,
               TRY_CAST(list_first(string_split(quic_connection_number, ',')) AS INTEGER) AS tshark_connection,
               list_first(string_split(tls_handshake_extensions_server_name, ',')) AS server_name,
               _ws_malformed IS NOT NULL AS malformed,
               {params}"""


def _packet_columns(value) -> str:
    """Per-packet columns; ``value(field)`` is the packet's value of a PACKET_FIELDS field."""
    return f"""TRY_CAST({value('quic.packet_length')} AS INTEGER) AS size_bytes,
               TRY_CAST({value('quic.version')} AS BIGINT) AS version,
               {value('quic.version')} AS version_text,
               TRY_CAST({value('quic.long.packet_type')} AS INTEGER) AS long_type,
               TRY_CAST({value('quic.long.packet_type_v2')} AS INTEGER) AS long_type_v2,
               {value('quic.dcid')} AS dcid,
               TRY_CAST({value('quic.packet_number')} AS BIGINT) AS packet_number"""


#: A packet without frames did not decrypt (a Retry or Version Negotiation has none anyway).
_UNDECRYPTED = "frame_count = 0 AND packet_type NOT IN ('retry', 'version_negotiation')"


def _batch_datagrams(con) -> None:
    # Text columns stay text: the lists of datagrams with several packets (a Lua layout) are
    # cut per packet, those of per-frame fields per frame.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cd_b AS
        SELECT *, CASE WHEN quicack_layout IS NULL THEN packets <= 1
                       ELSE len(string_split(quicack_layout, ';')) = packets END AS split_ok
        FROM (SELECT {_datagram_columns()},
                     CASE WHEN quic_header_form IS NULL THEN 0
                          ELSE (length(quic_header_form) + 1) // 2 END::INTEGER AS packets,
                     {", ".join(column(f) for f in PACKET_FIELDS + FRAME_FIELDS)}, quicack_layout, quic_header_form,
                     quicack_event
              FROM tshark_batch
              WHERE {_UDP})""")


def _batch_packets(con) -> None:
    slot = {f: i + 1 for i, f in enumerate(PACKET_FIELDS)}

    def start(f: str) -> str:
        return (f"CASE WHEN idx = 1 THEN 1 ELSE (1 + list_sum(list_transform(layout[1:idx - 1], "
                f"lambda c: c[{slot[f]}])))::BIGINT END")

    def count(f: str) -> str:
        return f"layout[idx][{slot[f]}]"

    def multi(f: str) -> str:
        return f"CASE WHEN {count(f)} > 0 THEN string_split({column(f)}, ',')[{start(f)}] END"

    several = con.execute(
        "SELECT count(*) FROM cd_b WHERE quicack_layout IS NOT NULL AND split_ok").fetchall()[0][0]
    # One packet: every per-packet field is a single value already.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cp_b0 AS
        SELECT frame_number, 1::BIGINT AS idx, TRY_CAST(quic_header_form AS INTEGER) AS header_form,
               {_packet_columns(column)},
               quic_decryption_failed IS NOT NULL AS decryption_failed,
               coalesce(len(string_split(quic_frame_type, ',')), 0)::INTEGER AS frame_count,
               string_split(tls_handshake_type, ',') AS tls_types,
               1::BIGINT AS frame_start, quicack_event AS event_index
        FROM cd_b WHERE packets = 1 AND quicack_layout IS NULL""")
    # Several packets: cut every list with the per-packet counts of the Lua layout.
    if several:
        con.execute(f"""INSERT INTO cp_b0
            SELECT frame_number, idx, TRY_CAST(string_split(quic_header_form, ',')[idx] AS INTEGER),
                   {_packet_columns(multi)},
                   {count('quic.decryption_failed')} > 0,
                   {count('quic.frame_type')},
                   CASE WHEN {count('tls.handshake.type')} > 0 THEN
                        list_slice(string_split(tls_handshake_type, ','), {start('tls.handshake.type')},
                                   {start('tls.handshake.type')} + {count('tls.handshake.type')} - 1)
                   END,
                   {start('quic.frame_type')}, quicack_event + idx - 1
            FROM (SELECT *, unnest(range(1, packets + 1)) AS idx,
                         list_transform(string_split(quicack_layout, ';'),
                                        lambda p: list_transform(string_split(p, '.'), lambda c: c::INTEGER)) AS layout
                  FROM cd_b WHERE quicack_layout IS NOT NULL AND split_ok)""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cp_b AS
        SELECT *, {_UNDECRYPTED} AS undecrypted
        FROM (SELECT *, {_LONG_TYPE} AS packet_type FROM cp_b0)""")


#: Frame columns taken from per-frame fields: column → (tshark field, family) pairs, the first
#: whose family holds the frame giving the value.  Besides these: a STREAM frame without the OFF
#: bit has offset 0 (RFC 9000 §19.8), FIN is the type's low bit, request_max_ack_delay_ms is the
#: field (µs) / 1000, details a JSON object (CONNECTION_CLOSE: its error codes).
FRAME_VALUES = {
    "largest": (("quic.ack.largest_acknowledged", "ack"),),
    "ack_delay_raw": (("quic.ack.ack_delay", "ack"),),
    "ecn_ce": (("quic.ack.ecn_ce_count", "ecn"),),
    "offset_bytes": (("quic.crypto.offset", "crypto"), ("quic.stream.offset", "stream_off")),
    "length_bytes": (("quic.crypto.length", "crypto"), ("quic.stream.length", "stream_len"),
                     ("quic.padding_length", "padding")),
    "stream_id": (("quic.stream.stream_id", "stream"),),
    "sequence_number": (("quic.nci.sequence", "nci"), ("quic.rci.sequence", "rci"),
                        ("quic.af.sequence_number", "af")),
    "ack_eliciting_threshold": (("quic.af.ack_eliciting_threshold", "af"),),
    "range_count": (("quic.ack.ack_range_count", "ack"),),
    "first_range": (("quic.ack.first_ack_range", "ack"),),
}

#: Frame types whose details are NULL (their fields have columns of their own).
PLAIN_FRAME_TYPES = (0, 1, 2, 3, 6, *range(8, 16))


def _details(type_value: str, error_code: str, trigger_frame_type: str, app_error_code: str) -> str:
    """A frame's details: NULL, or a JSON object with its type (CONNECTION_CLOSE: error codes)."""
    return f"""CASE WHEN {type_value} IN {PLAIN_FRAME_TYPES} THEN NULL
                    WHEN {type_value} = 28 THEN json_object(
                        'frame_type_value', {type_value}, 'error_space', 'transport',
                        'error_code', {error_code}, 'trigger_frame_type', {trigger_frame_type})
                    WHEN {type_value} = 29 THEN json_object(
                        'frame_type_value', {type_value}, 'error_space', 'application',
                        'error_code', {app_error_code})
                    ELSE json_object('frame_type_value', {type_value})
               END"""


def _frame_columns(at) -> str:
    """The frame columns; ``at(field, family, kind)`` is the field's value for this frame (NULL
    when the frame is not of the family)."""
    names = " ".join(f"WHEN {t} THEN '{n}'" for t, n in FRAME_NAMES.items())

    def value(name: str) -> str:
        values = [at(f, family) for f, family in FRAME_VALUES[name]]
        if name == "offset_bytes":
            values.append("CASE WHEN f.type_value BETWEEN 8 AND 15 THEN 0 END")
        return values[0] if len(values) == 1 else f"coalesce({', '.join(values)})"
    values = {name: value(name) for name in FRAME_VALUES}
    return f"""CASE f.type_value {names} ELSE 'unknown' END AS frame_type,
               {values['largest']} AS largest,
               {values['ack_delay_raw']} AS ack_delay_raw,
               {values['ecn_ce']} AS ecn_ce,
               {values['offset_bytes']} AS offset_bytes,
               {values['length_bytes']} AS length_bytes,
               {values['stream_id']} AS stream_id,
               CASE WHEN f.type_value BETWEEN 8 AND 15 THEN (f.type_value & 1) = 1 END AS fin,
               {values['sequence_number']} AS sequence_number,
               {values['ack_eliciting_threshold']} AS ack_eliciting_threshold,
               {at('quic.af.request_max_ack_delay', 'af', 'DOUBLE')} / 1000.0 AS request_max_ack_delay_ms,
               {_details('f.type_value', at('quic.cc.error_code', 'cc'), at('quic.cc.frame_type', 'cc'),
                         at('quic.cc.error_code.app', 'cc_app'))} AS details,
               {values['range_count']} AS range_count,
               {values['first_range']} AS first_range"""


def _batch_frames(con) -> None:
    # The k-th frame of a family takes the k-th value of the family's fields.
    ordinals = ",\n".join(
        f"CASE WHEN {cond} THEN (sum(CASE WHEN {cond} THEN 1 ELSE 0 END) OVER w)::BIGINT END AS o_{fam}"
        for fam, cond in _FAMILIES.items())

    def nth(field: str, family: str, kind: str = "BIGINT") -> str:
        return f"TRY_CAST(string_split(d.{column(field)}, ',')[f.o_{family}] AS {kind})"

    con.execute(f"""CREATE OR REPLACE TEMP TABLE cf_g AS
        WITH f0 AS (
            SELECT p.frame_number, p.idx, p.packet_type, fi,
                   (fi - p.frame_start)::INTEGER AS position,
                   TRY_CAST(string_split(d.quic_frame_type, ',')[fi] AS BIGINT) AS type_value
            FROM (SELECT frame_number, idx, packet_type, frame_start,
                         unnest(range(frame_start, frame_start + frame_count)) AS fi
                  FROM cp_b WHERE frame_count > 0) p
            JOIN cd_b d USING (frame_number)),
        f AS (SELECT *, {ordinals} FROM f0
              WINDOW w AS (PARTITION BY frame_number ORDER BY fi ROWS UNBOUNDED PRECEDING))
        SELECT f.frame_number, f.idx, f.packet_type, f.fi, f.position, f.type_value,
               {_frame_columns(nth)}
        FROM f JOIN cd_b d USING (frame_number)""")
    # ACK ranges (RFC 9000 §19.3.1): the first range ends at Largest Acknowledged; each
    # further range lies Gap + 2 below the smallest of the previous one.
    con.execute("""CREATE OR REPLACE TEMP TABLE cf_b AS
        WITH a AS (SELECT frame_number, fi, largest, first_range, coalesce(range_count, 0) AS range_count,
                          (1 + coalesce(sum(coalesce(range_count, 0)) OVER (PARTITION BY frame_number ORDER BY fi
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::BIGINT AS pair_start
                   FROM cf_g WHERE type_value IN (2, 3)),
             extra AS (SELECT a.frame_number, a.fi, a.largest - a.first_range AS low0, k,
                              TRY_CAST(string_split(d.quic_ack_gap, ',')[a.pair_start + k - 1] AS BIGINT) AS gap,
                              TRY_CAST(string_split(d.quic_ack_ack_range, ',')[a.pair_start + k - 1] AS BIGINT) AS len
                       FROM (SELECT *, unnest(range(1, range_count + 1)) AS k FROM a WHERE range_count > 0) a
                       JOIN cd_b d USING (frame_number)),
             lows AS (SELECT frame_number, fi, len,
                             low0 - sum(gap + 2 + len) OVER (PARTITION BY frame_number, fi ORDER BY k) AS low
                      FROM extra),
             r AS (SELECT frame_number, fi, list([low, high] ORDER BY low) AS ranges
                   FROM (SELECT frame_number, fi, largest - first_range AS low, largest AS high FROM a
                         UNION ALL SELECT frame_number, fi, low, low + len FROM lows)
                   GROUP BY frame_number, fi)
        SELECT g.frame_number, g.idx, g.packet_type, g.fi, g.position, g.type_value,
               g.frame_type, g.largest, g.ack_delay_raw, r.ranges, g.ecn_ce, g.offset_bytes, g.length_bytes,
               g.stream_id, g.fin, g.sequence_number, g.ack_eliciting_threshold, g.request_max_ack_delay_ms,
               g.details
        FROM cf_g g LEFT JOIN r USING (frame_number, fi)""")


def _batch_store(con) -> None:
    """Append the batch to the capture-wide tables, with what each datagram tells."""
    con.execute("""INSERT INTO c_frame
        SELECT frame_number, idx, packet_type, position, frame_type, largest, ack_delay_raw,
               ranges, ecn_ce, offset_bytes, length_bytes, stream_id, fin, sequence_number,
               ack_eliciting_threshold, request_max_ack_delay_ms, details
        FROM cf_b""")
    con.execute("""INSERT INTO c_pkt
        SELECT p.frame_number, p.idx, p.packet_type, p.header_form, p.size_bytes, p.version,
               p.version_text, p.dcid, p.packet_number, p.decryption_failed, p.frame_count, p.undecrypted,
               CASE WHEN p.frame_count > 0 THEN coalesce(e.eliciting, false) END, p.event_index
        FROM cp_b p
        LEFT JOIN (SELECT frame_number, idx,
                          bool_or(frame_type NOT IN ('ack', 'padding', 'connection_close')) AS eliciting
                   FROM cf_b GROUP BY ALL) e USING (frame_number, idx)""")
    # Per datagram: does it start a connection (an Initial's first CRYPTO bytes), carry a
    # ServerHello / Retry / Version Negotiation (server) or a ClientHello / 0-RTT (client), and
    # is it a GSO super-frame?
    con.execute(f"""INSERT INTO c_dgram
        SELECT d.frame_number, d.epoch_ns, d.src_ep, d.dst_ep, d.src_port, d.dst_port, d.udp_payload_bytes,
               d.tshark_connection, d.server_name, d.packets, d.split_ok,
               coalesce(c0.starts, false),
               coalesce(p.has_server_hello, false), coalesce(p.has_client_hello, false),
               coalesce(p.has_initial, false),
               coalesce(d.udp_payload_bytes > {MAX_SINGLE_DATAGRAM_PAYLOAD}
                        AND (p.any_undecrypted OR p.long_packets > p.long_types), false),
               coalesce(p.parsed, 0), coalesce(p.decrypted, 0), d.malformed
        FROM cd_b d
        LEFT JOIN (SELECT frame_number,
                          bool_or(list_contains(tls_types, '2') OR packet_type IN ('retry', 'version_negotiation'))
                              AS has_server_hello,
                          bool_or(list_contains(tls_types, '1') OR packet_type = '0RTT') AS has_client_hello,
                          bool_or(packet_type = 'initial') AS has_initial,
                          bool_or(undecrypted) AS any_undecrypted,
                          count(*) FILTER (WHERE header_form = 1) AS long_packets,
                          count(DISTINCT packet_type) FILTER (WHERE header_form = 1) AS long_types,
                          count(*) AS parsed, count(*) FILTER (WHERE NOT undecrypted) AS decrypted
                   FROM cp_b GROUP BY frame_number) p USING (frame_number)
        LEFT JOIN (SELECT DISTINCT frame_number, true AS starts FROM cf_b
                   WHERE type_value = 6 AND offset_bytes = 0 AND packet_type = 'initial') c0 USING (frame_number)""")


    con.execute(f"""INSERT INTO c_tp SELECT frame_number, {", ".join(f"tp_{n}" for n in PARAMETER_FIELDS)}
        FROM cd_b WHERE {_TP_ANY}""")


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


#: A tshark connection's root: itself if it starts (``tc``: tshark_connection, first_frame,
#: tuple_key, starts), else the one that started last before it on the same 4-tuple, if any.
_ROOT = """SELECT c.tshark_connection, coalesce(r.tshark_connection, c.tshark_connection) AS root
                      FROM tc c ASOF LEFT JOIN (SELECT * FROM tc WHERE starts) r
                        ON c.tuple_key = r.tuple_key AND c.first_frame > r.first_frame
                      WHERE NOT c.starts
                      UNION ALL SELECT tshark_connection, tshark_connection FROM tc WHERE starts"""

#: Who sent a datagram (``src_ep``, ports) of a connection whose ServerHello (or Retry, Version
#: Negotiation), ClientHello (or 0-RTT) and first Initial came from ``server_ep``, ``client_ep``
#: and ``first_initial_ep`` (NULL: none seen).
_SENDER = """CASE WHEN server_ep IS NOT NULL THEN CASE WHEN src_ep = server_ep THEN 'server' ELSE 'client' END
                    WHEN client_ep IS NOT NULL THEN CASE WHEN src_ep = client_ep THEN 'client' ELSE 'server' END
                    WHEN first_initial_ep IS NOT NULL THEN CASE WHEN src_ep = first_initial_ep THEN 'client' ELSE 'server' END
                    WHEN src_port > dst_port THEN 'client' ELSE 'server' END"""


def _assign_connections(con, first_connection_id: int, per_tshark_connection: bool = True) -> None:
    """``dmap``: every QUIC datagram → connection_id and sender; ``ck``: the connections.

    When tshark numbered every QUIC datagram (nearly always: it follows connection IDs) the work
    is done per tshark connection (:func:`_assign_by_tshark_connection`), else per datagram
    (below); ``per_tshark_connection=False`` forces the latter (tests hold the two to the same
    outcome)."""
    if per_tshark_connection and _assign_by_tshark_connection(con, first_connection_id):
        return
    # tshark's connection number when it has one; else the connection last seen on the same
    # 4-tuple (ASOF: the latest one that started at or before this frame, else the first).
    # A connection starts with the first CRYPTO bytes of an Initial (the ClientHello, or the
    # ServerHello if the capture missed it): a tshark connection that does not (tshark met a
    # connection ID it could not tie to the handshake, e.g. without keys) continues the
    # connection that started last on the same 4-tuple.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE dconn AS
        WITH q0 AS (SELECT frame_number, tshark_connection, starts,
                           least(src_ep, dst_ep) || ' ' || greatest(src_ep, dst_ep) AS tuple_key
                    FROM c_dgram WHERE packets > 0 AND split_ok),
             tc AS (SELECT tshark_connection, min(frame_number) AS first_frame,
                           arg_min(tuple_key, frame_number) AS tuple_key, arg_min(starts, frame_number) AS starts
                    FROM q0 WHERE tshark_connection IS NOT NULL GROUP BY ALL),
             root AS ({_ROOT}),
             q AS (SELECT q0.frame_number, q0.tuple_key, root.root AS tshark_connection
                   FROM q0 LEFT JOIN root USING (tshark_connection)),
             known AS (SELECT tuple_key, tshark_connection, min(frame_number) AS first_frame
                       FROM q WHERE tshark_connection IS NOT NULL GROUP BY ALL),
             earliest AS (SELECT tuple_key, arg_min(tshark_connection, first_frame) AS c
                          FROM known GROUP BY ALL),
             later AS (SELECT q.frame_number, k.tshark_connection AS c
                       FROM q ASOF JOIN known k ON q.tuple_key = k.tuple_key AND q.frame_number >= k.first_frame
                       WHERE q.tshark_connection IS NULL)
        SELECT q.frame_number,
               coalesce('t' || q.tshark_connection, 't' || later.c, 't' || earliest.c, 'u ' || q.tuple_key) AS conn_key,
               coalesce(q.tshark_connection, later.c, earliest.c) AS tshark_connection
        FROM q LEFT JOIN later USING (frame_number) LEFT JOIN earliest USING (tuple_key)""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE ck AS
        SELECT conn_key, any_value(tshark_connection) AS tshark_connection,
               {first_connection_id} - 1 + row_number() OVER (ORDER BY min(frame_number)) AS connection_id,
               row_number() OVER (ORDER BY min(frame_number)) - 1 AS trace_index
        FROM dconn GROUP BY conn_key""")
    # Who is the server: the ServerHello's (or Retry's, Version Negotiation's) sender; else the
    # peer of the ClientHello's (or 0-RTT's) sender; else the peer of the first Initial's sender;
    # else the side with the lower port.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE dmap AS
        WITH d AS (SELECT c_dgram.*, ck.connection_id FROM c_dgram JOIN dconn USING (frame_number) JOIN ck USING (conn_key)),
             s AS (SELECT connection_id,
                          arg_min(src_ep, frame_number) FILTER (WHERE has_server_hello) AS server_ep,
                          arg_min(src_ep, frame_number) FILTER (WHERE has_client_hello) AS client_ep,
                          arg_min(src_ep, frame_number) FILTER (WHERE has_initial) AS first_initial_ep
                   FROM d GROUP BY connection_id)
        SELECT d.frame_number, d.connection_id, d.epoch_ns, d.src_ep, d.gso, {_SENDER} AS sender
        FROM d JOIN s USING (connection_id)""")


def _assign_by_tshark_connection(con, first_connection_id: int) -> bool:
    """:func:`_assign_connections` when every QUIC datagram has a tshark connection number: what
    decides a connection (its tshark connections' first datagrams, where its ServerHello,
    ClientHello and first Initial came from) is gathered per tshark connection in one pass over
    the datagrams, the connections worked out on those few rows, and each datagram then looks its
    connection up — instead of several passes joining datagram to datagram.  The same outcome:
    the first datagram of a connection is the first of one of its tshark connections.  False
    (nothing made) if some QUIC datagram has no number."""
    con.execute("""CREATE OR REPLACE TEMP TABLE tcs AS
        SELECT tshark_connection, min(frame_number) AS first_frame,
               arg_min(src_ep, frame_number) AS first_src, arg_min(dst_ep, frame_number) AS first_dst,
               arg_min(starts, frame_number) AS starts,
               min(frame_number) FILTER (WHERE has_server_hello) AS server_frame,
               arg_min(src_ep, frame_number) FILTER (WHERE has_server_hello) AS server_ep,
               min(frame_number) FILTER (WHERE has_client_hello) AS client_frame,
               arg_min(src_ep, frame_number) FILTER (WHERE has_client_hello) AS client_ep,
               min(frame_number) FILTER (WHERE has_initial) AS initial_frame,
               arg_min(src_ep, frame_number) FILTER (WHERE has_initial) AS first_initial_ep
        FROM c_dgram WHERE packets > 0 AND split_ok GROUP BY tshark_connection""")
    if con.execute("SELECT count(*) FROM tcs WHERE tshark_connection IS NULL").fetchall()[0][0]:
        con.execute("DROP TABLE tcs")
        return False
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tcmap AS
        WITH tc AS (SELECT *, least(first_src, first_dst) || ' ' || greatest(first_src, first_dst) AS tuple_key
                    FROM tcs),
             root AS ({_ROOT}),
             c AS (SELECT root.root, tc.* FROM tc JOIN root USING (tshark_connection)),
             conn AS (SELECT root, min(first_frame) AS first_frame,
                             arg_min(server_ep, server_frame) AS server_ep,
                             arg_min(client_ep, client_frame) AS client_ep,
                             arg_min(first_initial_ep, initial_frame) AS first_initial_ep
                      FROM c GROUP BY root)
        SELECT c.tshark_connection, conn.root, conn.server_ep, conn.client_ep, conn.first_initial_ep,
               {first_connection_id} - 1 + row_number() OVER (ORDER BY conn.first_frame) AS connection_id,
               row_number() OVER (ORDER BY conn.first_frame) - 1 AS trace_index
        FROM c JOIN conn USING (root)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE ck AS
        SELECT DISTINCT 't' || root AS conn_key, root AS tshark_connection, connection_id, trace_index FROM tcmap""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE dmap AS
        SELECT d.frame_number, m.connection_id, d.epoch_ns, d.src_ep, d.gso, {_SENDER} AS sender
        FROM c_dgram d JOIN tcmap m USING (tshark_connection) WHERE d.packets > 0 AND d.split_ok""")
    con.execute("DROP TABLE tcs; DROP TABLE tcmap")
    return True


def normalize(con: duckdb.DuckDBPyConnection, file_id: int, first_connection_id: int,
              staged: StagedCapture) -> None:
    """Insert the rows of the staged capture into the store tables (caller holds the transaction).

    Sets ``staged.events`` (QUIC packets stored) and appends warnings about packets that could
    not be decrypted, GSO super-frames and datagrams that could not be split.
    """
    if not con.execute("SELECT count(*) FROM c_pkt").fetchall()[0][0]:
        udp = con.execute("SELECT count(*) FROM c_dgram").fetchall()[0][0]
        why = quicversion.explain(udp_payload_heads(Path(staged.path)), staged.tshark_version) if udp else None
        raise QuicackError(f"no QUIC packets found: {staged.frames} frames, {udp} UDP datagrams, none dissected as "
                           f"QUIC{'; ' + why if why else ' (QUIC on an unusual port? try --quic-port PORT)'}",
                           staged.path)
    _assign_connections(con, first_connection_id)
    # pk: every packet with its datagram's connection, sender and time; event_index is its
    # position in the capture, numbered while staging (quicack.pcap.fastpath.number_packets) unless a
    # datagram's packets could not be cut (their numbers are left out: numbered again here).
    unsplit = con.execute("SELECT count(*) FROM c_dgram WHERE packets > 0 AND NOT split_ok").fetchall()[0][0]
    numbered = ("(SELECT * REPLACE (row_number() OVER (ORDER BY frame_number, idx) - 1 AS event_index) FROM c_pkt)"
                if unsplit else "c_pkt")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE pk AS
        SELECT p.*, m.connection_id, m.sender, m.epoch_ns, m.gso
        FROM {numbered} p JOIN dmap m USING (frame_number)""")

    # Packets kept: everything except the unparsable remainder of GSO super-frames.
    kept = "NOT (undecrypted AND gso)"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cstart AS
        SELECT connection_id, min(epoch_ns) AS first_ns, max(epoch_ns) AS last_ns, count(*) AS packets,
               count(DISTINCT frame_number) AS datagrams, count(*) FILTER (WHERE undecrypted) AS not_decrypted
        FROM pk WHERE {kept} GROUP BY connection_id""")

    # Transport parameters: the first ClientHello (client) and EncryptedExtensions (server) seen.
    tp_json = ", ".join(
        f"struct_pack(k := '{n}', v := coalesce(TRY_CAST(tp_{n} AS BIGINT)::JSON, to_json(tp_{n})))"
        for n in PARAMETER_FIELDS)
    con.execute(f"""INSERT INTO transport_parameters
        SELECT connection_id, CASE WHEN sender = 'client' THEN 'local' ELSE 'remote' END, sender,
               (epoch_ns - first_ns) / 1e6,
               TRY_CAST(tp_max_ack_delay AS DOUBLE),
               TRY_CAST(tp_ack_delay_exponent AS INTEGER),
               TRY_CAST(tp_min_ack_delay AS DOUBLE) / 1000.0,
               TRY_CAST(tp_initial_max_data AS BIGINT),
               TRY_CAST(tp_max_udp_payload_size AS BIGINT),
               TRY_CAST(tp_max_idle_timeout AS DOUBLE),
               TRY_CAST(tp_active_connection_id_limit AS BIGINT),
               to_json([map_from_entries(list_filter([{tp_json}], lambda x: x.v IS NOT NULL))])
        FROM (SELECT d.*, m.connection_id, m.sender, m.epoch_ns,
                     row_number() OVER (PARTITION BY m.connection_id, m.sender ORDER BY d.frame_number) AS nth
              FROM c_tp d JOIN dmap m USING (frame_number))
        JOIN cstart USING (connection_id)
        WHERE nth = 1""")

    con.execute(f"""INSERT INTO frames
        SELECT p.connection_id, p.event_index, f.position, f.frame_type,
               CASE WHEN f.frame_type = 'ack' THEN {decoded_ms_sql("f.ack_delay_raw", "tp.ack_delay_exponent", "f.packet_type")} END,
               f.ack_delay_raw, f.largest, f.ranges, f.ecn_ce, f.offset_bytes, f.length_bytes,
               f.stream_id, f.fin, f.sequence_number, f.ack_eliciting_threshold,
               f.request_max_ack_delay_ms, NULL, f.details
        FROM c_frame f JOIN pk p USING (frame_number, idx)
        LEFT JOIN transport_parameters tp ON tp.connection_id = p.connection_id AND tp.endpoint = p.sender""")

    con.execute(f"""INSERT INTO packets
        SELECT p.connection_id, p.event_index, (p.epoch_ns - c.first_ns) / 1e6, {_epoch_ms('p.epoch_ns')},
               CASE WHEN p.sender = 'client' THEN 'sent' ELSE 'received' END, p.sender,
               p.packet_type, {_SPACE.replace('packet_type', 'p.packet_type')},
               -- a payload that did not decrypt does not vouch for the header protection
               -- removal either (wrong Initial keys give a random packet number)
               CASE WHEN NOT p.undecrypted THEN p.packet_number END, p.size_bytes,
               p.frame_number, p.eliciting, p.frame_count
        FROM pk p JOIN cstart c USING (connection_id)
        WHERE {kept}""")

    con.execute(f"""INSERT INTO connections (connection_id, file_id, trace_index, group_id, vantage,
            flow, implementation, odcid, title, reference_epoch_ms, first_event_epoch_ms, duration_ms,
            events, quirks)
        SELECT ck.connection_id, {file_id}, ck.trace_index, NULL, 'network', 'client', 'tshark',
               od.odcid, sn.server_name, {_epoch_ms('c.first_ns')}, {_epoch_ms('c.first_ns')},
               (c.last_ns - c.first_ns) / 1e6, c.packets, []
        FROM ck JOIN cstart c USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(dcid, (frame_number, idx)) AS odcid
                   FROM pk WHERE sender = 'client' AND packet_type = 'initial' GROUP BY ALL) od USING (connection_id)
        LEFT JOIN (SELECT m.connection_id, arg_min(d.server_name, d.frame_number) AS server_name
                   FROM c_dgram d JOIN dmap m USING (frame_number)
                   WHERE d.server_name IS NOT NULL GROUP BY ALL) sn USING (connection_id)""")

    con.execute(f"""INSERT INTO capture_issues
        SELECT {file_id}, m.connection_id, d.frame_number, {_epoch_ms('d.epoch_ns')}, 'gso_superframe', NULL,
               d.udp_payload_bytes,
               'UDP payload of ' || d.udp_payload_bytes || ' bytes from ' || replace(d.src_ep, '#', ' port ')
               || ': ' || d.decrypted || ' of ' || d.parsed
               || ' QUIC packets tshark parsed decrypted; the rest could not be split'
        FROM c_dgram d JOIN dmap m USING (frame_number) WHERE d.gso
        UNION ALL
        SELECT {file_id}, connection_id, frame_number, {_epoch_ms('epoch_ns')}, 'not_decrypted',
               packet_type, size_bytes, CASE WHEN decryption_failed THEN 'decryption failed' ELSE 'no keys' END
        FROM pk WHERE undecrypted AND NOT gso
        UNION ALL
        SELECT {file_id}, m.connection_id, d.frame_number, {_epoch_ms('d.epoch_ns')}, 'malformed', NULL,
               d.udp_payload_bytes, 'tshark: Malformed Packet'
        FROM c_dgram d JOIN dmap m USING (frame_number) WHERE d.malformed
        UNION ALL
        SELECT {file_id}, NULL, frame_number, {_epoch_ms('epoch_ns')}, 'unsplit', NULL, udp_payload_bytes,
               'datagram with ' || packets || ' QUIC packets that could not be cut into packets'
        FROM c_dgram WHERE packets > 0 AND NOT split_ok""")

    con.execute("""INSERT INTO capture_connections
        SELECT ck.connection_id,
               split_part(e.client_ep, '#', 1), TRY_CAST(split_part(e.client_ep, '#', 2) AS INTEGER),
               split_part(e.server_ep, '#', 1), TRY_CAST(split_part(e.server_ep, '#', 2) AS INTEGER),
               v.version_text, ck.tshark_connection, c.datagrams, c.not_decrypted, coalesce(e.superframes, 0)
        FROM ck JOIN cstart c USING (connection_id)
        LEFT JOIN (SELECT connection_id,
                          arg_min(src_ep, frame_number) FILTER (WHERE sender = 'client') AS client_ep,
                          arg_min(src_ep, frame_number) FILTER (WHERE sender = 'server') AS server_ep,
                          count(*) FILTER (WHERE gso) AS superframes
                   FROM dmap GROUP BY ALL) e USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(version_text, (frame_number, idx)) AS version_text
                   FROM pk WHERE header_form = 1 AND version <> 0 GROUP BY ALL) v USING (connection_id)""")

    malformed, gso = con.execute("""
        SELECT (SELECT count(*) FROM c_dgram JOIN dmap USING (frame_number) WHERE malformed),
               (count(*), max(udp_payload_bytes), string_agg(DISTINCT replace(src_ep, '#', ' port '), ', '))
        FROM c_dgram WHERE gso""").fetchall()[0]
    staged.events, not_decrypted = con.execute("""INSERT INTO capture_files
        SELECT $file_id, $version, $secrets, $keylog, $keylog_sha256, $ports, $frames,
               sum(datagrams), sum(packets), sum(not_decrypted), $gso FROM cstart
        RETURNING quic_packets, packets_not_decrypted""",
        {"file_id": file_id, "version": staged.tshark_version, "secrets": staged.secrets,
         "keylog": staged.keylog, "keylog_sha256": staged.keylog_sha256,
         "ports": staged.decode_as_ports, "frames": staged.frames, "gso": int(gso[0])}).fetchall()[0]
    staged.warnings.extend(_warnings(con, staged, unsplit, malformed, gso))
    con.execute("; ".join(f"DROP TABLE IF EXISTS {table}" for table in (
        "c_dgram", "c_tp", "c_pkt", "c_frame", "cd_b", "cp_b0", "cp_b", "cf_b", "cf_g", "dconn", "ck", "dmap",
        "cstart", "pk")))


def _warnings(con, staged: StagedCapture, unsplit: int, malformed: int, gso: tuple) -> list[str]:
    """What the summary says about a capture: packets not decrypted, malformed and unsplit
    datagrams, GSO super-frames (``gso``: how many, the largest, their senders)."""
    warnings = []
    path = staged.path
    total = staged.events
    by_type = con.execute("""SELECT packet_type, count(*) FROM pk
                             WHERE undecrypted AND NOT gso GROUP BY ALL ORDER BY 2 DESC, 1""").fetchall()
    if by_type:
        n = sum(c for _, c in by_type)
        listed = ", ".join(f"{t} {c}" for t, c in by_type)
        if staged.secrets == "none":
            hint = ("no TLS key log found (only Initial packets decrypt without one): pass --keylog FILE, "
                    "put <capture>.keys or keys.log beside the capture, or embed the secrets "
                    "(editcap --inject-secrets tls,KEYLOG)")
        else:
            hint = f"the secrets ({staged.keylog or 'Decryption Secrets Block'}) do not cover them"
        warnings.append(f"{path}: {n} of {total} QUIC packets not decrypted ({listed}); {hint}")
    if malformed:
        versions = con.execute("""SELECT string_agg(DISTINCT version_text, ', ') FROM pk
                                  WHERE header_form = 1 AND version <> 0""").fetchall()[0][0]
        warnings.append(f"{path}: tshark found {malformed} malformed QUIC datagrams (versions seen: "
                        f"{versions or 'none'}; tshark does not dissect every QUIC version, e.g. drafts older than "
                        "the invariants of RFC 8999): "
                        "their packet types and numbers may be wrong")
    if unsplit:
        warnings.append(f"{path}: {unsplit} datagrams holding several QUIC packets could not be cut into "
                        "packets and were left out (listed in capture_issues)")
    if gso[0]:
        warnings.append(f"{path}: {gso[0]} UDP datagrams of up to {gso[1]} bytes (sent by {gso[2]}) are UDP GSO "
                        f"super-frames that tshark cannot split: the packets inside them are missing; "
                        f"{GSO_REMEDY}")
    return warnings
