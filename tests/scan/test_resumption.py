"""`quicack scan --resumption` against local `quicack serve` listeners (loopback only): each probe a
full handshake, then a resumed connection sending its GET in 0-RTT.

What the probes say is checked against what the other vantage points recorded: the capture of the
scan (tshark) and the servers' own qlogs, ingested into the same store.
"""

from __future__ import annotations

import time

import duckdb
import pytest

from quicack import Store
from quicack.scan import scanner
from quicack.scan.options import ScanOptions
from servers import Servers

# wfc with 0-RTT (the default), the same without tickets, one whose return path is 50 ms, and one
# whose answer (30 KB) is far more than 3 × the client's first flight
LISTENERS = [("wfc", 0), ("wfc", 0, {"zero_rtt": "false"}), ("wfc", 0, {"extra_delay_ms": 50}),
             ("wfc", 0, {"response_bytes": 30000})]
NAMES = ["zero.test", "nozero.test", "far.test", "big.test"]


@pytest.fixture(scope="module")
def scan(tmp_path_factory, tshark):
    tmp = tmp_path_factory.mktemp("resumption")
    with Servers(tmp, LISTENERS, qlog_dir=tmp / "server-qlog") as servers:
        listing = tmp / "list.txt"
        listing.write_text("".join(n + "\n" for n in NAMES))
        opts = ScanOptions(str(listing), db=str(tmp / "s.duckdb"), allow_private=True, repetitions=2,
                           spacing_s=0.05, resumption=True, pcap=str(tmp / "scan.pcapng"),
                           resolve={n: (servers.ip(i), servers.port) for i, n in enumerate(NAMES)})
        summary = scanner.scan(opts)
        time.sleep(3.5)  # a server writes a connection's qlog when it ends: 3 PTOs after the close (RFC 9000 §10.2)
    with Store(opts.db) as store:  # the capture, and the servers' qlogs (written when they stopped)
        result = store.ingest(tmp / "scan.pcapng", keylog=f"{summary.out_dir}/sslkeylog.txt")
        assert result.status == "ingested", result
        for path in sorted((tmp / "server-qlog").rglob("*.qlog")):
            store.ingest(path)
    return summary, duckdb.connect(opts.db, read_only=True)


def _probes(con, domain: str) -> list[dict]:
    cur = con.execute("SELECT * FROM probes WHERE domain = ? ORDER BY repetition", [domain])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def test_the_resumed_get_goes_in_0rtt_and_is_accepted(scan):
    _, con = scan
    for p in _probes(con, "zero.test"):
        assert p["outcome"] == "ok" and p["resumed_outcome"] == "ok" and p["resumed_http_status"] == 200
        assert p["ticket_received"] and p["ticket_lifetime_s"] == 86400
        assert p["ticket_max_early_data"] == 0xFFFFFFFF  # RFC 9001 §4.6.1: QUIC's only value
        assert p["session_resumed"] and p["zero_rtt"] == "accepted"
        assert not p["token_received"] and not p["token_used"]  # aioquic's server sends no NEW_TOKEN
        assert p["resumed_cid_tag"] != p["cid_tag"]


def test_without_tickets_nothing_is_resumed(scan):
    _, con = scan
    for p in _probes(con, "nozero.test"):
        assert p["outcome"] == "ok" and p["ticket_received"] is False
        assert p["zero_rtt"] == "not_offered" and p["resumed_outcome"] is None


def test_accepted_0rtt_saves_a_round_trip_on_a_50_ms_path(scan):
    """The full connection needs a round trip for the handshake and one for the GET; the resumed
    one sends the GET with its ClientHello.  50 ms of return path: half a round trip of margin."""
    _, con = scan
    for p in _probes(con, "far.test"):
        assert p["zero_rtt"] == "accepted"
        assert p["resumed_ttfb_ms"] < p["ttfb_ms"] - 25


