"""The testbed's experiment runner: quicack's aioquic client against quicack's servers through the
impairment relay, each attempt a row in testbed_runs with both ends' qlogs ingested.

One small experiment (experiments/smoke.toml: six attempts, 5 ms each way) is run once for the
module, in two invocations — the first stopped after four attempts — so the rows, their joins to
the ingested connections, the relay's drops and the resumption are all checked on the same store.
Expected values come from the experiment file and the handshake each server mode makes.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from quicack.cli import main
from quicack.lab import certificate, experiment, runner, serve
from quicack.model import QuicackError
from quicack.store.merge import merge

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "experiments" / "smoke.toml"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke experiment run with the command line: four attempts, then the rest."""
    base = tmp_path_factory.mktemp("testbed")
    db = base / "smoke.duckdb"
    first = cli("testbed", "run", SMOKE, "--db", db, "--limit", 4)
    second = cli("testbed", "run", SMOKE, "--db", db)
    return db, first, second


def query(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_stopped_run_continues_and_stores_each_attempt_once(smoke):
    db, first, second = smoke
    assert first.exit_code == 0, first.output
    assert "experiment 'smoke': 4 attempts made and stored" in first.stdout
    assert "4 of 6 stored" in first.stdout and "run again to continue" in first.stdout
    assert "[1/6] no-loss 5 ms serve-wfc quicack #0: ok" in first.stderr
    assert second.exit_code == 0, second.output
    assert "resuming experiment 'smoke': 4 of 6 attempts stored" in second.stderr
    assert "experiment 'smoke': 2 attempts made and stored" in second.stdout and "6 of 6 stored" in second.stdout
    assert "median TTFB and client first PTO (ms)" in second.stdout
    rows = query(db, "SELECT scenario, server, client, one_way_delay_ms, repetition, count(*) "
                     "FROM testbed_runs GROUP BY ALL ORDER BY ALL")
    assert rows == [("client-second-flight-lost", s, "quicack", 5.0, 0, 1) for s in ("serve-iack", "serve-wfc")] + \
        [("no-loss", s, "quicack", 5.0, 0, 1) for s in ("serve-iack", "serve-iack-ping", "serve-wfc")] + \
        [("server-first-flight-lost", "serve-wfc", "quicack", 5.0, 0, 1)]
    # a third run finds nothing to do
    third = cli("testbed", "run", SMOKE, "--db", db, "-q")
    assert third.exit_code == 0 and "0 attempts made" in third.stdout and "6 of 6 stored" in third.stdout


def test_rows_name_the_servers_and_their_settings(smoke):
    db, *_ = smoke
    rows = query(db, """SELECT scenario, server, outcome, drop_to_client, drop_to_server, cert_chain_length,
                               cert_delay_ms, response_bytes, response_bytes_received, certificates_received
                        FROM testbed_runs ORDER BY scenario, server""")
    assert rows == [
        ("client-second-flight-lost", "serve-iack", "ok", None, "2", 1, 5.0, 10240, 10240, 1),
        ("client-second-flight-lost", "serve-wfc", "ok", None, "2", 1, 5.0, 10240, 10240, 1),
        ("no-loss", "serve-iack", "ok", None, None, 1, 5.0, 10240, 10240, 1),
        ("no-loss", "serve-iack-ping", "ok", None, None, 1, 5.0, 10240, 10240, 1),
        ("no-loss", "serve-wfc", "ok", None, None, 1, 5.0, 10240, 10240, 1),
        ("server-first-flight-lost", "serve-wfc", "ok", "2", None, 3, 5.0, 10240, 10240, 3)]
    # the client's view, from its qlog: the response came after the handshake, within reason
    for ttfb, handshake, pto in query(db, "SELECT ttfb_ms, handshake_ms, client_first_pto_ms FROM testbed_runs"):
        assert 4 < handshake < ttfb < 2000 and pto > 4


def test_both_ends_are_ingested_and_classified(smoke):
    """serve-wfc's handshakes are wfc and serve-iack's iack, seen from either end."""
    db, *_ = smoke
    rows = query(db, """
        SELECT t.scenario, t.server, c.vantage, c.handshake_class, s.vantage, s.handshake_class,
               c.first_pto_ms = t.client_first_pto_ms, c.first_response_byte_ms = t.ttfb_ms,
               c.odcid = s.odcid
        FROM testbed_runs t JOIN connections c ON c.connection_id = t.client_connection_id
        JOIN connections s ON s.connection_id = t.server_connection_id ORDER BY 1, 2""")
    classes = {"serve-wfc": "wfc", "serve-iack": "iack", "serve-iack-ping": "iack_ping"}
    assert len(rows) == 6
    for scenario, server, cv, cc, sv, sc, same_pto, same_ttfb, same_odcid in rows:
        assert (cv, sv, same_pto, same_ttfb, same_odcid) == ("client", "server", True, True, True)
        assert cc == sc == classes[server], (scenario, server)
    # IACK's first RTT sample leaves out the certificate delay (5 ms): a shorter first PTO
    wfc, iack = (query(db, f"SELECT client_first_pto_ms FROM testbed_runs WHERE scenario = 'no-loss' "
                           f"AND server = '{s}'")[0][0] for s in ("serve-wfc", "serve-iack"))
    assert wfc > iack + 5


def test_the_relay_drops_what_the_scenario_says_and_the_endpoints_resend(smoke):
    db, *_ = smoke
    drops = query(db, """
        SELECT t.scenario, t.server, d.direction, d.datagram_index, d.quic_types
        FROM testbed_runs t JOIN relay_datagrams d ON d.relay_run_id = t.relay_run_id AND d.flow = t.relay_flow
        WHERE d.dropped_reason = 'drop_list' ORDER BY 1, 2""")
    # the client's second flight: its ACKs, Finished and request in one datagram; the server's
    # second datagram of a two-datagram first flight
    assert drops == [("client-second-flight-lost", "serve-iack", "to_server", 2, "initial+handshake+1RTT"),
                     ("client-second-flight-lost", "serve-wfc", "to_server", 2, "initial+handshake+1RTT"),
                     ("server-first-flight-lost", "serve-wfc", "to_client", 2, "handshake+1RTT")]
    figures = dict(((s, v), rest) for s, v, *rest in query(db, """
        SELECT scenario, server, client_pto_count, server_pto_count, client_retransmitted_packets,
               server_retransmitted_packets FROM testbed_runs"""))
    for server in ("serve-wfc", "serve-iack"):
        client_ptos, _, client_resent, server_resent = figures[("client-second-flight-lost", server)]
        assert client_ptos >= 1 and client_resent >= 1 and server_resent == 0
        assert figures[("no-loss", server)][2:] == [0, 0]
    _, server_ptos, _, server_resent = figures[("server-first-flight-lost", "serve-wfc")]
    assert server_ptos + server_resent >= 1 and server_resent >= 1
    # the PTO expiries are in the store's timers, for the replay too
    assert query(db, "SELECT DISTINCT timer_type, event_type FROM timers") == [("pto", "expired")]


def test_the_certificate_chain_reaches_the_client(smoke):
    """Three certificates instead of one: the client counts them, and the server's Handshake
    CRYPTO data (its first flight's certificate bytes) grows by the two CA certificates."""
    db, *_ = smoke
    rows = dict(query(db, """
        SELECT t.cert_chain_length, max(f.offset_bytes + f.length_bytes)
        FROM testbed_runs t JOIN packets p ON p.connection_id = t.server_connection_id
        JOIN frames f USING (connection_id, event_index)
        WHERE p.direction = 'sent' AND p.packet_number_space = 'handshake' AND f.frame_type = 'crypto'
          AND t.server = 'serve-wfc' AND t.scenario <> 'client-second-flight-lost' GROUP BY 1"""))
    certs, _ = certificate.chain(3, ("*.test", "localhost"))
    assert rows[3] - rows[1] > 700  # two P-256 CA certificates of ~400 bytes each
    assert query(db, "SELECT DISTINCT cert_chain_length, certificates_received FROM testbed_runs ORDER BY 1") == \
        [(1, 1), (3, 3)]
    assert len(certs) == 3


def test_testbed_runs_merge_with_their_connections(smoke, tmp_path):
    """quicack merge shifts client_connection_id and server_connection_id like connection_id."""
    db, *_ = smoke
    target = tmp_path / "all.duckdb"
    cli("analyze", REPO / "quicack" / "demo" / "client.qlog", "--db", target)
    merge(target, [db])
    rows = query(target, """
        SELECT count(*), count(*) FILTER (WHERE c.vantage = 'client' AND s.vantage = 'server'
                                          AND fc.path = t.client_qlog_path AND fs.path = t.server_qlog_path)
        FROM testbed_runs t JOIN connections c ON c.connection_id = t.client_connection_id
        JOIN connections s ON s.connection_id = t.server_connection_id
        JOIN files fc ON fc.file_id = c.file_id JOIN files fs ON fs.file_id = s.file_id""")
    assert rows == [(6, 6)]


# --- the experiment file ---------------------------------------------------------------------

GOOD = """\
repetitions = 2
servers = ["serve-wfc", "serve-iack"]
one_way_delay_ms = [1, 5]

[[scenario]]
name = "plain"

[[scenario]]
name = "lossy"
servers = ["serve-iack"]
drop_to_client = { serve-iack = "2,3" }
drop_to_server = [3, 2]
loss_to_server = 5
"""


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def test_an_experiment_is_a_matrix(tmp_path):
    exp = experiment.load(write(tmp_path, GOOD))
    assert exp.name == "exp" and exp.repetitions == 2 and exp.address == "127.0.0.1"
    cells = [(c.scenario.name, c.one_way_delay_ms, c.server, c.drop_to_client, c.drop_to_server)
             for c in exp.cells()]
    assert cells == [("plain", 1.0, "serve-wfc", "", ""), ("plain", 1.0, "serve-iack", "", ""),
                     ("plain", 5.0, "serve-wfc", "", ""), ("plain", 5.0, "serve-iack", "", ""),
                     ("lossy", 1.0, "serve-iack", "2,3", "2,3"), ("lossy", 5.0, "serve-iack", "2,3", "2,3")]
    lossy = exp.cells()[-1].relay_options("127.0.0.1:0", "127.0.0.1:9", 0)
    assert lossy["loss_to_server"] == 5 and lossy["delay_ms"] == 5.0
    assert {(c.ack_policy, c.scenario.ack_policy, c.scenario.path) for c in exp.cells()} == {
        ("aioquic", None, "plain"), ("aioquic", None, "lossy")}  # no policy named: aioquic's, no rows
    groups = runner.plan(exp, 2, {})
    assert [[(c.server, r) for c, r in g.todo] for g in groups][:1] == [
        [("serve-wfc", 0), ("serve-iack", 0), ("serve-wfc", 1), ("serve-iack", 1)]]


def test_an_ack_policy_and_a_path_label_per_scenario_or_for_all(tmp_path):
    text = GOOD.replace("repetitions = 2", 'repetitions = 2\nack_policy = "ratio:2"\npath = "geo"').replace(
        'loss_to_server = 5', 'loss_to_server = 5\nack_policy = "ack-frequency"\npath = "lossy-geo"\n'
                              'request_ack_frequency = [10, 25]')
    exp = experiment.load(write(tmp_path, text))
    assert {(c.scenario.name, c.ack_policy, c.scenario.path, c.listener) for c in exp.cells()} == {
        ("plain", "ratio:2", "geo", ("wfc", 0.0, 1, "reno", None)),
        ("plain", "ratio:2", "geo", ("iack", 0.0, 1, "reno", None)),
        ("lossy", "ack-frequency", "lossy-geo", ("iack", 0.0, 1, "reno", (10, 25.0)))}


@pytest.mark.parametrize("change, line, message", [
    (("loss_to_server = 5", "loss_to_server = 5\nburst_size = 2"), 14,
     "unknown key 'burst_size' in [[scenario]]; known: name, description, servers"),
    (("repetitions = 2", "repetitions = 2\ncolour = 'red'"), 2, "unknown key 'colour' at the top level"),
    (('drop_to_server = [3, 2]', 'drop_to_server = "3,x"'), 12,
     "drop_to_server '3,x': expected datagram indexes counted from 1, separated by commas (e.g. 1,3,4); "
     "'x' is not one"),
    (('drop_to_server = [3, 2]', 'drop_to_server = [0]'), 12,
     "drop_to_server '0': expected datagram indexes counted from 1"),
    (('drop_to_client = { serve-iack = "2,3" }', 'drop_to_client = { serve-wfc = "2" }'), 11,
     "drop_to_client: a table of drop lists names each server of the scenario once (serve-iack); "
     "missing serve-iack"),
    (("repetitions = 2", 'repetitions = 2\naddress = "192.0.2.1"'), 2,
     "address '192.0.2.1': the testbed uses loopback addresses only (127.0.0.0/8, ::1)"),
    (('servers = ["serve-wfc", "serve-iack"]', 'servers = ["serve-wfc", "nginx"]'), 2,
     "servers: unknown server 'nginx'; known: serve-wfc, serve-iack, serve-iack-ping, "),  # then the peers
    (('name = "lossy"', 'name = "plain"'), 9, "name 'plain': two scenarios have this name"),
    (('loss_to_server = 5', 'loss_to_server = 5\nack_policy = "ratio:0"'), 14,
     "ACK policy 'ratio:0': expected one of aioquic, ratio:N (N from 1 to 1000), custura, ack-frequency"),
    (("repetitions = 2", 'repetitions = 2\nack_policy = "tcp"'), 2, "ACK policy 'tcp'"),
    (('loss_to_server = 5', 'loss_to_server = 5\npath = ""'), 14, "path '': expected a label"),
    (('loss_to_server = 5', 'loss_to_server = 5\nrequest_ack_frequency = [0, 25]'), 14,
     "request_ack_frequency [0, 25]: expected [N, MAX_DELAY_MS] with N ≥ 1 and 1 ≤ MAX_DELAY_MS < 16384"),
])
def test_a_bad_experiment_is_refused_with_file_line_and_key(tmp_path, change, line, message):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(QuicackError) as e:
        experiment.load(path)
    assert str(e.value).startswith(f"{path} at line {line}: {message}")
    assert "\n" not in str(e.value)


def test_the_command_refuses_a_bad_file_and_keeps_what_is_stored(smoke, tmp_path):
    db, *_ = smoke
    before = query(db, "SELECT count(*) FROM testbed_runs")
    path = write(tmp_path, GOOD.replace("repetitions = 2", "repetitions = 2\ncolour = 'red'"))
    result = cli("testbed", "run", path, "--db", db)
    assert result.exit_code == 1
    assert result.stderr == f"error: {path} at line 2: unknown key 'colour' at the top level; known: " \
        "name, description, repetitions, servers, clients, one_way_delay_ms, address, seed, timeout_s, " \
        "cert_delay_ms, cert_chain_length, response_bytes, ack_policy, path, capture, scenario\n"
    assert query(db, "SELECT count(*) FROM testbed_runs") == before


def test_a_resumed_run_with_changed_settings_is_refused(smoke, tmp_path):
    db, *_ = smoke
    path = tmp_path / "smoke.toml"
    path.write_text(SMOKE.read_text().replace('drop_to_server = "2"', 'drop_to_server = "2,3"'))
    with pytest.raises(QuicackError) as e:
        runner.run(path, db)
    assert "scenario 'client-second-flight-lost' (serve-wfc, 5 ms) has drop_to_server '2,3' but its " \
           "stored attempts had '2'" in str(e.value)


# --- the servers' new settings, sans I/O -------------------------------------------------------

def test_a_certificate_chain_is_issued_link_by_link():
    certs, key = certificate.chain(4, ("localhost",))
    assert len(certs) == 4 and certs[-1].issuer == certs[-1].subject  # the root last
    for cert, issuer in zip(certs, certs[1:]):
        cert.verify_directly_issued_by(issuer)
    assert certs[0].public_key() == key.public_key()


def test_the_response_size_follows_the_path_or_the_listener():
    spec = serve.ListenerSpec("127.0.0.1", 1, "iack")
    line = serve.response_body(spec, b"/")
    assert line.startswith(b"quicack-serve mode=iack")
    assert len(serve.response_body(spec, b"/10240")) == 10240 and serve.response_body(spec, b"/0") == b""
    sized = serve.ListenerSpec("127.0.0.1", 1, "iack", response_bytes=100)
    assert len(serve.response_body(sized, b"/")) == 100 and len(serve.response_body(sized, b"/7")) == 7
    assert serve.response_body(spec, b"/999999999999") == line  # beyond the bound: the line
