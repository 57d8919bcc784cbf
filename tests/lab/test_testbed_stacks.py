"""Real QUIC stacks in the testbed: the quic-go, ngtcp2 and quinn clients against quicack's servers
(serve-wfc, serve-iack) through the relay, and quicack's client against a real stack's server —
each attempt a row of testbed_runs, the stack's own qlog ingested as its side's trace.

One small experiment is run once for the module (one attempt per cell, 5 ms each way, no loss):
every row is ok, the client's trace is joined and classified like the server mode it met (quinn's
qlog logs no frames: its class comes from the server's trace, its TTFB from its own clock), the
relay's flow is the attempt's, and the figures are filled where the stack logs them and NULL
where it does not (schemas/README.md, testbed_runs).  The per-client drop tables of the
experiment file are checked without running anything.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from quicack.lab import experiment, runner
from quicack.model import QuicackError

REPO = Path(__file__).resolve().parents[2]
STACKS = ("quic-go", "ngtcp2", "quinn")
CLASSES = {"serve-wfc": "wfc", "serve-iack": "iack"}

SMALL = """\
repetitions = 1
servers = ["serve-wfc", "serve-iack"]
clients = ["quic-go", "ngtcp2", "quinn"]
one_way_delay_ms = [5]
cert_delay_ms = 5
response_bytes = 10240

[[scenario]]
name = "no-loss"

[[scenario]]
name = "real-server"
servers = ["quic-go"]
"""


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    base = tmp_path_factory.mktemp("stacks")
    path = base / "stacks.toml"
    path.write_text(SMALL.replace('clients = ["quic-go", "ngtcp2", "quinn"]',
                                  'clients = ["quic-go", "ngtcp2", "quinn", "quicack"]'))
    lines = []
    summary = runner.run(path, base / "stacks.duckdb", progress=lines.append)
    return base / "stacks.duckdb", summary, lines


def query(db: Path, sql: str, params=()) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def test_every_real_client_completes_against_each_server_mode(stacks):
    db, summary, lines = stacks
    assert summary.complete and summary.outcomes == {"ok": 12}, lines
    rows = query(db, """SELECT client, server, outcome, response_bytes_received, cert_chain_length
                        FROM testbed_runs WHERE scenario = 'no-loss' ORDER BY ALL""")
    assert rows == sorted((c, s, "ok", 10240, 1) for c in (*STACKS, "quicack") for s in CLASSES)


def test_the_client_trace_is_joined_with_the_class_of_the_server_mode(stacks):
    db, *_ = stacks
    rows = query(db, """
        SELECT t.client, t.server, c.vantage, c.implementation, c.handshake_class, c.handshake_reason,
               s.handshake_class, c.odcid = s.odcid, t.ttfb_ms = c.first_response_byte_ms, t.client_qlog_path
        FROM testbed_runs t JOIN connections c ON c.connection_id = t.client_connection_id
        JOIN connections s ON s.connection_id = t.server_connection_id
        WHERE t.scenario = 'no-loss' AND t.client <> 'quicack' ORDER BY 1, 2""")
    assert [(r[0], r[1]) for r in rows] == sorted((c, s) for c in STACKS for s in CLASSES)
    for client, server, vantage, implementation, cclass, reason, sclass, same_odcid, same_ttfb, qlog in rows:
        assert vantage == "client" and same_odcid and Path(qlog).is_file(), (client, server)
        assert sclass == CLASSES[server], (client, server)
        if client == "quinn":  # its qlog logs packets without frames: TTFB from its own clock
            assert (cclass, reason, same_ttfb) == ("unknown", "frames_not_logged", None)
        else:
            assert implementation == client and cclass == CLASSES[server] and same_ttfb, (client, server)


def test_the_figures_are_filled_where_the_stack_logs_them(stacks):
    db, *_ = stacks
    figures = {(c, s): rest for c, s, *rest in query(db, """
        SELECT client, server, ttfb_ms, handshake_ms, client_first_pto_ms, client_pto_count,
               client_retransmitted_packets, server_pto_count, certificates_received
        FROM testbed_runs WHERE scenario = 'no-loss'""")}
    for (client, server), (ttfb, handshake, pto, ptos, resent, server_ptos, certs) in figures.items():
        assert 10 < handshake < ttfb < 1000 and server_ptos == 0, (client, server)
        if client == "quinn":
            assert (pto, ptos, resent, certs) == (None, None, None, 1)
        else:
            assert pto > 10 and (ptos, resent) == (0, 0), (client, server)
            assert certs == (None if client == "ngtcp2" else 1)


def test_each_attempt_has_its_own_relay_flow(stacks):
    db, *_ = stacks
    rows = query(db, """
        SELECT t.client, t.server, count(*) FILTER (WHERE d.direction = 'to_server'),
               arg_min(d.quic_types, d.arrival_index)
        FROM testbed_runs t JOIN relay_datagrams d ON d.relay_run_id = t.relay_run_id AND d.flow = t.relay_flow
        GROUP BY ALL""")
    assert len(rows) == 12  # every attempt found its flow
    for client, server, sent, first in rows:
        assert sent >= 3 and first == "initial", (client, server)


def test_a_real_stack_serves_as_a_testbed_server(stacks):
    """The quic-go peer, started for its group: its own qlog is the server trace of each client."""
    db, *_ = stacks
    rows = query(db, """
        SELECT t.client, t.outcome, t.cert_delay_ms, s.vantage, s.implementation, s.handshake_class,
               t.server_qlog_path LIKE '%_server.sqlog', t.server_pto_count
        FROM testbed_runs t JOIN connections s ON s.connection_id = t.server_connection_id
        WHERE t.scenario = 'real-server' ORDER BY 1""")
    assert rows == [(c, "ok", 0.0, "server", "quic-go", "wfc", True, 0)
                    for c in sorted((*STACKS, "quicack"))]


# --- per-client drop tables, sans I/O --------------------------------------------------------

def load(tmp_path, text: str):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return experiment.load(path)


def drops(exp, scenario: str, key: str) -> dict:
    return {(c.server, c.client): getattr(c, key) for c in exp.cells() if c.scenario.name == scenario}


def test_a_drop_list_may_differ_per_client_and_per_server(tmp_path):
    exp = load(tmp_path, SMALL + """
