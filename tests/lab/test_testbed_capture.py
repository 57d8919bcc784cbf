"""A capture of a relayed testbed run (``capture = true``) against the server's own qlog.

A 12-certificate chain is beyond 3 × the client's first datagram: the server stops at its budget
and waits for the client's Handshake packet (RFC 9000 §8.1).  The run captures the relay ↔ server
leg only; its ``address_validation`` rows must tell the same story as the server's qlog: the
same bytes before validation, the same factor, one blocked period ending when the client's
datagram arrived (on the wire, then when the server read it).  The block's start differs by what the wire shows and the qlog cannot: aioquic
logs a packet when it builds it, and its datagrams leave one by one afterwards (the relay, a
real-time process on two cores, may run in between), so on the wire the block starts no earlier
than the qlog says.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from conftest import run_experiment

TINY = """
repetitions = 1
servers = ["serve-wfc", "serve-iack"]
clients = ["quicack", "quic-go"]
one_way_delay_ms = 10
timeout_s = 10
cert_delay_ms = 5
response_bytes = 1024
capture = true

[[scenario]]
name = "long-chain"
cert_chain_length = 12
"""

COLUMNS = ("client_bytes_before_validation", "server_bytes_before_validation", "amplification_factor",
           "limit_reached", "limit_exceeded", "blocked_count", "iack_bytes")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return run_experiment(tmp_path_factory.mktemp("capture"), TINY)


def views(db: Path) -> list[tuple]:
    """Per attempt: (server, client, the server qlog's row, the capture's row, block start and
    end of each on the wall clock)."""
    picked = ", ".join(f"a.{c}" for c in COLUMNS)
    with duckdb.connect(str(db), read_only=True) as con:
        out = []
        for server, client, server_id, capture_id in con.execute(
                "SELECT server, client, server_connection_id, capture_connection_id FROM testbed_runs "
                "ORDER BY server, client").fetchall():
            rows = []
            for cid in (server_id, capture_id):
                found = con.execute(f"""
                    SELECT {picked}, c.vantage, c.first_event_epoch_ms + a.first_blocked_ms,
                           c.first_event_epoch_ms + a.first_blocked_ms + a.blocked_ms
                    FROM address_validation a JOIN connections c USING (connection_id)
                    WHERE connection_id = ?""", [cid]).fetchall()
                rows.append(found[0] if found else None)
            out.append((server, client, *rows))
        return out


def test_the_capture_holds_only_the_server_leg_of_every_attempt(run):
    found = views(run)
    assert [(s, c, q is not None and q[len(COLUMNS)], p is not None and p[len(COLUMNS)]) for s, c, q, p in found] == [
        (server, client, "server", "network") for server in ("serve-iack", "serve-wfc")
        for client in ("quic-go", "quicack")]
    with duckdb.connect(str(run), read_only=True) as con:
        # one datagram on the wire per datagram the server logged: no relay ↔ client copies
        twice = con.execute("""
            SELECT count(*) FROM testbed_runs t
            WHERE (SELECT count(*) FROM datagrams WHERE connection_id = t.capture_connection_id AND sender = 'client')
                > (SELECT count(*) FROM datagrams WHERE connection_id = t.server_connection_id AND sender = 'client')
            """).fetchall()[0][0]
    assert twice == 0


def test_server_qlog_and_capture_report_the_same_block_at_3x(run):
    for server, client, qlog, capture in views(run):
        figures_q, figures_c = qlog[:len(COLUMNS)], capture[:len(COLUMNS)]
        assert figures_q == figures_c, (server, client, figures_q, figures_c)
        sent, received = figures_q[1], figures_q[0]
        assert figures_q[3] and not figures_q[4] and figures_q[5] == 1 and sent == 3 * received
        start_q, end_q = qlog[-2:]
        start_c, end_c = capture[-2:]
        assert end_q > start_q and end_c > start_c
        # the block ends when the client's datagram arrives: on the wire first, then in the server
        # (which logs it when it reads it: at once, or once a busy loop gets to it) within the RTT
        assert end_c - 1.0 < end_q < end_c + 20.0, (server, client, end_q, end_c)
        # it starts when the last datagram within the budget leaves: on the wire not before the log
        assert start_c > start_q - 1.0, (server, client, start_q, start_c)
