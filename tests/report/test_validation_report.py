"""The report's section on the anti-amplification limit and packets that waited for keys, from real
traces (tests/data/local/aioquic-amplification and quic-go-key-wait)."""

from __future__ import annotations

from datetime import datetime, timezone

from conftest import DATA
from quicack import Store
from quicack.report.document import write_report


def test_the_section_shows_the_blocked_shape_and_the_inflated_sample(tmp_path):
    with Store(tmp_path / "t.duckdb") as store:
        for path in (*(DATA / "local/aioquic-amplification/qlog_server").glob("*.qlog"),
                     DATA / "local/quic-go-key-wait/client.sqlog", DATA / "local/quic-go-key-wait/server.qlog"):
            assert store.ingest(path).status == "ingested"
        report = write_report(store, tmp_path / "r.html", now=datetime(2026, 11, 26, tzinfo=timezone.utc))
    html = (tmp_path / "r.html").read_text()
    assert "Resumption, 0-RTT and the anti-amplification limit" in report.sections
    assert "Shape: blocked" in report.sections and "Packets that waited for keys" in report.sections
    assert "Resumption and 0-RTT by server" not in report.sections  # no scan --resumption here
    # the inflated sample of the quic-go trace, next to the from-receipt one
    assert "from_receipt_rtt_ms" in html and "sample_inflation_ms" in html
