"""The testbed part of a report: per experiment, scenario, one-way delay and client, what each
server mode's attempts gave (``testbed_runs``), and a ladder diagram of a median attempt.

Theory of operation: the figures of a cell (experiment, scenario, one-way delay, client, server)
are aggregated in DuckDB — attempts, outcomes, TTFB median and quartiles, the client's first PTO
(median and quartiles) and the server's (its connection's RFC 9002 replay), PTO expiries and the
relay's drops — with each cell's per-attempt TTFBs of the completed attempts as one list, which
the box plots draw and the bootstrap resamples.  A cell's TTFB is compared with the WFC server's
(``serve-wfc``) of the same scenario, delay and client: the difference of the medians, with a 95 %
percentile interval from 2,000 bootstrap resamples of each side (:func:`bootstrap_median_difference`,
plain Python with a fixed seed over the sorted values, so the interval depends only on the stored
TTFBs).  Per scenario the ladder diagrams take the middle one-way delay and, per server, the
attempt whose TTFB is the cell's (lower) median: its client's and server's packets on one time
axis — each trace's ``first_event_epoch_ms + time_ms``, counted from the attempt's
``started_epoch_ms`` — and the relay's datagrams of its flow (``relay_run_id``, ``relay_flow``,
within the attempt's time), a forwarded one drawn from its arrival at the relay on the sender's
side to its departure on the receiver's, a dropped one ending in a red ✕ with the reason.
Labels of packets that lie closer than a line of text are merged; every packet keeps its own
marker and hover text.  Strings (scenario, server, client names) are escaped like the rest of
the report.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import polars as pl

from quicack.report.page import CLASS_COLOURS, Page, esc, has_table
from quicack.store.database import Store

#: the server every other server of a scenario, delay and client is compared with
WFC_SERVER = "serve-wfc"
#: bootstrap resamples, seed and confidence of the interval of a difference of medians
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 26
CONFIDENCE = 0.95
#: relay datagrams further than this before the attempt's start or after its last packet are not its own
LADDER_MARGIN_MS = 50.0
#: the packets a ladder draws at most, the earliest: a ladder is for the handshake and the first
#: flights; a 10 MB transfer (experiments/ack-policy-*.toml) has ~25,000, whose figure took minutes
LADDER_MAX_PACKETS = 600
LADDER_HEIGHT = 900
#: a label's height in pixels: packets closer in time share one label
LABEL_PX = 14
MAX_LABEL_CHARS = 60
SERVER_COLOURS = {"serve-wfc": CLASS_COLOURS["wfc"], "serve-iack": CLASS_COLOURS["iack"],
                  "serve-iack-ping": CLASS_COLOURS["iack_ping"]}
OTHER_COLOURS = ["#7570b3", "#e7298a", "#a6761d", "#1f78b4", "#666666"]
#: the cells table as shown: column → heading
CELL_COLUMNS = {"scenario": "scenario", "one_way_delay_ms": "one_way_ms", "client": "client", "server": "server",
                "attempts": "attempts", "ok": "ok", "median_ttfb_ms": "ttfb_ms", "q1_ttfb_ms": "ttfb_q1",
                "q3_ttfb_ms": "ttfb_q3", "median_client_first_pto_ms": "first_pto_ms",
                "median_server_first_pto_ms": "server_first_pto_ms", "client_ptos": "ptos_fired",
                "server_ptos": "server_ptos_fired", "relay_drops": "drops"}
LANE = {"client": 0.0, "relay": 0.5, "server": 1.0}
#: datagram direction → (sender lane, receiver lane, colour)
DIRECTIONS = {"to_server": ("client", "server", "#1f78b4"), "to_client": ("server", "client", "#d95f02")}


# --- pure helpers ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interval:
    """A difference of medians (a − b) with its bootstrap percentile interval."""

    estimate: float
    low: float
    high: float
    n_a: int
    n_b: int


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0…1) of sorted values, linearly interpolated between order statistics
    (Hyndman and Fan's type 7, numpy's default)."""
    if not ordered:
        raise ValueError("percentile of no values")
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap_median_difference(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                                seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> Interval | None:
    """median(a) − median(b) and its percentile interval: ``resamples`` times, each side is drawn
    with replacement (its own size) and the difference of the medians taken; the interval is the
    (1 − confidence)/2 and (1 + confidence)/2 quantiles of those differences.  The values are
    sorted first, so the result depends on the two samples, not their order.  None when a side
    has no value."""
    a, b = sorted(float(v) for v in a), sorted(float(v) for v in b)
    if not a or not b:
        return None
    rng = random.Random(seed)
    differences = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                         for _ in range(resamples))
    tail = (1 - confidence) / 2
    return Interval(statistics.median(a) - statistics.median(b), percentile(differences, tail),
                    percentile(differences, 1 - tail), len(a), len(b))


