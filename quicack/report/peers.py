"""Scans of the local QUIC peers, seen three ways: the scanner's client qlog, the capture of the
scan and the peer's own server qlog.

Theory of operation: a probe of a known peer (:data:`quicack.lab.peers.PEERS`) is a probe of
``<peer>.localhost`` on a loopback address (:func:`quicack.lab.peers.probe_domain`; ``quicack peers
scan`` and the peer tests scan exactly that).  Its three connections are paired in the store: the
client view is ``probes.connection_id``; the capture's connection (vantage ``network``) has the
same ODCID; the server's own view (vantage ``server``) has the same ODCID too, except quinn's,
whose qlog is keyed by the client's source connection ID (``group_id`` = ``probes.cid_tag``).

From these pairs:

* :func:`first_ack_delays` — the table of the ReACKed seed paper, "acknowledgment delay of the
  first ACK received from QUIC servers": per peer and repetition, the ACK delay the server reported
  in its first ACK in an Initial and in a Handshake packet (decoded as on the wire: Initial with
  exponent 3), from the capture where there is one, else from the client qlog; next to it the
  server's turnaround on the wire (client Initial → first server datagram), which the reported
  delay does not have to match (quic-go and ngtcp2 always send 0 in Initial/Handshake ACKs);
* :func:`rtt_comparison` — the server's RTT estimator: the RFC 9002 replay of the server's own
  qlog (``rtt_samples``) and the replay of the capture from the server's side
  (:func:`quicack.store.analysis.replay_view`, wire times), each sample next to the values the server
  logged after the same ACK, with the differences.  Why they differ, per peer: schemas/README.md,
  ``rtt_samples``, "Known systematic differences".

Everything is computed from the store on demand (nothing is written but temp tables), so it works
on a read-only store and on stores merged from several scans.  ``format_*`` return text for the
CLI and the tests; :func:`report_sections` adds them to an HTML report.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import polars as pl

from quicack.store import analysis
from quicack.lab import peers
from quicack.report.page import Page, esc
from quicack.store.database import Store

#: Columns of :func:`rtt_comparison` compared replay − logged.
METRICS = ("latest_rtt", "min_rtt", "smoothed_rtt", "rttvar", "pto")

#: The seed's table (issue 27): the ACK delay (ms) of the first ACK each server stack reported,
#: as text ("~14": it varied; msquic sent no ACK in its first flight).  A peer names its row
#: (:attr:`quicack.lab.peers.Peer.seed`; Caddy: its quic-go).
SEED_FIRST_ACK_MS = {
    "aioquic": "3.3", "go-x-net": "0", "haproxy": "1.0", "kwik": "0", "lsquic": "1.2", "mvfst": "0.8",
    "neqo": "0", "nginx": "0", "ngtcp2": "0", "picoquic": "0.8", "quic-go": "0", "quiche": "1.4",
    "quinn": "0.4", "s2n-quic": "~14", "xquic": "1.3", "msquic": "no ACK",
}


#: Printed under the table when the peer is in it: what the decoded value means for that stack.
TABLE_NOTES = {
    "s2n-quic": "s2n-quic encodes Initial/Handshake ACK delays with exponent 0 but announces 3: "
                "as decoded, 8 × the time it held the ACK (docs/peers.md)",
    "go-x-net": "go-x-net speaks hq-interop (x/net has no HTTP/3); its 0 is the same loop turn "
                "receiving and answering",
}


def seed_value(peer: str) -> str:
    """The seed's first ACK delay for a peer's stack, or '-' when the seed had none."""
    p = peers.PEERS.get(peer)
    return SEED_FIRST_ACK_MS.get(p.seed if p and p.seed else peer, "-")


def _known_sql() -> str:
    rows = ", ".join(f"('{peers.probe_domain(name)}', '{name}')" for name in peers.PEERS)
    return f"SELECT * FROM (VALUES {rows}) AS k(domain, peer)"


def has_peer_probes(store: Store) -> bool:
    found = store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'probes'").fetchall()[0][0]
    if not found:
        return False
    return store.con.execute(f"""SELECT count(*) > 0 FROM probes p JOIN ({_known_sql()}) k USING (domain)
                                 WHERE p.connection_id IS NOT NULL""").fetchall()[0][0]


def peer_probes(store: Store, runs: list[str] | None = None) -> pl.DataFrame:
    """One row per probe of a known peer (of scan ``runs`` if given): peer, run, repetition
    (0-based), outcome, the client's connection (``client_cid``), the capture's (``capture_cid``)
    and the server's (``server_cid``), NULL where the store has no such view."""
    only = "" if runs is None else "AND r.name IN (SELECT unnest($runs))"
    return store.sql(f"""
        WITH pp AS (
            SELECT k.peer, r.name AS run, p.run_id, p.repetition, p.cid_tag, p.outcome,
                   p.connection_id AS client_cid, c.odcid
            FROM probes p JOIN runs r USING (run_id) JOIN ({_known_sql()}) k USING (domain)
            LEFT JOIN connections c ON c.connection_id = p.connection_id
            WHERE (p.address LIKE '127.%' OR p.address = '::1') {only})
        SELECT pp.*,
               (SELECT max(n.connection_id) FROM connections n
                WHERE n.vantage = 'network' AND n.odcid = pp.odcid) AS capture_cid,
               (SELECT max(s.connection_id) FROM connections s
                WHERE s.vantage = 'server' AND (s.odcid = pp.odcid OR s.group_id = pp.cid_tag)) AS server_cid
        FROM pp ORDER BY pp.peer, pp.run_id, pp.repetition""", None if runs is None else {"runs": list(runs)})


