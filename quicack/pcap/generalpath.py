"""The general path of capture staging: tshark's rows to datagram, packet and frame rows, in SQL.

Theory of operation: any datagram can be staged here (DuckDB), whatever it holds; the fast path
(:mod:`quicack.pcap.fastpath`, Arrow) takes the usual one-packet datagrams and leaves the rest
(:class:`quicack.pcap.staging.Staging` holds them back and hands them over a few at a time).
Every list tshark wrote is cut with SQL, batch by batch, into the rows of the temporary tables
(:func:`quicack.pcap.staging.begin`), through a few tables of the batch (``cd_b``, ``cp_b``,
``cf_b``: :data:`TABLES`):

1. *Datagrams* (``c_dgram``): addresses, ports, time, what the datagram tells about who is
   client and server, GSO suspicion, transport parameters (``c_tp``).
2. *Packets* (``c_pkt``): datagram × packet index.  A datagram with one packet has one value per
   field.  With several, a field's value for packet *i* sits after the occurrences of the packets
   before it, counted by the Lua layout (``quicack_layout``, see :mod:`quicack.pcap.tshark`);
   without a layout the datagram cannot be cut (``split_ok`` false).
3. *Frames* (``c_frame``): packet × frame index.  Per-frame fields (ACK, CRYPTO, STREAM, …) are
   lists in frame order over the whole datagram, so the k-th ACK frame of a datagram takes the
   k-th ``largest_acknowledged`` (the families: :data:`quicack.pcap.fields.FAMILIES`); ACK ranges
   take ``ack_range_count`` gap/range pairs each.

UDP GSO: a sender that hands the kernel one buffer of several equal-size datagrams is captured on
loopback as one "super-frame".  tshark can split the long-header packets by their Length field
but a short-header packet swallows the rest, and its decryption fails.  A datagram larger than a
1500-byte MTU allows holding a packet that did not decrypt (or two long-header packets of one
type) is marked ``gso`` (:mod:`quicack.pcap.normalize` reports it).
"""

from __future__ import annotations

from quicack.pcap.fields import (FAMILIES, FRAME_FIELDS, FRAME_NAMES, FRAME_VALUES, LONG_TYPES_V1, LONG_TYPES_V2,
                                 MAX_SINGLE_DATAGRAM_PAYLOAD, PACKET_FIELDS, PARAMETER_FIELDS, PLAIN_FRAME_TYPES,
                                 column)

#: The tables of one batch, replaced by the next.
TABLES = ("cd_b", "cp_b0", "cp_b", "cf_g", "cf_b")


def _case(value: str, names: dict[int, str]) -> str:
    return f"CASE {value} {' '.join(f'WHEN {k} THEN {chr(39)}{v}{chr(39)}' for k, v in names.items())} END"


_LONG_TYPE = f"""CASE WHEN header_form = 0 THEN '1RTT'
    WHEN version = 0 THEN 'version_negotiation'
    WHEN long_type IS NOT NULL THEN {_case('long_type', LONG_TYPES_V1)}
    WHEN long_type_v2 IS NOT NULL THEN {_case('long_type_v2', LONG_TYPES_V2)}
    ELSE 'unknown' END"""


_FAMILIES = {name: f"type_value IN {types}" if len(types) > 1 else f"type_value = {types[0]}"
             for name, types in FAMILIES.items()}


def _last(col: str) -> str:
    return f"list_last(string_split({col}, ','))"


#: Datagrams quicack reads: UDP, not inside an ICMP error (quicack.pcap.fastpath.udp in Arrow).
_UDP = "udp_srcport IS NOT NULL AND icmp_type IS NULL AND icmpv6_type IS NULL"

#: A datagram with transport parameters (rows of c_tp).
_TP_ANY = " OR ".join(f"tp_{n} IS NOT NULL" for n in PARAMETER_FIELDS)

#: The general path runs without DuckDB's optimizer over at most this many rows: planning its
#: dozen statements costs more than running them unoptimized over a handshake's few datagrams.
UNOPTIMIZED_ROWS = 256


def stage(con, rows: str, count: int | None = None) -> int:
    """Append the datagrams of ``rows`` (SQL over tshark's columns and ``quicack_layout``;
    ``count`` of them if known) to the temporary tables; return how many of them hold no QUIC
    packet."""
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
    return con.execute("SELECT count(*) FROM cd_b WHERE packets = 0").fetchall()[0][0]


def drop(con) -> None:
    """Drop the general path's tables of the last batch."""
    con.execute("; ".join(f"DROP TABLE IF EXISTS {table}" for table in TABLES))


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


