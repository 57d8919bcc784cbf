"""The ACK-policy experiment's figures (quicack/lab/ackpolicyruns.py) against what tshark counts in
a capture of the same attempt, and a tiny ACK-policy experiment run whole.

One attempt of quicack's client (ratio:2) through the relay (8.5 Mbit/s forward, 1.5 Mbit/s
return, 2 ms each way) is captured on loopback with dumpcap and decrypted by tshark with the
client's key log: tshark's count of the return datagrams, their UDP payload bytes and those of the
datagrams holding only ACK and PADDING frames must be the relay's figures split by the client's
qlog, to the byte."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import orjson
import polars as pl
import pytest

from quicack import Store
from quicack.lab import ackpolicyruns, endpoints, runner, serve
from quicack.lab.relay import RelayConfig, RelayProcess
from quicack.pcap import dumpcap
from quicack.report import testbed
from quicack.report.document import write_report
from quicack.scan import batches

#: QUIC frame types (RFC 9000 §19): PADDING 0x00, ACK 0x02 and 0x03
ACK_ONLY_TYPES = {"0", "2", "3"}


def _attempt(tmp_path: Path, policy: str):
    """One GET of 150 kB through the relay, captured: (store, relay_run_id, flow, client
    connection_id, pcap, keylog, relay port)."""
    host = "127.0.0.1"
    server_port = endpoints.free_port(host)
    relay_port = endpoints.free_port(host)
    pcap, keylog = tmp_path / "attempt.pcapng", tmp_path / "keys.log"
    with serve.Background([serve.ListenerSpec(host, server_port, "wfc", response_bytes=150_000)]):
        relay = RelayProcess(RelayConfig.from_options(
            listen=f"{host}:{relay_port}", upstream=f"{host}:{server_port}", delay_ms=2.0,
            rate_to_client_kbps=8500, rate_to_server_kbps=1500, queue_packets=1000)).start()
        capture = dumpcap.start(pcap, {relay_port}, interface="lo")
        try:
            one = asyncio.run(endpoints.attempt(host, relay_port, "/", 10.0, ack_policy=policy))
        finally:
            capture.stop()
            records = relay.stop()
    assert one.result.outcome == "ok" and one.result.response_bytes == 150_000
    keylog.write_text(one.result.keylog)
    store = Store(tmp_path / "store.duckdb")
    run_id = records.write(store)
    qlog, _ = batches.write_batch(tmp_path, [orjson.dumps(one.result.trace)])
    result = store.ingest(qlog)
    (client_id,) = store.con.execute("SELECT connection_id FROM connections WHERE file_id = ? AND vantage = 'client'",
                                     [result.file_id]).fetchone()
    return store, run_id, one.flow, client_id, pcap, keylog, relay_port


def _tshark_return(tshark: str, pcap: Path, keylog: Path, port: int) -> list[tuple[int, set[str]]]:
    """Each datagram sent to the relay's port: (UDP payload bytes, QUIC frame types in it)."""
    done = subprocess.run([tshark, "-r", str(pcap), "-n", "-o", f"tls.keylog_file:{keylog}",
                           "-d", f"udp.port=={port},quic", "-Y", f"udp.dstport == {port}",
                           "-T", "fields", "-E", "occurrence=a", "-e", "udp.length", "-e", "quic.frame_type",
                           "-e", "quic.decryption_failed"],
                          capture_output=True, text=True, timeout=120, check=True)
    out = []
    for line in done.stdout.splitlines():
        length, types, failed = (line.split("\t") + ["", ""])[:3]
        assert not failed, line  # every packet decrypted: its frames are known
        out.append((int(length) - 8, set(types.split(",")) if types else set()))
    return out


def test_return_bytes_match_a_tshark_count_of_the_capture(tmp_path, tshark):
    store, run_id, flow, client_id, pcap, keylog, port = _attempt(tmp_path, "ratio:2")
    got = ackpolicyruns.figures(store.con, client_id, run_id, flow)
    store.close()
    seen = _tshark_return(tshark, pcap, keylog, port)
    ack_only = [size for size, types in seen if types and types <= ACK_ONLY_TYPES]
    assert got["return_packets"] == len(seen)
    assert got["return_bytes"] == sum(size for size, _ in seen)
    assert got["return_ack_only_bytes"] == sum(ack_only)
    assert 50 <= len(ack_only) < len(seen)  # ratio:2 over ~110 data packets: ACK-only datagrams
    assert got["forward_bytes"] > 150_000


TINY = """
repetitions = 1
servers = ["serve-wfc"]
one_way_delay_ms = [2]
response_bytes = 150000
path = "tiny"

[[scenario]]
name = "ratio-2"
ack_policy = "ratio:2"
rate_to_client_kbps = 8500
rate_to_server_kbps = 1500
queue_packets_to_server = 50

[[scenario]]
name = "ratio-10"
ack_policy = "ratio:10"
rate_to_client_kbps = 8500
rate_to_server_kbps = 1500
queue_packets_to_server = 50

[[scenario]]
name = "asked"
ack_policy = "ack-frequency"
request_ack_frequency = [10, 25]
rate_to_client_kbps = 8500
rate_to_server_kbps = 1500

[[scenario]]
name = "no-policy"
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny ACK-policy experiment run whole and its report: (store path, report HTML)."""
    folder = tmp_path_factory.mktemp("ack-policy")
    path = folder / "tiny.toml"
    path.write_text(TINY)
    db = folder / "tiny.duckdb"
    summary = runner.run(path, db)
    assert summary.complete and summary.outcomes["ok"] == 4
    with Store(db) as store:
        write_report(store, folder / "tiny.html", now=datetime(2026, 11, 26, tzinfo=timezone.utc))
    return db, (folder / "tiny.html").read_text()


