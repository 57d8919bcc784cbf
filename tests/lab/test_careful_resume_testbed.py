"""Careful Resume in the testbed: a tiny version of experiments/careful-resume.toml, run once.

quicack's client fetches a BDP-sized response (10 Mbit/s × 100 ms = 125 kB) from
``serve-wfc`` (aioquic's New Reno: slow start) and ``serve-careful-resume`` after an earlier
connection of 1 MB on the same path; then, from the Careful Resume server only, after an earlier
connection at 10 Mbit/s through a path whose rate has since dropped to 2 Mbit/s with a 25 kB
queue.  Checked on the stored rows: each connection's logged phase changes
(``careful_resume_phases``, read from the server's qlog) walk the drafts' transition rules
(:func:`quicack.core.resumelog.rule_breaks`), the resumed connection jumps from the saved
capacity, and the reduced-capacity one retreats.  No timing is asserted (speed: docs/careful-resume.md).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from quicack.cli import main
from quicack.core.resumelog import rule_breaks

TINY = """
repetitions = 1
servers = ["serve-wfc", "serve-careful-resume"]
one_way_delay_ms = [50]
timeout_s = 30

[[scenario]]
name = "bdp"
response_bytes = 125000
prime_bytes = 1000000
rate_to_client_kbps = 10000
queue_bytes = 125000
receive_window_bytes = 16000000

[[scenario]]
name = "capacity-dropped"
servers = ["serve-careful-resume"]
response_bytes = 125000
prime_bytes = 1000000
prime_rate_to_client_kbps = 10000
rate_to_client_kbps = 2000
queue_bytes = 25000
receive_window_bytes = 16000000
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("careful-resume")
    (base / "tiny.toml").write_text(TINY)
    db = base / "tiny.duckdb"
    result = CliRunner().invoke(main, ["testbed", "run", str(base / "tiny.toml"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("earlier connection, 1000000 bytes: ok") == 3
    return db


def query(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def phases(db: Path, scenario: str, server: str) -> list[tuple]:
    return query(db, f"""SELECT p.old_phase, p.new_phase, p.trigger, p.congestion_window_bytes,
                                p.saved_congestion_window_bytes
                         FROM careful_resume_phases p JOIN testbed_runs t ON p.connection_id = t.server_connection_id
                         WHERE t.scenario = '{scenario}' AND t.server = '{server}' ORDER BY p.event_index""")


def test_every_attempt_completes_with_its_settings(tiny):
    assert query(tiny, """SELECT scenario, server, outcome, response_bytes_received, prime_bytes,
                                 prime_rate_to_client_kbps, ttlb_ms > ttfb_ms FROM testbed_runs ORDER BY 1, 2""") == [
        ("bdp", "serve-careful-resume", "ok", 125000, 1000000, None, True),
        ("bdp", "serve-wfc", "ok", 125000, 1000000, None, True),
        ("capacity-dropped", "serve-careful-resume", "ok", 125000, 1000000, 10000.0, True)]


def test_slow_start_logs_no_phase(tiny):
    assert phases(tiny, "bdp", "serve-wfc") == []


def test_resumed_connection_jumps_from_the_saved_capacity(tiny):
    got = phases(tiny, "bdp", "serve-careful-resume")
    assert [(old, new) for old, new, *_ in got[:2]] == [(None, "reconnaissance"), ("reconnaissance", "unvalidated")]
    saved = got[0][4]
    # the earlier connection delivered about a BDP (125 kB) per RTT; "jump_cwnd ≤ saved_cwnd/2"
    assert 60_000 < saved < 250_000
    assert got[1][3] == saved // 2
    assert got[-1][1] == "normal"


def test_reduced_capacity_retreats(tiny):
    got = phases(tiny, "capacity-dropped", "serve-careful-resume")
    kinds = [(old, new, trigger) for old, new, trigger, *_ in got]
    assert ("reconnaissance", "unvalidated", "congestion_window_limited") in kinds
    assert any(new == "safe_retreat" and trigger == "packet_loss" for _, new, trigger in kinds)
    assert kinds[-1] == ("safe_retreat", "normal", "exit_recovery")


def test_logged_transitions_follow_the_drafts(tiny):
    runs = query(tiny, "SELECT DISTINCT connection_id FROM careful_resume_phases")
    assert len(runs) == 2
    for (cid,) in runs:
        changes = query(tiny, f"SELECT old_phase, new_phase, trigger FROM careful_resume_phases "
                              f"WHERE connection_id = {cid} ORDER BY event_index")
        assert rule_breaks(changes) == [], changes


def test_an_earlier_rate_needs_an_earlier_connection(tmp_path):
    from quicack.lab import experiment
    from quicack.model import QuicackError

    path = tmp_path / "bad.toml"
    path.write_text('servers = ["serve-careful-resume"]\n[[scenario]]\nname = "x"\nprime_rate_to_client_kbps = 100\n')
    with pytest.raises(QuicackError) as e:
        experiment.load(path)
    assert e.value.message == "prime_rate_to_client_kbps is the earlier connection's rate: give prime_bytes"
    path.write_text('[[scenario]]\nname = "x"\nprime_bytes = 2000\n')
    loaded = experiment.load(path)
    assert loaded.servers == ("serve-wfc", "serve-iack", "serve-iack-ping")   # not a default server
    assert loaded.scenarios[0].prime_bytes == 2000
