"""From the staged tables of a capture to the store's tables.

Theory of operation: once a capture is staged (``c_dgram``, ``c_tp``, ``c_pkt``, ``c_frame``:
:mod:`quicack.pcap.staging`), its connections are worked out over the whole capture
(:mod:`quicack.pcap.connections`) and :func:`normalize` fills the store tables in SQL, in the
caller's transaction.  Rows follow the qlog network convention with ``flow = 'client'``: client
packets are ``sent``, server packets ``received``; times are relative to each connection's first
packet.  ACK delays are decoded by :mod:`quicack.core.ackdelay` (RFC 9000 §19.3: 2 to the power
of the sender's ack_delay_exponent; 3 in Initial packets, sent before any transport parameter
is known).  Each packet keeps the ``event_index`` numbered while staging, unless a datagram's
packets could not be cut (no Lua layout): then the packets left are numbered again here.

What tshark could not read is listed in ``capture_issues`` and summed up as warnings: packets not
decrypted, malformed datagrams, datagrams that could not be cut, and UDP GSO super-frames — a
datagram larger than a 1500-byte MTU allows holding a packet that did not decrypt, in which a
short-header packet swallowed the datagrams the sender's kernel was to cut it into: the packets
tshark parsed are kept, the unparsable rest is left out of ``packets``.
"""

from __future__ import annotations

import duckdb

from quicack.core.ackdelay import decoded_ms_sql
from quicack.pcap import connections, nativepath
from quicack.pcap.fields import PARAMETER_FIELDS
from quicack.pcap.staging import StagedCapture

GSO_REMEDY = ("capture again with segmentation offload off at the sender: quic-go "
              "QUIC_GO_DISABLE_GSO=true, quinn enable_segmentation_offload(false), ngtcp2 "
              "--max-gso-dgrams=1, or `ethtool -K lo tx-udp-segmentation off` on the capturing host")

_SPACE = """CASE packet_type WHEN 'initial' THEN 'initial' WHEN 'handshake' THEN 'handshake'
    WHEN '0RTT' THEN 'application_data' WHEN '1RTT' THEN 'application_data' END"""

#: Packets kept: everything except the unparsable remainder of GSO super-frames.
_KEPT = "NOT (undecrypted AND gso)"

#: The temporary tables of a staged capture and of its normalization, dropped at the end.
TABLES = ("c_dgram", "c_tp", "c_pkt", "c_frame", "ck", "dmap", "cstart", "pk", "cf")


def _epoch_ms(ns: str) -> str:
    """Nanoseconds since the epoch as milliseconds (DOUBLE: exact to its 0.24 µs resolution)."""
    return f"(({ns} // 1000000)::DOUBLE + ({ns} % 1000000) / 1e6)"


def normalize(con: duckdb.DuckDBPyConnection, file_id: int, first_connection_id: int,
              staged: StagedCapture) -> None:
    """Insert the rows of the staged capture into the store tables (caller holds the transaction).

    Sets ``staged.events`` (QUIC packets stored) and appends warnings about packets that could
    not be decrypted, GSO super-frames and datagrams that could not be split.
    """
    connections.assign(con, first_connection_id)
    unsplit = _packets(con)
    insert_parameters(con)
    insert_events(con)
    insert_datagrams(con)
    _connection_facts(con)
    insert_connections(con, file_id, staged)
    insert_issues(con, file_id)
    malformed, gso = con.execute("""
        SELECT (SELECT count(*) FROM c_dgram JOIN dmap USING (frame_number) WHERE malformed),
               (count(*), max(udp_payload_bytes), string_agg(DISTINCT replace(src_ep, '#', ' port '), ', '))
        FROM c_dgram WHERE gso""").fetchall()[0]
    insert_capture(con, file_id, staged, gso[0])
    by_type = con.execute("""SELECT packet_type, count(*) FROM pk
                             WHERE undecrypted AND NOT gso GROUP BY ALL ORDER BY 2 DESC, 1""").fetchall()
    versions = con.execute("""SELECT string_agg(DISTINCT version_text, ', ') FROM pk
                              WHERE header_form = 1 AND version <> 0""").fetchall()[0][0] if malformed else None
    staged.warnings.extend(warnings(staged, unsplit, malformed, gso, by_type, versions))
    con.execute("; ".join(f"DROP TABLE IF EXISTS {table}" for table in TABLES))


