"""The ACK-policy experiments' part of a report: the seeds' Table III per policy, return link and
loss, and per policy the return packet sizes, the forward rate and ACK rate over time, and cwnd.

Theory of operation: everything comes from ``ack_policy_runs`` (one row per attempt,
:mod:`quicack.lab.ackpolicyruns`) and the rows it keys — the relay's datagrams of the attempt's
flow (``relay_datagrams``), the server's qlog through ``testbed_runs.server_connection_id``.
Aggregation happens in DuckDB; figures are plotly.

- **Table III** (seed 001's: per implementation and ACK ratio, the return bytes of a 10 MB
  transfer and their share of the forward bytes): per experiment, path, return rate, forward loss
  and policy — attempts, median forward and return bytes, the return share (return ÷ forward
  bytes, %, as the seed gives it: "the percentage of the total 10 MB sent on the forward path"),
  median ACK-only return bytes, return packets, download time and forward rate (the response's,
  from its first to its last byte), and the forward rate of the second half of the forward bytes
  at the relay (Mbit/s of UDP payload from the departure of the datagram that passes half of them
  to the last: past slow start, the rate the return path let the sender keep).
- **What the server saw of each client** (any client, not only quicack's): whether it advertised
  ``min_ack_delay``, the ACK_FREQUENCY frames the server sent, the ACK ratio in the server's qlog.
- **Return packet size CDF**: the client's datagrams at the relay, as IPv4 packets (UDP payload +
  28 bytes of IPv4 and UDP header, the sizes seed 001's Figure 4 counts: "smallest QUIC ACK 51 B")
  per policy and return rate, all repetitions pooled.
- **Over time** (per path and return rate, the first completed repetition of each policy): the
  forward rate in Mbit/s and the client's datagrams per second, in 1 s bins of the relay's
  departure (forward) and arrival (return) times, counted from the attempt's first datagram.
- **cwnd**: the server's logged congestion window (aioquic's ``recovery:metrics_updated``) over
  the same time, for the same attempts.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from quicack.report.page import Page, esc, has_table
from quicack.store.database import Store

#: IPv4 (20) + UDP (8) header bytes of a datagram
IPV4_UDP_BYTES = 28
BIN_S = 1.0
CDF_POINTS = 101

_TABLE_SQL = """
WITH out AS (
    SELECT a.experiment, a.scenario, a.server, a.client, a.one_way_delay_ms, a.repetition, d.size_bytes,
           d.time_out_epoch_ms AS t,
           sum(d.size_bytes) OVER (PARTITION BY d.relay_run_id, d.flow ORDER BY d.time_out_epoch_ms, d.arrival_index)
               AS cumulative,
           sum(d.size_bytes) OVER (PARTITION BY d.relay_run_id, d.flow) AS total
    FROM ack_policy_runs a JOIN relay_datagrams d ON d.relay_run_id = a.relay_run_id AND d.flow = a.relay_flow
    WHERE d.direction = 'to_client' AND d.time_out_epoch_ms IS NOT NULL
), half AS (
    SELECT experiment, scenario, server, client, one_way_delay_ms, repetition,
           (sum(size_bytes) FILTER (WHERE cumulative > total / 2)) * 8 / 1000.0
               / (max(t) - min(t) FILTER (WHERE cumulative > total / 2)) AS second_half_mbps
    FROM out GROUP BY ALL
)
SELECT experiment, path, return_kbps, forward_loss_pct, ack_policy, count(*) AS attempts,
       count(download_s) AS completed,
       median(forward_bytes) AS forward_bytes, median(return_bytes) AS return_bytes,
       median(100.0 * return_bytes / forward_bytes) AS return_share_pct,
       median(return_ack_only_bytes) AS ack_only_bytes, median(return_packets) AS return_packets,
       median(download_s) AS download_s, median(forward_mbps) AS forward_mbps,
       median(second_half_mbps) AS forward_mbps_second_half
FROM ack_policy_runs LEFT JOIN half USING (experiment, scenario, server, client, one_way_delay_ms, repetition)
GROUP BY ALL
ORDER BY experiment, path, return_kbps DESC NULLS FIRST, forward_loss_pct, ack_policy
"""

_SIZES_SQL = f"""
SELECT *, unnest(q) AS bytes, unnest($qs) AS p FROM (
    SELECT a.experiment, a.path, a.return_kbps, a.forward_loss_pct, a.ack_policy,
           quantile_disc(d.size_bytes + {IPV4_UDP_BYTES}, $qs) AS q, count(*) AS n
    FROM ack_policy_runs a JOIN relay_datagrams d ON d.relay_run_id = a.relay_run_id AND d.flow = a.relay_flow
    WHERE d.direction = 'to_server'
    GROUP BY a.experiment, a.path, a.return_kbps, a.forward_loss_pct, a.ack_policy)
