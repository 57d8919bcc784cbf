"""Real third-party QUIC servers as peers: each is installed/built, started on loopback, asked for
two files over HTTP/3 by an aioquic client while dumpcap captures, and then the three views —
the client's qlog, the server's own qlog and the decrypted capture — are ingested and compared.

How the expected first flights below were observed: each peer was run with tests/h3client.py
(aioquic 1.7.2, X25519, a P-256 certificate) and the client's qlog read back from the store
(`packets` joined with `frames`, first server datagram by `datagram_id`), then checked against
tshark's decryption of the capture (packet types, numbers and frame types per datagram) and the
server's own qlog (see /work/notes/peers-findings.md for the runs).  All four are WFC-shaped on
loopback: the first server Initial carries the ACK of the client's packet 0 *and* the ServerHello
(CRYPTO at offset 0), coalesced with the Handshake packet (certificate) in one datagram.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from capture import capture, datagrams, decryption_failures
from h3client import fetch
from quicack import QuicackError, Store, peers

#: the first datagram the server sends, as the aioquic client logs it: per packet, its type and
#: its frames in order (runs of one type as one; padding included, the client logs it), and the
#: first ACK's delay in ms (None: only bounds are stable, see the test).  The 0.5-RTT packet's
#: content depends on timing: Caddy and quic-go send NEW_CONNECTION_IDs and, in some runs, the
#: HTTP/3 control stream after them — listed as the frames that may follow.
FIRST_FLIGHT = {
    "caddy": ([("initial", ["ack", "padding", "crypto"]), ("handshake", ["crypto"]),
               ("1RTT", ["new_connection_id"])], {"stream"}, 0.0),
    "ngtcp2": ([("initial", ["ack", "crypto"]), ("handshake", ["crypto"]),
                ("1RTT", ["stream", "padding"])], set(), 0.0),
    "quic-go": ([("initial", ["ack", "padding", "crypto"]), ("handshake", ["crypto"]),
                 ("1RTT", ["new_connection_id"])], {"stream"}, 0.0),
    "quinn": ([("initial", ["ack", "crypto"]), ("handshake", ["crypto", "padding"])], set(), None),
}

#: the implementation name the store recognises in each server qlog
SERVER_IMPLEMENTATION = {"ngtcp2": "ngtcp2", "quic-go": "quic-go", "quinn": "quinn"}

LARGE_NAME, LARGE_SIZE = peers.LARGE_FILE


@dataclass
class Session:
    name: str
    port: int
    run: peers.RunningPeer
    responses: list
    client_qlog: Path
    server_qlogs: list[Path]
    pcap: Path
    keylog: Path
    store: Store


@pytest.fixture(scope="module", params=list(peers.PEERS))
def session(request, tmp_path_factory):
    """One peer, started once per module: capture, two GETs, stop, ingest both qlogs."""
    name = request.param
    work = tmp_path_factory.mktemp(name)
    port = peers.free_port()
    with capture(work / "cap.pcapng", port):
        with peers.start(name, work / "peer", port=port) as run:
            fetched = fetch(run.host, run.port, ["/", f"/{LARGE_NAME}"], server_name=run.server_name,
                            qlog_dir=work / "client-qlog", keylog=work / "keys.log")
    server_qlogs = run.qlog_files()  # after stop: flushed
    store = Store(work / "q.duckdb")
    yield Session(name, port, run, fetched.responses, fetched.qlog, server_qlogs,
                  work / "cap.pcapng", work / "keys.log", store)
    store.close()


def _connection(store: Store, vantage: str) -> dict:
    conns = store.sql(f"SELECT * FROM connections WHERE vantage = '{vantage}'").to_dicts()
    assert len(conns) == 1, conns
    return conns[0]


def _first_server_datagram(store: Store, connection_id: int) -> list[dict]:
    """The server's first datagram in one connection's view: its packets with their frames."""
    return store.sql(f"""
        SELECT p.packet_type, p.packet_number, p.size_bytes, p.event_index,
               list(f.frame_type ORDER BY f.position) FILTER (WHERE f.frame_type IS NOT NULL) AS frames,
               max(f.ack_delay_ms) AS ack_delay_ms, max(f.largest_acknowledged) AS largest_acknowledged,
               max(f.offset_bytes) FILTER (WHERE f.frame_type = 'crypto') AS crypto_offset
        FROM packets p LEFT JOIN frames f USING (connection_id, event_index)
        WHERE p.connection_id = {connection_id} AND p.sender = 'server' AND p.datagram_id = (
            SELECT min(datagram_id) FROM packets WHERE connection_id = {connection_id} AND sender = 'server')
        GROUP BY ALL ORDER BY p.event_index""").to_dicts()


def _dedup(frames: list[str]) -> list[str]:
    """Runs of one frame type as one (four NEW_CONNECTION_ID frames → one entry)."""
    return [f for i, f in enumerate(frames) if i == 0 or frames[i - 1] != f]


def test_http3_get_returns_the_served_files(session):
    index, large = session.responses
    assert index.status == 200
    assert index.body == peers.INDEX_BODY.format(name=session.name).encode()
    assert large.status == 200 and len(large.body) == LARGE_SIZE
    assert large.body == bytes(i % 251 for i in range(LARGE_SIZE))


def test_client_qlog_ingests_and_the_first_flight_has_the_observed_shape(session):
    result = session.store.ingest(session.client_qlog)
    assert result.status == "ingested", result.error
    conn = _connection(session.store, "client")
    assert conn["implementation"] == "aioquic" and result.packets > 0
    expected, may_follow, first_ack_delay_ms = FIRST_FLIGHT[session.name]
    flight = _first_server_datagram(session.store, conn["connection_id"])
    seen = [(p["packet_type"], _dedup(p["frames"])) for p in flight]
    assert [t for t, _ in seen] == [t for t, _ in expected]
    for (_, frames), (_, wanted) in zip(seen, expected):
        assert frames[:len(wanted)] == wanted and set(frames[len(wanted):]) <= may_follow, seen
    initial = flight[0]
    # WFC (ReACKed rule): the first server Initial with an ACK also carries the ServerHello (the
    # server's CRYPTO at offset 0 in the Initial space), and that ACK acknowledges packet 0.
    assert initial["largest_acknowledged"] == 0 and initial["crypto_offset"] == 0
    if first_ack_delay_ms is not None:
        assert initial["ack_delay_ms"] == first_ack_delay_ms
    else:  # quinn measures the delay (0.68 ms and 0.5 ms seen): ACK sent with the ServerHello
        assert 0 < initial["ack_delay_ms"] < 25
    # the classifier (quicack.classify, run by ingest) reads the same off the client's qlog
    assert (conn["handshake_class"], conn["handshake_reason"]) == ("wfc", "ack_with_server_hello")
    assert conn["first_ack_delay_ms"] == initial["ack_delay_ms"]
    # the datagram's packets add up to what the client's datagrams_received event logged
    logged = session.store.sql(f"""
        SELECT (data->'raw'->0->>'payload_length')::INTEGER AS n FROM other_events
        WHERE connection_id = {conn['connection_id']} AND event_name = 'transport:datagrams_received'
        ORDER BY event_index LIMIT 1""").item()
    assert sum(p["size_bytes"] for p in flight) == logged


def test_server_qlog_ingests_from_the_server_vantage(session):
    if peers.PEERS[session.name].qlog is None:
        assert session.run.qlog_dir is None and session.server_qlogs == []  # Caddy writes none
        return
    assert len(session.server_qlogs) == 1, session.server_qlogs
    result = session.store.ingest(session.server_qlogs[0])
    assert result.status == "ingested", result.error
    assert result.packets > 0
    conn = _connection(session.store, "server")
    assert conn["implementation"] == SERVER_IMPLEMENTATION[session.name]
    if session.name == "quinn":  # no frames in quinn's qlog: no class, no RFC 9002 replay
        assert (conn["handshake_class"], conn["handshake_reason"]) == ("unknown", "frames_not_logged")
        assert conn["replay_samples"] == 0
    else:  # the server's own view: WFC too, and the replay runs on its ACKs
        assert (conn["handshake_class"], conn["handshake_reason"]) == ("wfc", "ack_with_server_hello")
        assert conn["replay_endpoint"] == "server" and conn["replay_samples"] > 0


def test_client_and_server_qlogs_agree_on_the_first_flight(session):
    if peers.PEERS[session.name].qlog is None:
        assert session.server_qlogs == []  # Caddy writes none: the capture test compares instead
        return
    for path in [session.client_qlog, *session.server_qlogs]:
        session.store.ingest(path)
    client = _first_server_datagram(session.store, _connection(session.store, "client")["connection_id"])
    server = _first_server_datagram(session.store, _connection(session.store, "server")["connection_id"])
    assert [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in server] == \
           [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in client]
    if session.name == "quinn":
        assert all(p["frames"] is None for p in server)  # quinn's qlog has no frames
    else:  # quic-go does not log the PADDING frames the client finds; ngtcp2 logs them
        strip = (lambda fs: [f for f in fs if f != "padding"]) if session.name == "quic-go" else list
        assert [strip(p["frames"]) for p in server] == [strip(p["frames"]) for p in client]
        assert server[0]["ack_delay_ms"] == client[0]["ack_delay_ms"]


def test_capture_decrypts_and_matches_the_client_view(session):
    grams = datagrams(session.pcap, session.keylog, session.port)
    from_peer = [d for d in grams if d.src_port == session.port]
    assert len(from_peer) >= 1 + LARGE_SIZE // 1500  # the 64 KiB file alone needs 44+
    # GSO off: every datagram the peer sent is one QUIC datagram, no loopback super-frame
    assert max(d.ip_len for d in from_peer) <= 1500
    assert decryption_failures(session.pcap, session.keylog, session.port) == 0
    session.store.ingest(session.client_qlog)
    client = _first_server_datagram(session.store, _connection(session.store, "client")["connection_id"])
    first = from_peer[0]
    assert first.packet_types == [p["packet_type"] for p in client]
    assert first.packet_numbers == [p["packet_number"] for p in client]
    assert first.ip_len == 28 + sum(p["size_bytes"] for p in client)  # IPv4 20 + UDP 8
    assert first.frame_types[:1] == [0x02]  # ACK first, then CRYPTO (0x06) in the Initial
    assert 0x06 in first.frame_types


# --- the switches matter, the cache works, failures are clear -------------------------------

def test_without_its_gso_switch_quic_go_sends_frames_tshark_cannot_decrypt(tmp_path):
    # The same transfer as above with QUIC_GO_DISABLE_GSO=false: quic-go hands the kernel
    # several datagrams per sendmsg and the loopback capture sees them as one oversized frame.
    port = peers.free_port()
    with capture(tmp_path / "cap.pcapng", port):
        with peers.start("quic-go", tmp_path / "peer", port=port,
                         env={"QUIC_GO_DISABLE_GSO": "false"}) as run:
            fetch(run.host, run.port, ["/", f"/{LARGE_NAME}"], qlog_dir=tmp_path / "client",
                  keylog=tmp_path / "keys.log")
    from_peer = [d for d in datagrams(tmp_path / "cap.pcapng", tmp_path / "keys.log", port)
                 if d.src_port == port]
    assert max(d.ip_len for d in from_peer) > 1500
    assert decryption_failures(tmp_path / "cap.pcapng", tmp_path / "keys.log", port) > 0


def test_builds_are_cached_outside_the_work_tree_and_keyed_by_source(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parent.parent
    for name in ("quic-go", "quinn"):
        first = peers.prepare(name)
        again = peers.prepare(name)
        assert again.action == "cached" and again.binary == first.binary
        assert repo not in first.binary.parents
    original = peers.build_key(peers.PEERS["quic-go"])
    copy = tmp_path / "peers"
    shutil.copytree(peers.source_root(), copy, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(peers, "source_root", lambda: copy)
    assert peers.build_key(peers.PEERS["quic-go"]) == original
    (copy / "quic-go" / "main.go").write_text((copy / "quic-go" / "main.go").read_text() + "\n// changed\n")
    assert peers.build_key(peers.PEERS["quic-go"]) != original


def test_unknown_peer_is_refused_with_the_list():
    with pytest.raises(QuicackError) as e:
        peers.peer("nginx")
    assert str(e.value) == "unknown peer 'nginx'; peers: caddy, ngtcp2, quic-go, quinn"


def test_a_peer_that_cannot_bind_its_port_is_reported_with_its_log(tmp_path):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(QuicackError) as e:
            with peers.start("quic-go", tmp_path, port=port):
                pass
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'server.log'}: quic-go exited with status 1 before "
                              f"listening on UDP {port}:")
    assert "address already in use" in message


def test_self_signed_certificate_names_loopback(tmp_path):
    from cryptography import x509
    cert_path, key_path = peers.make_certificate(tmp_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert key_path.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
