"""`quicack report` rendered in a real headless Chromium (Debian's, driven by Playwright).

The store is real: a scan (`quicack.scan.scanner`) of local `quicack serve` listeners of each ACK
behaviour — one of them answering with a hostile `server` header — plus the real traces and
captures in tests/data (several producers, an instant ACK, WFC handshakes, a transfer).  In the
browser: no console errors, every plot has data points, the links resolve, and strings from
servers and traces (the header, an ODCID and a title carrying HTML) show as text.  A screenshot is
kept in reports/test-artifacts/ (or $QUICACK_TEST_ARTIFACTS).
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from conftest import DATA, ensure_command
from quicack import Store
from quicack.scan import scanner as scan
from quicack.scan.options import ScanOptions
from quicack.cli import main
from quicack.report.document import write_report
from servers import Servers

ARTIFACTS = Path(os.environ.get("QUICACK_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "reports/test-artifacts"))
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
HOSTILE_HEADER = "<script>window.pwned=3</script><b>cdn</b>"
LISTENERS = [("wfc", 0), ("iack", 10), ("iack-ping", 10), ("wfc", 5, {"server_header": f'"{HOSTILE_HEADER}"'})]
NAMES = ["wfc.test", "iack.test", "ping.test", "hostile.test"]


def _hostile_trace(folder: Path) -> Path:
    """The aioquic client trace with an ODCID and a title an attacker chose."""
    doc = orjson.loads((DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog").read_bytes())
    doc["traces"][0]["common_fields"]["ODCID"] = HOSTILE
    doc["traces"][0]["title"] = HOSTILE
    path = folder / "hostile.qlog"
    path.write_bytes(orjson.dumps(doc))
    return path


@pytest.fixture(scope="module")
def report_file(tmp_path_factory, tshark):
    folder = tmp_path_factory.mktemp("report")
    db = folder / "r.duckdb"
    with Servers(folder, LISTENERS) as servers:
        listing = folder / "list.txt"
        listing.write_text("".join(n + "\n" for n in NAMES))
        summary = scan.scan(ScanOptions(
            str(listing), db=str(db), resolve={n: (servers.ip(i), servers.port) for i, n in enumerate(NAMES)},
            allow_private=True, repetitions=3, spacing_s=0.05))
    assert summary.outcomes == {"ok": 12}
    # (the hostile trace first: the report draws the first connections only, and tests/data grows)
    traces = [_hostile_trace(folder)] + sorted(DATA.rglob("*.qlog")) + sorted(DATA.rglob("*.sqlog"))
    captures = [DATA / "zeek/testing/btest/Traces/quic/firefox-102.13.0esr-blog-cloudflare-com.pcap",
                DATA / "zeek/testing/btest/Traces/quic/curl-8.1.2-dev-http3-www-google-de.pcap"]
    with Store(db) as store:
        for path in traces + captures:
            store.ingest(path)
        report = write_report(store, folder / "report.html", now=datetime(2026, 11, 23, tzinfo=timezone.utc),
                              max_connections=64)  # every connection drawn, the hostile trace's too (it was 49th of 57)
    return report


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=ensure_command("chromium", "chromium"), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def test_report_renders_without_errors_and_every_plot_has_data(report_file, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: problems.append(f"dialog {d.message}"))
    page.goto(report_file.path.as_uri())
    page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= "
                           f"{report_file.figures}", timeout=60_000)
    points = page.evaluate("""Array.from(document.querySelectorAll('.plot')).map(d =>
        (d.data || []).reduce((n, t) => n + Math.max((t.x || []).length, (t.y || []).length), 0))""")
    assert problems == []
    assert len(points) == report_file.figures >= 10
    assert all(n > 0 for n in points), points
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=False)
    # every link in the table of contents and the tables lands on an element
    missing = page.evaluate("""Array.from(document.querySelectorAll('a[href^="#"]'))
        .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id))""")
    assert missing == []
    page.close()


def test_strings_from_servers_and_traces_are_shown_as_text(report_file, browser):
    page = browser.new_page()
    page.goto(report_file.path.as_uri())
    page.wait_for_timeout(500)
    assert page.evaluate("window.pwned") is None
    assert page.locator("img[src=x]").count() == 0
    text = page.inner_text("main")
    assert HOSTILE in text
    assert HOSTILE_HEADER in text  # the server header table of the scan section


def test_report_sections_and_size(report_file):
    html = report_file.path.read_text()
    assert html.count("Plotly.newPlot(") == report_file.figures
    # plotly.js included once, nothing fetched from the network
    assert len(re.findall(r"<script\s+src=", html)) == 0
    assert html.count("plotly.js v") <= 2
    for section in ("Overview", "Handshakes: instant ACK or wait for the certificate", "Scan",
                    "Instant ACK by provider", "Server headers (top 30)", "ACK→ServerHello gap by provider",
                    "First ACK delay against the measured gap", "What the first PTO would have been the other way",
                    "ACK policy of transfers", "Connections"):
        assert section in report_file.sections
    assert report_file.path.stat().st_size < 10_000_000


def test_report_command_writes_the_default_path_and_prints_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "demo.duckdb"
    with Store(db) as store:
        store.ingest(DATA / "qvis/visualizations/public/standalone_data/draft-01/parallel_10_50KB_f5.qlog")
        store.ingest(DATA / "qvis/visualizations/public/standalone_data/draft-01/doublevantage_100ms.qlog")
        stored = store.sql("SELECT count(*) AS n FROM connections")["n"][0]
    result = CliRunner().invoke(main, ["report", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("report: reports/demo.html (")
    assert result.output.endswith(f" plots; {stored} connections)\n")
    assert (tmp_path / "reports/demo.html").exists()
    # --max-connections bounds the connections drawn one by one, not those the report counts
    bounded = CliRunner().invoke(main, ["report", "--db", str(db), "--max-connections", "1"])
    assert bounded.output.endswith(f" plots; {stored} connections, 1 of them drawn one by one)\n")
    missing = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "nope.duckdb")])
    assert missing.exit_code == 1 and missing.output == f"error: {tmp_path / 'nope.duckdb'}: no such store\n"
