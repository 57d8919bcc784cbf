"""From tshark's rows (table ``dg``, see :mod:`quicack.pcap`) to the normalized tables.

Theory of operation: a capture is a network vantage point.  Every captured UDP datagram is cut
into its QUIC packets and every packet into its frames, entirely in DuckDB:

1. *Datagrams* (``cd``): addresses, ports, time, and each field's occurrences as a list.
2. *Packets* (``cp``): datagram × packet index.  A field's value for packet *i* sits after the
   occurrences of the packets before it; the counts come from the Lua layout (several packets
   in the datagram) or are the list lengths (one packet).
3. *Frames* (``cf``): packet × frame index.  Per-frame fields (ACK, CRYPTO, STREAM, …) are
   lists in frame order over the whole datagram, so the k-th ACK frame of a datagram takes the
   k-th ``largest_acknowledged``; ACK ranges take ``ack_range_count`` gap/range pairs each.
4. *Connections*: tshark's connection number (it follows connection IDs, including new ones
   and Retry), else the connection already seen on the same address/port 4-tuple, else one
   connection per 4-tuple.  The server is the side that sends the ServerHello or a Retry (else
   the one not sending the ClientHello, else the one not sending the first Initial, else the
   lower port); rows follow the qlog network convention with ``flow = 'client'``: client
   packets are ``sent``, server packets ``received``.

RFC 9000 §19.3: "ACK Delay: ... decoded by multiplying the value in the field by 2 to the power
of the ack_delay_exponent transport parameter sent by the sender of the ACK frame"; §18.2: the
default is 3.  Initial packets are sent before any transport parameter is known: exponent 3.

UDP GSO: a sender that hands the kernel one buffer of several equal-size datagrams is captured on
loopback as one "super-frame".  tshark can split the long-header packets by their Length field
but a short-header packet swallows the rest, and its decryption fails.  A datagram larger than a
1500-byte MTU allows (UDP payload > 1472 bytes) holding a packet that did not decrypt (or two
long-header packets of one type) is reported as a GSO super-frame: the packets tshark parsed are
kept, the unparsable rest is left out of ``packets`` and listed in ``capture_issues``.
"""

from __future__ import annotations

import duckdb

from .pcap import FRAME_FIELDS, PACKET_FIELDS, PARAMETER_FIELDS, StagedCapture, column

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

# Long header packet types: RFC 9000 §17.2 (v1 and the drafts) and RFC 9369 §3.2 (v2).
_LONG_TYPE = """CASE WHEN header_form = 0 THEN '1RTT'
    WHEN version = 0 THEN 'version_negotiation'
    WHEN long_type IS NOT NULL THEN
      CASE long_type WHEN 0 THEN 'initial' WHEN 1 THEN '0RTT' WHEN 2 THEN 'handshake' WHEN 3 THEN 'retry' END
    WHEN long_type_v2 IS NOT NULL THEN
      CASE long_type_v2 WHEN 1 THEN 'initial' WHEN 2 THEN '0RTT' WHEN 3 THEN 'handshake' WHEN 0 THEN 'retry' END
    ELSE 'unknown' END"""

_SPACE = """CASE packet_type WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0RTT' THEN 'application_data' WHEN '1RTT' THEN 'application_data' END"""


def _list(col: str) -> str:
    return f"coalesce(string_split({col}, ','), [])"


def _last(col: str) -> str:
    return f"list_last(string_split({col}, ','))"


