"""The command line: exit codes, exact messages, summary, export, demo."""

from __future__ import annotations

import gzip
import shutil

import polars as pl
from click.testing import CliRunner

from conftest import DATA
from quicack.cli import main

CLIENT = DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"
SERVER = DATA / "local/aioquic-aioquic-handshake/qlog_server/e60faf3e02b8978c.qlog"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_analyze_a_folder_prints_the_summary(tmp_path):
    folder = tmp_path / "traces" / "nested"
    folder.mkdir(parents=True)
    shutil.copy(CLIENT, folder / "c.qlog")
    shutil.copy(SERVER, folder / "s.qlog")
    (folder / "notes.txt").write_text("not a trace, not picked from a folder")
    db = tmp_path / "q.duckdb"
    result = run("analyze", tmp_path / "traces", "--db", db)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"files: 2 (2 ingested, 0 unchanged, 0 refused) into {db}"
    assert lines[1].startswith("connections: 2  packets: ")
    assert "transport:datagrams_received" in result.output
    again = run("analyze", tmp_path / "traces", "--db", db)
    assert again.output.splitlines()[0] == f"files: 2 (0 ingested, 2 unchanged, 0 refused) into {db}"


def test_a_refused_file_exits_1_and_the_others_are_stored(tmp_path):
    bad = tmp_path / "bad.qlog"
    bad.write_text("")
    db = tmp_path / "q.duckdb"
    result = run("analyze", CLIENT, bad, "--db", db)
    assert result.exit_code == 1
    assert f"error: {bad} at byte 0: empty file, no qlog header" in result.output
    assert f"files: 2 (1 ingested, 0 unchanged, 1 refused) into {db}" in result.output
    assert "failures: 1" in result.output


def test_a_gzip_qlog_cut_short_is_kept_with_a_warning_and_the_run_goes_on(tmp_path):
    # (a gzip stream that ends early raises EOFError, which click would take for "Aborted!")
    compressed = gzip.compress(CLIENT.read_bytes(), compresslevel=1)
    cut = tmp_path / "cut.qlog.gz"
    cut.write_bytes(compressed[:len(compressed) // 2])
    db = tmp_path / "q.duckdb"
    result = run("analyze", cut, SERVER, "--db", db)
    assert result.exit_code == 0, result.output
    assert "Aborted" not in result.output
    assert f"warning: {cut}: stream ends with an error at decompressed byte " in result.output
    assert f"files: 2 (2 ingested, 0 unchanged, 0 refused) into {db}" in result.output


def test_records_without_a_name_are_listed_as_such_in_the_summary(tmp_path):
    path = tmp_path / "odd.sqlog"
    path.write_bytes(b'\x1e{"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {}}\n'
                     b'\x1e{"time": 1, "name": "transport:spin_bit_updated", "data": {}}\n\x1e[1]\n\x1e{"x": 1}\n')
    result = run("analyze", path, "--db", tmp_path / "q.duckdb")
    assert result.exit_code == 0, result.output
    assert "events kept in other_events: 3 ((no name) 2, transport:spin_bit_updated 1)" in result.output


def test_a_missing_path_is_an_error_naming_it(tmp_path):
    result = run("analyze", tmp_path / "nope.qlog", "--db", tmp_path / "q.duckdb")
    assert result.exit_code == 1
    assert result.output == f"error: {tmp_path / 'nope.qlog'}: no such file or folder\n"


def test_usage_errors_exit_2():
    assert run("analyze").exit_code == 2
    assert run("analyze", "--bogus", "x").exit_code == 2


def test_export_parquet(tmp_path):
    db = tmp_path / "q.duckdb"
    run("analyze", CLIENT, "--db", db)
    result = run("export", "--db", db, "--parquet", tmp_path / "pq")
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(tmp_path / "pq" / "connections.parquet").height == 1
    missing = run("export", "--db", tmp_path / "none.duckdb", "--parquet", tmp_path / "pq2")
    assert missing.exit_code == 1
    assert missing.output == f"error: {tmp_path / 'none.duckdb'}: no such store\n"


def test_demo_shows_the_server_first_initial_from_both_sides(tmp_path, monkeypatch):
    from quicack.lab import peers
    for name in peers.PEERS:  # the demo scans the real peers that are ready: make them ready
        peers.prepare(name)
    monkeypatch.chdir(tmp_path)  # the demo writes reports/demo.html here
    result = run("demo", "--db", tmp_path / "demo.duckdb")
    assert result.exit_code == 0, result.output
    assert "files: 2 (2 ingested" in result.output
    # aioquic's server Initial pn 0 carries ACK + CRYPTO (the file says so on both sides)
    assert "   client received pn 0 at" in result.output
    assert "   server sent     pn 0 at" in result.output
    assert result.output.count(": ack+crypto") == 2
    # then ten local servers, 50 names × 3 probes, and each server's first flight as scanned
    # (scanners/demo-servers.toml says which listener has which behaviour)
    assert "run 'demo': 150 probes; outcomes: ok 135, retry 15" in result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.startswith("  127.0.0.")}
    assert len(lines) == 10
    for address in ("127.0.0.101:14433", "127.0.0.102:14433", "127.0.0.103:14433", "127.0.0.110:14433"):
        assert " wfc" in lines[address] or " retry" in lines[address]
        assert "ack+crypto" in lines[address] and " 0.0 ms" in lines[address]
    for address in ("127.0.0.104:14433", "127.0.0.105:14433", "127.0.0.106:14433", "127.0.0.108:14433"):
        assert " iack," in lines[address] and "  ack  " in lines[address] and " iack  " in lines[address]
    assert " iack-ping," in lines["127.0.0.107:14433"] and "ack+ping" in lines["127.0.0.107:14433"]
    assert " iack_ping " in lines["127.0.0.107:14433"]
    assert " wfc  " in lines["127.0.0.101:14433"] and " wfc  " in lines["127.0.0.110:14433"]
    # then the real QUIC peers, 3 probes each: their first ACK delays (tests/lab/test_peers.py: 0 for
    # all but quinn in Initial packets, and only Caddy acknowledges in a Handshake packet)
    assert "scanning the real QUIC peers that are ready: caddy, ngtcp2, quic-go, quinn" in result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()
            if line.split() and line.split()[0] in peers.PEERS and line.rstrip().endswith("capture")}
    assert rows["caddy"][:6] == ["0.000"] * 6 and rows["ngtcp2"][:6] == ["0.000"] * 3 + ["-"] * 3
    assert rows["quic-go"][:6] == ["0.000"] * 3 + ["-"] * 3 and rows["quinn"][3:6] == ["-"] * 3
    report = tmp_path / "reports" / "demo.html"
    assert "report: reports/demo.html (" in result.output and report.stat().st_size > 10_000
    assert "Acknowledgment delay of the first ACK received from each peer" in report.read_text()