ORDER BY experiment, path, return_kbps DESC NULLS FIRST, forward_loss_pct, ack_policy, p
"""

#: the first completed repetition of each (experiment, path, return rate, loss, policy)
_FIRST_SQL = """
SELECT a.*, t.server_connection_id FROM ack_policy_runs a JOIN testbed_runs t USING (experiment, scenario, server,
       client, one_way_delay_ms, repetition)
WHERE a.download_s IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY a.experiment, a.path, a.return_kbps, a.forward_loss_pct, a.ack_policy
                           ORDER BY a.repetition) = 1
ORDER BY a.experiment, a.path, a.return_kbps DESC NULLS FIRST, a.forward_loss_pct, a.ack_policy
"""

_RATES_SQL = f"""
WITH d AS (SELECT direction, size_bytes, coalesce(time_out_epoch_ms, time_in_epoch_ms) AS out_ms, time_in_epoch_ms
           FROM relay_datagrams WHERE relay_run_id = $run AND flow = $flow),
     start AS (SELECT min(time_in_epoch_ms) AS t0 FROM d)
SELECT floor(((CASE WHEN direction = 'to_client' THEN out_ms ELSE time_in_epoch_ms END) - t0) / 1000.0 / {BIN_S})
           * {BIN_S} AS t_s,
       sum(size_bytes) FILTER (WHERE direction = 'to_client' AND out_ms IS NOT NULL) * 8 / 1e6 / {BIN_S} AS forward_mbps,
       count(*) FILTER (WHERE direction = 'to_server') / {BIN_S} AS return_per_s
FROM d, start GROUP BY ALL ORDER BY t_s
"""


#: per attempt of an ACK-policy experiment (any client), from the server's qlog: whether the client
#: advertised min_ack_delay, the ACK_FREQUENCY frames the server sent, the ACK ratio it saw
_CLIENTS_SQL = """
WITH attempts AS (
    SELECT t.experiment, t.scenario, t.client, t.server_connection_id AS cid FROM testbed_runs t
    WHERE t.experiment IN (SELECT experiment FROM ack_policy_runs) AND t.server_connection_id IS NOT NULL
), per AS (
    SELECT a.experiment, a.scenario, a.client,
           (SELECT max(min_ack_delay_ms) FROM transport_parameters p
            WHERE p.connection_id = a.cid AND p.owner = 'remote') AS client_min_ack_delay_ms,
           (SELECT count(*) FROM frames f JOIN packets k USING (connection_id, event_index)
            WHERE f.connection_id = a.cid AND k.direction = 'sent' AND f.frame_type = 'ack_frequency') AS requests,
           (SELECT count(*) FROM packets k WHERE k.connection_id = a.cid AND k.direction = 'sent'
            AND k.packet_type = '1RTT' AND k.ack_eliciting) AS eliciting,
           (SELECT count(DISTINCT f.event_index) FROM frames f JOIN packets k USING (connection_id, event_index)
            WHERE f.connection_id = a.cid AND k.direction = 'received' AND k.packet_type = '1RTT'
            AND f.frame_type = 'ack') AS acks
    FROM attempts a
)
SELECT experiment, scenario, client, count(*) AS attempts,
       count(client_min_ack_delay_ms) AS advertised_min_ack_delay, median(requests) AS ack_frequency_frames,
       median(eliciting / nullif(acks, 0)) AS ack_ratio_seen_by_server