def _stage_datagrams(con) -> None:
    lists = ",\n".join(f"{_list(column(f))} AS l_{column(f)}" for f in PACKET_FIELDS + FRAME_FIELDS)
    lengths = ", ".join(f"len({_list(column(f))})::INTEGER" for f in PACKET_FIELDS)
    params = ",\n".join(f"list_first(string_split({column(f)}, ',')) AS tp_{name}"
                        for name, f in PARAMETER_FIELDS.items())
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cd AS
        SELECT frame_number::BIGINT AS frame_number,
               frame_time_epoch::DECIMAL(20, 9) AS epoch_s,
               coalesce({_last('ipv6_src')}, {_last('ip_src')}) AS src_ip,
               coalesce({_last('ipv6_dst')}, {_last('ip_dst')}) AS dst_ip,
               TRY_CAST({_last('udp_srcport')} AS INTEGER) AS src_port,
               TRY_CAST({_last('udp_dstport')} AS INTEGER) AS dst_port,
               TRY_CAST({_last('udp_length')} AS INTEGER) - 8 AS udp_payload_bytes,
               TRY_CAST(list_first(string_split(quic_connection_number, ',')) AS INTEGER) AS tshark_connection,
               list_transform({_list('quic_header_form')}, lambda x: x::INTEGER) AS header_forms,
               CASE WHEN quicack_layout IS NULL THEN [[{lengths}]]
                    ELSE list_transform(string_split(quicack_layout, ';'),
                                        lambda p: list_transform(string_split(p, '.'), lambda c: c::INTEGER))
               END AS layout,
               list_first(string_split(tls_handshake_extensions_server_name, ',')) AS server_name,
               {lists},
               {params}
        FROM dg
        WHERE udp_srcport IS NOT NULL AND icmp_type IS NULL AND icmpv6_type IS NULL""")
    con.execute("""UPDATE cd SET src_ip = coalesce(src_ip, '?'), dst_ip = coalesce(dst_ip, '?')""")


def _stage_packets(con) -> None:
    slot = {f: i + 1 for i, f in enumerate(PACKET_FIELDS)}

    def start(f: str) -> str:
        k = slot[f]
        return f"(1 + coalesce(list_sum(list_transform(layout[1:idx - 1], lambda c: c[{k}])), 0))::BIGINT"

    def count(f: str) -> str:
        return f"layout[idx][{slot[f]}]"

    def scalar(f: str) -> str:
        return f"CASE WHEN {count(f)} > 0 THEN l_{column(f)}[{start(f)}] END"

    con.execute(f"""CREATE OR REPLACE TEMP TABLE cp0 AS
        SELECT frame_number, idx, epoch_s, src_ip, src_port, dst_ip, dst_port, udp_payload_bytes,
               tshark_connection, header_forms[idx] AS header_form,
               TRY_CAST({scalar('quic.packet_length')} AS INTEGER) AS size_bytes,
               TRY_CAST({scalar('quic.version')} AS BIGINT) AS version,
               {scalar('quic.version')} AS version_text,
               TRY_CAST({scalar('quic.long.packet_type')} AS INTEGER) AS long_type,
               TRY_CAST({scalar('quic.long.packet_type_v2')} AS INTEGER) AS long_type_v2,
               {scalar('quic.dcid')} AS dcid,
               {scalar('quic.scid')} AS scid,
               TRY_CAST({scalar('quic.packet_number')} AS BIGINT) AS packet_number,
               {count('quic.decryption_failed')} > 0 AS decryption_failed,
               {start('quic.frame_type')} AS frame_start,
               {count('quic.frame_type')} AS frame_count,
               list_slice(l_tls_handshake_type, {start('tls.handshake.type')},
                          {start('tls.handshake.type')} + {count('tls.handshake.type')} - 1) AS tls_types
        FROM (SELECT *, unnest(range(1, len(header_forms) + 1)) AS idx FROM cd
              WHERE len(header_forms) > 0 AND len(layout) = len(header_forms))""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cp1 AS
        SELECT *, {_LONG_TYPE} AS packet_type,
               src_ip || '#' || src_port AS src_ep, dst_ip || '#' || dst_port AS dst_ep
        FROM cp0""")


def _assign_connections(con, first_connection_id: int) -> None:
    # tshark's connection number when it has one; else the connection last seen on the same
    # 4-tuple (ASOF: the latest one that started at or before this frame, else the first).
    # A connection starts with the client's Initial: a tshark connection that does not (tshark
    # met a connection ID it could not tie to the handshake, e.g. without keys) continues the
    # connection that started last on the same 4-tuple.
    con.execute("""CREATE OR REPLACE TEMP TABLE dconn AS
        WITH q0 AS (SELECT frame_number, any_value(tshark_connection) AS tshark_connection,
                           least(any_value(src_ep), any_value(dst_ep)) || ' ' || greatest(any_value(src_ep), any_value(dst_ep)) AS tuple_key,
                           bool_or(packet_type = 'initial') AS has_initial
                    FROM cp1 GROUP BY frame_number),
             tc AS (SELECT tshark_connection, min(frame_number) AS first_frame,
                           arg_min(tuple_key, frame_number) AS tuple_key, arg_min(has_initial, frame_number) AS starts
                    FROM q0 WHERE tshark_connection IS NOT NULL GROUP BY ALL),
             root AS (SELECT c.tshark_connection, coalesce(r.tshark_connection, c.tshark_connection) AS root
                      FROM tc c ASOF LEFT JOIN (SELECT * FROM tc WHERE starts) r
                        ON c.tuple_key = r.tuple_key AND c.first_frame > r.first_frame
                      WHERE NOT c.starts
                      UNION ALL SELECT tshark_connection, tshark_connection FROM tc WHERE starts),
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
        SELECT conn_key, any_value(tshark_connection) AS tshark_connection, min(frame_number) AS first_frame,
               {first_connection_id} - 1 + row_number() OVER (ORDER BY min(frame_number)) AS connection_id,
               row_number() OVER (ORDER BY min(frame_number)) - 1 AS trace_index
        FROM dconn GROUP BY conn_key""")
    # Who is the server: the ServerHello's (or Retry's, Version Negotiation's) sender; else the
    # peer of the ClientHello's (or 0-RTT's) sender; else the peer of the first Initial's sender.
    con.execute("""CREATE OR REPLACE TEMP TABLE cside AS
        SELECT connection_id,
               arg_min(src_ep, frame_number) FILTER (WHERE list_contains(tls_types, '2')
                   OR packet_type IN ('retry', 'version_negotiation')) AS server_ep,
               arg_min(src_ep, frame_number) FILTER (WHERE list_contains(tls_types, '1')
                   OR packet_type = '0RTT') AS client_ep,
               arg_min(src_ep, frame_number) FILTER (WHERE packet_type = 'initial') AS first_initial_ep
        FROM cp1 JOIN dconn USING (frame_number) JOIN ck USING (conn_key)
        GROUP BY connection_id""")
    con.execute("""CREATE OR REPLACE TEMP TABLE cp AS
        SELECT cp1.*, ck.connection_id, ck.trace_index,
               CASE WHEN s.server_ep IS NOT NULL THEN CASE WHEN src_ep = s.server_ep THEN 'server' ELSE 'client' END
                    WHEN s.client_ep IS NOT NULL THEN CASE WHEN src_ep = s.client_ep THEN 'client' ELSE 'server' END
                    WHEN s.first_initial_ep IS NOT NULL THEN CASE WHEN src_ep = s.first_initial_ep THEN 'client' ELSE 'server' END
                    WHEN src_port > dst_port THEN 'client' ELSE 'server' END AS sender,
               -- the payload was not decrypted: no frames (Retry and Version Negotiation have none)
               frame_count = 0 AND packet_type NOT IN ('retry', 'version_negotiation') AS undecrypted
        FROM cp1 JOIN dconn USING (frame_number) JOIN ck USING (conn_key)
        JOIN cside s USING (connection_id)""")


def _detect_gso(con) -> None:
    con.execute(f"""CREATE OR REPLACE TEMP TABLE gso AS
        SELECT frame_number, any_value(connection_id) AS connection_id, any_value(epoch_s) AS epoch_s,
               any_value(udp_payload_bytes) AS udp_payload_bytes, any_value(src_ep) AS src_ep,
               count(*) AS parsed, count(*) FILTER (WHERE NOT undecrypted) AS decrypted
        FROM cp
        GROUP BY frame_number
        HAVING any_value(udp_payload_bytes) > {MAX_SINGLE_DATAGRAM_PAYLOAD}
           AND (bool_or(undecrypted) OR count(*) FILTER (WHERE header_form = 1)
                > count(DISTINCT packet_type) FILTER (WHERE header_form = 1))""")


def _stage_frames(con) -> None:
    names = " ".join(f"WHEN {t} THEN '{n}'" for t, n in FRAME_NAMES.items())
    # Ordinal of a frame among the frames of its datagram that carry a given field.
    families = {
        "ack": "type_value IN (2, 3)", "ecn": "type_value = 3", "crypto": "type_value = 6",
        "stream": "type_value BETWEEN 8 AND 15",
        "stream_off": "type_value BETWEEN 8 AND 15 AND (type_value & 4) <> 0",
        "stream_len": "type_value BETWEEN 8 AND 15 AND (type_value & 2) <> 0",
        "padding": "type_value = 0", "nci": "type_value = 24", "rci": "type_value = 25",
        "af": "type_value = 175", "cc": "type_value = 28", "cc_app": "type_value = 29",
    }
    ordinals = ",\n".join(
        f"CASE WHEN {cond} THEN (sum(CASE WHEN {cond} THEN 1 ELSE 0 END) OVER w)::BIGINT END AS o_{fam}"
        for fam, cond in families.items())
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cf0 AS
        SELECT *, {ordinals}
        FROM (SELECT p.frame_number, p.idx, p.connection_id, p.packet_type, p.sender,
                     fi, (fi - p.frame_start)::INTEGER AS position,
                     TRY_CAST(d.l_quic_frame_type[fi] AS BIGINT) AS type_value
              FROM (SELECT *, unnest(range(frame_start, frame_start + frame_count)) AS fi
                    FROM cp WHERE frame_count > 0) p
              JOIN cd d USING (frame_number))
        WINDOW w AS (PARTITION BY frame_number ORDER BY fi ROWS UNBOUNDED PRECEDING)""")

    def at(field: str, family: str, kind: str = "BIGINT") -> str:
        return f"TRY_CAST(d.l_{column(field)}[f.o_{family}] AS {kind})"

    con.execute(f"""CREATE OR REPLACE TEMP TABLE cf1 AS
        SELECT f.*, CASE f.type_value {names} ELSE 'unknown' END AS frame_type,
               {at('quic.ack.largest_acknowledged', 'ack')} AS largest,
               {at('quic.ack.ack_delay', 'ack')} AS ack_delay_raw,
               {at('quic.ack.ack_range_count', 'ack')} AS range_count,
               {at('quic.ack.first_ack_range', 'ack')} AS first_range,
               {at('quic.ack.ecn_ce_count', 'ecn')} AS ecn_ce,
               coalesce({at('quic.crypto.offset', 'crypto')}, {at('quic.stream.offset', 'stream_off')},
                        CASE WHEN f.o_stream IS NOT NULL THEN 0 END) AS offset_bytes,
               coalesce({at('quic.crypto.length', 'crypto')}, {at('quic.stream.length', 'stream_len')},
                        {at('quic.padding_length', 'padding')}) AS length_bytes,
               {at('quic.stream.stream_id', 'stream')} AS stream_id,
               CASE WHEN f.o_stream IS NOT NULL THEN (f.type_value & 1) = 1 END AS fin,
               coalesce({at('quic.nci.sequence', 'nci')}, {at('quic.rci.sequence', 'rci')},
                        {at('quic.af.sequence_number', 'af')}) AS sequence_number,
               {at('quic.af.ack_eliciting_threshold', 'af')} AS ack_eliciting_threshold,
               {at('quic.af.request_max_ack_delay', 'af', 'DOUBLE')} / 1000.0 AS request_max_ack_delay_ms,
               CASE WHEN f.o_cc IS NOT NULL THEN json_object(
                        'error_space', 'transport',
                        'error_code', {at('quic.cc.error_code', 'cc')},
                        'trigger_frame_type', {at('quic.cc.frame_type', 'cc')})
                    WHEN f.o_cc_app IS NOT NULL THEN json_object(
                        'error_space', 'application',
                        'error_code', {at('quic.cc.error_code.app', 'cc_app')})
               END AS cc_details
        FROM cf0 f JOIN cd d USING (frame_number)""")
    # ACK ranges (RFC 9000 §19.3.1): the first range ends at Largest Acknowledged; each
    # further range lies Gap + 2 below the smallest of the previous one.
    con.execute("""CREATE OR REPLACE TEMP TABLE ack_ranges AS
        WITH a AS (SELECT frame_number, fi, largest, first_range, coalesce(range_count, 0) AS range_count,
                          (1 + coalesce(sum(coalesce(range_count, 0)) OVER (PARTITION BY frame_number ORDER BY fi
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::BIGINT AS pair_start
                   FROM cf1 WHERE o_ack IS NOT NULL),
             extra AS (SELECT a.frame_number, a.fi, a.largest - a.first_range AS low0, k,
                              TRY_CAST(d.l_quic_ack_gap[a.pair_start + k - 1] AS BIGINT) AS gap,
                              TRY_CAST(d.l_quic_ack_ack_range[a.pair_start + k - 1] AS BIGINT) AS len
                       FROM (SELECT *, unnest(range(1, range_count + 1)) AS k FROM a WHERE range_count > 0) a
                       JOIN cd d USING (frame_number)),
             lows AS (SELECT frame_number, fi, len,
                             low0 - sum(gap + 2 + len) OVER (PARTITION BY frame_number, fi ORDER BY k) AS low
                      FROM extra)
        SELECT frame_number, fi, list([low, high] ORDER BY low) AS ranges
        FROM (SELECT frame_number, fi, largest - first_range AS low, largest AS high FROM a
              UNION ALL SELECT frame_number, fi, low, low + len FROM lows)
        GROUP BY frame_number, fi""")