def _packets(con) -> int:
    """``pk``: every packet with its datagram's connection, sender and time; ``cstart``: per
    connection, its first and last packet's time and its counts.  Return how many datagrams
    could not be cut.

    ``event_index`` is a packet's position in the capture, numbered while staging
    (quicack.pcap.fastpath.number_packets) unless a datagram's packets could not be cut (their
    numbers are left out: numbered again here)."""
    unsplit = con.execute("SELECT count(*) FROM c_dgram WHERE packets > 0 AND NOT split_ok").fetchall()[0][0]
    numbered = ("(SELECT * REPLACE (row_number() OVER (ORDER BY frame_number, idx) - 1 AS event_index) FROM c_pkt)"
                if unsplit else "c_pkt")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE pk AS
        SELECT p.*, m.connection_id, m.sender, m.epoch_ns, m.gso
        FROM {numbered} p JOIN dmap m USING (frame_number)""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE cstart AS
        SELECT connection_id, min(epoch_ns) AS first_ns, max(epoch_ns) AS last_ns, count(*) AS packets,
               count(DISTINCT frame_number) AS datagrams, count(*) FILTER (WHERE undecrypted) AS not_decrypted
        FROM pk WHERE {_KEPT} GROUP BY connection_id""")
    return unsplit


def insert_parameters(con, tp: str = "c_tp", dmap: str = "dmap") -> None:
    """Transport parameters: the first ClientHello (client) and EncryptedExtensions (server) seen
    (``tp``: the staged parameters, ``dmap``: their datagrams' connection, sender and time)."""
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
              FROM {tp} d JOIN {dmap} m USING (frame_number))
        JOIN cstart USING (connection_id)
        WHERE nth = 1""")



def insert_events(con, pk: str = "pk", frame: str = "c_frame", cstart: str = "cstart",
                  tp: str = "transport_parameters") -> None:
    """The frames and packets tables (the frames' ACK delays decoded with the sender's exponent)
    of the packets ``pk`` (with their connection, sender, time), their frames ``frame``, the
    connections' first times ``cstart`` and their transport parameters ``tp``."""
    con.execute(f"""INSERT INTO frames
        SELECT p.connection_id, p.event_index, f.position, f.frame_type,
               CASE WHEN f.frame_type = 'ack' THEN {decoded_ms_sql("f.ack_delay_raw", "tp.ack_delay_exponent", "f.packet_type")} END,
               f.ack_delay_raw, f.largest, f.ranges, f.ecn_ce, f.offset_bytes, f.length_bytes,
               f.stream_id, f.fin, f.sequence_number, f.ack_eliciting_threshold,
               f.request_max_ack_delay_ms, NULL, f.details
        FROM {frame} f JOIN {pk} p USING (frame_number, idx)
        LEFT JOIN {tp} tp ON tp.connection_id = p.connection_id AND tp.endpoint = p.sender""")

    con.execute(f"""INSERT INTO packets
        SELECT p.connection_id, p.event_index, (p.epoch_ns - c.first_ns) / 1e6, {_epoch_ms('p.epoch_ns')},
               CASE WHEN p.sender = 'client' THEN 'sent' ELSE 'received' END, p.sender,
               p.packet_type, {_SPACE.replace('packet_type', 'p.packet_type')},
               -- a payload that did not decrypt does not vouch for the header protection
               -- removal either (wrong Initial keys give a random packet number)
               CASE WHEN NOT p.undecrypted THEN p.packet_number END, p.size_bytes,
               p.frame_number, p.eliciting, p.frame_count
        FROM {pk} p JOIN {cstart} c USING (connection_id)
        WHERE {_KEPT}""")


