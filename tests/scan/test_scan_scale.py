"""Scan runs that survive: kill -9 and resume, worker processes, shards and merging, capture.

Everything runs against local `quicack serve` listeners on loopback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import duckdb
import pytest
from click.testing import CliRunner

from quicack.core import cidtag
from quicack.cli import main
from servers import REPO, Servers, env, quicack

MODES = [("wfc", 0), ("iack", 5), ("iack-ping", 5), ("wfc", 5)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with Servers(tmp_path_factory.mktemp("servers"), MODES) as s:
        yield s


def write_list(tmp_path, servers, n: int):
    """n names spread over the listeners; a hosts file can only say port 443, so --resolve."""
    names = [f"n{i}.test" for i in range(n)]
    (tmp_path / "list.txt").write_text("".join(f"{name}\n" for name in names))
    resolve = []
    for i, name in enumerate(names):
        resolve += ["--resolve", f"{name}={servers.address(i % len(MODES))}"]
    return tmp_path / "list.txt", resolve


def rows(db, sql):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_kill_9_then_rerun_leaves_exactly_one_row_per_target_and_repetition(tmp_path, servers):
    listing, resolve = write_list(tmp_path, servers, 40)
    db = tmp_path / "k.duckdb"
    command = quicack("scan", str(listing), "--db", str(db), "-n", "2", "--spacing-s", "0.05",
                      "--rate", "6", "--allow-private", "-q", *resolve)
    process = subprocess.Popen(command, cwd=REPO, env=env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    # (6 probes/s: 80 probes take ~13 s, the first batch is written when its first probe is
    # 10 s old, ScanOptions.batch_age_s)
    # kill it in the middle: once the first batch of probes is on disk (the store itself stays
    # locked by the scanner, so watch its qlog folder)
    qlog = tmp_path / "k-scans" / "list" / "qlog"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
        if qlog.exists() and any(qlog.iterdir()):
            time.sleep(0.3)
            break
    assert process.poll() is None, "the scan ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = rows(db, "SELECT count(*) FROM probes")[0][0]
    assert 10 <= before < 80
    again = subprocess.run(command, cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"resuming run 'list': {before} of 80 probes stored" in again.stderr
    assert rows(db, "SELECT count(*), count(DISTINCT (target_index, repetition)) FROM probes") == [(80, 80)]
    assert rows(db, "SELECT outcome, count(*) FROM probes GROUP BY 1") == [("ok", 80)]
    # every probe is linked to exactly one client connection, each connection to one probe
    assert rows(db, "SELECT count(*) FROM probes p JOIN connections c USING (connection_id)") == [(80,)]
    assert rows(db, "SELECT count(*) FROM connections WHERE connection_id NOT IN "
                    "(SELECT connection_id FROM probes)") == [(0,)]
    assert rows(db, "SELECT cardinality(resumed_at), finished_at IS NOT NULL FROM runs") == [(1, True)]


def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp_path, servers):
    listing, resolve = write_list(tmp_path, servers, 30)
    db = tmp_path / "i.duckdb"
    command = quicack("scan", str(listing), "--db", str(db), "-n", "1", "--rate", "2",
                      "--allow-private", "-q", *resolve)
    process = subprocess.Popen(command, cwd=REPO, env=env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    # (2 probes/s: the first batch goes out after 10 s, before the 30 probes are done)
    qlog = tmp_path / "i-scans" / "list" / "qlog"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (qlog.exists() and any(qlog.iterdir())):
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted: re-run the same command to resume" in err
    stopped = rows(db, "SELECT count(*), count(connection_id), max(finished_at IS NULL) FROM runs, probes")
    assert 0 < stopped[0][0] < 30 and stopped[0][0] == stopped[0][1] and stopped[0][2]
    again = subprocess.run(command, cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert rows(db, "SELECT count(*), count(DISTINCT target_index), count(connection_id) FROM probes") == [(30, 30, 30)]


def test_worker_processes_share_the_scan_and_die_with_their_parent(tmp_path, servers):
    listing, resolve = write_list(tmp_path, servers, 12)
    db = tmp_path / "w.duckdb"
    result = subprocess.run(quicack("scan", str(listing), "--db", str(db), "-n", "2", "-w", "2",
                                    "--spacing-s", "0.05", "--allow-private", "-q", *resolve),
                            cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert rows(db, "SELECT count(*), count(connection_id), count(DISTINCT worker) FROM probes "
                    "WHERE outcome = 'ok'") == [(24, 24, 2)]
    # a parent killed with SIGKILL takes its workers along
    slow = tmp_path / "slow.txt"
    slow.write_text("".join(f"s{i}.test\n" for i in range(200)))
    process = subprocess.Popen(quicack("scan", str(slow), "--db", str(tmp_path / "x.duckdb"), "-w", "2",
                                       "--rate", "5", "--allow-private", "-q", "--resolve",
                                       f"s0.test={servers.address(0)}"),
                               cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(children) < 2:
        time.sleep(0.2)
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == process.pid]
    assert len(children) >= 2
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(c) for c in children):
        time.sleep(0.1)
    assert not any(_alive(c) for c in children)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_shards_cover_the_list_once_and_merge_into_one_store(tmp_path, servers):
    listing, resolve = write_list(tmp_path, servers, 9)
    for k in (1, 2, 3):
        result = CliRunner().invoke(main, ["scan", str(listing), "--db", str(tmp_path / f"s{k}.duckdb"),
                                           "-n", "1", "--shard", f"{k}/3", "--allow-private", *resolve])
        assert result.exit_code == 0, result.output
    merged = tmp_path / "all.duckdb"
    result = CliRunner().invoke(main, ["merge", str(merged)] + [str(tmp_path / f"s{k}.duckdb") for k in (1, 2, 3)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"merged 3 stores into {merged}: 9 probes, 9 connections, 3 files")
    assert rows(merged, "SELECT list(target_index ORDER BY target_index) FROM probes") == [(list(range(9)),)]
    assert rows(merged, "SELECT list(shard ORDER BY shard) FROM runs") == [(["1/3", "2/3", "3/3"],)]
    # keys were renumbered: every probe still joins its own connection and the packets follow
    assert rows(merged, "SELECT count(*) FROM probes p JOIN connections c USING (connection_id) "
                        "JOIN files f USING (file_id) WHERE f.content_sha256 = p.qlog_sha256") == [(9,)]
    again = CliRunner().invoke(main, ["merge", str(merged), str(tmp_path / "s1.duckdb")])
    assert again.exit_code == 1
    assert again.output == f"error: {tmp_path / 's1.duckdb'}: run 'list' shard '1/3' is already in {merged}\n"


def test_the_cid_tag_joins_a_capture_of_the_scan_back_to_each_domain(tmp_path, servers):
    listing, resolve = write_list(tmp_path, servers, 8)
    db = tmp_path / "c.duckdb"
    pcap = tmp_path / "scan.pcapng"
    result = CliRunner().invoke(main, ["scan", str(listing), "--db", str(db), "-n", "2",
                                       "--spacing-s", "0.05", "--allow-private", "--pcap", str(pcap), *resolve])
    assert result.exit_code == 0, result.output
    # read the capture with tshark directly: the client's Initial packets and their source CIDs
    out = subprocess.run(["tshark", "-r", str(pcap), "-n", "-d", f"udp.port=={servers.port},quic",
                          "-Y", f"udp.dstport=={servers.port} && quic.long.packet_type == 0",
                          "-T", "fields", "-e", "ip.dst", "-e", "quic.scid"],
                         capture_output=True, text=True, check=True).stdout
    seen = set()
    for line in out.splitlines():
        address, scid = line.split("\t")
        run_tag, index, rep = cidtag.decode(scid.split(",")[0])
        seen.add((index, rep, address))
    probes = {(i, r, a) for i, r, a in rows(db, "SELECT target_index, repetition, address FROM probes")}
    assert seen == probes and len(probes) == 16
    (tag,) = rows(db, "SELECT cid_run_tag FROM runs")[0]
    assert {cidtag.decode(s.split("\t")[1].split(",")[0])[0] for s in out.splitlines()} == {tag}
    domains = dict(rows(db, "SELECT target_index, domain FROM probes"))
    assert {domains[i] for i, _, _ in seen} == {f"n{i}.test" for i in range(8)}