# --- first ACK delays ------------------------------------------------------------------------------

def first_ack_delays(store: Store, runs: list[str] | None = None) -> pl.DataFrame:
    """Per probe of a known peer: the ACK delay of the server's first ACK in an Initial packet and
    in a Handshake packet (ms; NULL: none), from the capture (``source``) or else the client qlog,
    the packet type of the first ACK of all, the client view's handshake class and ACK→ServerHello
    gap, and the server's turnaround on the wire (ms from the client's first Initial to the
    server's first datagram, in the capture)."""
    probes = peer_probes(store, runs)
    if probes.height == 0:
        return pl.DataFrame()
    store.con.register("pv_probes", probes.to_arrow())
    try:
        return store.sql("""
            WITH v AS (
                SELECT *, coalesce(capture_cid, client_cid) AS view_cid,
                       CASE WHEN capture_cid IS NOT NULL THEN 'capture' ELSE 'client qlog' END AS source
                FROM pv_probes),
            acks AS (
                SELECT p.connection_id, p.packet_number_space AS space,
                       arg_min(f.ack_delay_ms, p.event_index) AS delay_ms, min(p.event_index) AS at
                FROM packets p JOIN frames f USING (connection_id, event_index)
                WHERE p.connection_id IN (SELECT view_cid FROM v) AND p.sender = 'server'
                  AND f.frame_type = 'ack' AND p.packet_number_space IN ('initial', 'handshake')
                GROUP BY ALL),
            wire AS (
                SELECT connection_id,
                       min(epoch_ms) FILTER (WHERE sender = 'server') - min(epoch_ms) FILTER (WHERE sender = 'client')
                           AS turnaround_ms
                FROM packets WHERE connection_id IN (SELECT capture_cid FROM v) GROUP BY ALL)
            SELECT v.peer, v.run, v.repetition + 1 AS repetition, c.handshake_class, c.ack_sh_gap_ms,
                   CASE WHEN i.at <= coalesce(h.at, i.at) THEN 'initial' ELSE 'handshake' END AS first_ack_packet,
                   i.delay_ms AS initial_ack_delay_ms, h.delay_ms AS handshake_ack_delay_ms, v.source,
                   w.turnaround_ms
            FROM v LEFT JOIN connections c ON c.connection_id = v.client_cid
            LEFT JOIN acks i ON i.connection_id = v.view_cid AND i.space = 'initial'
            LEFT JOIN acks h ON h.connection_id = v.view_cid AND h.space = 'handshake'
            LEFT JOIN wire w ON w.connection_id = v.capture_cid
            ORDER BY v.peer, v.run_id, v.repetition""")
    finally:
        store.con.unregister("pv_probes")


