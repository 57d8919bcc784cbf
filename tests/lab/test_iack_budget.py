"""quicack serve's instant ACK against the 3× budget: counted (``iack``, as RFC 9000 §8.1 wants) or
not (``iack-uncounted``, for experiments) — read back from each server's own qlog."""

from __future__ import annotations

import time

import duckdb

from quicack import Store
from quicack.scan import scanner
from quicack.scan.options import ScanOptions
from servers import Servers

# 12 certificates: the first flight is far beyond 3 × 1200 B, so both servers use all the budget
LISTENERS = [("iack", 0, {"cert_chain_length": 12}), ("iack-uncounted", 0, {"cert_chain_length": 12})]
NAMES = ["counted.test", "uncounted.test"]


def test_an_uncounted_instant_ack_lets_the_server_exceed_3x_by_its_size(tmp_path):
    with Servers(tmp_path, LISTENERS, qlog_dir=tmp_path / "server-qlog") as servers:
        listing = tmp_path / "list.txt"
        listing.write_text("".join(n + "\n" for n in NAMES))
        opts = ScanOptions(str(listing), db=str(tmp_path / "s.duckdb"), allow_private=True, repetitions=1,
                           resolve={n: (servers.ip(i), servers.port) for i, n in enumerate(NAMES)})
        assert scanner.scan(opts).outcomes == {"ok": 2}
        time.sleep(3.5)  # a server writes a connection's qlog when it ends (RFC 9000 §10.2)
    with Store(opts.db) as store:
        for path in sorted((tmp_path / "server-qlog").rglob("*.qlog")):
            store.ingest(path)
    con = duckdb.connect(opts.db, read_only=True)
    found = con.execute("""
        SELECT a.iack_bytes, a.client_bytes_before_validation, a.server_bytes_before_validation,
               a.limit_exceeded, a.max_excess_bytes, a.blocked_count
        FROM address_validation a JOIN connections c USING (connection_id) WHERE c.vantage = 'server'
        ORDER BY a.max_excess_bytes""").fetchall()
    assert len(found) == 2
    counted, uncounted = found
    assert counted[3] is False and counted[2] <= 3 * counted[1] and counted[5] == 1
    assert uncounted[3] is True and uncounted[4] == uncounted[0] and uncounted[5] == 1


def test_the_instant_ack_alone_blocks_a_0rtt_answer_in_the_testbed(tmp_path):
    """experiments/iack-only-block.toml, one attempt per server: a resumed connection's GET in
    0-RTT answered at once with 3010 B.  From each server's own qlog: serve-wfc's first flight
    fits in 3 × the client's bytes; serve-iack's instant ACK makes the same flight hit 3× and
    hold the answer's end until the client's Handshake packet, a block the ACK caused;
    serve-iack-uncounted sends it all, past 3× by at most its ACK."""
    from click.testing import CliRunner

    from quicack.cli import main

    db = tmp_path / "iack.duckdb"
    result = CliRunner().invoke(main, ["testbed", "run", "experiments/iack-only-block.toml", "--db", str(db),
                                       "--repetitions", "1"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    found = {row[0]: row[1:] for row in con.execute("""
        SELECT t.server, t.zero_rtt, a.client_bytes_before_validation, a.server_bytes_before_validation,
               a.blocked_count, a.blocked_ms, a.iack_bytes, a.iack_caused_block, a.limit_exceeded, a.max_excess_bytes
        FROM testbed_runs t JOIN address_validation a ON a.connection_id = t.server_connection_id""").fetchall()}
    assert set(found) == {"serve-wfc", "serve-iack", "serve-iack-uncounted"}
    assert all(r[0] == "accepted" for r in found.values())
    _, received, sent, blocked, _, ack, caused, exceeded, _ = found["serve-wfc"]
    assert ack is None and sent <= 3 * received and blocked == 0 and not exceeded
    _, received, sent, blocked, blocked_ms, ack, caused, exceeded, _ = found["serve-iack"]
    assert ack is not None and sent == 3 * received and blocked == 1 and blocked_ms > 0 and caused and not exceeded
    _, received, sent, blocked, _, ack, caused, exceeded, excess = found["serve-iack-uncounted"]
    assert exceeded and 0 < excess <= ack and blocked == 0
    con.close()
    from datetime import datetime, timezone

    from quicack.report.document import write_report

    with Store(db) as store:  # the report draws that connection's timeline as its own shape
        report = write_report(store, tmp_path / "r.html", now=datetime(2026, 11, 27, tzinfo=timezone.utc))
    assert "Shape: instant ACK caused the block" in report.sections