def test_the_resumed_connection_keeps_its_own_trace(scan):
    """Each pair's second connection: its qlog trace in a file of its own, ingested, its
    connection the client's view of the resumed handshake — the 0-RTT packets it sent, the tagged
    connection ID and its first response byte."""
    _, con = scan
    rows = con.execute("""
        SELECT p.domain, p.zero_rtt, p.resumed_qlog_path, p.qlog_path, c.vantage, c.odcid, a.zero_rtt,
               a.zero_rtt_sent, c.first_response_byte_ms, p.resumed_ttfb_ms, p.connection_id
        FROM probes p JOIN connections c ON c.connection_id = p.resumed_connection_id
        JOIN address_validation a ON a.connection_id = c.connection_id ORDER BY 1""").fetchall()
    attempted = con.execute("SELECT count(*) FROM probes WHERE resumed_outcome IS NOT NULL").fetchall()[0][0]
    assert len(rows) == attempted == 6  # zero.test, far.test and big.test, twice each
    # the client's trace alone tells accepted 0-RTT by the server's ACK of it: a probe that closed on
    # its answer before that ACK came reads as rejected (address_validation.zero_rtt), so the
    # probe's own view (the server's EncryptedExtensions) is the one kept in probes.zero_rtt
    for _, zero_rtt, resumed_path, first_path, vantage, odcid, seen, sent, ttfb, probe_ttfb, first in rows:
        assert "/resumed/" in resumed_path and resumed_path != first_path and vantage == "client"
        assert zero_rtt == "accepted" and sent >= 1 and seen in ("accepted", "rejected")
        # the first response byte in its trace, at most when the probe's own clock saw it
        assert 0 < ttfb <= probe_ttfb + 0.5
        assert first is not None and odcid


def test_the_capture_and_the_server_see_the_0rtt_packets(scan):
    """The resumed connections in the scan's capture (decrypted with the scan's key log, which
    holds both connections' secrets) and in the servers' qlogs: 0-RTT packets, acknowledged by
    the server (capture) and processed by it (server qlog) — none dropped for want of keys."""
    _, con = scan
    rows = con.execute("""
        SELECT c.vantage, a.zero_rtt, a.zero_rtt_sent, a.zero_rtt_acked, a.zero_rtt_received, a.zero_rtt_discarded
        FROM address_validation a JOIN connections c USING (connection_id)
        WHERE a.zero_rtt <> 'not_offered'""").fetchall()
    network = [r for r in rows if r[0] == "network"]
    server = [r for r in rows if r[0] == "server"]
    # two repetitions of zero.test, far.test and big.test
    assert len(network) == 6 and all(r[1] == "accepted" and r[2] >= 1 and r[3] == r[2] for r in network)
    assert len(server) == 6 and all(r[1] == "accepted" and r[4] >= 1 and r[5] == 0 for r in server)


def test_a_0rtt_answer_larger_than_3x_blocks_the_server(scan):
    """Seed 002's first problem: the GET arrives in 0-RTT, the server answers at once (0.5-RTT
    data) and hits 3 × what the client sent before its address is validated; the rest of the
    answer waits for the client's Handshake packet.  The full connection of the same server, whose
    GET comes after the handshake, never reaches the limit.  From the server's own qlog."""
    _, con = scan
    rows = con.execute("""
        SELECT a.zero_rtt, a.client_bytes_before_validation, a.server_bytes_before_validation,
               a.limit_reached, a.limit_exceeded, a.blocked_count, a.blocked_ms
        FROM address_validation a JOIN connections c USING (connection_id)
        JOIN (SELECT connection_id FROM packets WHERE sender = 'server' AND packet_type = '1RTT'
              GROUP BY 1 HAVING sum(size_bytes) > 30000) big USING (connection_id)
        WHERE c.vantage = 'server'""").fetchall()
    resumed = [r for r in rows if r[0] == "accepted"]
    full = [r for r in rows if r[0] == "not_offered"]
    assert len(resumed) == 2 and len(full) == 2
    for _, client, server, reached, exceeded, blocked, blocked_ms in resumed:
        assert reached and not exceeded and server <= 3 * client and blocked >= 1 and blocked_ms > 0
    assert all(not r[3] and r[5] == 0 for r in full)


def test_sent_packets_are_named_by_their_datagram():
    """aioquic logs a batch's packets before any datagram leaves: an Initial (276 B) padded to a
    1200-byte datagram after the packet, then an Initial ACK and a Handshake packet coalesced in
    one 1200-byte datagram (padding inside the Initial), then a lone 1-RTT packet."""
    from quicack.scan.probe import stamp_datagrams

    def sent(n):
        return {"name": "transport:packet_sent", "time": 1.0, "data": {"raw": {"length": n}}}
    events = [{"name": "transport:packet_received", "time": 0.5, "data": {}},
              sent(276), sent(1151), sent(49), sent(60)]
    stamp_datagrams(events, 1, [1200, 1200, 60], sent_before=5)
    assert [e["data"]["datagram_id"] for e in events[1:5]] == [5, 6, 6, 7]
    extra = [e["data"] for e in events[5:]]
    assert extra == [{"count": 1, "raw": [{"payload_length": 1200}], "datagram_ids": [5]}]