def normalize(con: duckdb.DuckDBPyConnection, file_id: int, first_connection_id: int,
              staged: StagedCapture) -> None:
    """Insert the rows of the staged capture into the store tables (caller holds the transaction).

    Sets ``staged.events`` (QUIC packets stored) and appends warnings about packets that could
    not be decrypted and GSO super-frames.
    """
    _stage_datagrams(con)
    _stage_packets(con)
    _assign_connections(con, first_connection_id)
    _detect_gso(con)
    _stage_frames(con)

    # Packets kept: everything except the unparsable remainder of GSO super-frames.
    con.execute("""CREATE OR REPLACE TEMP TABLE kept AS
        SELECT cp.*, row_number() OVER (PARTITION BY connection_id ORDER BY frame_number, idx) - 1 AS event_index
        FROM cp WHERE NOT (undecrypted AND frame_number IN (SELECT frame_number FROM gso))""")
    con.execute("""CREATE OR REPLACE TEMP TABLE cstart AS
        SELECT connection_id, min(epoch_s) AS first_s, max(epoch_s) AS last_s, count(*) AS packets
        FROM kept GROUP BY connection_id""")

    # Transport parameters: the first ClientHello (client) and EncryptedExtensions (server) seen.
    tp_any = " OR ".join(f"tp_{n} IS NOT NULL" for n in PARAMETER_FIELDS)
    tp_json = ", ".join(
        f"struct_pack(k := '{n}', v := coalesce(TRY_CAST(tp_{n} AS BIGINT)::JSON, to_json(tp_{n})))"
        for n in PARAMETER_FIELDS)
    con.execute(f"""INSERT INTO transport_parameters
        SELECT connection_id, CASE WHEN sender = 'client' THEN 'local' ELSE 'remote' END, sender,
               ((epoch_s - first_s) * 1000)::DOUBLE,
               TRY_CAST(tp_max_ack_delay AS DOUBLE),
               TRY_CAST(tp_ack_delay_exponent AS INTEGER),
               TRY_CAST(tp_min_ack_delay AS DOUBLE) / 1000.0,
               TRY_CAST(tp_initial_max_data AS BIGINT),
               TRY_CAST(tp_max_udp_payload_size AS BIGINT),
               TRY_CAST(tp_max_idle_timeout AS DOUBLE),
               TRY_CAST(tp_active_connection_id_limit AS BIGINT),
               to_json([map_from_entries(list_filter([{tp_json}], lambda x: x.v IS NOT NULL))])
        FROM (SELECT d.*, p.connection_id, p.sender,
                     row_number() OVER (PARTITION BY p.connection_id, p.sender ORDER BY d.frame_number) AS nth
              FROM cd d JOIN (SELECT frame_number, any_value(connection_id) AS connection_id,
                                     any_value(sender) AS sender FROM cp GROUP BY frame_number) p
                USING (frame_number)
              WHERE {tp_any})
        JOIN cstart USING (connection_id)
        WHERE nth = 1""")

    con.execute("""INSERT INTO frames
        SELECT k.connection_id, k.event_index, f.position, f.frame_type,
               CASE WHEN f.frame_type = 'ack' THEN f.ack_delay_raw
                    * pow(2, CASE WHEN k.packet_type = 'initial' THEN 3
                                  ELSE coalesce(tp.ack_delay_exponent, 3) END) / 1000.0 END,
               f.ack_delay_raw, f.largest, r.ranges, f.ecn_ce, f.offset_bytes, f.length_bytes,
               f.stream_id, f.fin, f.sequence_number, f.ack_eliciting_threshold,
               f.request_max_ack_delay_ms, NULL,
               CASE WHEN f.frame_type NOT IN ('ack', 'padding', 'ping', 'crypto', 'stream') THEN
                    json_merge_patch(json_object('frame_type_value', f.type_value), coalesce(f.cc_details, '{}'))
               END
        FROM cf1 f
        JOIN kept k USING (frame_number, idx)
        LEFT JOIN ack_ranges r USING (frame_number, fi)
        LEFT JOIN transport_parameters tp ON tp.connection_id = k.connection_id AND tp.endpoint = k.sender""")

    con.execute("""INSERT INTO packets
        SELECT k.connection_id, k.event_index, ((k.epoch_s - c.first_s) * 1000)::DOUBLE,
               (k.epoch_s * 1000)::DOUBLE,
               CASE WHEN k.sender = 'client' THEN 'sent' ELSE 'received' END, k.sender,
               k.packet_type, """ + _SPACE + """, k.packet_number, k.size_bytes, k.frame_number,
               CASE WHEN k.frame_count > 0 THEN fc.eliciting END, k.frame_count
        FROM kept k JOIN cstart c USING (connection_id)
        LEFT JOIN (SELECT frame_number, idx,
                          bool_or(frame_type NOT IN ('ack', 'padding', 'connection_close')) AS eliciting
                   FROM cf1 GROUP BY ALL) fc USING (frame_number, idx)""")

    con.execute(f"""INSERT INTO connections
        SELECT ck.connection_id, {file_id}, ck.trace_index, NULL, 'network', 'client', 'tshark',
               od.odcid, sn.server_name, (c.first_s * 1000)::DOUBLE, (c.first_s * 1000)::DOUBLE,
               ((c.last_s - c.first_s) * 1000)::DOUBLE, c.packets, []
        FROM ck JOIN cstart c USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(dcid, (frame_number, idx)) AS odcid FROM cp
                   WHERE sender = 'client' AND packet_type = 'initial' GROUP BY ALL) od USING (connection_id)
        LEFT JOIN (SELECT p.connection_id, arg_min(d.server_name, d.frame_number) AS server_name
                   FROM cd d JOIN (SELECT DISTINCT frame_number, connection_id FROM cp) p USING (frame_number)
                   WHERE d.server_name IS NOT NULL GROUP BY ALL) sn USING (connection_id)""")

    con.execute(f"""INSERT INTO capture_issues
        SELECT {file_id}, connection_id, frame_number, (epoch_s * 1000)::DOUBLE, 'gso_superframe', NULL,
               udp_payload_bytes,
               'UDP payload of ' || udp_payload_bytes || ' bytes from ' || replace(src_ep, '#', ' port ')
               || ': ' || decrypted || ' of ' || parsed || ' QUIC packets tshark parsed decrypted; the rest could not be split'
        FROM gso
        UNION ALL
        SELECT {file_id}, connection_id, frame_number, (epoch_s * 1000)::DOUBLE, 'not_decrypted', packet_type,
               size_bytes, CASE WHEN decryption_failed THEN 'decryption failed' ELSE 'no keys' END
        FROM kept WHERE undecrypted""")

    con.execute("""INSERT INTO capture_connections
        SELECT ck.connection_id,
               split_part(cl.ep, '#', 1), TRY_CAST(split_part(cl.ep, '#', 2) AS INTEGER),
               split_part(sv.ep, '#', 1), TRY_CAST(split_part(sv.ep, '#', 2) AS INTEGER),
               v.version_text, ck.tshark_connection,
               coalesce(n.datagrams, 0), coalesce(n.not_decrypted, 0), coalesce(g.superframes, 0)
        FROM ck JOIN cstart USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(src_ep, frame_number) AS ep FROM cp
                   WHERE sender = 'client' GROUP BY ALL) cl USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(src_ep, frame_number) AS ep FROM cp
                   WHERE sender = 'server' GROUP BY ALL) sv USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(version_text, frame_number) AS version_text FROM cp
                   WHERE header_form = 1 AND version <> 0 GROUP BY ALL) v USING (connection_id)
        LEFT JOIN (SELECT connection_id, count(DISTINCT frame_number) AS datagrams,
                          count(*) FILTER (WHERE undecrypted) AS not_decrypted FROM kept GROUP BY ALL) n
          USING (connection_id)
        LEFT JOIN (SELECT connection_id, count(*) AS superframes FROM gso GROUP BY ALL) g USING (connection_id)""")

    staged.events = con.execute("SELECT count(*) FROM kept").fetchall()[0][0]
    staged.warnings.extend(_warnings(con, staged))
    con.execute("""INSERT INTO capture_files VALUES ($file_id, $version, $secrets, $keylog, $keylog_sha256,
        $ports, $frames, (SELECT count(DISTINCT frame_number) FROM kept), $packets,
        (SELECT count(*) FROM kept WHERE undecrypted), (SELECT count(*) FROM gso))""",
                {"file_id": file_id, "version": staged.tshark_version, "secrets": staged.secrets,
                 "keylog": staged.keylog, "keylog_sha256": staged.keylog_sha256,
                 "ports": staged.decode_as_ports, "frames": staged.frames, "packets": staged.events})
    for table in ("cd", "cp0", "cp1", "dconn", "ck", "cside", "cp", "gso", "cf0", "cf1", "ack_ranges",
                  "kept", "cstart", "dg"):
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _warnings(con, staged: StagedCapture) -> list[str]:
    warnings = []
    path = staged.path
    total = staged.events
    if total == 0:
        return warnings
    by_type = con.execute("""SELECT packet_type, count(*) FROM kept WHERE undecrypted
                             GROUP BY ALL ORDER BY 2 DESC""").fetchall()
    if by_type:
        n = sum(c for _, c in by_type)
        listed = ", ".join(f"{t} {c}" for t, c in by_type)
        if staged.secrets == "none":
            hint = ("no TLS key log found (only Initial packets decrypt without one): pass --keylog FILE, "
                    "put <capture>.keys or keys.log beside the capture, or embed the secrets "
                    "(editcap --inject-secrets tls,KEYLOG)")
        else:
            hint = (f"the secrets ({staged.keylog or 'Decryption Secrets Block'}) do not cover them")
        warnings.append(f"{path}: {n} of {total} QUIC packets not decrypted ({listed}); {hint}")
    gso = con.execute("""SELECT count(*), max(udp_payload_bytes), string_agg(DISTINCT replace(src_ep, '#', ' port '), ', ')
                         FROM gso""").fetchall()[0]
    if gso[0]:
        warnings.append(f"{path}: {gso[0]} UDP datagrams of up to {gso[1]} bytes (sent by {gso[2]}) are UDP GSO "
                        f"super-frames that tshark cannot split: the packets inside them are missing; "
                        f"{GSO_REMEDY}")
    return warnings
