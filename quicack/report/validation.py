"""The report's section on resumption, 0-RTT and the anti-amplification limit (issue 29, seed 002).

Theory of operation: everything is read from tables the ingest filled — ``probes`` (``scan
--resumption``: ticket, token, 0-RTT, both connections' TTFB), ``testbed_runs`` (resumed
attempts: 0-RTT, full and resumed TTFB per server and client), ``address_validation`` (the 3×
budget per connection), ``key_waits`` and, through :func:`quicack.store.keywaits.inflated_samples`,
the peer's RTT samples those waits inflated, and ``datagrams`` for the timelines.  Aggregates run
in DuckDB; the timelines draw one connection per *shape* (the server blocked at its budget; a trace
that ends blocked; a server that broke 3×; a block its instant ACK caused; 0-RTT accepted), each the first such connection of the
store, as cumulative bytes per side against time with the server's budget (3 × the client's bytes
until validation).  Nothing is written when the store holds none of it.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from quicack.report.page import Page, esc, has_table
from quicack.store.database import Store
from quicack.store.keywaits import inflated_samples

#: quantiles of the amplification factor shown per vantage point
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)

#: (shape, its condition on address_validation a, what it means)
SHAPES = (
    ("blocked", "a.blocked_count > 0 AND NOT a.ended_blocked AND a.zero_rtt <> 'accepted'",
     "the server stopped at 3 × the client's bytes with more to send, and went on once the client spoke"),
    ("ended blocked", "a.ended_blocked",
     "the trace ends with the server at its limit: nothing armed, nothing sent (idle timeout)"),
    ("3× exceeded", "a.limit_exceeded",
     "the server sent more than 3 × what it had received before validation"),
    ("instant ACK caused the block", "a.iack_caused_block",
     "without the bytes its instant ACK spent, the server would have sent what it waited to send"),
    ("0-RTT accepted", "a.zero_rtt = 'accepted'", "a resumed connection whose early data was accepted"),
)


def has_validation(store: Store) -> bool:
    return has_table(store, "address_validation") and bool(
        store.con.execute("SELECT count(*) FROM address_validation").fetchall()[0][0])


def validation_sections(store: Store, page: Page) -> None:
    """Write the section (the store holds address_validation rows)."""
    page.section("validation", "Resumption, 0-RTT and the anti-amplification limit")
    page.text("RFC 9000 §8.1: before it has validated the client's address (a Handshake packet from it, or a "
              "token) a server may send at most three times the UDP payload bytes it received. Per connection "
              "(<code>address_validation</code>): bytes each side sent before validation, whether the server reached "
              "the limit and was blocked there with more to send, and the 0-RTT packets seen. Client-side views "
              "are put in the server's order first (<code>clock_shift_ms</code>).")
    _resumption(store, page)
    _testbed_resumption(store, page)
    page.table(store.sql(f"""
        SELECT c.vantage, count(*) AS connections,
               count(*) FILTER (WHERE a.limit_reached) AS at_limit, count(*) FILTER (WHERE a.blocked_count > 0) AS blocked,
               count(*) FILTER (WHERE a.ended_blocked) AS ended_blocked, count(*) FILTER (WHERE a.limit_exceeded) AS exceeded_3x,
               count(*) FILTER (WHERE a.iack_bytes IS NOT NULL) AS instant_ack, count(*) FILTER (WHERE a.iack_caused_block) AS iack_caused_block,
               median(a.blocked_ms) FILTER (WHERE a.blocked_count > 0) AS median_blocked_ms,
               max(a.blocked_ms) AS max_blocked_ms,
               list_transform(quantile_cont(a.amplification_factor, {list(QUANTILES)}), lambda x: round(x, 2))
                   AS factor_quantiles
        FROM address_validation a JOIN connections c USING (connection_id)
        GROUP BY ALL ORDER BY 1"""))
    page.text(f"<i>factor_quantiles</i>: server ÷ client bytes before validation at the quantiles "
              f"{', '.join(f'{q:g}' for q in QUANTILES)}.")
    _inflated(store, page)
    _timelines(store, page)


def _resumption(store: Store, page: Page) -> None:
    """Outcomes of ``scan --resumption`` by server."""
    if not store.con.execute("SELECT count(*) FROM probes WHERE ticket_received IS NOT NULL").fetchall()[0][0]:
        return
    page.section("validation-resumption", "Resumption and 0-RTT by server", 3)
    page.table(store.sql("""
        SELECT coalesce(server_header, address || ':' || port) AS server, count(*) AS pairs,
               count(*) FILTER (WHERE ticket_received) AS tickets, max(ticket_lifetime_s) AS ticket_lifetime_s,
               max(ticket_max_early_data) AS max_early_data, count(*) FILTER (WHERE token_received) AS tokens,
               count(*) FILTER (WHERE session_resumed) AS resumed,
               count(*) FILTER (WHERE zero_rtt = 'accepted') AS zero_rtt_accepted,
               count(*) FILTER (WHERE zero_rtt = 'rejected') AS zero_rtt_rejected,
               count(*) FILTER (WHERE zero_rtt = 'not_offered') AS zero_rtt_not_offered,
               median(ttfb_ms) AS full_ttfb_ms, median(resumed_ttfb_ms) AS resumed_ttfb_ms,
               median(amplification_factor) AS amplification_factor
        FROM probes WHERE ticket_received IS NOT NULL GROUP BY ALL ORDER BY 1"""))


def _testbed_resumption(store: Store, page: Page) -> None:
    """Resumed testbed attempts (``resumption = true``): 0-RTT and the TTFB of both connections."""
    if not has_table(store, "testbed_runs") or not store.con.execute(
            "SELECT count(*) FROM testbed_runs WHERE resumption").fetchall()[0][0]:
        return
    page.section("validation-testbed-resumption", "Resumed connections in the testbed", 3)
    page.text("Each attempt: a full connection keeping the session ticket, then one resuming it with its GET in "
              "0-RTT, through the same relay. Where the early data is accepted and answered at once, the resumed "
              "connection's first response byte comes one round trip (2 × the one-way delay) earlier.")
    page.table(store.sql("""
        SELECT experiment, one_way_delay_ms, server, client, count(*) AS attempts,
               count(*) FILTER (WHERE zero_rtt = 'accepted') AS zero_rtt_accepted,
               count(*) FILTER (WHERE zero_rtt = 'rejected') AS zero_rtt_rejected,
               count(*) FILTER (WHERE zero_rtt = 'not_offered') AS zero_rtt_not_offered,
               median(full_ttfb_ms) FILTER (WHERE outcome = 'ok') AS full_ttfb_ms,
               median(ttfb_ms) FILTER (WHERE outcome = 'ok') AS resumed_ttfb_ms,
               median(full_ttfb_ms - ttfb_ms) FILTER (WHERE outcome = 'ok') AS saved_ms
        FROM testbed_runs WHERE resumption GROUP BY ALL ORDER BY 1, 2, 4, 3"""))


def _inflated(store: Store, page: Page) -> None:
    """Packets that waited for keys, and the peer samples they inflated."""
    if not has_table(store, "key_waits") or not store.con.execute("SELECT count(*) FROM key_waits").fetchall()[0][0]:
        return
    page.section("validation-key-waits", "Packets that waited for keys", 3)
    page.text("RFC 9000 §13.2.5 counts the ACK Delay from receipt; RFC 9002 §5.3 lets the peer subtract it only up "
              "to max_ack_delay once the handshake is confirmed. <i>from_receipt_rtt_ms</i>: the peer's sample with "
              "the whole delay since receipt taken off.")
    page.table(store.sql("""SELECT connection_id, receiver, source, packet_type, packet_number, wait_ms, ack_delay_ms,
            ack_delay_from_receipt_ms, uncovered_ms, max_ack_delay_ms, sample_inflation_ms
        FROM key_waits ORDER BY connection_id, buffered_event_index LIMIT 50"""))
    samples = inflated_samples(store.con)
    if samples:
        page.table(pl.DataFrame(samples))


def _timelines(store: Store, page: Page) -> None:
    """One connection per shape: cumulative bytes per side and the server's budget."""
    for shape, condition, meaning in SHAPES:
        found = store.con.execute(f"""SELECT a.connection_id, c.vantage, a.clock_shift_ms FROM address_validation a
            JOIN connections c USING (connection_id) WHERE {condition} ORDER BY c.vantage = 'server' DESC, 1 LIMIT 1""").fetchall()
        if not found:
            continue
        cid, vantage, shift = found[0]
        page.section(f"validation-shape-{shape.replace(' ', '-').replace('×', 'x')}", f"Shape: {shape}", 3)
        page.text(f"{esc(meaning)} — connection {cid} ({esc(vantage)}'s trace).")
        page.figure(_timeline(store, cid, shift or 0.0, shape))