[[scenario]]
name = "lossy"
drop_to_client = { serve-wfc = "2", serve-iack = { quic-go = [2, 3], ngtcp2 = "2", quinn = "3,2" } }

[scenario.drop_to_server]
quic-go = { serve-wfc = "2,3", serve-iack = "3,4" }
ngtcp2 = "2"
quinn = [2, 3, 4]
""")
    assert drops(exp, "lossy", "drop_to_client") == {
        ("serve-wfc", "quic-go"): "2", ("serve-wfc", "ngtcp2"): "2", ("serve-wfc", "quinn"): "2",
        ("serve-iack", "quic-go"): "2,3", ("serve-iack", "ngtcp2"): "2", ("serve-iack", "quinn"): "2,3"}
    assert drops(exp, "lossy", "drop_to_server") == {
        ("serve-wfc", "quic-go"): "2,3", ("serve-iack", "quic-go"): "3,4", ("serve-wfc", "ngtcp2"): "2",
        ("serve-iack", "ngtcp2"): "2", ("serve-wfc", "quinn"): "2,3,4", ("serve-iack", "quinn"): "2,3,4"}


def test_the_stacks_experiment_gives_each_client_its_second_flight(tmp_path):
    exp = experiment.load(REPO / "experiments" / "instant-ack-stacks.toml")
    assert exp.clients == ("quicack", "quic-go", "ngtcp2", "quinn")
    lost = {(c.server, c.client): c.drop_to_server for c in exp.cells()
            if c.scenario.name == "client-second-flight-lost"}
    assert lost[("serve-wfc", "quicack")] == "2" and lost[("serve-iack-ping", "quic-go")] == "3,4"
    assert lost[("serve-iack", "quinn")] == "2,3,4,5,6"


@pytest.mark.parametrize("table, line, message", [
    ('[scenario.drop_to_server]\nquic-go = "2"\nngtcp2 = "2"\n', 17,
     "drop_to_server: a table of drop lists names each client of the experiment once "
     "(quic-go, ngtcp2, quinn); missing quinn"),
    ('[scenario.drop_to_server]\nquic-go = "2"\nngtcp2 = "x"\nquinn = "2"\n', 17,
     "drop_to_server.ngtcp2 'x': expected datagram indexes counted from 1"),
    ('drop_to_client = { serve-wfc = { quic-go = "2" }, serve-iack = "2" }\n', 17,
     "drop_to_client.serve-wfc: a table of drop lists names each client of the experiment once "
     "(quic-go, ngtcp2, quinn); missing ngtcp2, quinn"),
])
def test_a_bad_drop_table_is_refused_at_its_line(tmp_path, table, line, message):
    with pytest.raises(QuicackError) as e:
        load(tmp_path, SMALL + '\n[[scenario]]\nname = "lossy"\n' + table)
    assert f"at line {line}: {message}" in str(e.value)
