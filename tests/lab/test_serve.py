"""The local servers' first flights and the scanner's ACK-delay decoding, sans I/O.

aioquic is sans-I/O: the client and server connections below exchange datagrams in memory with
a clock we set, so times and frames are exact.  Expected values come from the configuration
(certificate delay, ack_delay_exponent, ACK timer) and RFC 9000's encoding, not from the code.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

import pytest
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicLogger

from quicack.scan import probe
from quicack.lab import serve
from quicack.model import QuicackError

CLIENT, SERVER = ("127.0.0.1", 50000), ("127.0.0.2", 4433)
CERT, KEY = serve.self_signed()


def pair(mode: str, cert_delay_ms: float = 0.0, client_class=probe.ScanConnection, **spec):
    client = client_class(configuration=QuicConfiguration(
        is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE, server_name="a.test",
        quic_logger=QuicLogger()))
    client.connect(SERVER, now=0.0)
    server = serve.ServerConnection(
        spec=serve.ListenerSpec(*SERVER, mode=mode, cert_delay_ms=cert_delay_ms, **spec),
        configuration=QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, certificate=CERT,
                                        private_key=KEY, quic_logger=QuicLogger()),
        original_destination_connection_id=client.original_destination_connection_id)
    return client, server


def sent(conn) -> list[dict]:
    """The packets a connection logged as sent: type, frames (no padding), ack_delay (ms)."""
    out = []
    for e in conn._quic_logger._events:
        if e["name"] == "transport:packet_sent":
            frames = [f for f in e["data"]["frames"] if f["frame_type"] != "padding"]
            out.append({"type": e["data"]["header"]["packet_type"],
                        "frames": [f["frame_type"] for f in frames],
                        "ack_delay": next((f["ack_delay"] for f in frames if f["frame_type"] == "ack"), None)})
    return out


def deliver(src, dst, now, src_addr, dst_addr) -> list[bytes]:
    datagrams = [d for d, _ in src.datagrams_to_send(now)]
    for data in datagrams:
        dst.receive_datagram(data, src_addr, now)
    return datagrams


def settle(client, server, now):
    """Exchange everything that is due at ``now`` (timers included) until both are quiet."""
    for _ in range(20):
        moved = 0
        for src, dst, a, b in ((client, server, CLIENT, SERVER), (server, client, SERVER, CLIENT)):
            timer = src.get_timer()
            if timer is not None and timer <= now:
                src.handle_timer(now)
            moved += len(deliver(src, dst, now, a, b))
        if not moved:
            return


def test_iack_sends_an_ack_only_initial_at_once_and_the_server_hello_after_the_cert_delay():
    client, server = pair("iack", cert_delay_ms=20)
    deliver(client, server, 0.010, CLIENT, SERVER)  # the ClientHello arrives at 10 ms
    first = server.datagrams_to_send(0.010)
    assert len(first) == 1 and len(first[0][0]) < 100  # an ACK-only Initial is small, not padded
    assert sent(server) == [{"type": "initial", "frames": ["ack"], "ack_delay": 0.0}]
    assert server.get_timer() == pytest.approx(0.030)  # the certificate is ready 20 ms later
    assert server.datagrams_to_send(0.020) == []  # nothing before that
    server.handle_timer(0.030)
    server.datagrams_to_send(0.030)
    flight = sent(server)[1:]
    assert flight[0] == {"type": "initial", "frames": ["crypto"], "ack_delay": None}  # ServerHello
    assert flight[1]["type"] == "handshake" and "crypto" in flight[1]["frames"]


def test_iack_ping_puts_a_ping_in_the_instant_ack_and_pads_it():
    client, server = pair("iack-ping", cert_delay_ms=20)
    deliver(client, server, 0.010, CLIENT, SERVER)
    first = server.datagrams_to_send(0.010)
    # RFC 9000 §14.1: datagrams with ack-eliciting Initial packets are padded to 1200 bytes
    assert len(first) == 1 and len(first[0][0]) >= 1200
    assert sent(server)[0]["frames"] == ["ack", "ping"]


def test_wfc_sends_nothing_until_the_certificate_then_ack_and_server_hello_together():
    client, server = pair("wfc", cert_delay_ms=20)
    deliver(client, server, 0.010, CLIENT, SERVER)
    assert server.datagrams_to_send(0.010) == []
    server.handle_timer(0.030)
    server.datagrams_to_send(0.030)
    first = sent(server)[0]
    assert first["frames"] == ["ack", "crypto"]
    # the ACK says how long the server held the client's Initial: 20 ms (RFC 9000 §13.2.5)
    assert first["ack_delay"] == pytest.approx(20.0, abs=0.01)


def test_wfc_without_delay_is_aiquics_own_first_flight():
    client, server = pair("wfc")  # the listener's connection with no hold...
    deliver(client, server, 0.010, CLIENT, SERVER)
    server.handle_timer(0.010)
    server.datagrams_to_send(0.010)
    plain_client, _ = pair("wfc")
    plain = QuicConnection(configuration=QuicConfiguration(
        is_client=False, alpn_protocols=H3_ALPN, certificate=CERT, private_key=KEY,
        quic_logger=QuicLogger()), original_destination_connection_id=plain_client.original_destination_connection_id)
    deliver(plain_client, plain, 0.010, CLIENT, SERVER)
    plain.datagrams_to_send(0.010)
    # ...sends what aioquic's own server sends: ACK + CRYPTO in the first Initial, then Handshake
    assert [p["frames"] for p in sent(server)] == [p["frames"] for p in sent(plain)]
    assert sent(server)[0]["frames"] == ["ack", "crypto"]


@pytest.mark.parametrize("client_class, expected_ms", [
    # RFC 9000 §18.2/§19.3: ACK Delay is decoded × 2^ack_delay_exponent of the ACK's sender.
    # The server holds its 1-RTT ACK 25 ms and encodes floor(25000 µs / 2^10) = 24:
    (probe.ScanConnection, 24 * 1024 / 1000),  # the scanner: 24 × 1024 µs = 24.576 ms
    (QuicConnection, 24 * 8 / 1000),           # stock aioquic 1.7.2 keeps exponent 3: 0.192 ms
])
def test_the_scanner_decodes_ack_delay_with_the_peers_exponent(client_class, expected_ms):
    client, server = pair("wfc", client_class=client_class, ack_delay_exponent=10, ack_delay_ms=25)
    now = 0.0
    for _ in range(5):
        now += 0.01
        settle(client, server, now)
    assert client._handshake_complete
    client.send_ping(7)
    now += 0.01
    deliver(client, server, now, CLIENT, SERVER)
    assert server.datagrams_to_send(now) == []  # the ACK waits for the 25 ms timer
    now += 0.025
    deliver(server, client, now, SERVER, CLIENT)
    received = [e for e in client._quic_logger._events if e["name"] == "transport:packet_received"]
    last_ack = [f for f in received[-1]["data"]["frames"] if f["frame_type"] == "ack"][0]
    assert last_ack["ack_delay"] == pytest.approx(expected_ms, abs=1e-9)


def test_a_probe_keeps_aioquics_log_unless_a_scan_silenced_it():
    log = logging.getLogger("quic")
    level = log.level

    def logger():
        return probe.ScanConnection(configuration=QuicConfiguration(is_client=True))._logger
    try:
        log.setLevel(logging.DEBUG)
        assert logger().isEnabledFor(logging.DEBUG) and logger().logger is log
        log.setLevel(logging.CRITICAL)  # as quicack.scan.connection.quiet_aioquic()
        assert not logger().isEnabledFor(logging.CRITICAL)
        logger().warning("dropped %s", "silently")
    finally:
        log.setLevel(level)


def test_listener_configuration_errors_name_the_file(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('[[listener]]\nlisten = "127.0.0.2:4433"\nmode = "fast"\n')
    with pytest.raises(QuicackError, match=r"s.toml listener 1: unknown mode 'fast'"):
        serve.load_config(bad)
    bad.write_text('[[listener]]\nlisten = "localhost:4433"\n')
    with pytest.raises(QuicackError, match="not an address: 'localhost:4433'"):
        serve.load_config(bad)


def test_the_server_counts_ack_delay_from_the_kernel_receive_time(tmp_path):
    """A ClientHello that waits in the listener's socket buffer while its event loop is busy is
    ACKed with that wait in the ACK Delay (RFC 9000 §13.2.5: from when the packet was received),
    not from when Python got to it."""
    from servers import free_udp_port

    port = free_udp_port()
    spec = serve.ListenerSpec("127.0.0.1", port, mode="iack", cert_delay_ms=5)
    with serve.Background([spec]) as background:
        client, _ = pair("iack")
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.settimeout(5)
        blocked = threading.Event()

        def block_the_loop():
            blocked.set()
            time.sleep(0.060)

        background._loop.call_soon_threadsafe(block_the_loop)
        blocked.wait(5)
        for data, _ in client.datagrams_to_send(0.0):
            udp.sendto(data, ("127.0.0.1", port))
        reply, _ = udp.recvfrom(2048)
        client.receive_datagram(reply, SERVER, now=0.1)
    received = [e for e in client._quic_logger._events if e["name"] == "transport:packet_received"]
    ack = next(f for f in received[0]["data"]["frames"] if f["frame_type"] == "ack")
    # the Initial arrived ~60 ms before the blocked loop read it; ACK Delay (exponent 3) says so
    assert 40.0 <= ack["ack_delay"] <= 1000.0


def test_the_probe_retransmits_its_clienthello_after_the_rfc_9002_first_pto():
    # RFC 9002 §6.2.2: an initial RTT of 333 ms, "handshakes starting with a PTO of 1 second"
    # (333 + 4 × 333/2 ms); aioquic's own default would resend the ClientHello after 200 ms.
    spec = probe.ProbeSpec(0, 0, "a.test", *SERVER, cid=b"\x01" * 8, odcid=b"\x02" * 8)
    client = probe.ScanConnection(configuration=probe._configuration(spec, probe._KeyLog()))
    client.connect(SERVER, now=0.0)
    assert len(client.datagrams_to_send(0.0)) == 1
    assert client.get_timer() == pytest.approx(0.999)
    client.handle_timer(0.999)
    resent = client.datagrams_to_send(0.999)
    assert len(resent) >= 1 and len(resent[0][0]) >= 1200  # the Initial again, padded


def test_a_listener_waits_the_rfc_9002_first_pto_before_resending_its_first_flight():
    # RFC 9002 §6.2.2 again, on the server side: a listener whose return path is long
    # (extra_delay_ms 400, as the scan benchmark uses) must not resend its whole first flight
    # before the client's ACK can arrive, as aioquic's 200 ms default PTO would.
    spec = serve.ListenerSpec(*SERVER, mode="wfc")
    client, _ = pair("wfc")
    server = serve.ServerConnection(
        spec=spec, configuration=serve._configuration(spec, CERT, KEY, None),
        original_destination_connection_id=client.original_destination_connection_id)
    deliver(client, server, 0.0, CLIENT, SERVER)
    server.handle_timer(0.0)  # (the certificate is ready at once)
    assert deliver(server, client, 0.0, SERVER, CLIENT)  # the first flight
    assert server.get_timer() == pytest.approx(0.999)
    server.handle_timer(0.5)
    assert server.datagrams_to_send(0.5) == []
    server.handle_timer(0.999)
    assert server.datagrams_to_send(0.999)  # the flight again (a PTO probe)