def format_first_ack_delays(table: pl.DataFrame) -> str:
    """The seed paper's layout: one line per peer (and run), the repetitions side by side, for
    Initial and Handshake packets; then the client view's class (every class seen, most common
    first), the median ACK→ServerHello gap, the wire turnaround and the seed's value."""
    if table.height == 0:
        return "no probes of known peers in this store\n"
    runs = table.group_by(["peer", "run"], maintain_order=True).agg(pl.all())
    reps = max(len(r) for r in runs["repetition"])

    def cells(values) -> str:
        out = ["-" if v is None else f"{v:.3f}" for v in values]
        return " ".join(f"{c:>7}" for c in out + [""] * (reps - len(out)))

    width = 8 * reps - 1
    numbers = " ".join(f"{i:>7}" for i in range(1, reps + 1))
    lines = ["Acknowledgment delay of the first ACK received from each peer [ms], per repetition "
             "(as decoded from the wire; - = none), next to the seed's",
             f"{'peer':<9} {'Initial packet':^{width}}   {'Handshake packet':^{width}}   {'class':<9} "
             f"{'ACK→SH':>7}   {'turnaround on the wire':^{width}}   {'seed':>6}   source",
             f"{'':<9} {numbers}   {numbers}   {'':<9} {'gap':>7}   {numbers}"]
    for row in runs.iter_rows(named=True):
        lines.append(f"{row['peer']:<9} {cells(row['initial_ack_delay_ms'])}   {cells(row['handshake_ack_delay_ms'])}   "
                     f"{_classes(row['handshake_class']):<9} {_median(row['ack_sh_gap_ms']):>7}   "
                     f"{cells(row['turnaround_ms'])}   {seed_value(row['peer']):>6}   "
                     f"{', '.join(sorted(set(row['source'])))}")
    lines.append("stacks: " + "; ".join(f"{name}: {peers.PEERS[name].stack}"
                                        for name in dict.fromkeys(table["peer"])))
    lines += [f"note: {TABLE_NOTES[name]}" for name in dict.fromkeys(table["peer"]) if name in TABLE_NOTES]
    return "\n".join(lines) + "\n"


def _classes(values) -> str:
    """Every class seen, most common first ('wfc', 'iack/wfc'); '-' when none."""
    counts: dict[str, int] = {}
    for v in values:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    return "/".join(sorted(counts, key=lambda c: -counts[c])) or "-"


def _median(values) -> str:
    present = sorted(v for v in values if v is not None)
    if not present:
        return "-"
    mid = len(present) // 2
    value = present[mid] if len(present) % 2 else (present[mid - 1] + present[mid]) / 2
    return f"{value:.3f}"


# --- the server's RTT estimator: replay vs logged ----------------------------------------------------

