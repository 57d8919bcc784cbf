"""The vantage-point part of a scan report: IACK share and gap by provider, per vantage point.

Theory of operation: a scan on a Dask cluster (``quicack scan --cluster``) tags each probe with
the vantage point that sent it (``probes.vantage``).  When the store holds probes from more than
one vantage, this section compares them over the view ``sp`` of :mod:`quicack.report.scans`
(every probe with its classified connection and its provider): per vantage and provider the
share of classified probes whose handshake was an instant ACK, and the median gap between the
instant ACK and the ServerHello; a bar chart shows the IACK shares side by side.  The probes of
different vantages are different targets when the list was sharded over them, so a difference
between vantages is one of paths and of targets together, as the text says.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from quicack.report.page import Page, esc
from quicack.store.database import Store


def vantage_count(store: Store) -> int:
    return store.con.execute("SELECT count(DISTINCT vantage) FROM probes WHERE vantage IS NOT NULL").fetchall()[0][0]


def vantage_table(store: Store) -> pl.DataFrame:
    """Per vantage and provider (and ``all`` providers): probes, classified probes, IACK share
    (% of classified) and the median IACK gap (ms).  Needs the view ``sp``."""
    rows = """count(*) AS probes, count(kind) AS classified,
              100.0 * count(*) FILTER (WHERE kind = 'iack') / nullif(count(kind), 0) AS iack_pct,
              median(ack_sh_gap_ms) FILTER (WHERE kind = 'iack') AS median_iack_gap_ms"""
    return store.sql(f"""
        SELECT vantage, provider, {rows} FROM sp WHERE vantage IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT vantage, 'all' AS provider, {rows} FROM sp WHERE vantage IS NOT NULL GROUP BY ALL
        ORDER BY vantage, provider = 'all', probes DESC, provider""")


def vantage_section(store: Store, page: Page) -> None:
    """Write the section if the store holds probes from more than one vantage point."""
    if vantage_count(store) < 2:
        return
    page.section("scan-vantages", "Instant ACK by vantage point", 3)
    page.text("Each vantage point (a worker of <code>quicack scan --cluster</code>) probed its own shard of the "
              "list: a difference between vantages is one of network paths and of targets together. Shares are "
              "of classified probes; the gap is between the instant ACK and the ServerHello.")
    table = vantage_table(store)
    page.table(table)
    fig = go.Figure()
    for vantage in table["vantage"].unique(maintain_order=True):
        part = table.filter(pl.col("vantage") == vantage)
        fig.add_bar(x=[esc(p) for p in part["provider"]], y=part["iack_pct"].to_list(), name=esc(vantage))
    fig.update_layout(barmode="group", title="Instant ACK share by provider and vantage point (% of classified probes)",
                      yaxis_title="% IACK")
    page.figure(fig)
