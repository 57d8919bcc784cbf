"""``quicack scan --cluster`` from two vantage points: two real ``dask worker`` processes on
loopback scanning local ``quicack serve`` listeners."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import duckdb
import pytest

from dask_cluster import REPO, DaskCluster, _env, quicack
from servers import Servers

#: site i answers from listener i % 4: the even sites (vantage hamburg) wait for the certificate,
#: the odd ones (vantage sao-paulo) acknowledge instantly
LISTENERS = [("wfc", 0), ("iack", 10), ("wfc", 10), ("iack", 10)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with Servers(tmp_path_factory.mktemp("servers"), LISTENERS) as s:
        yield s


def _arguments(tmp_path, servers, names: int, *extra: str) -> list[str]:
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"site{i}.test\n" for i in range(names)))
    resolve = [f"--resolve=site{i}.test={servers.address(i % len(LISTENERS))}" for i in range(names)]
    return ["scan", str(listing), "--db", str(tmp_path / "scan.duckdb"), "--allow-private", *resolve, "-q", *extra]


def _probes(tmp_path) -> list[tuple]:
    con = duckdb.connect(str(tmp_path / "scan.duckdb"), read_only=True)
    try:
        return con.execute("SELECT p.domain, p.target_index, p.repetition, p.vantage, r.vantage, r.shard, "
                           "p.connection_id IS NOT NULL FROM probes p JOIN runs r USING (run_id) "
                           "ORDER BY 2, 3").fetchall()
    finally:
        con.close()


def _each_once_with_its_vantage(probes: list[tuple], names: int, repetitions: int) -> None:
    assert sorted((d, rep) for d, _, rep, *_ in probes) == sorted(
        (f"site{i}.test", rep) for i in range(names) for rep in range(repetitions))
    for domain, index, _, vantage, run_vantage, shard, _ in probes:
        assert vantage == run_vantage == ("hamburg" if index % 2 == 0 else "sao-paulo"), (domain, vantage)
        assert shard == ("1/2" if vantage == "hamburg" else "2/2")


def test_two_vantage_workers_probe_every_target_and_repetition_once(tmp_path, servers):
    with DaskCluster(tmp_path, ["w1", "w2"]) as cluster:
        done = quicack(*_arguments(tmp_path, servers, 8, "-n", "2", "--spacing-s", "0.05"), *_vantages(cluster))
    assert done.returncode == 0, done.stderr
    assert "vantage hamburg: 8 probes" in done.stdout and "vantage sao-paulo: 8 probes" in done.stdout
    probes = _probes(tmp_path)
    _each_once_with_its_vantage(probes, 8, 2)
    assert all(joined for *_, joined in probes)  # every probe's qlog ingested, joined to its connection
    _the_report_compares_the_vantages(tmp_path)


def _the_report_compares_the_vantages(tmp_path):
    from quicack.report import scans, vantages
    from quicack.store.database import Store
    written = quicack("report", "--db", str(tmp_path / "scan.duckdb"), "--out", str(tmp_path / "r.html"))
    assert written.returncode == 0, written.stderr
    assert 'id="scan-vantages"' in (tmp_path / "r.html").read_text()
    with Store(tmp_path / "scan.duckdb", read_only=True) as store:
        classes = store.con.execute("SELECT p.vantage, c.handshake_class, c.ack_sh_gap_ms FROM probes p "
                                    "JOIN connections c USING (connection_id)").fetchall()
        scans._providers(store)
        table = {(r["vantage"], r["provider"]): r for r in vantages.vantage_table(store).to_dicts()}
    assert set(table) == {("hamburg", "local"), ("hamburg", "all"), ("sao-paulo", "local"), ("sao-paulo", "all")}
    for vantage in ("hamburg", "sao-paulo"):
        mine = [(k, gap) for v, k, gap in classes if v == vantage]
        iack_gaps = sorted(gap for k, gap in mine if k in ("iack", "iack_ping"))
        row = table[(vantage, "all")]
        assert row["probes"] == row["classified"] == len(mine) == 8
        assert row["iack_pct"] == pytest.approx(100.0 * len(iack_gaps) / len(mine))
        if iack_gaps:
            assert row["median_iack_gap_ms"] == pytest.approx((iack_gaps[3] + iack_gaps[4]) / 2)
    assert table[("hamburg", "all")]["iack_pct"] == 0.0 and table[("sao-paulo", "all")]["iack_pct"] == 100.0


def _vantages(cluster) -> list[str]:
    """The scan's options: vantage hamburg on worker w1, sao-paulo on w2."""
    return ["--cluster", cluster.address, "--vantage", "hamburg=w1", "--vantage", "sao-paulo=w2"]


