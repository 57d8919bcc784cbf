"""The scan part of a report: probes, outcomes, providers, IACK shares, gaps, PTO changes.

Theory of operation: everything is aggregated in DuckDB over ``probes`` joined with
``connections`` (one row per probe with its classified connection), so the section is the same
size for a thousand probes or a million.  Providers come from :mod:`quicack.report.provider`, evaluated
once per distinct (address, server header, certificate issuer) and joined back as a small table.
Shares count probes whose connection has a handshake class; "variation" is the share of domains
whose class was not the same in every repetition (instant ACK depends on how warm the server is),
and, with several runs, the spread of the per-run IACK share.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import pyarrow as pa

from quicack.report.page import CLASS_COLOURS, CLASS_ORDER, Page, cdf_figure, esc
from quicack.report.provider import AsNames, attribute
from quicack.report.vantages import vantage_section
from quicack.store.database import Store
from quicack.store.sqltext import quote

#: Quantile points of the per-provider CDFs.
POINTS = 101
#: Providers drawn in the CDF figures (the largest by probes).
PROVIDERS_DRAWN = 10
#: Bin width (ms) of the first-ACK-delay × gap histogram.
BIN_MS = 1.0


def has_probes(store: Store) -> bool:
    found = store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'probes'").fetchall()[0][0]
    return bool(found) and store.con.execute("SELECT count(*) > 0 FROM probes").fetchall()[0][0]


def _providers(store: Store) -> None:
    """Temp view ``sp``: every probe with its connection's figures and its provider."""
    keys = store.sql("""SELECT DISTINCT address, server_header, cert_issuer FROM probes""")
    try:
        as_name = AsNames()
    except Exception:  # the package data is optional: fall back to headers
        as_name = lambda _address: None  # noqa: E731
    rows = [attribute(a, s, i, as_name) for a, s, i in keys.iter_rows()]
    table = pa.table({"address": keys["address"].to_arrow(), "server_header": keys["server_header"].to_arrow(),
                      "cert_issuer": keys["cert_issuer"].to_arrow(),
                      "provider": pa.array([r.provider for r in rows], pa.string()),
                      "evidence": pa.array([r.evidence for r in rows], pa.string())})
    store.con.register("provider_arrow", table)
    store.con.execute("CREATE OR REPLACE TEMP TABLE provider_of AS SELECT * FROM provider_arrow")
    store.con.unregister("provider_arrow")
    store.con.execute("""CREATE OR REPLACE TEMP VIEW sp AS
        SELECT p.*, coalesce(v.provider, 'other') AS provider, c.handshake_class, c.handshake_reason,
               c.ack_sh_gap_ms, c.first_ack_delay_ms, c.first_pto_ms, c.counterfactual_first_pto_ms,
               c.server_max_ack_delay_ms, c.server_ack_delay_exponent, c.ack_frequency_supported,
               CASE WHEN c.handshake_class IN ('iack', 'iack_ping') THEN 'iack'
                    WHEN c.handshake_class = 'wfc' THEN 'wfc'
                    WHEN c.handshake_class IS NULL THEN NULL ELSE 'other' END AS kind
        FROM probes p
        LEFT JOIN connections c USING (connection_id)
        LEFT JOIN provider_of v ON v.address IS NOT DISTINCT FROM p.address
             AND v.server_header IS NOT DISTINCT FROM p.server_header
             AND v.cert_issuer IS NOT DISTINCT FROM p.cert_issuer""")


def scan_sections(store: Store, page: Page) -> None:
    """Write the scan sections (the store holds probes)."""
    _providers(store)
    page.section("scan", "Scan")
    page.table(store.sql("""SELECT r.name AS run, r.shard, r.vantage, r.started_at, r.finished_at, count(p.run_id) AS probes,
            count(DISTINCT p.domain) AS domains, r.repetitions, r.quicack_version, r.aioquic_version, r.host
        FROM runs r LEFT JOIN probes p USING (run_id) GROUP BY ALL ORDER BY r.started_at"""))
    outcomes = store.sql("""SELECT outcome, count(*) AS probes, 100.0 * count(*) / sum(count(*)) OVER () AS pct
                            FROM probes GROUP BY ALL ORDER BY probes DESC""")
    ok = outcomes.filter(pl.col("outcome") == "ok")["pct"].sum()
    page.text(f"Success rate: <b>{ok:.1f}%</b> of probes completed (outcome <code>ok</code>).")
    fig = go.Figure(go.Bar(x=[esc(o) for o in outcomes["outcome"]], y=outcomes["probes"].to_list(),
                           text=[f"{p:.1f}%" for p in outcomes["pct"]], textposition="outside"))
    fig.update_layout(title="Probe outcomes", yaxis_title="probes")
    page.figure(fig, height=300)
    page.table(outcomes)
    _provider_table(store, page)
    vantage_section(store, page)
    _server_headers(store, page)
    _gap_cdf(store, page)
    _delay_vs_gap(store, page)
    _pto_change(store, page)
    _schedule(store, page)
    _transport_parameters(store, page)


