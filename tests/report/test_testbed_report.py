"""The report's testbed section (quicack/report/testbed.py), from a real testbed run.

experiments/smoke.toml is run once for the module with three repetitions (18 attempts through the
impairment relay, ~20 s) and `quicack report` writes its report; the assertions read what the
written HTML holds — sections, and the figures' data as plotly gets them — and check it against
the store: the TTFBs of each box, the bootstrap intervals recomputed from the stored rows with the
same seed, the ladder diagrams' packets and the relay's dropped datagrams of their attempt.  The
bootstrap itself is checked on hand-made samples whose answer is known.  The report is rendered in
a real headless Chromium (Debian's, driven by Playwright) and a screenshot of the section kept in
reports/test-artifacts/ (or $QUICACK_TEST_ARTIFACTS).
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import ensure_command
from quicack import Store
from quicack.cli import main
from quicack.report import testbed
from quicack.report.document import write_report

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "experiments" / "smoke.toml"
ARTIFACTS = Path(os.environ.get("QUICACK_TEST_ARTIFACTS", REPO / "reports/test-artifacts"))
REPETITIONS = 3
LADDER_TITLE = re.compile(r"^(?P<scenario>\S+), (?P<delay>[\d.]+) ms one way, (?P<server>\S+) ← (?P<client>\S+): "
                          r"repetition (?P<repetition>\d+) \(median TTFB of (?P<n>\d+)\)")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """(store, report path, the report command's output) of the smoke experiment × 3."""
    base = tmp_path_factory.mktemp("testbed-report")
    db = base / "smoke.duckdb"
    made = cli("testbed", "run", SMOKE, "--db", db, "--repetitions", REPETITIONS, "-q")
    assert made.exit_code == 0, made.output
    assert f"{6 * REPETITIONS} of {6 * REPETITIONS} stored" in made.stdout
    out = base / "smoke.html"
    written = cli("report", "--db", db, "--out", out)
    assert written.exit_code == 0, written.output
    return db, out, written.output


def query(db: Path, sql: str, params=None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def figures(html: str) -> list[dict]:
    """Every figure of the page as plotly receives it: {'data': […], 'layout': {…}}."""
    found = re.findall(r'Plotly\.newPlot\("fig\d+".*?\}\)\((.*?)\);</script>', html, flags=re.S)
    return [json.loads(f) for f in found]


def title(fig: dict) -> str:
    t = fig["layout"].get("title", "")
    return t.get("text", "") if isinstance(t, dict) else t


def headings(html: str) -> list[str]:
    return re.findall(r'<h[23] id="[^"]*">([^<]*)</h[23]>', html)


def stored_ttfbs(db: Path, scenario: str, server: str, delay: float = 5.0) -> list[float]:
    return [t for (t,) in query(db, """SELECT ttfb_ms FROM testbed_runs WHERE scenario = ? AND server = ?
                                       AND one_way_delay_ms = ? AND outcome = 'ok' ORDER BY repetition""",
                                [scenario, server, delay])]


# --- the section --------------------------------------------------------------------------------

def test_the_section_has_one_ttfb_figure_per_scenario_and_delay_with_the_stored_ttfbs(smoke):
    db, out, printed = smoke
    html = out.read_text()
    assert printed.startswith(f"report: {out} (")
    shown = headings(html)
    for heading in ("Testbed", "Testbed experiment smoke: cells", "Testbed experiment smoke: IACK − WFC median TTFB",
                    "Testbed scenario no-loss", "Testbed scenario client-second-flight-lost",
                    "Testbed scenario server-first-flight-lost"):
        assert heading in shown
    assert shown.index("Testbed") < shown.index("Connections")
    cells = query(db, "SELECT DISTINCT scenario, one_way_delay_ms FROM testbed_runs")
    ttfb = {title(f): f for f in figures(html) if title(f).startswith("TTFB: ")}
    assert sorted(ttfb) == sorted(f"TTFB: {s}, {d:g} ms one way (completed attempts)" for s, d in cells)
    assert len(ttfb) == 3
    # each box holds exactly the completed attempts' TTFBs of its cell
    for (scenario, delay) in cells:
        boxes = ttfb[f"TTFB: {scenario}, {delay:g} ms one way (completed attempts)"]["data"]
        servers = [s for (s,) in query(db, "SELECT DISTINCT server FROM testbed_runs WHERE scenario = ?", [scenario])]
        assert sorted(b["name"] for b in boxes) == sorted(servers)
        for box in boxes:
            expected = stored_ttfbs(db, scenario, box["name"], delay)
            assert len(expected) == REPETITIONS
            assert box["type"] == "box" and sorted(box["y"]) == pytest.approx(sorted(expected))
    # WFC first, then the others as the experiment lists them
    assert [b["name"] for b in ttfb["TTFB: no-loss, 5 ms one way (completed attempts)"]["data"]] == \
        ["serve-wfc", "serve-iack", "serve-iack-ping"]


def test_the_first_pto_bars_are_the_stored_medians(smoke):
    db, out, _ = smoke
    pto = {title(f): f for f in figures(out.read_text()) if title(f).startswith("Client's first PTO")}
    assert len(pto) == 3
    bars = pto["Client's first PTO: no-loss (median, bars to the quartiles)"]["data"]
    for bar in bars:
        (median,) = query(db, """SELECT median(client_first_pto_ms) FROM testbed_runs
                                 WHERE scenario = 'no-loss' AND server = ? AND outcome = 'ok'""", [bar["name"]])[0]
        assert bar["y"] == [pytest.approx(median)]
    # the instant ACK's first RTT sample leaves out the certificate delay: a shorter first PTO
    by_server = {b["name"]: b["y"][0] for b in bars}
    assert by_server["serve-iack"] < by_server["serve-wfc"] and by_server["serve-iack-ping"] < by_server["serve-wfc"]


def test_the_bootstrap_intervals_come_from_the_stored_rows(smoke):
    db, out, _ = smoke
    (forest,) = [f for f in figures(out.read_text()) if title(f).startswith("Median TTFB minus serve-wfc's")]
    points = {}
    for trace in forest["data"]:
        if trace.get("type") == "scatter" and trace.get("customdata"):
            server = trace["name"].split(" − ")[0]
            for label, estimate, (low, high, n, n_wfc) in zip(trace["y"], trace["x"], trace["customdata"]):
                points[(label.split(" · ")[0], server)] = (estimate, low, high, n, n_wfc)
    assert sorted(points) == [("client-second-flight-lost", "serve-iack"), ("no-loss", "serve-iack"),
                              ("no-loss", "serve-iack-ping")]
    for (scenario, server), (estimate, low, high, n, n_wfc) in points.items():
        a, b = stored_ttfbs(db, scenario, server), stored_ttfbs(db, scenario, "serve-wfc")
        assert (n, n_wfc) == (len(a), len(b)) == (REPETITIONS, REPETITIONS)
        assert estimate == pytest.approx(statistics.median(a) - statistics.median(b))
        assert low <= estimate <= high
        assert min(a) - max(b) <= low and high <= max(a) - min(b)
        direct = testbed.bootstrap_median_difference(a, b, resamples=2000, seed=testbed.BOOTSTRAP_SEED,
                                                     confidence=0.95)
        assert (low, high) == (pytest.approx(direct.low), pytest.approx(direct.high))
    # losing the client's second flight costs WFC more: its inflated first PTO resends the Finished later
    assert points[("client-second-flight-lost", "serve-iack")][0] < 0


def test_each_ladder_is_a_median_attempt_with_its_packets_and_the_relays_drops(smoke):
    db, out, _ = smoke
    ladders = [f for f in figures(out.read_text()) if LADDER_TITLE.match(title(f))]
    # one per server of each scenario (one delay each)
    assert len(ladders) == 6
    drops_seen = set()
    for fig in ladders:
        m = LADDER_TITLE.match(title(fig))
        scenario, server, repetition = m["scenario"], m["server"], int(m["repetition"])
        ttfbs = sorted(stored_ttfbs(db, scenario, server))
        run, flow, ttfb, client_id, server_id = query(db, """
            SELECT relay_run_id, relay_flow, ttfb_ms, client_connection_id, server_connection_id FROM testbed_runs
            WHERE scenario = ? AND server = ? AND repetition = ?""", [scenario, server, repetition])[0]
        assert ttfb == ttfbs[(len(ttfbs) - 1) // 2] and int(m["n"]) == REPETITIONS
        traces = {t.get("name"): t for t in fig["data"]}
        dropped = query(db, """SELECT direction, datagram_index, dropped_reason FROM relay_datagrams
                               WHERE relay_run_id = ? AND flow = ? AND dropped_reason IS NOT NULL""", [run, flow])
        marked = traces.get("✕ dropped at the relay", {}).get("customdata", [])
        assert sorted(tuple(c[:3]) for c in marked) == sorted(dropped), (scenario, server)
        drops_seen |= {(scenario, server, d[0], d[1]) for d in dropped if d[2] == "drop_list"}
        # every packet of both traces and every forwarded datagram of the flow is drawn
        for lane, cid in (("client", client_id), ("server", server_id)):
            (expected,) = query(db, """SELECT (SELECT count(*) FROM packets WHERE connection_id = $1)
                + (SELECT count(*) FROM timers WHERE connection_id = $1 AND timer_type = 'pto'
                   AND event_type = 'expired')""", [cid])[0]
            assert len(traces[f"{lane} qlog"]["y"]) == expected
        forwarded = query(db, """SELECT direction, count(*) FROM relay_datagrams WHERE relay_run_id = ? AND flow = ?
                                 AND dropped_reason IS NULL GROUP BY ALL""", [run, flow])
        for direction, count in forwarded:
            assert traces[f"{direction} (relay)"]["x"].count(None) == count
        # times are aligned on the client's first Initial (started_epoch_ms)
        assert min(traces["client qlog"]["y"]) == pytest.approx(0, abs=1.0)
    assert drops_seen == {("client-second-flight-lost", "serve-wfc", "to_server", 2),
                          ("client-second-flight-lost", "serve-iack", "to_server", 2),
                          ("server-first-flight-lost", "serve-wfc", "to_client", 2)}


def test_a_store_without_testbed_runs_has_no_testbed_section(tmp_path):
    with Store(tmp_path / "t.duckdb") as store:
        store.ingest(REPO / "quicack" / "demo" / "client.qlog")
        assert not testbed.has_testbed(store)
        report = write_report(store, tmp_path / "r.html", now=datetime(2026, 11, 27, tzinfo=timezone.utc))
    assert not [s for s in report.sections if s.startswith("Testbed")]


def test_the_section_renders_in_chromium_without_errors(smoke):
    from playwright.sync_api import sync_playwright
    _, out, _ = smoke
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=ensure_command("chromium", "chromium"), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        problems = []
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(out.as_uri())
        total = out.read_text().count("Plotly.newPlot(")
        page.wait_for_function(f"document.querySelectorAll('.plot .main-svg').length >= {total}", timeout=60_000)
        points = page.evaluate("""Array.from(document.querySelectorAll('.plot')).map(d =>
            (d.data || []).reduce((n, t) => n + Math.max((t.x || []).length, (t.y || []).length), 0))""")
        assert problems == []
        assert len(points) == total and all(n > 0 for n in points), points
        # the ladder's drop is drawn: a red ✕ marker and its reason as text
        assert page.locator("text=drop_list").count() >= 3
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("#testbed").scroll_into_view_if_needed()
        page.evaluate("document.getElementById('testbed').scrollIntoView()")
        page.screenshot(path=str(ARTIFACTS / "testbed.png"))
        ladder = page.locator(".plot", has_text="client-second-flight-lost, 5 ms one way, serve-wfc")
        ladder.screenshot(path=str(ARTIFACTS / "testbed-ladder.png"))
        browser.close()


# --- the pure helpers, on numbers whose answer is known ------------------------------------------

def test_identical_samples_give_a_zero_width_interval():
    assert testbed.bootstrap_median_difference([5.0] * 4, [2.0] * 6) == testbed.Interval(3.0, 3.0, 3.0, 4, 6)
    assert testbed.bootstrap_median_difference([7, 7, 7], [7]) == testbed.Interval(0.0, 0.0, 0.0, 3, 1)


def test_a_two_value_sample_gives_its_whole_range():
    """median of a resample of [0, 10]: 0, 5 or 10 with chances ¼, ½, ¼ — the 2.5 % and 97.5 %
    points of 2,000 draws are 0 and 10."""
    assert testbed.bootstrap_median_difference([0, 10], [0]) == testbed.Interval(5.0, 0.0, 10.0, 2, 1)
    assert testbed.bootstrap_median_difference([0], [0, 10]) == testbed.Interval(-5.0, -10.0, 0.0, 1, 2)


def test_the_bootstrap_is_bounded_reproducible_and_order_free():
    a, b = [100.0, 101.5, 102.0, 104.0, 99.0], [0.0, 1.0, 2.5, 3.0]
    interval = testbed.bootstrap_median_difference(a, b)
    assert interval.estimate == statistics.median(a) - statistics.median(b) == 99.75
    assert min(a) - max(b) <= interval.low <= interval.estimate <= interval.high <= max(a) - min(b)
    shuffled_a, shuffled_b = a[:], b[:]
    random.Random(1).shuffle(shuffled_a)
    random.Random(2).shuffle(shuffled_b)
    assert testbed.bootstrap_median_difference(shuffled_a, shuffled_b) == interval
    same = testbed.bootstrap_median_difference([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert same.estimate == 0 and same.low < 0 < same.high
    narrow = testbed.bootstrap_median_difference([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], confidence=0.5)
    assert same.low <= narrow.low <= narrow.high <= same.high
    assert testbed.bootstrap_median_difference([], [1.0]) is None


def test_percentile_interpolates_between_order_statistics():
    assert testbed.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert testbed.percentile(list(range(101)), 0.025) == pytest.approx(2.5)
    assert testbed.percentile([7], 0.975) == 7
    assert testbed.percentile([1, 3], 0) == 1 and testbed.percentile([1, 3], 1) == 3


def test_labels_frames_and_the_middle_delay():
    assert testbed.frames_text(["stream", "stream", "stream", "padding"]) == "stream×3+padding"
    assert testbed.frames_text([]) == "no frames logged"
    items = [(0.0, "sent", "initial 0: ack"), (0.1, "sent", "handshake 1: ack"), (0.2, "rcvd", "1RTT 2: ack"),
             (5.0, "", "PTO expired")]
    assert testbed.merge_labels(items, 1.0) == [
        (0.0, "sent initial 0: ack · handshake 1: ack · rcvd 1RTT 2: ack"), (5.0, "PTO expired")]
    long = testbed.merge_labels([(float(i) / 100, "sent", f"1RTT {i}: stream") for i in range(12)], 1.0)
    assert long == [(0.0, "sent 1RTT 0: stream · 1RTT 1: stream … (+10)")]
    assert testbed.middle([0.5, 4.5, 10, 50, 150, 10]) == 10 and testbed.middle([1, 5]) == 1