def rtt_comparison(store: Store, runs: list[str] | None = None) -> pl.DataFrame:
    """Per probe of a known peer and per RTT sample of the *server's* estimator, from two replays:
    ``server qlog`` (the stored replay of the peer's own qlog, ``rtt_samples``) and ``capture``
    (the capture replayed from the server's side, wire times).  Each sample: space, largest
    acknowledged, the ACK delay it carried and the part subtracted, the replay's latest (raw and
    adjusted), min, smoothed, rttvar and PTO, the values the peer logged after the same ACK
    (``logged_*``; ``logged_pto_ms`` is implied: logged smoothed + max(4 × logged rttvar, 1 ms),
    plus the max_ack_delay term the replay used) and ``*_diff_ms`` = replay − logged."""
    probes = peer_probes(store, runs)
    rows: list[dict] = []
    for probe in probes.iter_rows(named=True):
        base = {"peer": probe["peer"], "run": probe["run"], "repetition": probe["repetition"] + 1}
        if probe["server_cid"] is not None:
            for sample in store.con.execute("""
                    SELECT packet_number_space, largest_acknowledged, ack_delay_ms, ack_delay_used_ms,
                           latest_rtt_ms, adjusted_rtt_ms, min_rtt_ms, smoothed_rtt_ms, rttvar_ms, pto_ms,
                           logged_latest_rtt_ms, logged_min_rtt_ms, logged_smoothed_rtt_ms, logged_rttvar_ms
                    FROM rtt_samples WHERE connection_id = ? ORDER BY event_index""",
                                            [probe["server_cid"]]).fetchall():
                rows.append({**base, "replay": "server qlog", **_sample_row(sample)})
        if probe["capture_cid"] is not None:
            for sample in _capture_samples(store, probe["capture_cid"], probe["server_cid"]):
                rows.append({**base, "replay": "capture", **_sample_row(sample)})
    if not rows:
        return pl.DataFrame()
    frame = pl.DataFrame(rows, infer_schema_length=None)
    frame = frame.with_columns(pl.col([c for c in frame.columns if c.endswith("_ms")]).cast(pl.Float64))
    frame = frame.with_columns(pl.int_range(1, pl.len() + 1).over(["peer", "run", "repetition", "replay"]).alias("sample"))
    first = ["peer", "run", "repetition", "replay", "sample"]
    return frame.select(first + [c for c in frame.columns if c not in first])


def _sample_row(s) -> dict:
    (space, largest, ack_delay, used, latest, adjusted, min_rtt, smoothed, rttvar, pto,
     l_latest, l_min, l_smoothed, l_var) = s
    l_pto = None
    if l_smoothed is not None and l_var is not None and pto is not None:
        extra = pto - (smoothed + max(4 * rttvar, 1.0))  # the max_ack_delay term of the replay
        l_pto = l_smoothed + max(4 * l_var, 1.0) + extra
    row = {"space": space, "largest_acknowledged": largest, "ack_delay_ms": ack_delay, "ack_delay_used_ms": used,
           "latest_rtt_ms": latest, "adjusted_rtt_ms": adjusted, "min_rtt_ms": min_rtt,
           "smoothed_rtt_ms": smoothed, "rttvar_ms": rttvar, "pto_ms": pto,
           "logged_latest_rtt_ms": l_latest, "logged_min_rtt_ms": l_min,
           "logged_smoothed_rtt_ms": l_smoothed, "logged_rttvar_ms": l_var, "logged_pto_ms": l_pto}
    for m in METRICS:
        a, b = row[f"{m}_ms"], row[f"logged_{m}_ms"]
        row[f"{m}_diff_ms"] = None if a is None or b is None else a - b
    return row


def _capture_samples(store: Store, capture_cid: int, server_cid: int | None) -> list[tuple]:
    """The capture replayed as the server, each sample with the metrics the server logged after
    the same ACK (matched by the ACK packet's space and number in the server's own qlog)."""
    con = store.con
    replay = analysis.replay_view(con, capture_cid, "server")
    if not replay.samples:
        return []
    ack_packet = dict(((e, (space, pn)) for e, space, pn in con.execute(
        "SELECT event_index, packet_number_space, packet_number FROM packets WHERE connection_id = ?",
        [capture_cid]).fetchall()))
    logged = _LoggedMetrics(con, server_cid) if server_cid is not None else None
    at = [logged.received_at(*ack_packet[s.event_index]) if logged else None for s in replay.samples]
    out = []
    for i, s in enumerate(replay.samples):
        later = [e for e in at[i + 1:] if e is not None]
        values = logged.after(at[i], later[0] if later else None) if logged and at[i] is not None else None
        out.append((s.space, s.largest_acknowledged, s.ack_delay_ms, s.ack_delay_used_ms, s.latest_rtt_ms,
                    s.adjusted_rtt_ms, s.min_rtt_ms, s.smoothed_rtt_ms, s.rttvar_ms, s.pto_ms,
                    *(values or (None, None, None, None))))
    return out


