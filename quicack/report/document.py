"""Self-contained HTML reports from a store: one file, plotly's JavaScript included once, offline.

Theory of operation: :func:`write_report` queries the store (aggregating in DuckDB, so a store of a
million probes still gives a report of a few MB: CDFs are quantiles, scatter plots are 2-D
histograms), turns each result into a plotly figure or an HTML table, and writes one page of
sections — overview, handshakes, scan (when the store holds probes), testbed (when it holds
``testbed_runs`` rows, :mod:`quicack.report.testbed`), Careful Resume (when it holds logged phase
changes: TTLB speedups and phase timelines, :mod:`quicack.report.resume`), the ACK-policy
experiments (:mod:`quicack.report.ackexperiment`), resumption, 0-RTT and the anti-amplification
limit (:mod:`quicack.report.validation`), ACK policy of transfers, and a
bounded number of per-connection sections linked from the overview (handshake sequence diagram,
RTT/PTO replay next to logged values, congestion window).  Every string that came from a trace or
a server is HTML-escaped in tables and in plot labels; figure JSON is embedded with ``<``/``/``
escaped (plotly's encoder does that), so nothing from a server can end a script element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import plotly.graph_objects as go
import polars as pl

from quicack.report import ackexperiment, ackpolicy
from quicack.report import peers as peerviews
from quicack.report import resume as resumereport
from quicack.report import scans as scanreport
from quicack.report import testbed as testbedreport
from quicack.report import validation as validationreport
from quicack.report.page import CDF_POINTS, CLASS_COLOURS, CLASS_ORDER, Page, cdf, cdf_figure, display, esc
from quicack.store.database import Store

#: Per-connection sections at most (they are the large part of a report).
DEFAULT_MAX_CONNECTIONS = 12
#: Packets drawn in a handshake sequence diagram.
SEQUENCE_PACKETS = 36


@dataclass
class Report:
    path: Path
    figures: int = 0
    sections: list[str] = field(default_factory=list)
    #: connections drawn one by one (at most max_connections), of ``stored_connections``
    connections: int = 0
    stored_connections: int = 0


# --- the report ------------------------------------------------------------------------------------

def write_report(store: Store, out: str | Path, *, now: datetime, title: str = "quicack report",
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Report:
    """Write the report of ``store`` to ``out`` (folders created); ``now`` stamps it."""
    out = Path(out)
    page = Page()
    report = Report(out)
    _overview(store, page)
    _handshakes(store, page)
    if scanreport.has_probes(store):
        scanreport.scan_sections(store, page)
        if peerviews.has_peer_probes(store):  # probes of the local peers (quicack peers scan)
            peerviews.report_sections(store, page)
    if testbedreport.has_testbed(store):  # attempts of quicack testbed run
        testbedreport.testbed_sections(store, page)
    if resumereport.has_careful_resume(store):  # Careful Resume phases (and testbed speedups)
        resumereport.resume_sections(store, page)
    if ackexperiment.has_ack_policy_runs(store):  # ACK-policy experiments (ack_policy_runs)
        ackexperiment.ack_experiment_sections(store, page)
    if validationreport.has_validation(store):  # address_validation rows (issue 29)
        validationreport.validation_sections(store, page)
    _ack_policy(store, page)
    report.connections = _connections(store, page, max_connections)
    counts = store.sql("SELECT (SELECT count(*) FROM files) AS files, (SELECT count(*) FROM connections) AS c").row(0)
    report.stored_connections = counts[1]
    subtitle = (f"{counts[0]} files, {counts[1]} connections · store {esc(store.path)} · "
                f"generated {esc(now.isoformat(timespec='seconds'))} by quicack")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page.render(title, subtitle), encoding="utf-8")
    report.figures = page.figures
    report.sections = [t for _, t, _ in page.toc]
    return report


def _overview(store: Store, page: Page) -> None:
    page.section("overview", "Overview")
    page.table(store.sql("""SELECT vantage, implementation, count(*) AS connections,
            sum(CASE WHEN handshake_class IN ('iack', 'iack_ping') THEN 1 ELSE 0 END) AS iack,
            sum(CASE WHEN handshake_class = 'wfc' THEN 1 ELSE 0 END) AS wfc,
            sum(CASE WHEN handshake_class NOT IN ('iack', 'iack_ping', 'wfc') THEN 1 ELSE 0 END) AS other,
            sum(replay_samples) AS rtt_samples
        FROM connections GROUP BY ALL ORDER BY connections DESC, vantage, implementation"""))


def _handshakes(store: Store, page: Page) -> None:
    page.section("handshakes", "Handshakes: instant ACK or wait for the certificate")
    page.text("Class of each connection's handshake as its vantage point saw it (see "
              "<code>schemas/README.md</code>): <b>iack</b> — the server acknowledged the client's "
              "Initial in an Initial before the one carrying its ServerHello; <b>wfc</b> — ACK and "
              "ServerHello in one packet.")
    by = store.sql("""SELECT implementation, handshake_class AS class, count(*) AS n
                      FROM connections GROUP BY ALL""")
    if by.height:
        fig = go.Figure()
        totals = by.group_by("implementation").agg(pl.col("n").sum().alias("total"))
        shares = by.join(totals, on="implementation").with_columns((100 * pl.col("n") / pl.col("total")).alias("pct"))
        for klass in CLASS_ORDER:
            part = shares.filter(pl.col("class") == klass)
            if part.height:
                fig.add_bar(x=[esc(v) for v in part["implementation"]], y=part["pct"].to_list(), name=klass,
                            marker_color=CLASS_COLOURS[klass], customdata=part["n"].to_list(),
                            hovertemplate="%{x}: %{y:.1f}% (%{customdata})")
        fig.update_layout(barmode="stack", title="Handshake class by implementation (% of connections)",
                          yaxis_title="% of connections")
        page.figure(fig)
    page.table(store.sql("""SELECT handshake_class AS class, handshake_reason AS reason, count(*) AS connections,
            median(ack_sh_gap_ms) AS median_gap_ms, median(first_ack_delay_ms) AS median_first_ack_delay_ms,
            median(first_rtt_sample_ms) AS median_first_sample_ms, median(first_pto_ms) AS median_first_pto_ms,
            median(counterfactual_first_pto_ms) AS median_counterfactual_pto_ms
        FROM connections GROUP BY ALL ORDER BY connections DESC, class, reason"""))
    gaps = cdf(store, "ack_sh_gap_ms", "handshake_class IN ('iack', 'iack_ping', 'sh_before_ack')", "handshake_class")
    if gaps.height:
        page.figure(cdf_figure(gaps, "ACK→ServerHello gap (ms)", "CDF of the ACK→ServerHello gap by class"))
    delays = cdf(store, "first_ack_delay_ms", "first_ack_delay_ms IS NOT NULL", "implementation")
    if delays.height:
        page.figure(cdf_figure(delays, "first ACK delay (ms)", "First ACK delay reported by the server, by implementation"))
    change = cdf(store, "counterfactual_first_pto_ms - first_pto_ms",
                  "counterfactual_first_pto_ms IS NOT NULL", "handshake_class")
    if change.height:
        page.text("Counterfactual first PTO: for <b>iack</b> connections what the client's first PTO "
                  "would have been with WFC (a positive change is what the instant ACK saved); for "
                  "<b>wfc</b> what it would have been with an instant ACK (negative: what waiting cost).")
        page.figure(cdf_figure(change, "counterfactual − actual first PTO (ms)",
                                "First PTO under the other server behaviour"))
    tps = store.sql("""SELECT implementation, server_max_ack_delay_ms, server_ack_delay_exponent,
                              ack_frequency_supported, count(*) AS connections
                       FROM connections WHERE server_max_ack_delay_ms IS NOT NULL OR server_ack_delay_exponent IS NOT NULL
                       GROUP BY ALL ORDER BY connections DESC LIMIT 50""")
    if tps.height:
        page.section("transport-parameters", "Server transport parameters", 3)
        page.table(tps)


# --- ACK policy -------------------------------------------------------------------------------------

#: Connections with at least this many packets are shown as transfers.
TRANSFER_MIN_PACKETS = 100
TRANSFERS_SHOWN = 8


def _policy_packets(store: Store, cid: int) -> pl.DataFrame:
    return store.sql("""SELECT p.time_ms, p.sender, p.size_bytes, p.datagram_id, p.ack_eliciting,
               a.connection_id IS NOT NULL AS has_ack, a.ranges AS ack_ranges
        FROM packets p LEFT JOIN (SELECT connection_id, event_index, max(len(acked_ranges)) AS ranges
                                  FROM frames WHERE connection_id = $cid AND frame_type = 'ack' GROUP BY ALL) a
          USING (connection_id, event_index)
        WHERE p.connection_id = $cid ORDER BY p.event_index""", {"cid": cid})


def _frequency_frames(store: Store, cid: int) -> pl.DataFrame:
    return store.sql("""SELECT p.time_ms, p.sender, f.frame_type, f.sequence_number, f.ack_eliciting_threshold,
               f.request_max_ack_delay_ms, f.reordering_threshold
        FROM frames f JOIN packets p USING (connection_id, event_index)
        WHERE f.connection_id = $cid AND f.frame_type IN ('ack_frequency', 'immediate_ack')""", {"cid": cid})


def _ack_policy(store: Store, page: Page) -> None:
    transfers = store.sql(f"""SELECT connection_id, vantage, implementation, count(*) AS packets
        FROM packets JOIN connections USING (connection_id)
        GROUP BY ALL HAVING count(*) >= {TRANSFER_MIN_PACKETS}
        ORDER BY packets DESC, connection_id LIMIT {TRANSFERS_SHOWN}""")
    if transfers.height == 0:
        return
    page.section("ack-policy", "ACK policy of transfers")
    page.text("ACK ratio = ack-eliciting packets of the data sender per packet of the receiver that carries "
              "an ACK (2 means 1:2). Wire bytes add 28 bytes of IPv4+UDP header per datagram.")
    rows = []
    largest = None
    for row in transfers.iter_rows(named=True):
        packets = _policy_packets(store, row["connection_id"])
        policy = ackpolicy.summarize(packets)
        if policy is None:
            continue
        largest = largest or (row["connection_id"], packets, policy)
        rows.append({"connection": row["connection_id"], "vantage": row["vantage"],
                     "implementation": row["implementation"], "data sender": policy.forward_sender,
                     "ACK ratio": policy.ack_ratio, "ACKs/s": policy.acks_per_second,
                     "forward wire bytes": policy.forward_wire_bytes, "return wire bytes": policy.return_wire_bytes,
                     "return share %": policy.return_share_pct,
                     "median return packet bytes": policy.median_return_packet_bytes,
                     "median ACK ranges": policy.median_ack_ranges})
    page.table(pl.DataFrame(rows), links={r["connection"]: f"conn-{r['connection']}" for r in rows},
               link_column="connection")
    if largest is None:
        return
    cid, packets, policy = largest
    page.section(f"ack-policy-{cid}", f"Connection {cid}: ACK policy over time", 3)
    asked = ackpolicy.requests(packets, _frequency_frames(store, cid), policy.forward_sender)
    if asked.height:
        page.text("ACK_FREQUENCY frames the data sender sent (draft-ietf-quic-ack-frequency-12): the ratio each "
                  "asked for (Ack-Eliciting Threshold + 1) and the ACK ratio measured until the next one.")
        page.table(asked)
    bin_ms = max(policy.duration_ms / 200, 1.0)
    series = ackpolicy.over_time(packets, policy.forward_sender, bin_ms)
    fig = go.Figure()
    fig.add_scatter(x=series["bin_ms"].to_list(), y=series["ack_ratio"].to_list(), name="ACK ratio", mode="lines+markers")
    fig.add_scatter(x=series["bin_ms"].to_list(), y=series["acks_per_second"].to_list(), name="ACKs/s",
                    yaxis="y2", mode="lines")
    fig.update_layout(title=f"ACK ratio and ACK rate ({bin_ms:.0f} ms bins)", xaxis_title="time (ms)",
                      yaxis_title="ACK ratio", yaxis2=dict(title="ACKs per second", overlaying="y", side="right"))
    page.figure(fig)
    ret = packets.filter((pl.col("sender") != policy.forward_sender) & pl.col("size_bytes").is_not_null())
    if ret.height:
        sizes = ret["size_bytes"].sort()
        qs = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
        fig = go.Figure(go.Scatter(x=[sizes.quantile(q, "nearest") for q in qs], y=qs, mode="lines",
                                   line=dict(shape="hv"), name="return packets"))
        fig.update_layout(title="Return-path packet size", xaxis_title="QUIC packet bytes",
                          yaxis_title="fraction of return packets")
        page.figure(fig)
    ranges = packets.filter(pl.col("has_ack") & (pl.col("sender") != policy.forward_sender))["ack_ranges"].drop_nulls()
    if len(ranges):
        counts = ranges.value_counts().sort(ranges.name)
        fig = go.Figure(go.Bar(x=counts[ranges.name].to_list(), y=counts["count"].to_list(), name="ACK frames"))
        fig.update_layout(title="ACK ranges per ACK frame (return path)", xaxis_title="ranges",
                          yaxis_title="ACK frames")
        page.figure(fig)


# --- per connection ---------------------------------------------------------------------------------

def _connections(store: Store, page: Page, limit: int) -> int:
    """A bounded number of connections: the classes mixed (round robin), most samples first."""
    chosen = store.sql(f"""SELECT connection_id FROM (
            SELECT connection_id, row_number() OVER (PARTITION BY handshake_class
                                                     ORDER BY replay_samples DESC NULLS LAST, connection_id) AS r
            FROM connections WHERE handshake_class IS DISTINCT FROM 'unknown'
               OR EXISTS (SELECT 1 FROM packets p WHERE p.connection_id = connections.connection_id))
        ORDER BY r, connection_id LIMIT {int(limit)}""")["connection_id"].to_list()
    if not chosen:
        return 0
    page.section("connections", "Connections")
    listing = store.sql(f"""SELECT c.connection_id AS connection, c.vantage, c.implementation, f.path AS file,
            c.handshake_class AS class, c.handshake_reason AS reason, c.ack_sh_gap_ms AS gap_ms,
            c.first_rtt_sample_ms, c.first_pto_ms, c.replay_samples
        FROM connections c JOIN files f USING (file_id)
        WHERE c.connection_id IN ({', '.join(map(str, chosen))}) ORDER BY c.connection_id""")
    page.table(listing, links={c: f"conn-{c}" for c in chosen}, link_column="connection")
    for cid in sorted(chosen):
        _connection(store, page, cid)
    return len(chosen)


def _connection(store: Store, page: Page, cid: int) -> None:
    info = store.sql("SELECT * FROM connections WHERE connection_id = $cid", {"cid": cid}).row(0, named=True)
    page.section(f"conn-{cid}", f"Connection {cid}: {info['vantage']} view, {info['implementation']}, "
                                f"{info['handshake_class']}", 3)
    facts = {k: info[k] for k in ("odcid", "handshake_class", "handshake_reason", "handshake_notes", "ack_sh_gap_ms",
                                  "first_ack_delay_ms", "first_ack_frames", "first_server_packet_ms",
                                  "server_hello_ms", "handshake_complete_ms", "first_response_byte_ms",
                                  "first_rtt_sample_ms", "first_pto_ms", "counterfactual_first_pto_ms",
                                  "server_max_ack_delay_ms")}
    page.table(pl.DataFrame({"figure": list(facts), "value": [display(v) for v in facts.values()]}))
    fig = _sequence_figure(store, cid, info)
    if fig is not None:
        page.figure(fig, height=fig.layout.height)
    fig = _rtt_figure(store, cid)
    if fig is not None:
        page.figure(fig)
    # a connection that logged Careful Resume phases: its cwnd with the phases and the replayed RTT
    fig = resumereport.timeline_figure(store, cid, f"connection {cid}")
    if fig is not None:
        page.figure(fig)
    fig = _cwnd_figure(store, cid) if fig is None else None
    if fig is not None:
        page.figure(fig, height=300)


def _sequence_figure(store: Store, cid: int, info: dict) -> go.Figure | None:
    """A ladder diagram: one row per packet (and PTO expiry) in the order the vantage point
    logged them, an arrow from the sender's lane to the receiver's; the label gives the logged
    time, packet type and number, and frames.  Rows instead of a time axis keep packets a
    microsecond apart readable; the time is in every label."""
    packets = store.sql(f"""SELECT p.event_index, p.time_ms, p.sender, p.packet_type, p.packet_number,
            p.datagram_id, string_agg(f.frame_type, '+' ORDER BY f.position) AS frames
        FROM packets p LEFT JOIN frames f USING (connection_id, event_index)
        WHERE p.connection_id = $cid
        GROUP BY ALL ORDER BY p.event_index LIMIT {SEQUENCE_PACKETS}""", {"cid": cid})
    if packets.height == 0:
        return None
    last = packets["event_index"].max()
    timers = store.sql("""SELECT event_index, time_ms FROM timers WHERE connection_id = $cid AND event_index <= $last
                          AND lower(event_type) = 'expired' AND lower(coalesce(timer_type, '')) IN ('pto', 'probe')""",
                       {"cid": cid, "last": last})
    items = [("packet", r) for r in packets.iter_rows(named=True)] + [("pto", r) for r in timers.iter_rows(named=True)]
    items.sort(key=lambda item: item[1]["event_index"])
    lane = {"client": 0.0, "server": 1.0}
    me = lane.get(info["vantage"], 0.0)
    fig = go.Figure()
    xs: dict[str, list] = {"client": [], "server": []}
    ys: dict[str, list] = {"client": [], "server": []}
    texts: dict[str, list] = {"client": [], "server": []}
    previous_datagram = None
    for row_number, (kind, row) in enumerate(items):
        if kind == "pto":
            fig.add_scatter(x=[me], y=[row_number], mode="markers+text", text=[f"PTO fired at {row['time_ms']:.3f} ms"],
                            textposition="middle right" if me == 0 else "middle left", showlegend=False,
                            marker=dict(symbol="x", size=11, color="red"))
            continue
        sender = row["sender"] if row["sender"] in lane else "client"
        x0 = lane[sender]
        coalesced = "⤷ " if row["datagram_id"] == previous_datagram else ""
        previous_datagram = row["datagram_id"]
        number = row["packet_number"] if row["packet_number"] is not None else ""
        fig.add_annotation(x=1 - x0, y=row_number + 0.7, ax=x0, ay=row_number, xref="x", yref="y", axref="x",
                           ayref="y", showarrow=True, arrowhead=2, arrowwidth=1.5,
                           arrowcolor="#d95f02" if sender == "server" else "#1f78b4", text="")
        xs[sender].append(x0)
        ys[sender].append(row_number)
        texts[sender].append(esc(f"{coalesced}{row['time_ms']:.3f} ms  {row['packet_type']} {number}: "
                                 f"{row['frames'] or '(no frames logged)'}"))
    for sender, colour in (("client", "#1f78b4"), ("server", "#d95f02")):
        if xs[sender]:
            fig.add_scatter(x=xs[sender], y=ys[sender], mode="markers+text", text=texts[sender], name=f"from {sender}",
                            textposition="middle right" if sender == "client" else "middle left",
                            marker=dict(color=colour, size=7), textfont=dict(size=10, color=colour), hoverinfo="text")
    fig.update_layout(title=f"First {packets.height} packets, in the order the {esc(info['vantage'])} logged them "
                            "(⤷: coalesced in the previous packet's datagram)",
                      xaxis=dict(tickvals=[0, 1], ticktext=["client", "server"], range=[-0.05, 1.05], side="top"),
                      yaxis=dict(autorange="reversed", visible=False), showlegend=False)
    fig.update_layout(height=max(260, 26 * len(items) + 120))
    return fig


def _rtt_figure(store: Store, cid: int) -> go.Figure | None:
    s = store.sql("SELECT * FROM rtt_samples WHERE connection_id = $cid ORDER BY event_index", {"cid": cid})
    if s.height == 0:
        return None
    t = s["time_ms"].to_list()
    fig = go.Figure()
    for column, name, dash in (("latest_rtt_ms", "latest_rtt", None), ("smoothed_rtt_ms", "smoothed_rtt", None),
                               ("min_rtt_ms", "min_rtt", None), ("pto_ms", "PTO (replay)", None),
                               ("logged_latest_rtt_ms", "latest_rtt (logged)", "dot"),
                               ("logged_smoothed_rtt_ms", "smoothed_rtt (logged)", "dot")):
        values = s[column]
        if values.null_count() < len(values):
            fig.add_scatter(x=t, y=values.to_list(), name=name, mode="lines+markers",
                            line=dict(dash=dash, shape="hv"), marker=dict(size=4))
    fig.update_layout(title="RTT estimate and PTO: RFC 9002 replay vs logged", xaxis_title="time (ms)",
                      yaxis_title="ms")
    return fig


def _cwnd_figure(store: Store, cid: int) -> go.Figure | None:
    m = store.sql("""SELECT time_ms, congestion_window_bytes, bytes_in_flight_bytes FROM logged_metrics
                     WHERE connection_id = $cid AND (congestion_window_bytes IS NOT NULL OR bytes_in_flight_bytes IS NOT NULL)
                     ORDER BY event_index""", {"cid": cid})
    if m.height == 0:
        return None
    fig = go.Figure()
    for column, name in (("congestion_window_bytes", "cwnd"), ("bytes_in_flight_bytes", "bytes in flight")):
        if m[column].null_count() < m.height:
            part = m.filter(pl.col(column).is_not_null())
            fig.add_scatter(x=part["time_ms"].to_list(), y=part[column].to_list(), name=name, mode="lines",
                            line=dict(shape="hv"))
    fig.update_layout(title="Congestion window and bytes in flight (logged)", xaxis_title="time (ms)",
                      yaxis_title="bytes")
    return fig