def _provider_table(store: Store, page: Page) -> None:
    page.section("scan-providers", "Instant ACK by provider", 3)
    page.text("Provider from the address's AS (offline GeoLite2 data), else the <code>server</code> header, else "
              "the certificate issuer. Shares are of classified probes; <i>variation</i> is the share of domains "
              "whose class differed between repetitions; <i>run spread</i> the standard deviation of the IACK "
              "share between runs.")
    table = store.sql("""
        WITH per_domain AS (
            SELECT provider, domain, count(DISTINCT kind) AS kinds FROM sp WHERE kind IS NOT NULL GROUP BY ALL),
        per_run AS (
            SELECT provider, run_id, avg(CASE WHEN kind = 'iack' THEN 1.0 ELSE 0.0 END) AS share
            FROM sp WHERE kind IS NOT NULL GROUP BY ALL)
        SELECT s.provider, count(DISTINCT s.domain) AS domains, count(*) AS probes,
               count(s.kind) AS classified,
               100.0 * count(*) FILTER (WHERE s.kind = 'iack') / nullif(count(s.kind), 0) AS iack_pct,
               100.0 * count(*) FILTER (WHERE s.kind = 'wfc') / nullif(count(s.kind), 0) AS wfc_pct,
               100.0 * count(*) FILTER (WHERE s.kind = 'other') / nullif(count(s.kind), 0) AS other_pct,
               (SELECT 100.0 * avg(CASE WHEN d.kinds > 1 THEN 1.0 ELSE 0.0 END) FROM per_domain d
                WHERE d.provider = s.provider) AS variation_pct,
               (SELECT 100.0 * stddev_samp(r.share) FROM per_run r WHERE r.provider = s.provider) AS run_spread_pct,
               median(s.ack_sh_gap_ms) FILTER (WHERE s.kind = 'iack') AS median_iack_gap_ms
        FROM sp s GROUP BY s.provider ORDER BY probes DESC, s.provider""")
    total = store.sql("""SELECT 'all' AS provider, count(DISTINCT domain) AS domains, count(*) AS probes,
            count(kind) AS classified,
            100.0 * count(*) FILTER (WHERE kind = 'iack') / nullif(count(kind), 0) AS iack_pct,
            100.0 * count(*) FILTER (WHERE kind = 'wfc') / nullif(count(kind), 0) AS wfc_pct,
            100.0 * count(*) FILTER (WHERE kind = 'other') / nullif(count(kind), 0) AS other_pct
        FROM sp""")
    page.table(pl.concat([table, total], how="diagonal_relaxed"))
    shares = store.sql("""SELECT provider, handshake_class AS class, count(*) AS n FROM sp
                          WHERE handshake_class IS NOT NULL GROUP BY ALL""")
    if shares.height:
        totals = shares.group_by("provider").agg(pl.col("n").sum().alias("total"))
        shares = shares.join(totals, on="provider").with_columns((100 * pl.col("n") / pl.col("total")).alias("pct"))
        fig = go.Figure()
        for klass in CLASS_ORDER:
            part = shares.filter(pl.col("class") == klass).sort("provider")
            if part.height:
                fig.add_bar(x=[esc(p) for p in part["provider"]], y=part["pct"].to_list(), name=klass,
                            marker_color=CLASS_COLOURS[klass])
        fig.update_layout(barmode="stack", title="Handshake class by provider (% of classified probes)",
                          yaxis_title="% of probes")
        page.figure(fig)


def _server_headers(store: Store, page: Page) -> None:
    table = store.sql("""SELECT server_header, provider, count(*) AS probes, count(DISTINCT domain) AS domains,
            100.0 * count(*) FILTER (WHERE kind = 'iack') / nullif(count(kind), 0) AS iack_pct,
            median(first_ack_delay_ms) AS median_first_ack_delay_ms
        FROM sp WHERE server_header IS NOT NULL GROUP BY ALL ORDER BY probes DESC, server_header LIMIT 30""")
    if table.height:
        page.section("scan-servers", "Server headers (top 30)", 3)
        page.table(table)


def _top_providers(store: Store, where: str) -> list[str]:
    return store.sql(f"""SELECT provider FROM sp WHERE {where} GROUP BY provider
                         ORDER BY count(*) DESC, provider LIMIT {PROVIDERS_DRAWN}""")["provider"].to_list()