CAPTURE = DATA / "local/aioquic-aioquic-handshake/cap.pcapng"
KEYS = DATA / "local/aioquic-aioquic-handshake/keys.log"


def test_analyze_picks_captures_from_folders_and_decrypts_them(tmp_path, tshark):
    """A folder with a capture (keys.log beside it), a gzipped copy elsewhere and a qlog."""
    folder = tmp_path / "traces" / "run1"
    folder.mkdir(parents=True)
    shutil.copy(CAPTURE, folder / "cap.pcapng")
    shutil.copy(KEYS, folder / "keys.log")  # found beside the capture, not ingested itself
    other = tmp_path / "traces" / "run2"
    other.mkdir()
    (other / "cap.pcapng.gz").write_bytes(gzip.compress(CAPTURE.read_bytes()))
    shutil.copy(CLIENT, other / "c.qlog")
    db = tmp_path / "q.duckdb"
    result = run("analyze", tmp_path / "traces", "--db", db)
    assert result.exit_code == 0, result.output
    assert f"files: 3 (3 ingested, 0 unchanged, 0 refused) into {db}" in result.output
    # by hand (tshark without keys): 8 of the 11 packets are Handshake/1-RTT and do not decrypt
    assert (f"warning: {other / 'cap.pcapng.gz'}: 8 of 11 QUIC packets not decrypted (1RTT 6, "
            "handshake 2); no TLS key log found") in result.output
    assert result.output.count("warning:") == 1
    keyed = run("analyze", other / "cap.pcapng.gz", "--keylog", KEYS, "--db", db)
    assert keyed.exit_code == 0, keyed.output
    assert keyed.output.splitlines()[0] == f"files: 1 (1 ingested, 0 unchanged, 0 refused) into {db}"
    assert "warning" not in keyed.output


def test_analyze_capture_options_are_checked(tmp_path, tshark):
    missing = run("analyze", CAPTURE, "--keylog", tmp_path / "none.log", "--db", tmp_path / "q.duckdb")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert run("analyze", CAPTURE, "--quic-port", "0", "--db", tmp_path / "q.duckdb").exit_code == 2
    ok = run("analyze", CAPTURE, "--quic-port", "4433", "--db", tmp_path / "q.duckdb")
    assert ok.exit_code == 0, ok.output
    assert "connections: 1  packets: 11  events: 11" in ok.output


def test_analyze_arguments_read_before_click():
    """The plain `analyze` command lines whose first capture tshark can start on before the
    command line is parsed; anything else is left to click (None)."""
    from pathlib import Path

    from quicack.__main__ import analyze_arguments

    assert analyze_arguments(["analyze", "-q", "--db", "x.duckdb", "c.pcapng", "d"]) == \
        (Path("c.pcapng"), None, ())
    assert analyze_arguments(["analyze", "c.pcap", "--keylog=k.log", "--quic-port", "4433", "--quic-port=443",
                              "--reanalyze"]) == (Path("c.pcap"), "k.log", (4433, 443))
    assert analyze_arguments(["analyze", "--", "-odd name.pcap"]) == (Path("-odd name.pcap"), None, ())
    assert analyze_arguments(["analyze", "--dissector", "tshark", "c.pcap"]) == (Path("c.pcap"), None, ())
    assert analyze_arguments(["analyze", "--dissector=native", "c.pcap"]) == (Path("c.pcap"), None, ())
    for other in (["export"], ["analyze"], ["analyze", "--db"], ["analyze", "-x", "c.pcap"],
                  ["analyze", "c.pcap", "--quic-port", "x"], ["analyze", "--dissector", "x", "c.pcap"],
                  ["analyze", "--help"], ["--version"]):
        assert analyze_arguments(other) is None, other


def test_analyze_as_a_program_starts_tshark_before_parsing_and_keeps_it(tmp_path, tshark):
    """`python -m quicack analyze CAPTURE` starts tshark before click loads and ingests the
    capture with that dissection; a usage error found later by click still exits 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    db = tmp_path / "q.duckdb"
    ok = subprocess.run([sys.executable, "-m", "quicack", "analyze", "-q", "--db", str(db), str(CAPTURE),
                         "--quic-port", "4433"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "connections: 1  packets: 11  events: 11" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "quicack", "analyze", "--db", str(db), str(CAPTURE),
                          "--quic-port", "0"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--quic-port" in bad.stderr
