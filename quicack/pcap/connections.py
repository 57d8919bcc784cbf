"""Which connection, and which side of it, each captured QUIC datagram belongs to.

Theory of operation: a capture is a network vantage point: its datagrams are grouped into
connections over the whole capture, at datagram granularity, once staging is done
(``c_dgram``, :mod:`quicack.pcap.staging`).  A datagram belongs to tshark's connection number
(tshark follows connection IDs, including new ones and Retry), else to the connection already
seen on the same address/port 4-tuple, else to one connection per 4-tuple.  A connection starts
with the first CRYPTO bytes of an Initial; a tshark connection that does not start one (tshark
met a connection ID it could not tie to the handshake, e.g. without keys) continues the
connection that started last on the same 4-tuple.  The server is the side that sends the
ServerHello or a Retry (else the one not sending the ClientHello, else the one not sending the
first Initial, else the lower port).  :func:`assign` leaves two temporary tables for
:mod:`quicack.pcap.normalize`: ``ck`` (the connections: id, trace index, tshark connection)
and ``dmap`` (every QUIC datagram: its connection and sender).
"""

from __future__ import annotations


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
SENDER = """CASE WHEN server_ep IS NOT NULL THEN CASE WHEN src_ep = server_ep THEN 'server' ELSE 'client' END
                    WHEN client_ep IS NOT NULL THEN CASE WHEN src_ep = client_ep THEN 'client' ELSE 'server' END
                    WHEN first_initial_ep IS NOT NULL THEN CASE WHEN src_ep = first_initial_ep THEN 'client' ELSE 'server' END
                    WHEN src_port > dst_port THEN 'client' ELSE 'server' END"""


def assign(con, first_connection_id: int, per_tshark_connection: bool = True) -> None:
    """``dmap``: every QUIC datagram → connection_id and sender; ``ck``: the connections.

    When tshark numbered every QUIC datagram (nearly always: it follows connection IDs) the work
    is done per tshark connection (:func:`assign_per_tshark_connection`), else per datagram
    (below); ``per_tshark_connection=False`` forces the latter (tests hold the two to the same
    outcome)."""
    if per_tshark_connection and assign_per_tshark_connection(con, first_connection_id):
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
        SELECT d.frame_number, d.connection_id, d.epoch_ns, d.src_ep, d.gso, {SENDER} AS sender
        FROM d JOIN s USING (connection_id)""")
    con.execute("DROP TABLE dconn")


def assign_per_tshark_connection(con, first_connection_id: int) -> bool:
    """:func:`assign` when every QUIC datagram has a tshark connection number: what
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
        SELECT d.frame_number, m.connection_id, d.epoch_ns, d.src_ep, d.gso, {SENDER} AS sender
        FROM c_dgram d JOIN tcmap m USING (tshark_connection) WHERE d.packets > 0 AND d.split_ok""")
    con.execute("DROP TABLE tcs; DROP TABLE tcmap")
    return True
