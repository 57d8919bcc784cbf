"""The Careful Resume part of a report: what resuming saved, and how each resumed connection moved
through its phases.

Theory of operation: two views of the store.  (1) The speedup, from ``testbed_runs``: per
experiment, scenario and one-way delay, the median time to last byte (``ttlb_ms``) of the
completed attempts of the slow-start server (``serve-wfc``, aioquic's New Reno) and of
``serve-careful-resume``, and their ratio — the seed's "Speedup = t(Slow-Start) ÷ t(Careful
Resume)".  The path comes from the attempt's relay (``relay_runs.config``: the bottleneck rate
towards the client) and its RTT (twice the one-way delay): BDP = rate × RTT, and the transfer is
given in BDPs as the seed does.  (2) The phase timeline of a connection with logged phase changes
(``careful_resume_phases``): its logged congestion window and bytes in flight
(``logged_metrics``), the RTT the store's RFC 9002 replay computed (``rtt_samples``, smoothed and
latest) on a second axis, and one band per phase with the trigger that began it.  Drawn for a
bounded number of connections: in a testbed store the Careful Resume attempt whose TTLB is its
cell's (lower) median, per scenario; otherwise the first connections with phase changes.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from quicack.report.page import Page, esc, has_table
from quicack.store.database import Store

SLOW_START, CAREFUL_RESUME = "serve-wfc", "serve-careful-resume"
#: phase timelines drawn at most, and the logged metrics drawn at most per timeline
MAX_TIMELINES = 16
MAX_POINTS = 3000
PHASE_COLOURS = {"reconnaissance": "#a6cee3", "unvalidated": "#fdbf6f", "validating": "#ffff99",
                 "normal": "#b2df8a", "safe_retreat": "#fb9a99"}


def has_careful_resume(store: Store) -> bool:
    return has_table(store, "careful_resume_phases") and store.sql(
        "SELECT count(*) FROM careful_resume_phases").item() > 0


def resume_sections(store: Store, page: Page) -> None:
    page.section("careful-resume", "Careful Resume: time to last byte and phases")
    page.text("Careful Resume (draft-ietf-tsvwg-careful-resume-24) phase changes as logged "
              "(<code>careful_resume_phase_updated</code>, read into <code>careful_resume_phases</code>).")
    speedups = speedup_table(store)
    if speedups.height:
        page.section("careful-resume-speedup", "Speedup: slow start ÷ Careful Resume (median TTLB)", 3)
        page.table(speedups)
        page.figure(_speedup_figure(speedups))
    for cid, label in _timeline_connections(store):
        fig = timeline_figure(store, cid, label)
        if fig is not None:
            page.section(f"careful-resume-{cid}", f"Connection {cid}: {label}", 3)
            page.figure(fig, height=420)


def speedup_table(store: Store) -> pl.DataFrame:
    """One row per experiment, scenario and one-way delay with both servers' completed attempts."""
    if not has_table(store, "testbed_runs"):
        return pl.DataFrame()
    return store.sql(f"""
        WITH runs AS (
            SELECT t.experiment, t.scenario, t.one_way_delay_ms, t.server, t.ttlb_ms, t.response_bytes,
                   (r.config->'to_client'->>'rate_kbps')::DOUBLE AS rate_kbps
            FROM testbed_runs t LEFT JOIN relay_runs r USING (relay_run_id)
            WHERE t.outcome = 'ok' AND t.ttlb_ms IS NOT NULL
              AND t.server IN ('{SLOW_START}', '{CAREFUL_RESUME}')),
        cells AS (
            SELECT experiment, scenario, one_way_delay_ms, any_value(response_bytes) AS transfer_bytes,
                   any_value(rate_kbps) AS rate_kbps,
                   count(*) FILTER (WHERE server = '{SLOW_START}') AS n_slow_start,
                   count(*) FILTER (WHERE server = '{CAREFUL_RESUME}') AS n_careful_resume,
                   median(ttlb_ms) FILTER (WHERE server = '{SLOW_START}') AS slow_start_ttlb_ms,
                   median(ttlb_ms) FILTER (WHERE server = '{CAREFUL_RESUME}') AS careful_resume_ttlb_ms
            FROM runs GROUP BY ALL)
        SELECT experiment, scenario, rate_kbps / 1000 AS rate_mbit_s, 2 * one_way_delay_ms AS rtt_ms,
               rate_kbps * 1000 / 8 * 2 * one_way_delay_ms / 1000 AS bdp_bytes, transfer_bytes,
               transfer_bytes / (rate_kbps * 1000 / 8 * 2 * one_way_delay_ms / 1000) AS transfer_bdp,
               n_slow_start, slow_start_ttlb_ms, n_careful_resume, careful_resume_ttlb_ms,
               slow_start_ttlb_ms / careful_resume_ttlb_ms AS speedup
        FROM cells WHERE n_slow_start > 0 AND n_careful_resume > 0
        ORDER BY experiment, rtt_ms, transfer_bytes, scenario""")


