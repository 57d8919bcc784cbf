"""The QUIC stacks added for issue 27 (go-x-net, s2n-quic, quiche, …) as peers, end to end like
tests/lab/test_peers.py: each is built and started on loopback, scanned with ``quicack scan``
(3 probes of ``<peer>.localhost`` fetching /64k.bin, ``--pcap``; ``--alpn hq-interop`` for a
stack without HTTP/3), and ``quicack analyze`` puts the capture (with the scan's key log) and the
peer's own server qlog into the same store.  Each probe's views — the scanner's client qlog, the
capture and the server's qlog where the stack writes one — must agree (``quicack compare``) and
give the handshake class and the first ACK delay observed for that stack.  Their own clients
fetch ``/`` from the peer servers they can speak to.

How the expected values were observed (runs on this machine, loopback, 2 shared cores): the first
server datagram read off the store in each view, ``quicack compare`` between the capture and each
qlog, and the ACK delays off the capture.  Why each stack's first ACK delay is what it is, from
its source, is in docs/peers.md.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

import pytest

from quicack.lab import peers
from quicack.report import peers as peerviews
from quicack.store.compare import compare_connections

from peerscan import (LARGE_SIZE, REPETITIONS, connection,
                      first_server_datagram, scan_peer)


@dataclass(frozen=True)
class Expect:
    """What a stack's probes show."""

    #: (class, reason) of the client qlog's and the capture's view
    wire_class: tuple[str, str]
    #: (class, reason) of the server's own qlog; None: it writes none
    server_class: tuple[str, str] | None
    #: the ACK delay (ms) of the server's first Initial ACK: a number, or "measured": above 0 and,
    #: divided by ``ack_delay_scale``, below the server's turnaround on the wire (a delay it
    #: measured cannot be longer than the time it held the client's packet)
    initial_ack: float | str
    #: the packet types of the server's first datagram (client qlog and capture)
    first_datagram: tuple[str, ...]
    #: the server's qlog groups the packets of a datagram (False: one packet per datagram there)
    server_datagrams: bool = True
    #: decoded ACK delay ÷ the delay the stack measured (s2n-quic: 8)
    ack_delay_scale: int = 1


STACKS = {
    # x/net acknowledges with the ServerHello and always reports 0: Conn.loop takes one `now` for
    # handling a datagram and for the send that follows (conn.go), acks.go: delay = now − maxRecvTime.
    # Its qlog logs no datagram events and every packet at its own time: one packet per datagram.
    "go-x-net": Expect(("wfc", "ack_with_server_hello"), ("wfc", "ack_with_server_hello"), 0.0,
                       ("initial", "handshake", "1RTT"), server_datagrams=False),
    # s2n-quic encodes Initial and Handshake ACK delays with exponent 0 (s2n-quic-core
    # ack::Settings::EARLY, ack_delay_exponent 0) while it announces 3: decoded as RFC 9000 §19.3
    # says, its delays are 8 × the time it held the ACK.
    "s2n-quic": Expect(("wfc", "ack_with_server_hello"), None, "measured", ("initial", "handshake"),
                       ack_delay_scale=8),
    # quiche measures the delay (recovery: now − time the largest packet was received) and sends it
    "quiche": Expect(("wfc", "ack_with_server_hello"), ("wfc", "ack_with_server_hello"), "measured",
                     ("initial", "handshake")),
    # TQUIC (a quiche descendant) measures the delay and sends it; its qlog writes no reference
    # time, Option values as Rust debug text ("None"), no datagram events and each packet at its
    # own time (one packet per datagram there)
    "tquic": Expect(("wfc", "ack_with_server_hello"), ("wfc", "ack_with_server_hello"), "measured",
                    ("initial", "handshake"), server_datagrams=False),
    # kwik's AckGenerator.generateAck computes a delay (whole ms) only in the App space: 0 in
    # Initial and Handshake ACKs; no qlog (its qlog module is not on Maven Central)
    "kwik": Expect(("wfc", "ack_with_server_hello"), None, 0.0, ("initial", "handshake")),
}
NEW = [name for name in STACKS if name in peers.PEERS]


@pytest.fixture(scope="module", params=NEW)
def scanned(request, tmp_path_factory, tshark):
    """One stack scanned like a user would: `quicack scan` while it runs, then `quicack analyze`
    of the capture (the scan's key log) and of the peer's own qlog into the same store."""
    scanned = scan_peer(request.param, tmp_path_factory.mktemp(request.param))
    yield scanned
    scanned.store.close()


