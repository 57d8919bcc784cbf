"""A real peer scanned like a user would, shared by tests/lab/test_peers.py (Caddy, ngtcp2, quic-go,
quinn) and tests/lab/test_peer_stacks.py (the stacks added later).

Theory of operation: :func:`scan_peer` starts the peer on loopback, runs ``quicack scan`` of
``<peer>.localhost`` (a few probes fetching the large file, ``--pcap``) while it runs, then
``quicack analyze`` of the capture (with the scan's key log) and of the peer's own server qlogs
into the same store.  The queries below read one connection's view back from that store.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from quicack import Store
from quicack.lab import peers
from quicack.report import peers as peerviews

REPO = Path(__file__).resolve().parents[1]
REPETITIONS = 3
LARGE_NAME, LARGE_SIZE = peers.LARGE_FILE


@dataclass
class Scanned:
    name: str
    store: Store
    probes: pl.DataFrame
    pcap: Path
    scan_output: str


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quicack", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def scan_peer(name: str, work: Path) -> Scanned:
    """Scan peer ``name`` (its own ALPN) and analyze the capture and its qlogs into one store;
    the caller closes ``Scanned.store``."""
    domain = peers.probe_domain(name)
    (work / "list.txt").write_text(domain + "\n")
    db, pcap = work / "scan.duckdb", work / "scan.pcapng"
    with peers.start(name, work / "peer") as run:
        scan = cli("scan", work / "list.txt", "--db", db, "-n", REPETITIONS, "--spacing-s", "0.2",
                   "--path", f"/{LARGE_NAME}", "--pcap", pcap, "--resolve", f"{domain}=127.0.0.1:{run.port}",
                   "--allow-private", "--alpn", peers.PEERS[name].alpn, "-q")
    assert scan.returncode == 0, scan.stdout + scan.stderr
    server_qlogs = run.qlog_files()  # after stop: flushed
    keylog = work / "scan-scans" / "list" / "sslkeylog.txt"  # DB-scans/RUN next to the store
    analyze = cli("analyze", pcap, *server_qlogs, "--db", db, "--keylog", keylog, "-q")
    assert analyze.returncode == 0, analyze.stdout + analyze.stderr
    store = Store(db, read_only=True)
    return Scanned(name, store, peerviews.peer_probes(store), pcap, scan.stdout)


def connection(store: Store, connection_id: int) -> dict:
    return store.sql(f"SELECT * FROM connections WHERE connection_id = {connection_id}").to_dicts()[0]


def first_server_datagram(store: Store, connection_id: int) -> list[dict]:
    """The server's first datagram in one view: its packets with their frames."""
    return store.sql(f"""
        SELECT p.packet_type, p.packet_number, p.size_bytes, p.event_index,
               list(f.frame_type ORDER BY f.position) FILTER (WHERE f.frame_type IS NOT NULL) AS frames,
               max(f.ack_delay_ms) AS ack_delay_ms, max(f.largest_acknowledged) AS largest_acknowledged,
               max(f.offset_bytes) FILTER (WHERE f.frame_type = 'crypto') AS crypto_offset
        FROM packets p LEFT JOIN frames f USING (connection_id, event_index)
        WHERE p.connection_id = {connection_id} AND p.sender = 'server' AND p.datagram_id = (
            SELECT min(datagram_id) FROM packets WHERE connection_id = {connection_id} AND sender = 'server')
        GROUP BY ALL ORDER BY p.event_index""").to_dicts()