def middle(values: Sequence[float]):
    """The lower middle of the sorted distinct values (the one-way delay a scenario's ladders take)."""
    distinct = sorted(set(values))
    return distinct[(len(distinct) - 1) // 2]


def frames_text(frames: Sequence[str]) -> str:
    """Frame types in packet order, repeats folded: ``stream×3+padding``."""
    parts: list[list] = []
    for frame in frames:
        if parts and parts[-1][0] == frame:
            parts[-1][1] += 1
        else:
            parts.append([frame, 1])
    return "+".join(f"{f}×{n}" if n > 1 else f for f, n in parts) or "no frames logged"


def merge_labels(items: Sequence[tuple[float, str, str]], gap: float) -> list[tuple[float, str]]:
    """(time, prefix, text) items sorted by time → (time, label): an item less than ``gap`` after
    the first item of the current label joins it (its prefix left out when it repeats the one
    before it); a label longer than MAX_LABEL_CHARS ends in ``… (+k)``."""
    groups: list[list[tuple[float, str, str]]] = []
    for item in items:
        if groups and item[0] - groups[-1][0][0] < gap:
            groups[-1].append(item)
        else:
            groups.append([item])
    labels = []
    for group in groups:
        parts, previous = [], None
        for _, prefix, text in group:
            parts.append(text if prefix == previous else f"{prefix} {text}".strip())
            previous = prefix
        label = " · ".join(parts)
        if len(label) > MAX_LABEL_CHARS:
            kept = 1
            while kept < len(parts) and len(" · ".join(parts[:kept + 1])) <= MAX_LABEL_CHARS - 8:
                kept += 1
            rest = len(parts) - kept
            label = " · ".join(parts[:kept])[:MAX_LABEL_CHARS - 8] + (f" … (+{rest})" if rest else " …")
        labels.append((group[0][0], label))
    return labels


def server_colour(server: str, index: int) -> str:
    return SERVER_COLOURS.get(server, OTHER_COLOURS[index % len(OTHER_COLOURS)])


# --- the data --------------------------------------------------------------------------------

def has_testbed(store: Store) -> bool:
    return has_table(store, "testbed_runs") and \
        store.con.execute("SELECT count(*) > 0 FROM testbed_runs").fetchall()[0][0]


def cells(store: Store) -> pl.DataFrame:
    """One row per experiment, scenario, delay, client and server, in the experiment's order
    (scenarios and servers as first attempted, WFC first), with the completed attempts' TTFBs."""
    return store.sql("""
        WITH drops AS (SELECT relay_run_id, flow, count(*) AS n FROM relay_datagrams
                       WHERE dropped_reason IS NOT NULL GROUP BY ALL),
        t AS (SELECT t.*, s.first_pto_ms AS server_first_pto_ms, coalesce(d.n, 0) AS drops,
                     CASE WHEN t.outcome = 'ok' THEN t.ttfb_ms END AS ok_ttfb,
                     CASE WHEN t.outcome = 'ok' THEN t.client_first_pto_ms END AS ok_pto,
                     min(t.started_epoch_ms) OVER (PARTITION BY t.experiment) AS experiment_start,
                     min(t.started_epoch_ms) OVER (PARTITION BY t.experiment, t.scenario) AS scenario_start,
                     min(t.started_epoch_ms) OVER (PARTITION BY t.experiment, t.server) AS server_start
              FROM testbed_runs t LEFT JOIN connections s ON s.connection_id = t.server_connection_id
              LEFT JOIN drops d ON d.relay_run_id = t.relay_run_id AND d.flow = t.relay_flow)
        SELECT experiment, scenario, one_way_delay_ms, client, server, count(*) AS attempts,
               count(*) FILTER (WHERE outcome = 'ok') AS ok,
               median(ok_ttfb) AS median_ttfb_ms, quantile_cont(ok_ttfb, 0.25) AS q1_ttfb_ms,
               quantile_cont(ok_ttfb, 0.75) AS q3_ttfb_ms,
               median(ok_pto) AS median_client_first_pto_ms, quantile_cont(ok_pto, 0.25) AS q1_client_first_pto_ms,
               quantile_cont(ok_pto, 0.75) AS q3_client_first_pto_ms,
               median(server_first_pto_ms) FILTER (WHERE outcome = 'ok') AS median_server_first_pto_ms,
               sum(client_pto_count)::BIGINT AS client_ptos, sum(server_pto_count)::BIGINT AS server_ptos,
               sum(drops)::BIGINT AS relay_drops,
               list(ok_ttfb ORDER BY repetition) FILTER (WHERE ok_ttfb IS NOT NULL) AS ttfbs,
               list(repetition ORDER BY repetition) FILTER (WHERE ok_ttfb IS NOT NULL) AS repetitions
        FROM t GROUP BY experiment, scenario, one_way_delay_ms, client, server, experiment_start, scenario_start,
                        server_start
        ORDER BY experiment_start, experiment, scenario_start, scenario,
                 one_way_delay_ms, client, server <> $wfc, server_start, server""", {"wfc": WFC_SERVER})


def differences(cells: pl.DataFrame) -> pl.DataFrame:
    """Per cell of another server than WFC whose scenario, delay and client has a WFC cell: its
    median TTFB minus WFC's, with the bootstrap interval (empty samples give no row)."""
    key = ["experiment", "scenario", "one_way_delay_ms", "client"]
    wfc = cells.filter(pl.col("server") == WFC_SERVER).select(*key, pl.col("ttfbs").alias("wfc_ttfbs"))
    rows = []
    for row in cells.filter(pl.col("server") != WFC_SERVER).join(wfc, on=key).iter_rows(named=True):
        interval = bootstrap_median_difference(row["ttfbs"] or [], row["wfc_ttfbs"] or [])
        if interval is not None:
            rows.append({**{k: row[k] for k in key}, "server": row["server"], "n": interval.n_a,
                         "n_wfc": interval.n_b, "difference_ms": interval.estimate,
                         "ci_low_ms": interval.low, "ci_high_ms": interval.high})
    schema = {"experiment": pl.String, "scenario": pl.String, "one_way_delay_ms": pl.Float64, "client": pl.String,
              "server": pl.String, "n": pl.Int64, "n_wfc": pl.Int64, "difference_ms": pl.Float64,
              "ci_low_ms": pl.Float64, "ci_high_ms": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def representatives(store: Store) -> pl.DataFrame:
    """Per cell the attempt whose TTFB is the cell's lower median among the completed attempts
    (ties: the lower repetition; none completed: the first repetition)."""
    return store.sql("""
        WITH ranked AS (
            SELECT *, row_number() OVER w AS r,
                   count(CASE WHEN outcome = 'ok' THEN ttfb_ms END) OVER (
                       PARTITION BY experiment, scenario, one_way_delay_ms, client, server) AS n
            FROM testbed_runs
            WINDOW w AS (PARTITION BY experiment, scenario, one_way_delay_ms, client, server
                         ORDER BY CASE WHEN outcome = 'ok' THEN ttfb_ms END NULLS LAST, repetition))
        SELECT experiment, scenario, one_way_delay_ms, client, server, repetition, n, outcome, ttfb_ms,
               started_epoch_ms, client_connection_id, server_connection_id, relay_run_id, relay_flow,
               drop_to_client, drop_to_server
        FROM ranked WHERE r = greatest((n + 1) // 2, 1)""")


@dataclass
class Ladder:
    """An attempt's packets (both traces), PTO expiries and relay datagrams, times in ms since
    the client's first Initial (``started_epoch_ms``)."""

    packets: pl.DataFrame
    timers: pl.DataFrame
    datagrams: pl.DataFrame
    #: the attempt's packets in both traces (more than drawn when above LADDER_MAX_PACKETS)
    total_packets: int = 0


def ladder(store: Store, attempt: dict) -> Ladder:
    """The attempt's rows; without ``started_epoch_ms`` the time counts from the earlier trace's start."""
    ids = {"client": attempt["client_connection_id"], "server": attempt["server_connection_id"],
           "origin": attempt["started_epoch_ms"]}
    if ids["origin"] is None:
        ids["origin"] = store.con.execute("SELECT coalesce(min(first_event_epoch_ms), 0) FROM connections "
                                          "WHERE connection_id IN ($client, $server)",
                                          {"client": ids["client"], "server": ids["server"]}).fetchall()[0][0]
    packets = store.sql("""
        SELECT CASE WHEN p.connection_id = $client THEN 'client' ELSE 'server' END AS lane,
               c.first_event_epoch_ms + p.time_ms - $origin AS t_ms, p.event_index, p.direction, p.packet_type,
               p.packet_number, p.size_bytes,
               list(f.frame_type ORDER BY f.position) FILTER (WHERE f.frame_type IS NOT NULL) AS frames
        FROM packets p JOIN connections c USING (connection_id)
        LEFT JOIN frames f USING (connection_id, event_index)
        WHERE p.connection_id IN ($client, $server) AND c.first_event_epoch_ms IS NOT NULL
        GROUP BY ALL ORDER BY t_ms, lane, p.event_index""", ids)
    total = packets.height
    packets = packets.head(LADDER_MAX_PACKETS)
    timers = store.sql("""
        SELECT CASE WHEN t.connection_id = $client THEN 'client' ELSE 'server' END AS lane,
               c.first_event_epoch_ms + t.time_ms - $origin AS t_ms, t.packet_number_space
        FROM timers t JOIN connections c USING (connection_id)
        WHERE t.connection_id IN ($client, $server) AND c.first_event_epoch_ms IS NOT NULL
          AND lower(t.event_type) = 'expired' AND lower(coalesce(t.timer_type, '')) IN ('pto', 'probe')
        ORDER BY t_ms""", ids)
    last = packets["t_ms"].max() if packets.height else None
    if total > packets.height:
        timers = timers.filter(pl.col("t_ms") <= last)
    datagrams = store.sql("""
        SELECT arrival_index, direction, datagram_index, size_bytes, quic_types, dropped_reason,
               time_in_epoch_ms - $origin AS in_ms, time_out_epoch_ms - $origin AS out_ms
        FROM relay_datagrams
        WHERE relay_run_id = $run AND flow = $flow AND time_in_epoch_ms >= $origin - $margin
          AND ($last IS NULL OR time_in_epoch_ms <= $origin + $last + $margin)
        ORDER BY arrival_index""", {"run": attempt["relay_run_id"], "flow": attempt["relay_flow"],
                                    "origin": ids["origin"], "margin": LADDER_MARGIN_MS, "last": last})
    return Ladder(packets, timers, datagrams, total)


# --- the section -----------------------------------------------------------------------------

def testbed_sections(store: Store, page: Page) -> None:
    """Write the testbed sections (the store holds testbed_runs rows)."""
    page.section("testbed", "Testbed")
    page.text("Attempts of <code>quicack testbed run</code> (<code>testbed_runs</code>): each through the "
              "impairment relay, both ends' qlogs ingested. TTFB and the client's first PTO are from the client's "
              "qlog (ms after its first Initial), the server's first PTO from its own; medians and quartiles are "
              "of the completed attempts. <i>IACK − WFC</i>: a server's median TTFB minus that of "
              f"<code>{esc(WFC_SERVER)}</code> in the same scenario, delay and client, with a "
              f"{CONFIDENCE:.0%} percentile interval from {BOOTSTRAP_RESAMPLES:,} bootstrap resamples "
              f"(seed {BOOTSTRAP_SEED}).")
    page.table(store.sql("""SELECT experiment, count(*) AS attempts, count(*) FILTER (WHERE outcome = 'ok') AS ok,
            count(DISTINCT scenario) AS scenarios, string_agg(DISTINCT server, ', ' ORDER BY server) AS servers,
            string_agg(DISTINCT client, ', ' ORDER BY client) AS clients,
            list_sort(list(DISTINCT one_way_delay_ms)) AS one_way_delays_ms, max(repetition) + 1 AS repetitions,
            make_timestamp((min(started_epoch_ms) * 1000)::BIGINT) AS first_attempt_utc
        FROM testbed_runs GROUP BY experiment ORDER BY min(started_epoch_ms)"""))
    table = cells(store)
    diffs = differences(table)
    for e, (experiment,) in enumerate(dict.fromkeys(table.select("experiment").iter_rows())):
        _experiment(store, page, e, experiment, table.filter(pl.col("experiment") == experiment),
                    diffs.filter(pl.col("experiment") == experiment))


def _experiment(store: Store, page: Page, e: int, experiment: str, table: pl.DataFrame,
                diffs: pl.DataFrame) -> None:
    page.section(f"testbed-{e}", f"Testbed experiment {experiment}: cells", 3)
    page.text("Per cell: TTFB median and quartiles, the client's and the server's first PTO (medians), the PTO "
              "expiries both ends logged and the datagrams the relay dropped (sums over the attempts).")
    page.table(table.select(*(pl.col(c).alias(shown) for c, shown in CELL_COLUMNS.items())))
    if diffs.height:
        page.section(f"testbed-{e}-difference", f"Testbed experiment {experiment}: IACK − WFC median TTFB", 3)
        page.table(diffs.drop("experiment").rename({"one_way_delay_ms": "one_way_ms"}))
        page.figure(_difference_figure(diffs), height=140 + 28 * diffs.height)
    representative = representatives(store).filter(pl.col("experiment") == experiment)
    for s, (scenario,) in enumerate(dict.fromkeys(table.select("scenario").iter_rows())):
        part = table.filter(pl.col("scenario") == scenario)
        page.section(f"testbed-{e}-{s}", f"Testbed scenario {scenario}", 3)
        for (delay,) in dict.fromkeys(part.select("one_way_delay_ms").iter_rows()):
            page.figure(_ttfb_figure(scenario, delay, part.filter(pl.col("one_way_delay_ms") == delay)))
        page.figure(_pto_figure(scenario, part))
        delay = middle(part["one_way_delay_ms"].to_list())
        client = part["client"][0]
        shown = representative.filter((pl.col("scenario") == scenario) & (pl.col("one_way_delay_ms") == delay)
                                      & (pl.col("client") == client))
        servers = part.filter(pl.col("one_way_delay_ms") == delay)["server"].to_list()
        page.text(f"Ladder diagrams at {delay:g} ms one way (the scenario's middle delay), client {esc(client)}: "
                  "per server the attempt with the median TTFB. Lines are the relay's datagrams, from their arrival "
                  "on the sender's side to their departure on the receiver's; ✕ marks a datagram the relay dropped "
                  "(and why).")
        for server in servers:
            attempt = shown.filter(pl.col("server") == server).row(0, named=True)
            page.figure(ladder_figure(ladder(store, attempt), attempt), height=LADDER_HEIGHT)


# --- figures ---------------------------------------------------------------------------------

def _ttfb_figure(scenario: str, delay: float, part: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, row in enumerate(part.iter_rows(named=True)):
        values = row["ttfbs"] or []
        fig.add_box(x=[esc(row["client"])] * len(values), y=values, name=esc(row["server"]), boxpoints="all",
                    jitter=0.4, pointpos=0, marker=dict(color=server_colour(row["server"], i), size=5),
                    text=[f"repetition {r}" for r in row["repetitions"] or []],
                    hovertemplate="%{y:.1f} ms, %{text}<extra>%{fullData.name}</extra>")
    fig.update_layout(title=f"TTFB: {esc(scenario)}, {delay:g} ms one way (completed attempts)", boxmode="group",
                      xaxis_title="client", yaxis_title="TTFB (ms)")
    return fig


def _pto_figure(scenario: str, part: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    clients = part["client"].n_unique()
    for i, server in enumerate(dict.fromkeys(part["server"].to_list())):
        rows = part.filter(pl.col("server") == server)
        x = [f"{d:g} ms" + (f" · {esc(c)}" if clients > 1 else "")
             for d, c in zip(rows["one_way_delay_ms"], rows["client"])]
        median = rows["median_client_first_pto_ms"].to_list()
        up = [None if m is None else q - m for q, m in zip(rows["q3_client_first_pto_ms"], median)]
        down = [None if m is None else m - q for q, m in zip(rows["q1_client_first_pto_ms"], median)]
        fig.add_bar(x=x, y=median, name=esc(server), marker_color=server_colour(server, i),
                    error_y=dict(type="data", array=up, arrayminus=down),
                    customdata=rows["ok"].to_list(),
                    hovertemplate="%{x}: %{y:.1f} ms (median of %{customdata})<extra>%{fullData.name}</extra>")
    fig.update_layout(title=f"Client's first PTO: {esc(scenario)} (median, bars to the quartiles)", barmode="group",
                      xaxis_title="one-way delay", yaxis_title="first PTO (ms)")
    return fig


def _difference_figure(diffs: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    clients = diffs["client"].n_unique()
    for i, server in enumerate(dict.fromkeys(diffs["server"].to_list())):
        rows = diffs.filter(pl.col("server") == server)
        y = [f"{esc(s)} · {d:g} ms" + (f" · {esc(c)}" if clients > 1 else "")
             for s, d, c in zip(rows["scenario"], rows["one_way_delay_ms"], rows["client"])]
        estimate = rows["difference_ms"].to_list()
        fig.add_scatter(x=estimate, y=y, mode="markers", name=f"{esc(server)} − {esc(WFC_SERVER)}", orientation="h",
                        marker=dict(color=server_colour(server, i), size=9),
                        error_x=dict(type="data", array=[h - m for h, m in zip(rows["ci_high_ms"], estimate)],
                                     arrayminus=[m - lo for lo, m in zip(rows["ci_low_ms"], estimate)]),
                        customdata=rows.select("ci_low_ms", "ci_high_ms", "n", "n_wfc").rows(),
                        hovertemplate="%{x:.1f} ms [%{customdata[0]:.1f}, %{customdata[1]:.1f}] "
                                      "(n %{customdata[2]} vs %{customdata[3]})<extra>%{fullData.name}</extra>")
    fig.add_vline(x=0, line=dict(color="#888", dash="dot"))
    fig.update_layout(title=f"Median TTFB minus {esc(WFC_SERVER)}'s, {CONFIDENCE:.0%} bootstrap interval "
                            "(negative: faster than WFC)", xaxis_title="difference of medians (ms)",
                      yaxis=dict(autorange="reversed", type="category", automargin=True), scattermode="group")
    return fig


def _packet_items(packets: pl.DataFrame, timers: pl.DataFrame, lane: str) -> list[tuple[float, str, str]]:
    items = [(r["t_ms"], "sent" if r["direction"] == "sent" else "rcvd",
              f"{r['packet_type']} {'' if r['packet_number'] is None else r['packet_number']}: "
              f"{frames_text(r['frames'] or [])}")
             for r in packets.filter(pl.col("lane") == lane).iter_rows(named=True)]
    for r in timers.filter(pl.col("lane") == lane).iter_rows(named=True):
        space = r["packet_number_space"]
        items.append((r["t_ms"], "", f"PTO expired ({space})" if space else "PTO expired"))
    return sorted(items, key=lambda item: item[0])


def _datagram_lines(fig: go.Figure, datagrams: pl.DataFrame) -> None:
    for direction, (sender, receiver, colour) in DIRECTIONS.items():
        part = datagrams.filter((pl.col("direction") == direction) & pl.col("dropped_reason").is_null())
        xs, ys, texts = [], [], []
        for r in part.iter_rows(named=True):
            xs += [LANE[sender], LANE[receiver], None]
            ys += [r["in_ms"], r["out_ms"] if r["out_ms"] is not None else r["in_ms"], None]
            text = f"{direction} #{r['datagram_index']}: {r['quic_types']}, {r['size_bytes']} B"
            texts += [text, text, None]
        if xs:
            fig.add_scatter(x=xs, y=ys, mode="lines", name=f"{direction} (relay)", text=texts, hoverinfo="text+y",
                            line=dict(color=colour, width=1.2))
    dropped = datagrams.filter(pl.col("dropped_reason").is_not_null())
    if dropped.height == 0:
        return
    xs, ys = [], []
    for r in dropped.iter_rows(named=True):
        xs += [LANE[DIRECTIONS[r["direction"]][0]], LANE["relay"], None]
        ys += [r["in_ms"], r["in_ms"], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color="red", dash="dash", width=1.2), hoverinfo="skip",
                    showlegend=False)
    fig.add_scatter(x=[LANE["relay"]] * dropped.height, y=dropped["in_ms"].to_list(), mode="markers",
                    name="✕ dropped at the relay",
                    marker=dict(symbol="x", color="red", size=14, line=dict(width=1)),
                    customdata=dropped.select("direction", "datagram_index", "dropped_reason", "quic_types",
                                              "size_bytes").rows(),
                    hovertemplate="✕ %{customdata[2]}: %{customdata[0]} #%{customdata[1]}, %{customdata[3]}, "
                                  "%{customdata[4]} B at %{y:.2f} ms<extra></extra>")
    for r in dropped.iter_rows(named=True):  # the reason on the side the datagram did not come from
        towards_client = DIRECTIONS[r["direction"]][1] == "client"
        fig.add_annotation(x=LANE["relay"], y=r["in_ms"], xanchor="right" if towards_client else "left",
                           xshift=-10 if towards_client else 10, showarrow=False, text=esc(r["dropped_reason"]),
                           font=dict(color="red", size=11), bgcolor="rgba(255,255,255,0.85)")


def ladder_figure(data: Ladder, attempt: dict) -> go.Figure:
    """The attempt's ladder diagram: lanes client, relay, server; time downwards."""
    fig = go.Figure()
    times = data.packets["t_ms"].to_list() + data.datagrams["in_ms"].to_list() + \
        [t for t in data.datagrams["out_ms"].to_list() if t is not None]
    span = (max(times) - min(0.0, min(times))) if times else 1.0
    gap = span * LABEL_PX / (LADDER_HEIGHT - 120)
    _datagram_lines(fig, data.datagrams)
    for lane, side in (("client", "left"), ("server", "right")):
        items = _packet_items(data.packets, data.timers, lane)
        if not items:
            continue
        fig.add_scatter(x=[LANE[lane]] * len(items), y=[t for t, _, _ in items], mode="markers",
                        name=f"{lane} qlog", text=[esc(f"{p} {t}".strip()) for _, p, t in items],
                        hoverinfo="text+y",
                        marker=dict(color="#333" if lane == "client" else "#555", size=6,
                                    symbol=["diamond" if p == "" else "circle" for _, p, _ in items]))
        labels = merge_labels(items, gap)
        fig.add_scatter(x=[LANE[lane]] * len(labels), y=[t for t, _ in labels], mode="text", showlegend=False,
                        text=[esc(text) for _, text in labels], textposition=f"middle {side}", hoverinfo="skip",
                        textfont=dict(size=10, color="#333"))
    for x in LANE.values():
        fig.add_vline(x=x, line=dict(color="#bbb", width=1))
    if attempt.get("ttfb_ms") is not None:
        fig.add_hline(y=attempt["ttfb_ms"], line=dict(color="#1b9e77", dash="dot"))
        fig.add_annotation(x=LANE["relay"], y=attempt["ttfb_ms"], yanchor="bottom", showarrow=False,
                           text=f"TTFB {attempt['ttfb_ms']:.1f} ms", font=dict(color="#1b9e77", size=11),
                           bgcolor="rgba(255,255,255,0.85)")
    drops = ", ".join(f"{d} {v}" for d, v in (("to client", attempt.get("drop_to_client")),
                                                 ("to server", attempt.get("drop_to_server"))) if v) or "none"
    fig.update_layout(
        title=esc(f"{attempt['scenario']}, {attempt['one_way_delay_ms']:g} ms one way, {attempt['server']} ← "
                  f"{attempt['client']}: repetition {attempt['repetition']} (median TTFB of {attempt['n']}); "
                  f"drop lists: {drops}"
                  + (f"; its first {data.packets.height} of {data.total_packets} packets"
                     if data.total_packets > data.packets.height else "")),
        xaxis=dict(tickvals=list(LANE.values()), ticktext=list(LANE), range=[-1.5, 2.5], side="top",
                   showgrid=False, zeroline=False),
        yaxis=dict(autorange="reversed", title="ms since the client's first Initial", zeroline=False,
                   automargin=True),
        legend=dict(orientation="h", y=-0.03))
    return fig