FROM per GROUP BY ALL ORDER BY experiment, scenario, client
"""


def has_ack_policy_runs(store: Store) -> bool:
    return has_table(store, "ack_policy_runs") and store.sql("SELECT count(*) AS n FROM ack_policy_runs")["n"][0] > 0


def _label(row: dict) -> str:
    rate = "unlimited" if row["return_kbps"] is None else f"{row['return_kbps']:g} kbit/s"
    loss = f", {row['forward_loss_pct']:g} % loss" if row["forward_loss_pct"] else ""
    return f"{row['path']}, return {rate}{loss}"


def ack_experiment_sections(store: Store, page: Page) -> None:
    """Write the ACK-policy experiment sections (the store holds ack_policy_runs rows)."""
    page.section("ack-experiments", "ACK-policy experiments")
    page.text("Attempts of <code>quicack testbed run</code> whose scenario names the client's ACK policy "
              "(<code>ack_policy_runs</code>), seed 001's Table III: bytes are UDP payload at the relay (return: "
              "everything the client sent; ACK-only: datagrams of ACK and PADDING frames only, per the client's "
              "qlog), the return share is return ÷ forward bytes, values are medians over the attempts.")
    page.table(store.sql(_TABLE_SQL))
    page.section("ack-experiments-clients", "What the server saw of each client", 3)
    page.text("Every attempt of these experiments, any client, from the server's qlog: whether the client "
              "advertised <code>min_ack_delay</code> (its support of ACK_FREQUENCY), the ACK_FREQUENCY frames "
              "the server sent (quicack serve asks only a client that advertised it), and the ACK ratio the "
              "server saw (its ack-eliciting 1-RTT packets per 1-RTT packet with an ACK it received); medians.")
    page.table(store.sql(_CLIENTS_SQL))
    qs = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
    sizes = store.sql(_SIZES_SQL, {"qs": qs})
    page.section("ack-experiments-sizes", "Return packet sizes", 3)
    fig = go.Figure()
    for key, part in sizes.group_by(["experiment", "path", "return_kbps", "forward_loss_pct", "ack_policy"],
                                    maintain_order=True):
        row = part.row(0, named=True)
        fig.add_scatter(x=part["bytes"].to_list(), y=part["p"].to_list(), mode="lines", line=dict(shape="hv"),
                        name=esc(f"{row['ack_policy']} ({_label(row)}; n={row['n']})"))
    fig.update_layout(title="Return-path packet size (IPv4: UDP payload + 28 bytes)", xaxis_title="bytes",
                      yaxis_title="fraction of the client's datagrams", xaxis_type="log")
    page.figure(fig)
    first = store.sql(_FIRST_SQL)
    for i, ((experiment, *_), part) in enumerate(first.group_by(
            ["experiment", "path", "return_kbps", "forward_loss_pct"], maintain_order=True)):
        label = _label(part.row(0, named=True))
        page.section(f"ack-experiments-{i}", f"{experiment}: {label}", 3)
        page.figure(_over_time(store, part, label), height=420)
        cwnd = _cwnd(store, part, label)
        if cwnd is not None:
            page.figure(cwnd)


def _over_time(store: Store, runs: pl.DataFrame, label: str) -> go.Figure:
    fig = go.Figure()
    for row in runs.iter_rows(named=True):
        rates = store.sql(_RATES_SQL, {"run": row["relay_run_id"], "flow": row["relay_flow"]})
        fig.add_scatter(x=rates["t_s"].to_list(), y=rates["forward_mbps"].to_list(), mode="lines",
                        name=esc(f"{row['ack_policy']}: forward Mbit/s"), line=dict(shape="hv"))
        fig.add_scatter(x=rates["t_s"].to_list(), y=rates["return_per_s"].to_list(), mode="lines", yaxis="y2",
                        name=esc(f"{row['ack_policy']}: return datagrams/s"), line=dict(shape="hv", dash="dot"))
    fig.update_layout(title=esc(f"Forward rate and return datagrams per second ({label}; {BIN_S:g} s bins, "
                                "first completed repetition)"),
                      xaxis_title="s after the attempt's first datagram", yaxis_title="forward Mbit/s",
                      yaxis2=dict(title="return datagrams per second", overlaying="y", side="right", rangemode="tozero",
                                  automargin=True),
                      yaxis=dict(rangemode="tozero"), legend=dict(orientation="h", y=-0.2))
    return fig


def _cwnd(store: Store, runs: pl.DataFrame, label: str) -> go.Figure | None:
    fig = go.Figure()
    for row in runs.iter_rows(named=True):
        if row["server_connection_id"] is None:
            continue
        m = store.sql("""SELECT time_ms / 1000.0 AS t_s, congestion_window_bytes FROM logged_metrics
                         WHERE connection_id = $cid AND congestion_window_bytes IS NOT NULL ORDER BY event_index""",
                      {"cid": row["server_connection_id"]})
        if m.height:
            fig.add_scatter(x=m["t_s"].to_list(), y=m["congestion_window_bytes"].to_list(), mode="lines",
                            name=esc(row["ack_policy"]), line=dict(shape="hv"))
    if not fig.data:
        return None
    fig.update_layout(title=esc(f"Server congestion window ({label}; first completed repetition)"),
                      xaxis_title="s in the server's qlog", yaxis_title="cwnd bytes")
    return fig