class _LoggedMetrics:
    """A server qlog's received packets and RTT metrics, to find what it logged after an ACK."""

    def __init__(self, con, cid: int):
        received = con.execute("""SELECT event_index, packet_number_space, packet_number, datagram_id FROM packets
            WHERE connection_id = ? AND direction = 'received' ORDER BY event_index""", [cid]).fetchall()
        self._by_packet = {(space, pn): e for e, space, pn, _ in received}
        self._received = [e for e, *_ in received]
        self._datagram = {e: d for e, _, _, d in received}
        # forward-filled: quic-go and quinn log only the fields that changed
        rows = con.execute("""SELECT event_index, latest_rtt_ms IS NOT NULL OR smoothed_rtt_ms IS NOT NULL,
                   last_value(latest_rtt_ms IGNORE NULLS) OVER w, last_value(min_rtt_ms IGNORE NULLS) OVER w,
                   last_value(smoothed_rtt_ms IGNORE NULLS) OVER w, last_value(rtt_variance_ms IGNORE NULLS) OVER w
            FROM logged_metrics WHERE connection_id = ?
            WINDOW w AS (ORDER BY event_index ROWS UNBOUNDED PRECEDING) ORDER BY event_index""", [cid]).fetchall()
        self._metrics = [(r[0], r[2:]) for r in rows if r[1]]
        self._metric_at = [e for e, _ in self._metrics]
        quirks = con.execute("SELECT quirks FROM connections WHERE connection_id = ?", [cid]).fetchall()[0][0] or []
        self._before = any("metrics_before_packet_received" in q for q in quirks)

    def received_at(self, space: str, pn: int) -> int | None:
        return self._by_packet.get((space, pn))

    def after(self, at: int, next_sample_at: int | None) -> tuple | None:
        """The metrics logged for the ACK in received packet ``at``: the first RTT metrics after
        it, before the next received datagram and before the next sample's packet (quinn logs once
        per datagram: the earlier ACKs of a datagram get none); with the quirk
        metrics_before_packet_received (quic-go), the last one after the previous received packet."""
        i = bisect_left(self._received, at)
        if self._before:
            previous = self._received[i - 1] if i > 0 else -1
            j = bisect_left(self._metric_at, at) - 1
            return self._metrics[j][1] if j >= 0 and self._metric_at[j] > previous else None
        datagram = self._datagram[at]
        bound = next((e for e in self._received[i + 1:] if self._datagram[e] != datagram), None)
        if next_sample_at is not None:
            bound = next_sample_at if bound is None else min(bound, next_sample_at)
        j = bisect_right(self._metric_at, at)
        if j < len(self._metrics) and (bound is None or self._metric_at[j] < bound):
            return self._metrics[j][1]
        return None


def summarize_rtt(table: pl.DataFrame) -> pl.DataFrame:
    """Per peer, replay and packet number space: samples, samples with logged values, and the
    median and largest |replay − logged| of each metric (ms)."""
    if table.height == 0:
        return pl.DataFrame()
    aggs = [pl.len().alias("samples"), pl.col("logged_smoothed_rtt_ms").is_not_null().sum().alias("logged")]
    for m in METRICS:
        diff = pl.col(f"{m}_diff_ms").abs()
        aggs += [diff.median().alias(f"{m}_median_abs_diff_ms"), diff.max().alias(f"{m}_max_abs_diff_ms")]
    order = {"initial": 0, "handshake": 1, "application_data": 2}
    return (table.group_by(["peer", "replay", "space"]).agg(aggs)
            .with_columns(pl.col("space").replace_strict(order, default=9).alias("_o"))
            .sort(["peer", "replay", "_o"]).drop("_o"))


def _num(value, width: int = 6) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.3f}"