def insert_datagrams(con, dgram: str = "c_dgram", dmap: str = "dmap", cstart: str = "cstart",
                     pkt: str | None = "c_pkt") -> None:
    """The datagrams table: each datagram's whole UDP payload (RFC 9000 §8.1 counts it all,
    padding and coalesced packets included).  GSO super-frames are left out: their size is
    several datagrams'.  The packets are counted per frame from ``pkt``, or, if None, taken
    from the datagrams' own ``packets`` and ``packet_types`` (the native reader's)."""
    # (one row per captured frame in c_dgram and dmap: the packets are counted per frame first)
    counted = ("""LEFT JOIN (SELECT frame_number, count(idx) AS n, string_agg(packet_type, ',' ORDER BY idx) AS types
                   FROM {pkt} GROUP BY frame_number) p USING (frame_number)""".format(pkt=pkt) if pkt else "")
    n, types = ("coalesce(p.n, 0)", "coalesce(p.types, '')") if pkt else ("d.packets", "d.packet_types")
    con.execute(f"""INSERT INTO datagrams
        SELECT m.connection_id, d.frame_number, (d.epoch_ns - c.first_ns) / 1e6, m.sender,
               d.udp_payload_bytes, {n}, {types}, 'udp'
        FROM {dgram} d JOIN {dmap} m USING (frame_number) JOIN {cstart} c USING (connection_id)
        {counted}
        WHERE NOT m.gso AND d.udp_payload_bytes IS NOT NULL""")


def _connection_facts(con) -> None:
    """``cf``: per connection, what its connections and capture_connections rows take from its
    packets and datagrams (the first client Initial's DCID, server name, client and server
    endpoints, version; its GSO super-frames)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE cf AS
        SELECT ck.connection_id, od.odcid, sn.server_name, e.client_ep, e.server_ep,
               coalesce(e.superframes, 0) AS superframes, v.version_text
        FROM ck
        LEFT JOIN (SELECT connection_id, arg_min(dcid, (frame_number, idx)) AS odcid
                   FROM pk WHERE sender = 'client' AND packet_type = 'initial' GROUP BY ALL) od USING (connection_id)
        LEFT JOIN (SELECT m.connection_id, arg_min(d.server_name, d.frame_number) AS server_name
                   FROM c_dgram d JOIN dmap m USING (frame_number)
                   WHERE d.server_name IS NOT NULL GROUP BY ALL) sn USING (connection_id)
        LEFT JOIN (SELECT connection_id,
                          arg_min(src_ep, frame_number) FILTER (WHERE sender = 'client') AS client_ep,
                          arg_min(src_ep, frame_number) FILTER (WHERE sender = 'server') AS server_ep,
                          count(*) FILTER (WHERE gso) AS superframes
                   FROM dmap GROUP BY ALL) e USING (connection_id)
        LEFT JOIN (SELECT connection_id, arg_min(version_text, (frame_number, idx)) AS version_text
                   FROM pk WHERE header_form = 1 AND version <> 0 GROUP BY ALL) v USING (connection_id)""")


def insert_connections(con, file_id: int, staged: StagedCapture) -> None:
    """The connections and capture_connections tables (from ``ck``, ``cstart`` and ``cf``); the
    implementation is the reader."""
    reader = "quicack-capture" if staged.tshark_version == nativepath.READER_VERSION else "tshark"
    con.execute(f"""INSERT INTO connections (connection_id, file_id, trace_index, group_id, vantage,
            flow, implementation, odcid, title, reference_epoch_ms, first_event_epoch_ms, duration_ms,
            events, quirks)
        SELECT ck.connection_id, {file_id}, ck.trace_index, NULL, 'network', 'client', '{reader}',
               cf.odcid, cf.server_name, {_epoch_ms('c.first_ns')}, {_epoch_ms('c.first_ns')},
               (c.last_ns - c.first_ns) / 1e6, c.packets, []
        FROM ck JOIN cstart c USING (connection_id) JOIN cf USING (connection_id)""")

    con.execute("""INSERT INTO capture_connections
        SELECT ck.connection_id,
               split_part(cf.client_ep, '#', 1), TRY_CAST(split_part(cf.client_ep, '#', 2) AS INTEGER),
               split_part(cf.server_ep, '#', 1), TRY_CAST(split_part(cf.server_ep, '#', 2) AS INTEGER),
               cf.version_text, ck.tshark_connection, c.datagrams, c.not_decrypted, cf.superframes
        FROM ck JOIN cstart c USING (connection_id) JOIN cf USING (connection_id)""")