def _timeline(store: Store, cid: int, shift: float, shape: str) -> go.Figure:
    rows = store.con.execute("""SELECT time_ms, sender, size_bytes FROM datagrams WHERE connection_id = ?
        ORDER BY time_ms, datagram_id""", [cid]).fetchall()
    validated = store.con.execute("SELECT validated_ms FROM address_validation WHERE connection_id = ?",
                                  [cid]).fetchall()[0][0]
    points = sorted(((t - (shift if sender == "server" else 0.0)), sender, size) for t, sender, size in rows)
    fig = go.Figure()
    totals = {"client": 0, "server": 0}
    series = {"client": ([], []), "server": ([], []), "budget": ([], [])}
    for t, sender, size in points:
        totals[sender] += size
        series[sender][0].append(t)
        series[sender][1].append(totals[sender])
        if sender == "client" and (validated is None or t < validated):
            series["budget"][0].append(t)
            series["budget"][1].append(3 * totals["client"])
    for name, (x, y) in series.items():
        fig.add_scatter(x=x, y=y, mode="lines+markers", name=name, line=dict(shape="hv", dash="dot" if name == "budget" else None))
    if validated is not None:
        fig.add_vline(x=validated, line_dash="dash", annotation_text="validated")
    fig.update_layout(title=f"{esc(shape)}: cumulative UDP payload bytes (server's order)",
                      xaxis_title="ms", yaxis_title="bytes")
    return fig