def format_rtt_comparison(table: pl.DataFrame, repetitions: int | None = 1) -> str:
    """Per peer: the samples of the first ``repetitions`` (None: all) of each replay, each metric
    as replay / logged / replay − logged, then the summary over all repetitions."""
    if table.height == 0:
        return "no RTT samples of known peers in this store\n"
    out = []
    names = {"latest_rtt": "latest_rtt", "min_rtt": "min_rtt", "smoothed_rtt": "smoothed_rtt",
             "rttvar": "rttvar", "pto": "PTO"}
    head = (f"{'replay':<11} {'rep':>3} {'#':>2} {'space':<9} {'acked':>5} {'delay':>6} {'used':>6}  "
            + "  ".join(f"{names[m] + ' replay/log/diff':>20}" for m in METRICS))
    for peer in dict.fromkeys(table["peer"]):
        rows = table.filter(pl.col("peer") == peer)
        if repetitions is not None:
            rows = rows.filter(pl.col("repetition") <= repetitions)
        out.append(f"{peer} ({peers.PEERS[peer].stack}): the server's RTT estimator, RFC 9002 replay vs "
                   f"what it logged [ms]")
        out.append(head)
        for r in rows.iter_rows(named=True):
            space = {"application_data": "1-RTT"}.get(r["space"], r["space"])
            cells = "  ".join(f"{_num(r[f'{m}_ms'])} {_num(r[f'logged_{m}_ms'])} {_num(r[f'{m}_diff_ms'])}"
                              for m in METRICS)
            out.append(f"{r['replay']:<11} {r['repetition']:>3} {r['sample']:>2} {space:<9} "
                       f"{r['largest_acknowledged']:>5} {_num(r['ack_delay_ms'])} {_num(r['ack_delay_used_ms'])}  {cells}")
        out.append("  all repetitions, |replay − logged| median / max per packet number space:")
        for s in summarize_rtt(table.filter(pl.col("peer") == peer)).iter_rows(named=True):
            parts = "  ".join(f"{names[m]} {_num(s[f'{m}_median_abs_diff_ms'], 5)}/{_num(s[f'{m}_max_abs_diff_ms'], 5)}"
                              for m in METRICS)
            out.append(f"  {s['replay']:<11} {s['space']:<16} {s['samples']:>3} samples ({s['logged']:>3} logged)  {parts}")
        out.append("")
    return "\n".join(out)


# --- HTML report -------------------------------------------------------------------------------------

def report_sections(store: Store, page: Page) -> None:
    """The peers' first-ACK table and the server RTT replay vs logged summary (the store holds
    probes of known peers)."""
    page.section("peers", "Local QUIC peers")
    page.text("Probes of <code>&lt;peer&gt;.localhost</code> (<code>quicack peers scan</code>): the scanner's "
              "client qlog, the capture of the scan and the peer's own qlog of each probe. Why a peer's logged "
              "RTT values differ from the RFC 9002 replay: <code>schemas/README.md</code>, "
              "<code>rtt_samples</code>, “Known systematic differences”.")
    delays = first_ack_delays(store)
    page.section("peers-first-ack", "Acknowledgment delay of the first ACK received from each peer", 3)
    page.text("ACK delay (ms) of the server's first ACK in an Initial and in a Handshake packet, as decoded "
              "from the wire (the capture, else the client qlog); the turnaround is the time from the client's "
              "first Initial to the server's first datagram on the wire. "
              "quic-go (and Caddy's) and ngtcp2 always send 0 in Initial and Handshake ACKs; quinn measures. "
              "seed_ms: the seed's value for that stack (issue 27), docs/peers.md says why they differ.")
    page.table(delays.with_columns(pl.col("peer").map_elements(lambda p: peers.PEERS[p].stack, return_dtype=pl.String)
                                   .alias("stack"),
                                   pl.col("peer").map_elements(seed_value, return_dtype=pl.String).alias("seed_ms")))
    page.section("peers-rtt", "Server RTT estimator: RFC 9002 replay vs what the peer logged", 3)
    page.table(summarize_rtt(rtt_comparison(store)))
    page.text(esc("Replays: 'server qlog' is the stored replay of the peer's own qlog (its times), 'capture' "
                  "the capture replayed from the server's side (wire times). Differences are replay − logged."))