def insert_issues(con, file_id: int, dgram: str = "c_dgram", dmap: str = "dmap", pk: str = "pk") -> None:
    """capture_issues: GSO super-frames, packets not decrypted, malformed and unsplit datagrams."""
    con.execute(f"""INSERT INTO capture_issues
        SELECT {file_id}, m.connection_id, d.frame_number, {_epoch_ms('d.epoch_ns')}, 'gso_superframe', NULL,
               d.udp_payload_bytes,
               'UDP payload of ' || d.udp_payload_bytes || ' bytes from ' || replace(d.src_ep, '#', ' port ')
               || ': ' || d.decrypted || ' of ' || d.parsed
               || ' QUIC packets tshark parsed decrypted; the rest could not be split'
        FROM {dgram} d JOIN {dmap} m USING (frame_number) WHERE d.gso
        UNION ALL
        SELECT {file_id}, connection_id, frame_number, {_epoch_ms('epoch_ns')}, 'not_decrypted',
               packet_type, size_bytes, CASE WHEN decryption_failed THEN 'decryption failed' ELSE 'no keys' END
        FROM {pk} WHERE undecrypted AND NOT gso
        UNION ALL
        SELECT {file_id}, m.connection_id, d.frame_number, {_epoch_ms('d.epoch_ns')}, 'malformed', NULL,
               d.udp_payload_bytes, 'tshark: Malformed Packet'
        FROM {dgram} d JOIN {dmap} m USING (frame_number) WHERE d.malformed
        UNION ALL
        SELECT {file_id}, NULL, frame_number, {_epoch_ms('epoch_ns')}, 'unsplit', NULL, udp_payload_bytes,
               'datagram with ' || packets || ' QUIC packets that could not be cut into packets'
        FROM {dgram} WHERE packets > 0 AND NOT split_ok""")


def insert_capture(con, file_id: int, staged: StagedCapture, superframes: int) -> None:
    """The capture_files row (from ``cstart``; sets ``staged.events``)."""
    staged.events, _ = con.execute("""INSERT INTO capture_files
        SELECT $file_id, $version, $secrets, $keylog, $keylog_sha256, $ports, $frames,
               sum(datagrams), sum(packets), sum(not_decrypted), $gso FROM cstart
        RETURNING quic_packets, packets_not_decrypted""",
        {"file_id": file_id, "version": staged.tshark_version, "secrets": staged.secrets,
         "keylog": staged.keylog, "keylog_sha256": staged.keylog_sha256,
         "ports": staged.decode_as_ports, "frames": staged.frames, "gso": int(superframes)}).fetchall()[0]


def warnings(staged: StagedCapture, unsplit: int, malformed: int, gso: tuple, by_type: list[tuple[str, int]],
             versions: str | None) -> list[str]:
    """What the summary says about a capture: packets not decrypted (``by_type``: type, count),
    malformed datagrams (``versions``: the QUIC versions seen), unsplit datagrams, GSO
    super-frames (``gso``: how many, the largest, their senders)."""
    found = []
    path = staged.path
    total = staged.events
    if by_type:
        n = sum(c for _, c in by_type)
        listed = ", ".join(f"{t} {c}" for t, c in by_type)
        if staged.secrets == "none":
            hint = ("no TLS key log found (only Initial packets decrypt without one): pass --keylog FILE, "
                    "put <capture>.keys or keys.log beside the capture, or embed the secrets "
                    "(editcap --inject-secrets tls,KEYLOG)")
        else:
            hint = f"the secrets ({staged.keylog or 'Decryption Secrets Block'}) do not cover them"
        found.append(f"{path}: {n} of {total} QUIC packets not decrypted ({listed}); {hint}")
    if malformed:
        found.append(f"{path}: tshark found {malformed} malformed QUIC datagrams (versions seen: "
                        f"{versions or 'none'}; tshark does not dissect every QUIC version, e.g. drafts older than "
                        "the invariants of RFC 8999): "
                        "their packet types and numbers may be wrong")
    if unsplit:
        found.append(f"{path}: {unsplit} datagrams holding several QUIC packets could not be cut into "
                        "packets and were left out (listed in capture_issues)")
    if gso[0]:
        found.append(f"{path}: {gso[0]} UDP datagrams of up to {gso[1]} bytes (sent by {gso[2]}) are UDP GSO "
                        f"super-frames that tshark cannot split: the packets inside them are missing; "
                        f"{GSO_REMEDY}")
    return found
