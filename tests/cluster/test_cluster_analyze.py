"""``quicack analyze --cluster`` on a real Dask cluster: a ``dask scheduler`` and two ``dask
worker`` processes on loopback."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from dask_cluster import REPO, DaskCluster, _env, different_rows, quicack
from quicack import cli

DATA = REPO / "tests" / "data"


def test_analyze_through_the_cluster_stores_the_rows_of_a_local_analyze(tmp_path):
    with DaskCluster(tmp_path, ["a", "b"]) as cluster:
        through = quicack("analyze", str(DATA), "--db", str(tmp_path / "cluster.duckdb"), "--cluster",
                          cluster.address, "-q")
    local = quicack("analyze", str(DATA), "--db", str(tmp_path / "local.duckdb"), "-q", "-j", "1")
    assert through.returncode == local.returncode == 1, through.stderr  # (files are refused, as locally)
    assert "refused" in local.stdout
    assert through.stdout.replace("cluster.duckdb", "local.duckdb") == local.stdout
    assert through.stderr == local.stderr
    assert different_rows(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb") == {}
    assert not (tmp_path / "cluster.duckdb.shards").exists()  # (the shards are gone once combined)
    again = quicack("analyze", str(DATA), "--db", str(tmp_path / "cluster.duckdb"), "--cluster", "local:2", "-q")
    files, ingested, refused = map(int, re.search(r"files: (\d+) \((\d+) ingested, 0 unchanged, (\d+) refused\)",
                                                  local.stdout).groups())
    assert files == ingested + refused and refused >= 1
    assert f"files: {files} (0 ingested, {ingested} unchanged, {refused} refused)" in again.stdout, \
        again.stdout + again.stderr


def _distinct_traces(folder: Path, n: int) -> list[Path]:
    """n qlog files of different bytes: a real trace whose title is made unique."""
    source = DATA / "pcap2qlog" / "examples" / "draft-01" / "ack_range.qlog"
    doc = orjson.loads(source.read_bytes())
    folder.mkdir()
    paths = []
    for i in range(n):
        doc["title"] = f"copy {i}"
        paths.append(folder / f"trace-{i:03d}.qlog")
        paths[-1].write_bytes(orjson.dumps(doc))
    return paths


def test_a_worker_killed_mid_file_loses_nothing(tmp_path):
    traces = _distinct_traces(tmp_path / "traces", 24)
    shards = tmp_path / "shards"
    with DaskCluster(tmp_path, ["a", "b"]) as cluster:
        run = subprocess.Popen([sys.executable, "-m", "quicack", "analyze", str(tmp_path / "traces"), "--db",
                                str(tmp_path / "cluster.duckdb"), "--cluster", cluster.address, "--shards",
                                str(shards), "-q"], cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(shards.glob("*/*-a-*.partial.duckdb")):  # worker a has started a file
            assert time.monotonic() < deadline and run.poll() is None, run.communicate()
            time.sleep(0.005)
        cluster.kill("a")
        half_written = list(shards.glob("*/*-a-*.partial.duckdb"))
        out, err = run.communicate(timeout=300)
    assert half_written, "worker a was killed between two files, not in the middle of one"
    assert run.returncode == 0, err
    assert "files: 24 (24 ingested, 0 unchanged, 0 refused)" in out
    local = quicack("analyze", str(tmp_path / "traces"), "--db", str(tmp_path / "local.duckdb"), "-q", "-j", "1")
    assert local.returncode == 0, local.stderr
    assert different_rows(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb") == {}


def test_no_worker_in_time_is_one_clear_line(tmp_path):
    with DaskCluster(tmp_path, []) as cluster:
        done = quicack("analyze", str(DATA / "careful-resume"), "--db", str(tmp_path / "c.duckdb"), "--cluster",
                       cluster.address, "--cluster-wait-s", "2")
    assert done.returncode == 1
    assert done.stderr == (f"error: 0 Dask workers registered with the scheduler at {cluster.address} within 2 s, "
                           f"1 needed: start workers with `dask worker {cluster.address}`\n")


def test_no_scheduler_is_one_clear_line(tmp_path):
    from servers import free_udp_port
    address = f"tcp://127.0.0.1:{free_udp_port()}"  # (a port nothing listens on)
    done = quicack("analyze", str(DATA / "careful-resume"), "--db", str(tmp_path / "c.duckdb"), "--cluster",
                   address, "--cluster-wait-s", "2")
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: no Dask scheduler answered at {address} within 2 s (")
    assert done.stderr.endswith("): start one with `dask scheduler`\n") and done.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["analyze", "scan"])
def test_without_dask_the_command_says_how_to_get_it(tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "distributed", None)  # (import distributed raises ImportError)
    (tmp_path / "list.txt").write_text("a.test\n")
    source = str(DATA / "careful-resume") if command == "analyze" else str(tmp_path / "list.txt")
    done = CliRunner().invoke(cli.main, [command, source, "--db", str(tmp_path / "c.duckdb"), "--cluster", "local:2"])
    assert done.exit_code == 1
    assert done.output == ("error: --cluster needs Dask distributed, which is not installed: "
                           "pip install 'quicack[cluster]'\n")
    assert not (tmp_path / "c.duckdb").exists()


def test_the_same_bytes_twice_are_stored_once_as_locally(tmp_path):
    """Files of equal bytes in one task's batch and in two tasks' batches: the later ones are
    unchanged, as in a local analyze (through local:2, a LocalCluster of two processes)."""
    traces = _distinct_traces(tmp_path / "traces", 20)
    for copy, original in ((6, 5), (19, 2)):  # (a batch holds 16 small qlogs: 5 and 6 share one, 2 and 19 not)
        traces[copy].write_bytes(traces[original].read_bytes())
    through = quicack("analyze", str(tmp_path / "traces"), "--db", str(tmp_path / "cluster.duckdb"), "--cluster",
                      "local:2", "-q")
    local = quicack("analyze", str(tmp_path / "traces"), "--db", str(tmp_path / "local.duckdb"), "-q", "-j", "1")
    assert through.returncode == local.returncode == 0, through.stderr
    assert "files: 20 (18 ingested, 2 unchanged, 0 refused)" in local.stdout
    assert through.stdout.replace("cluster.duckdb", "local.duckdb") == local.stdout
    assert different_rows(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb") == {}
    # --reanalyze: each file read again, the rows of an earlier copy of its bytes replaced
    again = quicack("analyze", str(tmp_path / "traces"), "--db", str(tmp_path / "cluster.duckdb"), "--cluster",
                    "local:2", "-q", "--reanalyze")
    local_again = quicack("analyze", str(tmp_path / "traces"), "--db", str(tmp_path / "local.duckdb"), "-q", "-j", "1",
                          "--reanalyze")
    assert "files: 20 (20 ingested, 0 unchanged, 0 refused)" in local_again.stdout
    assert again.stdout.replace("cluster.duckdb", "local.duckdb") == local_again.stdout, again.stderr
    assert different_rows(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb") == {}