def test_scan_fetches_the_file_with_the_stacks_alpn(scanned):
    alpn = peers.PEERS[scanned.name].alpn
    probes = scanned.store.sql("SELECT * FROM probes ORDER BY repetition").to_dicts()
    assert [p["repetition"] for p in probes] == list(range(REPETITIONS))
    for p in probes:
        assert (p["outcome"], p["alpn"], p["response_bytes"]) == ("ok", alpn, LARGE_SIZE), p
        assert p["http_status"] == (200 if alpn == "h3" else None)  # hq-interop has no status
    assert scanned.probes["capture_cid"].null_count() == 0
    has_qlog = peers.PEERS[scanned.name].qlog is not None
    assert scanned.probes["server_cid"].null_count() == (0 if has_qlog else REPETITIONS)


def test_capture_decrypts_and_holds_no_gso_superframes(scanned):
    capture = scanned.store.sql("SELECT * FROM capture_files").to_dicts()
    assert len(capture) == 1 and capture[0]["secrets"] == "keylog"
    assert capture[0]["gso_superframes"] == 0 and capture[0]["packets_not_decrypted"] == 0
    grams = scanned.store.sql(f"""
        SELECT connection_id, datagram_id, sum(size_bytes) AS payload FROM packets
        WHERE connection_id IN ({', '.join(map(str, scanned.probes['capture_cid']))}) AND sender = 'server'
        GROUP BY ALL""")
    assert grams["payload"].max() <= 1472


def test_every_view_has_the_stacks_class(scanned):
    expect = STACKS[scanned.name]
    for probe in scanned.probes.iter_rows(named=True):
        for cid in (probe["client_cid"], probe["capture_cid"]):
            conn = connection(scanned.store, cid)
            assert (conn["handshake_class"], conn["handshake_reason"]) == expect.wire_class, conn
        if expect.server_class is not None:
            conn = connection(scanned.store, probe["server_cid"])
            assert conn["vantage"] == "server" and conn["implementation"] == scanned.name
            assert (conn["handshake_class"], conn["handshake_reason"]) == expect.server_class, conn


def test_views_agree_on_the_first_server_flight(scanned):
    expect = STACKS[scanned.name]
    for probe in scanned.probes.iter_rows(named=True):
        client = first_server_datagram(scanned.store, probe["client_cid"])
        capture = first_server_datagram(scanned.store, probe["capture_cid"])
        assert tuple(p["packet_type"] for p in client) == expect.first_datagram, client
        ident = [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in client]
        assert [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in capture] == ident
        assert [p["frames"] for p in capture] == [p["frames"] for p in client]
        if probe["server_cid"] is None:
            continue
        server = first_server_datagram(scanned.store, probe["server_cid"])
        got = [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in server]
        assert got == (ident if expect.server_datagrams else ident[:1])


def _explained(d, last_logged_handshake_pn: int | None) -> bool:
    """Differences between the capture (A) and a server's qlog (B) its logging explains."""
    if d.kind == "only_b" and d.sender == "server":
        # the CONNECTION_CLOSE a server sends to connections still open when it is stopped,
        # after the scan's capture ended (go-x-net: Endpoint.Close)
        return "connection_close" in d.detail
    if d.kind == "only_a" and d.sender == "client" and d.space == "handshake":
        # the client's Handshake retransmissions after the server discarded its Handshake keys
        # (RFC 9001 §4.9.2): undecryptable, so no packet event (a loaded machine lets the
        # client's PTO fire before the server's ACK of its Finished arrives)
        return last_logged_handshake_pn is not None and d.packet_number > last_logged_handshake_pn
    return False


def test_compare_pairs_every_packet_of_capture_and_qlogs(scanned):
    for probe in scanned.probes.iter_rows(named=True):
        client = compare_connections(scanned.store.con, probe["capture_cid"], probe["client_cid"], tolerance_ms=20.0)
        late = [d for d in client.differences if d.kind == "only_a" and d.sender == "server"]
        assert [d for d in client.differences if d not in late] == [], client.differences
        assert client.only_b == 0 and client.matched > LARGE_SIZE // 1472
        if probe["server_cid"] is None:
            continue
        server = compare_connections(scanned.store.con, probe["capture_cid"], probe["server_cid"], tolerance_ms=20.0)
        last_hs = scanned.store.sql(f"""SELECT max(packet_number) FROM packets WHERE connection_id = {probe['server_cid']}
            AND sender = 'client' AND packet_number_space = 'handshake'""").item()
        assert [d for d in server.differences if not _explained(d, last_hs)] == [], server.differences
        assert server.matched > LARGE_SIZE // 1472