def _quantiles(store: Store, expr: str, where: str) -> pl.DataFrame:
    providers = _top_providers(store, where)
    if not providers:
        return pl.DataFrame()
    qs = [i / (POINTS - 1) for i in range(POINTS)]
    listed = ", ".join(quote(p) for p in providers)
    return store.sql(f"""SELECT * FROM (SELECT provider AS g, unnest(quantile_cont(v, {qs})) AS value,
                                unnest({qs}) AS p, any_value(n) AS n
        FROM (SELECT provider, ({expr}) AS v, count(*) OVER (PARTITION BY provider) AS n FROM sp
              WHERE {where} AND provider IN ({listed}))
        GROUP BY provider) ORDER BY g, p""")


def _gap_cdf(store: Store, page: Page) -> None:
    frame = _quantiles(store, "ack_sh_gap_ms", "kind = 'iack' AND ack_sh_gap_ms IS NOT NULL")
    if frame.height:
        page.section("scan-gaps", "ACK→ServerHello gap by provider", 3)
        page.figure(cdf_figure(frame, "ACK→ServerHello gap (ms)", "CDF of the gap, instant-ACK probes"))


def _delay_vs_gap(store: Store, page: Page) -> None:
    bins = store.sql(f"""SELECT floor(ack_sh_gap_ms / {BIN_MS}) * {BIN_MS} AS gap,
                                floor(first_ack_delay_ms / {BIN_MS}) * {BIN_MS} AS delay, count(*) AS probes
                         FROM sp WHERE ack_sh_gap_ms IS NOT NULL AND first_ack_delay_ms IS NOT NULL
                         GROUP BY ALL""")
    if bins.height == 0:
        return
    page.section("scan-delay-gap", "First ACK delay against the measured gap", 3)
    page.text("Each cell counts probes (binned by 1 ms). A server that waits for its certificate reports the wait "
              "as ACK delay (gap 0, delay > 0); an instant ACK has a small delay and a gap.")
    fig = go.Figure(go.Scatter(x=bins["gap"].to_list(), y=bins["delay"].to_list(), mode="markers",
                               marker=dict(size=[min(40, 6 + n ** 0.5) for n in bins["probes"]],
                                           color=bins["probes"].to_list(), colorscale="Viridis", showscale=True,
                                           colorbar=dict(title="probes")),
                               text=[f"{n} probes" for n in bins["probes"]], hoverinfo="text+x+y"))
    fig.update_layout(title="First ACK delay vs ACK→ServerHello gap", xaxis_title="gap (ms)",
                      yaxis_title="first ACK delay (ms)")
    page.figure(fig)


def _pto_change(store: Store, page: Page) -> None:
    frame = store.sql(f"""SELECT * FROM (SELECT kind AS g, unnest(quantile_cont(v, {[i / (POINTS - 1) for i in range(POINTS)]})) AS value,
                                 unnest({[i / (POINTS - 1) for i in range(POINTS)]}) AS p, count(*) AS n
        FROM (SELECT kind, counterfactual_first_pto_ms - first_pto_ms AS v FROM sp
              WHERE counterfactual_first_pto_ms IS NOT NULL AND first_pto_ms IS NOT NULL)
        GROUP BY kind) ORDER BY g, p""")
    if frame.height:
        page.section("scan-pto", "What the first PTO would have been the other way", 3)
        page.text("iack: the client's first PTO had the server waited for its certificate, minus the real one "
                  "(what the instant ACK saved); wfc: with an instant ACK, minus the real one.")
        page.figure(cdf_figure(frame, "counterfactual − actual first PTO (ms)", "Counterfactual first-PTO change"))


def _schedule(store: Store, page: Page) -> None:
    table = store.sql("""SELECT schedule, count(*) AS probes, count(kind) AS classified,
            100.0 * count(*) FILTER (WHERE kind = 'iack') / nullif(count(kind), 0) AS iack_pct,
            median(ack_sh_gap_ms) FILTER (WHERE kind = 'iack') AS median_iack_gap_ms,
            median(first_ack_delay_ms) AS median_first_ack_delay_ms
        FROM sp GROUP BY ALL ORDER BY schedule""")
    if table.height > 1 or (table.height == 1 and table["schedule"][0] != "spaced"):
        page.section("scan-schedule", "Cold and warm probes", 3)
        page.text("A cold probe comes after the server was idle; warm probes follow another right away.")
        page.table(table)


def _transport_parameters(store: Store, page: Page) -> None:
    table = store.sql("""SELECT provider, server_max_ack_delay_ms, server_ack_delay_exponent, ack_frequency_supported,
                                count(*) AS probes
                         FROM sp WHERE server_max_ack_delay_ms IS NOT NULL OR server_ack_delay_exponent IS NOT NULL
                         GROUP BY ALL ORDER BY probes DESC LIMIT 60""")
    if table.height:
        page.section("scan-tp", "Server transport parameters seen by the scan", 3)
        page.table(table)

