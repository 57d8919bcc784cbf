"""The ``ack_policy_runs`` table: per attempt of an ACK-policy experiment, what the policy cost the
return path and what the forward path delivered.

Theory of operation: a scenario that names an ``ack_policy`` (:mod:`quicack.lab.experiment`)
gets one row per attempt of quicack's client, inserted by the runner right after the attempt's
``testbed_runs`` row, from what the store then holds:

- the relay's record of the attempt's flow (``relay_datagrams``): ``forward_bytes`` — the UDP
  payload bytes of every datagram the server sent that reached the relay (``to_client``),
  ``return_bytes`` / ``return_packets`` — the same for the client's datagrams (``to_server``),
  whether the relay then forwarded them or its queue dropped them (what the receiver's policy
  put on the return link);
- the client's own qlog (``packets`` and ``frames`` of its connection), which says what each
  encrypted datagram held: ``return_ack_only_bytes`` are the return bytes of datagrams whose QUIC
  packets carry nothing but ACK and PADDING frames.  The relay knows a datagram's packets only
  by their headers (``quic_types``, e.g. ``initial+handshake``); the client logs every packet it
  sends in the order it builds them, which is the order they leave in (aioquic builds a
  datagram's packets one after another and sends datagrams in order), and nothing is lost between
  the client and the relay on loopback.  So the relay's k-th datagram holds the client's sent
  packets numbered after the packets of the datagrams before it: the datagrams are matched to
  packets by position (:data:`_FIGURES_SQL`); when the client's qlog does not account for every
  packet of the relay's datagrams, there is no split (``return_ack_only_bytes`` NULL);
- the client's timings: ``download_s`` from its first Initial sent to the last response byte
  (``testbed_runs``' clock), ``forward_mbps`` the response bytes over the time from the first to
  the last response byte.

``path``, ``return_kbps`` and ``forward_loss_pct`` describe the scenario (its ``path`` label, its
``rate_to_server_kbps`` and ``loss_to_client``).  The row keeps the attempt's key into
``testbed_runs`` and its relay run and flow into ``relay_datagrams``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: testbed_runs' key, then the row's description, as the runner gives them
KEY = ("experiment", "scenario", "server", "client", "one_way_delay_ms", "repetition")
GIVEN = KEY + ("ack_policy", "path", "return_kbps", "forward_loss_pct", "relay_run_id", "relay_flow")

_FIGURES_SQL = """
WITH client AS (
    SELECT row_number() OVER (ORDER BY p.event_index) AS seq,
           NOT EXISTS (SELECT 1 FROM frames f WHERE f.connection_id = p.connection_id
                       AND f.event_index = p.event_index AND f.frame_type NOT IN ('ack', 'padding')) AS ack_only
    FROM packets p WHERE p.connection_id = $client AND p.direction = 'sent'
), relay AS (
    SELECT direction, datagram_index, size_bytes, len(string_split(quic_types, '+')) AS n,
           sum(len(string_split(quic_types, '+'))) OVER (PARTITION BY direction ORDER BY datagram_index) AS last
    FROM relay_datagrams WHERE relay_run_id = $run AND flow = $flow
), returned AS (
    SELECT r.datagram_index, any_value(r.size_bytes) AS size_bytes, any_value(r.n) AS n,
           count(c.seq) AS matched, coalesce(bool_and(c.ack_only), false) AS ack_only
    FROM relay r LEFT JOIN client c ON c.seq > r.last - r.n AND c.seq <= r.last
    WHERE r.direction = 'to_server' GROUP BY r.datagram_index
)
SELECT (SELECT sum(size_bytes) FROM relay WHERE direction = 'to_client') AS forward_bytes,
       sum(size_bytes) AS return_bytes,
       coalesce(sum(size_bytes) FILTER (WHERE ack_only AND matched = n), 0) AS return_ack_only_bytes,
       count(*) AS return_packets,
       count(*) FILTER (WHERE matched <> n) AS return_unmatched_packets
FROM returned
"""

_COLUMNS = ("forward_bytes", "return_bytes", "return_ack_only_bytes", "return_packets")


def figures(con: duckdb.DuckDBPyConnection, client_connection_id: int | None, relay_run_id: int | None,
            flow: str | None) -> dict:
    """The relay's byte and packet counts of one flow, the return bytes split by the client's
    qlog (module docstring); None figures when the relay has no record of the flow."""
    if relay_run_id is None or flow is None:
        return dict.fromkeys(_COLUMNS)
    row = con.execute(_FIGURES_SQL, {"client": client_connection_id if client_connection_id is not None else -1,
                                     "run": relay_run_id, "flow": flow}).fetchone()
    out = dict(zip(_COLUMNS, row[:4]))
    if not out["return_packets"]:
        return dict.fromkeys(_COLUMNS)
    if client_connection_id is None or row[4]:  # no qlog, or packets it does not account for
        out["return_ack_only_bytes"] = None
    return out


def insert(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Insert one row per attempt: each of ``rows`` has :data:`GIVEN`, the client's
    ``client_connection_id`` (its qlog), ``response_bytes_received``, ``ttfb_ms`` and
    ``download_ms`` (None when it had no response)."""
    columns = GIVEN + _COLUMNS + ("download_s", "forward_mbps")
    values = []
    for row in rows:
        got = figures(con, row.get("client_connection_id"), row["relay_run_id"], row["relay_flow"])
        download_ms, ttfb_ms, size = row.get("download_ms"), row.get("ttfb_ms"), row.get("response_bytes_received")
        mbps = (size * 8 / ((download_ms - ttfb_ms) / 1000.0) / 1e6
                if download_ms is not None and ttfb_ms is not None and size and download_ms > ttfb_ms else None)
        full = {**row, **got, "download_s": download_ms / 1000.0 if download_ms is not None else None,
                "forward_mbps": mbps}
        values.append([full[c] for c in columns])
    if values:
        con.executemany(f"INSERT INTO ack_policy_runs ({', '.join(columns)}) VALUES "
                        f"({', '.join('?' for _ in columns)})", values)
    return len(values)