def test_first_ack_delay_per_repetition(scanned, text_report):
    table = peerviews.first_ack_delays(scanned.store)
    text_report.rows("peers", table, peerviews.format_first_ack_delays)
    expect = STACKS[scanned.name]
    assert table["repetition"].to_list() == list(range(1, REPETITIONS + 1))
    assert set(table["source"]) == {"capture"} and set(table["first_ack_packet"]) == {"initial"}
    for row, probe in zip(table.iter_rows(named=True), scanned.probes.iter_rows(named=True)):
        if expect.initial_ack == "measured":
            assert 0 < row["initial_ack_delay_ms"] / expect.ack_delay_scale < row["turnaround_ms"], row
        else:
            assert row["initial_ack_delay_ms"] == expect.initial_ack, row
        assert row["handshake_class"] == expect.wire_class[0]
        client = connection(scanned.store, probe["client_cid"])
        assert client["first_ack_delay_ms"] == pytest.approx(row["initial_ack_delay_ms"], abs=0.008)
        assert row["turnaround_ms"] > 0
    if expect.ack_delay_scale > 1:
        # decoded as RFC 9000 §19.3 says, longer than the whole turnaround on the wire (s2n-quic)
        assert (table["initial_ack_delay_ms"] > table["turnaround_ms"]).any(), table
    line = next(t for t in peerviews.format_first_ack_delays(table).splitlines() if t.startswith(scanned.name))
    assert peerviews.seed_value(scanned.name) in line.split()


# --- the stacks' own clients -----------------------------------------------------------------------

#: client → how it is asked for a URL (its binary is the peer's); qlog goes into $QLOGDIR
CLIENTS = {"go-x-net": ["-get", "{url}", "-ca", "{ca}"], "s2n-quic": ["--get", "{url}", "--ca", "{ca}"],
           "quiche": ["--get", "{url}", "--ca", "{ca}"], "tquic": ["--get", "{url}", "--ca", "{ca}"],
           "kwik": ["--get", "{url}", "--ca", "{ca}"]}
#: clients that write no qlog of their own
NO_CLIENT_QLOG = {"s2n-quic", "kwik"}
#: (client, server) pairs that do not interoperate, and why (asserted: they still fail)
FAILS = {
    # quiche sends reserved (grease) HTTP/3 frames on the request stream before HEADERS; flupke
    # 0.9.4 closes the connection with H3_FRAME_UNEXPECTED (0x105) where RFC 9114 §9 says
    # "frame types that are unknown ... MUST be ignored"
    ("quiche", "kwik"): "H3_FRAME_UNEXPECTED",
}


def _servers_for(client: str) -> list[str]:
    """The peer servers a client can fetch from: same ALPN (the h3 ones all; go-x-net its own)."""
    alpn = peers.PEERS[client].alpn
    return [name for name, p in peers.PEERS.items() if p.alpn == alpn and peers.status(name) in ("built", "installed")]


@pytest.mark.parametrize("client", [c for c in CLIENTS if c in peers.PEERS])
def test_the_stacks_client_fetches_from_the_peer_servers(client, tmp_path):
    binary = peers.prepare(client).binary
    servers = _servers_for(client)
    assert client in servers
    for server in servers:
        with peers.start(server, tmp_path / server) as run:
            url = f"https://127.0.0.1:{run.port}/"
            args = [a.format(url=url, ca=run.cert) for a in CLIENTS[client]]
            qlog = tmp_path / f"{client}-{server}-qlog"
            done = subprocess.run([str(binary), *args], env={**os.environ, "QLOGDIR": str(qlog)},
                                  capture_output=True, text=True, timeout=60)
        if (client, server) in FAILS:
            assert done.returncode != 0, (server, FAILS[client, server], done.stdout)
            continue
        assert done.returncode == 0, (server, done.stdout, done.stderr)
        body = len(peers.INDEX_BODY.format(name=server))
        assert done.stdout.strip().endswith(f"{body} bytes"), (server, done.stdout)
        if client not in NO_CLIENT_QLOG:
            assert [p.name.endswith("_client.sqlog") for p in qlog.iterdir()] == [True], server
