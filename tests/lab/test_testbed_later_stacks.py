"""The later peers' clients in the testbed — quiche, TQUIC, s2n-quic and kwik — against quicack's
servers (serve-wfc, serve-iack, and serve-wfc with a chain of three certificates).

These clients check the server's certificate: each attempt is told the listener's trust anchor
(the chain's root; :attr:`quicack.lab.endpoints.ServerProcess.anchors`), so every attempt
completing — the chain's too — shows the right anchor reached them.  quiche and TQUIC write a
qlog: their trace is joined like any client's.  s2n-quic and kwik write none: their rows hold the
outcome and the response's size, and the server's trace is still found, by the original
destination connection ID the relay read from the client's first Initial
(:attr:`quicack.store.relaytable.RelayRecords.initial_dcids`).  One attempt per cell, 5 ms each
way, run once for the module.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from quicack.lab import runner

QLOG_CLIENTS = ("quiche", "tquic")
NO_QLOG_CLIENTS = ("s2n-quic", "kwik")
CLASSES = {"serve-wfc": "wfc", "serve-iack": "iack"}

EXPERIMENT = """\
repetitions = 1
servers = ["serve-wfc", "serve-iack"]
clients = ["quiche", "tquic", "s2n-quic", "kwik"]
one_way_delay_ms = [5]
cert_delay_ms = 5
response_bytes = 10240

[[scenario]]
name = "no-loss"

[[scenario]]
name = "chain"
servers = ["serve-wfc"]
cert_chain_length = 3
"""


@pytest.fixture(scope="module")
def later(tmp_path_factory):
    base = tmp_path_factory.mktemp("later")
    (base / "later.toml").write_text(EXPERIMENT)
    lines: list[str] = []
    summary = runner.run(base / "later.toml", base / "later.duckdb", progress=lines.append)
    return base / "later.duckdb", summary, lines


def query(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_every_later_client_completes_trusting_the_listeners_anchor(later):
    db, summary, lines = later
    assert summary.complete and summary.outcomes == {"ok": 12}, lines
    rows = query(db, "SELECT client, server, scenario, cert_chain_length, response_bytes_received FROM testbed_runs")
    expected = [(c, s, "no-loss", 1, 10240) for c in (*QLOG_CLIENTS, *NO_QLOG_CLIENTS) for s in CLASSES]
    expected += [(c, "serve-wfc", "chain", 3, 10240) for c in (*QLOG_CLIENTS, *NO_QLOG_CLIENTS)]
    assert sorted(rows) == sorted(expected)


def test_the_server_trace_is_found_for_every_client_qlog_or_not(later):
    db, *_ = later
    rows = query(db, """
        SELECT t.client, t.server, s.vantage, s.handshake_class, t.server_qlog_path
        FROM testbed_runs t JOIN connections s ON s.connection_id = t.server_connection_id
        WHERE t.scenario = 'no-loss'""")
    assert sorted((r[0], r[1]) for r in rows) == sorted((c, s) for c in (*QLOG_CLIENTS, *NO_QLOG_CLIENTS)
                                                        for s in CLASSES)
    for client, server, vantage, server_class, path in rows:
        assert vantage == "server" and server_class == CLASSES[server] and Path(path).is_file(), (client, server)


def test_a_client_with_a_qlog_is_joined_and_measured(later):
    db, *_ = later
    rows = query(db, f"""
        SELECT t.client, t.server, c.implementation, c.handshake_class, c.odcid = s.odcid,
               t.ttfb_ms = c.first_response_byte_ms, t.handshake_ms, t.ttfb_ms, t.client_first_pto_ms
        FROM testbed_runs t JOIN connections c ON c.connection_id = t.client_connection_id
        JOIN connections s ON s.connection_id = t.server_connection_id
        WHERE t.scenario = 'no-loss' AND t.client IN {QLOG_CLIENTS}""")
    assert len(rows) == 4
    for client, server, implementation, cclass, same_odcid, same_ttfb, handshake, ttfb, pto in rows:
        assert (implementation, cclass, same_odcid, same_ttfb) == (client, CLASSES[server], True, True)
        assert 10 < handshake < ttfb < 1000 and pto > 10, (client, server)


def test_a_client_without_a_qlog_has_its_outcome_only(later):
    db, *_ = later
    rows = query(db, f"""
        SELECT client_connection_id, client_qlog_path, ttfb_ms, handshake_ms, client_pto_count, relay_flow
        FROM testbed_runs WHERE client IN {NO_QLOG_CLIENTS}""")
    assert len(rows) == 6
    assert all(r[:5] == (None,) * 5 and r[5] is not None for r in rows)