def _started(tmp_path, arguments: list[str]) -> tuple[subprocess.Popen, object]:
    """The scan started in a child process, once vantage hamburg has stored two probes; and the
    path of hamburg's progress file."""
    run = subprocess.Popen([sys.executable, "-m", "quicack", *arguments], cwd=REPO, env=_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = tmp_path / "shards" / "list" / "hamburg.progress.json"
    deadline = time.monotonic() + 120
    while not (progress.exists() and json.loads(progress.read_text())["done"] >= 2):
        assert time.monotonic() < deadline and run.poll() is None, run.communicate()
        time.sleep(0.05)
    return run, progress


def test_a_vantage_worker_killed_mid_scan_resumes_on_rerun(tmp_path, servers):
    arguments = _arguments(tmp_path, servers, 12, "-n", "3", "--spacing-s", "0.3", "--concurrency", "2",
                           "--shards", str(tmp_path / "shards"))
    with DaskCluster(tmp_path, ["w1", "w2"]) as cluster:
        vantage = _vantages(cluster)
        run, progress = _started(tmp_path, [*arguments, *vantage])
        cluster.kill("w1")
        out, err = run.communicate(timeout=300)
        assert run.returncode == 1
        assert ("error: vantage hamburg: its worker went away (killed?); its probes so far are kept: re-run the "
                "same command to resume") in err
        assert "vantage sao-paulo: 18 probes" in out
        partial = json.loads(progress.read_text())["done"]
        assert 2 <= partial < 18
        cluster.start_worker("w1")
        again = quicack(*arguments, *vantage)
    assert again.returncode == 0, again.stderr
    assert "vantage hamburg: 18 probes" in again.stdout and "vantage sao-paulo: 18 probes" in again.stdout
    _each_once_with_its_vantage(_probes(tmp_path), 12, 3)
    con = duckdb.connect(str(tmp_path / "scan.duckdb"), read_only=True)
    resumed = dict(con.execute("SELECT vantage, len(resumed_at) FROM runs").fetchall())
    assert resumed == {"hamburg": 1, "sao-paulo": 0}  # hamburg resumed its own store; sao-paulo ran once


def test_a_client_killed_mid_scan_resumes_on_rerun(tmp_path, servers):
    arguments = _arguments(tmp_path, servers, 8, "-n", "3", "--spacing-s", "0.3", "--concurrency", "2",
                           "--shards", str(tmp_path / "shards"))
    with DaskCluster(tmp_path, ["w1", "w2"]) as cluster:
        vantage = _vantages(cluster)
        run, progress = _started(tmp_path, [*arguments, *vantage])
        # (read as the client is killed: hamburg's worker goes on with its task and its file after it)
        done_at_kill = json.loads(progress.read_text())["done"]
        run.kill()
        run.wait()
        assert done_at_kill < 12
        assert not (tmp_path / "scan.duckdb").exists() or _probes(tmp_path) == []  # nothing was appended yet
        again = quicack(*arguments, *vantage)
    assert again.returncode == 0, again.stderr
    assert "vantage hamburg: 12 probes" in again.stdout and "vantage sao-paulo: 12 probes" in again.stdout
    _each_once_with_its_vantage(_probes(tmp_path), 8, 3)


def test_a_vantage_naming_no_registered_worker_is_one_clear_line(tmp_path, servers):
    done = quicack(*_arguments(tmp_path, servers, 2, "--cluster", "local:2", "--vantage", "hamburg=vp-ham"))
    assert done.returncode == 1
    assert done.stderr == ("error: vantage 'hamburg': no worker named or at 'vp-ham' is registered "
                                            "(workers: 0, 1)\n")
    assert not (tmp_path / "scan.duckdb").exists()
