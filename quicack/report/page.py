"""The page the reports are written on: sections, tables, plotly figures, one self-contained file.

Theory of operation: a :class:`Page` collects HTML parts and a table of contents; :meth:`Page.render`
puts plotly's JavaScript in once and returns one HTML document that works offline.  Everything
shown in a table goes through :func:`esc`; figure JSON comes from plotly's encoder, which writes
``<`` and ``/`` as ``\\u003c``/``\\u002f``, so no string from a trace or a server can close a
script element.  CDFs are computed in DuckDB as quantiles (:func:`cdf`), so their size does not grow
with the store.
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import plotly.offline
import polars as pl

from quicack.store.database import Store

#: Points of a CDF.
CDF_POINTS = 101
CLASS_ORDER = ["iack", "iack_ping", "wfc", "sh_before_ack", "no_ack", "retry", "version_negotiation",
               "failed", "unknown"]
CLASS_COLOURS = {"iack": "#1b9e77", "iack_ping": "#66a61e", "wfc": "#d95f02", "sh_before_ack": "#7570b3",
                 "no_ack": "#e7298a", "retry": "#a6761d", "version_negotiation": "#e6ab02",
                 "failed": "#666666", "unknown": "#bbbbbb"}


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


class Page:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.toc: list[tuple[str, str, int]] = []
        self.figures = 0

    def section(self, anchor: str, title: str, level: int = 2) -> None:
        self.toc.append((anchor, title, level))
        self.parts.append(f'<h{level} id="{esc(anchor)}">{esc(title)}</h{level}>')

    def text(self, paragraph: str) -> None:
        self.parts.append(f"<p>{paragraph}</p>")

    def table(self, frame: pl.DataFrame, links: dict[int, str] | None = None, link_column: str | None = None) -> None:
        if frame.height == 0:
            self.parts.append("<p class=empty>none</p>")
            return
        head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
        body = []
        for row in frame.iter_rows(named=True):
            cells = []
            for column, value in row.items():
                shown = fmt(value)
                if links and column == link_column and value in links:
                    shown = f'<a href="#{esc(links[value])}">{shown}</a>'
                cells.append(f"<td>{shown}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def figure(self, fig: go.Figure, height: int = 360) -> None:
        self.figures += 1
        fig.update_layout(template="none", height=height, margin=dict(l=60, r=20, t=40, b=50),
                          font=dict(family="system-ui, sans-serif", size=12))
        div = f"fig{self.figures}"
        self.parts.append(f'<div class="plot" id="{div}" data-traces="{len(fig.data)}"></div>'
                          f"<script>(function(f){{Plotly.newPlot({json.dumps(div)}, f.data, f.layout, "
                          f"{{responsive: true, displaylogo: false}});}})({fig.to_json()});</script>")

    def render(self, title: str, subtitle: str) -> str:
        toc = "".join(f'<li class="l{level}"><a href="#{esc(a)}">{esc(t)}</a></li>' for a, t, level in self.toc)
        return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
                f"<style>{_CSS}</style><script>{plotly.offline.get_plotlyjs()}</script></head><body>"
                f"<header><h1>{esc(title)}</h1><p>{subtitle}</p></header>"
                f"<nav><ul>{toc}</ul></nav><main>{''.join(self.parts)}</main></body></html>")


_CSS = """body{font-family:system-ui,sans-serif;margin:0;display:grid;grid-template-columns:16rem 1fr}
header{grid-column:1/3;background:#223;color:#fff;padding:.5rem 1.5rem}header p{margin:.2rem 0;color:#ccd}
nav{position:sticky;top:0;align-self:start;max-height:100vh;overflow:auto;padding:1rem;font-size:.85rem}
nav ul{list-style:none;padding:0}nav li.l3{padding-left:1rem}main{padding:0 1.5rem 3rem;min-width:0}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;
text-align:right}th{background:#eef}td:first-child,th:first-child{text-align:left}.plot{width:100%;max-width:70rem}
p.empty{color:#888}"""


def display(value) -> str:
    """A cell's text (not yet escaped)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def fmt(value) -> str:
    return esc(display(value))


def has_table(store: Store, name: str) -> bool:
    return bool(store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall()[0][0])


def cdf(store: Store, expr: str, where: str, group: str) -> pl.DataFrame:
    """Quantiles (CDF_POINTS) of ``expr`` per ``group``, computed in DuckDB."""
    qs = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
    return store.sql(f"""SELECT * FROM (SELECT g, unnest(quantile_cont(v, {qs})) AS value, unnest({qs}) AS p,
                                             any_value(n) AS n
        FROM (SELECT {group} AS g, ({expr}) AS v, count(*) OVER (PARTITION BY {group}) AS n
              FROM connections WHERE {where} AND ({expr}) IS NOT NULL)
        GROUP BY g) ORDER BY g, p""")


def cdf_figure(frame: pl.DataFrame, x_title: str, title: str) -> go.Figure:
    fig = go.Figure()
    for (group,), part in frame.group_by(["g"], maintain_order=True):
        n = part["n"][0]
        fig.add_scatter(x=part["value"].to_list(), y=part["p"].to_list(), mode="lines",
                        name=f"{esc(group)} (n={n})", line=dict(color=CLASS_COLOURS.get(str(group)), shape="hv"))
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title="fraction of connections")
    return fig