def test_a_tiny_ack_policy_experiment(tiny):
    db, _ = tiny
    con = duckdb.connect(str(db), read_only=True)
    rows = {r[0]: r[1:] for r in con.execute("""
        SELECT scenario, ack_policy, path, return_kbps, forward_loss_pct, return_packets, return_ack_only_bytes,
               return_bytes, download_s, forward_mbps FROM ack_policy_runs""").fetchall()}
    assert set(rows) == {"ratio-2", "ratio-10", "asked"}  # a scenario without a policy has no row
    two, ten, asked = rows["ratio-2"], rows["ratio-10"], rows["asked"]
    assert two[:4] == ("ratio:2", "tiny", 1500.0, 0.0) and ten[0] == "ratio:10"
    # ~110 data packets: ~55 ACKs at 1:2, ~11 at 1:10 (plus the handshake's and the request's)
    assert two[4] > 2.5 * ten[4]
    assert two[5] > 3 * ten[5]
    assert asked[0] == "ack-frequency" and asked[4] < 0.5 * two[4]  # quicack serve asked for 1:10
    for row in (two, ten, asked):
        assert 0 < row[5] < row[6] and 0 < row[7] < 10 and 0 < row[8] <= 8.5 * 1.05
    # the keys lead back to the attempt and its datagrams
    assert con.execute("""
        SELECT count(*) FROM ack_policy_runs a JOIN testbed_runs t USING (experiment, scenario, server, client,
               one_way_delay_ms, repetition)
        WHERE a.relay_run_id = t.relay_run_id AND a.relay_flow = t.relay_flow""").fetchone() == (3,)
    con.close()


def test_the_report_shows_table_iii_and_the_figures(tiny):
    db, html = tiny
    start = html.index('id="ack-experiments"')
    table = re.search(r"<table>(.*?)</table>", html[start:], re.S).group(1)
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]]
    con = duckdb.connect(str(db), read_only=True)
    stored = dict(con.execute("SELECT ack_policy, return_bytes FROM ack_policy_runs").fetchall())
    con.close()
    shown = {row[4]: float(row[8].replace(",", "")) for row in cells[:3]}
    assert shown == {policy: float(value) for policy, value in stored.items()}  # one attempt each: the median
    clients = re.search(r'id="ack-experiments-clients".*?<table>(.*?)</table>', html, re.S).group(1)
    seen = {r[1]: r for r in (re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", clients,
                                                                                         re.S)[1:])}
    # scenario → (advertised min_ack_delay, ACK_FREQUENCY frames sent, ratio the server saw)
    assert (seen["asked"][4], seen["asked"][5]) == ("1", "1.000") and 8 <= float(seen["asked"][6]) <= 11
    assert (seen["ratio-2"][4], seen["ratio-2"][5]) == ("0", "0.000") and 1.8 <= float(seen["ratio-2"][6]) <= 2.2
    figures = [json.loads(f) for f in re.findall(r'Plotly\.newPlot\("fig\d+".*?\}\)\((.*?)\);</script>',
                                                 html[start:], flags=re.S)]
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert any(t.startswith("Return-path packet size") for t in titles)
    assert any(t.startswith("Forward rate and return datagrams") for t in titles)
    assert any(t.startswith("Server congestion window") for t in titles)
    sizes = next(f for f in figures if f["layout"]["title"]["text"].startswith("Return-path packet size"))
    # IPv4 sizes: an ACK-only 1-RTT datagram of aioquic is ~33 bytes of UDP payload, 61 on the wire
    assert {trace["name"].split(" ")[0] for trace in sizes["data"]} == {"ratio:2", "ratio:10", "ack-frequency"}
    assert all(50 <= trace["x"][len(trace["x"]) // 2] <= 80 for trace in sizes["data"])


def test_a_long_attempts_ladder_draws_its_first_packets(tiny, monkeypatch):
    """A ladder is for the handshake and first flights: of a 150 kB transfer (~250 packets in the two
    traces) it draws the earliest LADDER_MAX_PACKETS, and the relay's datagrams of that time."""
    db, _ = tiny
    monkeypatch.setattr(testbed, "LADDER_MAX_PACKETS", 100)
    with Store(db) as store:
        attempt = testbed.representatives(store).filter(pl.col("scenario") == "ratio-2").row(0, named=True)
        data = testbed.ladder(store, attempt)
    assert data.packets.height == 100 and data.total_packets > 200
    assert data.packets["t_ms"].to_list() == sorted(data.packets["t_ms"].to_list())
    last = data.packets["t_ms"].max()
    assert 0 < data.datagrams.height < 200 and data.datagrams["in_ms"].max() <= last + testbed.LADDER_MARGIN_MS
    title = testbed.ladder_figure(data, attempt).layout.title.text
    assert title.endswith(f"its first 100 of {data.total_packets} packets")