def _speedup_figure(table: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for (experiment, rtt, rate), part in table.group_by(["experiment", "rtt_ms", "rate_mbit_s"],
                                                       maintain_order=True):
        part = part.sort("transfer_bdp")
        fig.add_scatter(x=part["transfer_bdp"].to_list(), y=part["speedup"].to_list(), mode="lines+markers",
                        name=esc(f"{experiment}: {rate:g} Mbit/s × {rtt:g} ms"),
                        text=[esc(s) for s in part["scenario"].to_list()], hoverinfo="text+x+y")
    fig.add_hline(y=1.0, line=dict(color="grey", dash="dot"))
    fig.update_layout(title="Speedup of Careful Resume over slow start (median TTLB ratio)",
                      xaxis=dict(title="transfer size (× BDP)", type="log"), yaxis_title="speedup")
    return fig


def _timeline_connections(store: Store) -> list[tuple[int, str]]:
    if has_table(store, "testbed_runs"):
        rows = store.sql(f"""
            SELECT server_connection_id, scenario, one_way_delay_ms, ttlb_ms FROM (
                SELECT *, row_number() OVER (PARTITION BY experiment, scenario, one_way_delay_ms
                                             ORDER BY ttlb_ms) AS k,
                       count(*) OVER (PARTITION BY experiment, scenario, one_way_delay_ms) AS n
                FROM testbed_runs WHERE server = '{CAREFUL_RESUME}' AND outcome = 'ok'
                  AND server_connection_id IN (SELECT connection_id FROM careful_resume_phases))
            WHERE k = (n + 1) // 2 ORDER BY one_way_delay_ms, scenario LIMIT {MAX_TIMELINES}""").rows()
        if rows:
            return [(cid, f"{scenario}, {2 * delay:g} ms RTT, median TTLB {ttlb:.0f} ms")
                    for cid, scenario, delay, ttlb in rows]
    return [(cid, "logged Careful Resume phases") for (cid,) in store.sql(
        f"SELECT DISTINCT connection_id FROM careful_resume_phases ORDER BY 1 LIMIT {MAX_TIMELINES}").rows()]


def timeline_figure(store: Store, cid: int, label: str = "") -> go.Figure | None:
    """cwnd and bytes in flight (logged), replayed RTT, and a band per Careful Resume phase."""
    phases = store.sql("""SELECT time_ms, new_phase, trigger, congestion_window_bytes FROM careful_resume_phases
                          WHERE connection_id = $cid AND time_ms IS NOT NULL ORDER BY event_index""",
                       {"cid": cid}).rows()
    if not phases:
        return None
    # (a 15 MB transfer logs ~40,000 metrics: every k-th of them keeps a plot of ~MAX_POINTS)
    metrics = store.sql(f"""SELECT time_ms, congestion_window_bytes, bytes_in_flight_bytes FROM logged_metrics
                            WHERE connection_id = $cid
                            QUALIFY row_number() OVER (ORDER BY event_index) %
                                    greatest(1, count(*) OVER () // {MAX_POINTS}) = 0
                            ORDER BY event_index""", {"cid": cid})
    rtt = store.sql("""SELECT time_ms, smoothed_rtt_ms, latest_rtt_ms FROM rtt_samples
                       WHERE connection_id = $cid ORDER BY event_index""", {"cid": cid})
    end = max([phases[-1][0]] + metrics["time_ms"].drop_nulls().to_list() + rtt["time_ms"].to_list())
    fig = go.Figure()
    for i, (start, phase, trigger, _) in enumerate(phases):
        stop = phases[i + 1][0] if i + 1 < len(phases) else end
        fig.add_vrect(x0=start, x1=max(stop, start), fillcolor=PHASE_COLOURS.get(phase, "#dddddd"), opacity=0.45,
                      line_width=0, layer="below", annotation_text=esc(f"{phase} ({trigger or 'start'})"),
                      annotation_position="top left", annotation=dict(textangle=-90, font=dict(size=9)))
    # the changes themselves, at the window each event logged (0 when it logged none)
    fig.add_scatter(x=[p[0] for p in phases], y=[p[3] or 0 for p in phases], mode="markers", name="phase change",
                    text=[esc(f"{p[1]} ({p[2] or 'start'})") for p in phases], hoverinfo="text+x+y",
                    marker=dict(symbol="diamond", size=9, color="black"))
    for column, name in (("congestion_window_bytes", "cwnd"), ("bytes_in_flight_bytes", "bytes in flight")):
        part = metrics.filter(pl.col(column).is_not_null())
        if part.height:
            fig.add_scatter(x=part["time_ms"].to_list(), y=part[column].to_list(), name=name, mode="lines",
                            line=dict(shape="hv"))
    for column, name, dash in (("smoothed_rtt_ms", "smoothed RTT (replay)", None),
                               ("latest_rtt_ms", "latest RTT (replay)", "dot")):
        if rtt.height:
            fig.add_scatter(x=rtt["time_ms"].to_list(), y=rtt[column].to_list(), name=name, yaxis="y2",
                            mode="lines", line=dict(dash=dash, shape="hv", color="#6a3d9a"))
    fig.update_layout(title=esc(f"Careful Resume phases — {label}"), xaxis_title="time (ms, server's trace)",
                      yaxis=dict(title="bytes"), yaxis2=dict(title="RTT (ms)", overlaying="y", side="right",
                                                             rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.2))
    return fig
