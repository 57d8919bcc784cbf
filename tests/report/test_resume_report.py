"""The report's Careful Resume section (quicack/report/resume.py): the speedup table from
testbed rows and the phase timeline of a connection with logged phase changes."""

from __future__ import annotations

import json
from datetime import datetime

from conftest import DATA

from quicack.report import resume
from quicack.report.document import write_report


def _attempt(store, scenario, server, repetition, ttlb_ms, relay_run_id, delay_ms=300.0, size=750_000):
    store.con.execute("""INSERT INTO testbed_runs (experiment, scenario, server, client, one_way_delay_ms, repetition,
                         cert_chain_length, cert_delay_ms, response_bytes, outcome, ttlb_ms, relay_run_id)
                         VALUES ('cr', ?, ?, 'quicack', ?, ?, 1, 0, ?, 'ok', ?, ?)""",
                      [scenario, server, delay_ms, repetition, size, ttlb_ms, relay_run_id])


def test_speedup_is_median_slow_start_over_median_careful_resume(store):
    config = {"to_client": {"rate_kbps": 10000, "delay_ms": 300.0}, "to_server": {"rate_kbps": None}}
    store.con.execute("""INSERT INTO relay_runs VALUES (1, 'a', 'b', 0, ?, 0, 1, 0, 0, 0, 'test')""",
                      [json.dumps(config)])
    for rep, (ss, cr) in enumerate([(4600.0, 3000.0), (4700.0, 3100.0), (5000.0, 9000.0)]):
        _attempt(store, "geo-1bdp", "serve-wfc", rep, ss, 1)
        _attempt(store, "geo-1bdp", "serve-careful-resume", rep, cr, 1)
    _attempt(store, "geo-1bdp", "serve-iack", 0, 1.0, 1)          # another server: not compared
    _attempt(store, "only-slow-start", "serve-wfc", 0, 100.0, 1)  # no Careful Resume attempt: no row
    rows = resume.speedup_table(store).to_dicts()
    assert len(rows) == 1
    row = rows[0]
    assert (row["scenario"], row["rate_mbit_s"], row["rtt_ms"], row["bdp_bytes"], row["transfer_bdp"]) == \
        ("geo-1bdp", 10.0, 600.0, 750_000.0, 1.0)
    assert (row["n_slow_start"], row["slow_start_ttlb_ms"], row["careful_resume_ttlb_ms"]) == (3, 4700.0, 3100.0)
    assert row["speedup"] == 4700.0 / 3100.0


def test_timeline_draws_a_band_per_logged_phase(store, tmp_path):
    store.ingest(DATA / "careful-resume" / "draft-names-0.3.qlog")
    (cid,) = store.sql("SELECT DISTINCT connection_id FROM careful_resume_phases").row(0)
    fig = resume.timeline_figure(store, cid, "hand-made")
    bands = [(s.x0, s.x1, s.fillcolor) for s in fig.layout.shapes]
    assert bands == [(10.0, 35.5, resume.PHASE_COLOURS["unvalidated"]),
                     (35.5, 62.25, resume.PHASE_COLOURS["validating"]),
                     (62.25, 120.0, resume.PHASE_COLOURS["safe_retreat"]),
                     (120.0, 120.0, resume.PHASE_COLOURS["normal"])]
    assert [a.text for a in fig.layout.annotations] == [
        "unvalidated (congestion_window_limited)", "validating (first_unvalidated_packet_acknowledged)",
        "safe_retreat (packet_loss)", "normal (exit_recovery)"]
    report = write_report(store, tmp_path / "r.html", now=datetime(2026, 11, 26))
    assert "Careful Resume: time to last byte and phases" in report.sections
    assert f"Connection {cid}: logged Careful Resume phases" in report.sections
    # and in the connection's own section, in place of its plain cwnd plot
    html = report.path.read_text()
    assert f"Careful Resume phases — connection {cid}" in html
