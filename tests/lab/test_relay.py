"""The testbed relay: its sans-I/O core on synthetic arrivals (exact), the QUIC types it reads,
and the relay itself on loopback (every datagram recorded, drop lists exact, delays and rates
as configured within bounds that hold on a loaded 2-core machine).

Expected values come from the configuration: a delay of D ms means departure = arrival + D; a
rate of R kbit/s spaces a datagram of S bytes S·8/R ms after the one before; a drop list names
datagram indexes from 1 per flow and direction (quic-network-simulator's droplist).
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import (QuicPacketType, QuicProtocolVersion, encode_quic_retry,
                                 encode_quic_version_negotiation, pull_quic_header)

from quicack.core.impairment import (DROP_LIST, LOSS, QUEUE_FULL, TO_CLIENT, TO_SERVER, Direction,
                                     Impairment, datagram_types, destination_cid, parse_drops)
from quicack.lab import serve
from quicack.lab.relay import (SEND_ERROR, STOPPED, Relay, RelayConfig, RelayProcess,
                               parse_endpoint)
from quicack.model import QuicackError
from quicack.scan import rxtime

#: the source tree (found upwards, so that this file may move into a subfolder of tests/)
REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def offer_all(direction: Direction, arrivals, flow="f", size=1000):
    return [direction.offer(flow, size, t) for t in arrivals]


# --- the core: delay, jitter, rate, queue, loss, drop lists ---------------------------------

def test_delay_is_added_to_every_arrival():
    d = Direction(Impairment(delay_ms=25.0), TO_SERVER)
    verdicts = offer_all(d, [0.0, 0.1, 0.1, 7.5, 1000.0])
    assert [v.departure_ms for v in verdicts] == pytest.approx([25.0, 25.1, 25.1, 32.5, 1025.0])
    assert [v.index for v in verdicts] == [1, 2, 3, 4, 5]
    assert {v.reason for v in verdicts} == {None}


def test_each_direction_has_its_own_delay():
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream="127.0.0.1:4433", delay_ms=10,
                                      delay_to_client_ms=30)
    assert (config.to_server.delay_ms, config.to_client.delay_ms) == (10, 30)
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream="127.0.0.1:4433",
                                      delay_to_server_ms=5)
    assert (config.to_server.delay_ms, config.to_client.delay_ms) == (5, 0)


@pytest.mark.parametrize("spacing_ms", [50.0, 0.05])
def test_jitter_stays_within_its_bounds_and_never_reorders(spacing_ms):
    """Sparse arrivals cover ±J; dense ones (closer than 2J) are kept in order and still within
    [D − J, D + J]."""
    d = Direction(Impairment(delay_ms=20.0, jitter_ms=5.0), TO_CLIENT, seed=7)
    arrivals = [i * spacing_ms for i in range(2000)]
    departures = [v.departure_ms for v in offer_all(d, arrivals)]
    delays = [out - t for out, t in zip(departures, arrivals)]
    assert min(delays) >= 15.0 - 1e-9 and max(delays) <= 25.0 + 1e-9
    assert departures == sorted(departures)
    if spacing_ms > 10:  # independent draws: the whole range is used, uniformly
        assert min(delays) < 15.1 and max(delays) > 24.9
        assert statistics.mean(delays) == pytest.approx(20.0, abs=0.3)


def test_jitter_and_loss_are_fixed_by_the_seed():
    def run(seed):
        d = Direction(Impairment(delay_ms=20.0, jitter_ms=5.0, loss_percent=30), TO_SERVER, seed=seed)
        return offer_all(d, [i * 10.0 for i in range(500)])
    assert run(3) == run(3)
    assert run(3) != run(4)
    # the two directions draw from their own streams
    a = offer_all(Direction(Impairment(loss_percent=50), TO_SERVER, 1), range(200))
    b = offer_all(Direction(Impairment(loss_percent=50), TO_CLIENT, 1), range(200))
    assert [v.reason for v in a] != [v.reason for v in b]


def test_rate_limit_serializes_datagrams_one_after_another():
    """8000 kbit/s: a 1000-byte datagram takes 1 ms, a 500-byte one 0.5 ms.  A burst leaves at
    that pace from arrival + delay; an arrival on an idle link waits for nothing."""
    d = Direction(Impairment(delay_ms=10.0, rate_kbps=8000), TO_SERVER)
    sizes = [1000, 1000, 500, 1000, 250]
    out = [d.offer("f", size, 0.0).departure_ms for size in sizes]
    assert out == pytest.approx([10.0, 11.0, 12.0, 12.5, 13.5])
    assert d.offer("f", 1000, 3.7).departure_ms == pytest.approx(13.75)  # behind the 250 bytes
    assert d.offer("f", 1000, 50.0).departure_ms == pytest.approx(60.0)  # idle again


def test_the_rate_can_count_the_headers_of_each_datagram():
    """An ACK-only QUIC datagram of 34 bytes on a 100 kbit/s link: 2.72 ms of UDP payload, 4.96 ms
    as the 62-byte IPv4 packet a real link carries (overhead 28)."""
    for overhead, gap in ((0, 2.72), (28, 4.96)):
        d = Direction(Impairment(rate_kbps=100, overhead_bytes=overhead), TO_SERVER)
        assert [v.departure_ms for v in offer_all(d, [0.0] * 3, size=34)] == pytest.approx([0.0, gap, 2 * gap])
    with pytest.raises(QuicackError, match="rate-overhead-bytes"):
        Impairment(overhead_bytes=-1).check(TO_SERVER)


def test_queue_bytes_bounds_what_waits():
    """1000-byte datagrams at 8000 kbit/s (1 ms each) arriving together, queue 3000 bytes: the
    first is transmitted at once, three wait, the rest find the queue full; 1.5 ms later two
    have started, so there is room for one more."""
    d = Direction(Impairment(delay_ms=5.0, rate_kbps=8000, queue_bytes=3000), TO_CLIENT)
    verdicts = offer_all(d, [0.0] * 8)
    assert [v.reason for v in verdicts] == [None] * 4 + [QUEUE_FULL] * 4
    assert [v.departure_ms for v in verdicts[:4]] == pytest.approx([5.0, 6.0, 7.0, 8.0])
    later = offer_all(d, [1.5, 1.5])
    assert later[0].departure_ms == pytest.approx(9.0) and later[1].reason == QUEUE_FULL
    # a 1200-byte datagram would exceed the bound where a 1000-byte one would not
    d = Direction(Impairment(rate_kbps=8000, queue_bytes=2100), TO_CLIENT)
    assert [d.offer("f", s, 0.0).reason for s in (1000, 1000, 1200, 1000)] == [None, None, QUEUE_FULL, None]


def test_queue_packets_bounds_what_waits_and_a_datagram_that_need_not_wait_is_never_dropped():
    d = Direction(Impairment(rate_kbps=8000, queue_packets=2), TO_SERVER)
    assert [v.reason for v in offer_all(d, [0.0] * 5)] == [None, None, None, QUEUE_FULL, QUEUE_FULL]
    d = Direction(Impairment(rate_kbps=8000, queue_bytes=100), TO_SERVER)
    assert d.offer("f", 1500, 0.0).reason is None  # the link is idle: it waits for nothing
    assert d.offer("f", 50, 0.0).reason is None and d.offer("f", 60, 0.0).reason == QUEUE_FULL


def test_full_loss_with_a_burst_bound_forwards_one_after_each_burst():
    d = Direction(Impairment(loss_percent=100, burst=3), TO_SERVER)
    reasons = [v.reason for v in offer_all(d, range(12))]
    assert reasons == [LOSS, LOSS, LOSS, None] * 3


def test_random_loss_never_exceeds_the_burst_bound():
    d = Direction(Impairment(loss_percent=50, burst=2), TO_CLIENT, seed=11)
    reasons = [v.reason for v in offer_all(d, range(20000))]
    runs, run = [], 0
    for reason in reasons + [None]:
        if reason == LOSS:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    assert max(runs) == 2 and runs.count(2) > 1000
    assert 0.35 < reasons.count(LOSS) / len(reasons) < 0.5  # the bound takes some of the 50 %


def test_random_loss_rate_without_a_bound():
    d = Direction(Impairment(loss_percent=10), TO_SERVER, seed=5)
    lost = sum(v.reason == LOSS for v in offer_all(d, range(20000)))
    assert 1800 < lost < 2200  # 10 % ± 5 σ (σ ≈ 42)


def test_drop_list_counts_from_1_per_flow_and_direction():
    """Two flows interleaved: each loses its own 1st, 3rd and 4th datagram towards the client
    (``--drop-to-client 1,3,4``); the other direction its 2nd."""
    up = Direction(Impairment(delay_ms=1.0, drops=parse_drops("2", "--drop-to-server")), TO_SERVER)
    down = Direction(Impairment(delay_ms=1.0, drops=parse_drops("1,3,4", "--drop-to-client")), TO_CLIENT)
    t = 0.0
    seen = {("a", TO_SERVER): [], ("b", TO_SERVER): [], ("a", TO_CLIENT): [], ("b", TO_CLIENT): []}
    for _ in range(6):
        for flow in ("a", "b"):
            for name, direction in ((TO_SERVER, up), (TO_CLIENT, down)):
                v = direction.offer(flow, 100, t)
                seen[flow, name].append((v.index, v.reason))
                t += 0.1
    for flow in ("a", "b"):
        assert seen[flow, TO_SERVER] == [(i, DROP_LIST if i == 2 else None) for i in range(1, 7)]
        assert seen[flow, TO_CLIENT] == [(i, DROP_LIST if i in (1, 3, 4) else None) for i in range(1, 7)]


def test_drop_listed_datagrams_take_no_loss_draw_and_no_queue_room():
    listed = Impairment(loss_percent=100, burst=1, rate_kbps=8000, queue_packets=1,
                        drops=frozenset({2, 3}))
    reasons = [v.reason for v in offer_all(Direction(listed, TO_SERVER), [0.0] * 5)]
    # 1 lost (burst 1), 2 and 3 listed, 4 forwarded (after one loss), 5 lost
    assert reasons == [LOSS, DROP_LIST, DROP_LIST, None, LOSS]
    d = Direction(Impairment(rate_kbps=8000, queue_packets=1, drops=frozenset({2})), TO_SERVER)
    assert [v.reason for v in offer_all(d, [0.0] * 4)] == [None, DROP_LIST, None, QUEUE_FULL]


def test_drop_lists_are_read_as_quic_network_simulator_writes_them():
    assert parse_drops("1,3,4", "--drop-to-client") == {1, 3, 4}
    assert parse_drops(" 5 , 15 ", "--drop-to-client") == {5, 15}
    assert parse_drops("", "--drop-to-client") == frozenset()


@pytest.mark.parametrize("text, item", [("1,x", "x"), ("0", "0"), ("1,,2", ""), ("-1", "-1"),
                                        ("1;2", "1;2"), ("1.5", "1.5"), ("٣", "٣")])
def test_a_malformed_drop_list_is_refused_with_one_line(text, item):
    with pytest.raises(QuicackError) as e:
        RelayConfig.from_options(listen="127.0.0.1:0", upstream="127.0.0.1:4433", drop_to_server=text)
    assert str(e.value) == (f"--drop-to-server {text!r}: expected datagram indexes counted from 1, "
                            f"separated by commas (e.g. 1,3,4); {item!r} is not one")


@pytest.mark.parametrize("option, value", [
    ("listen", "192.168.1.2:4433"), ("upstream", "10.0.0.1:443"), ("upstream", "[2001:db8::1]:443"),
    ("upstream", "0.0.0.0:4433"), ("listen", "[::ffff:127.0.0.1]:4434")])
def test_an_address_outside_loopback_is_refused(option, value):
    given = {"listen": "127.0.0.1:0", "upstream": "127.0.0.1:4433", option: value}
    with pytest.raises(QuicackError) as e:
        RelayConfig.from_options(**given)
    assert str(e.value) == f"--{option} {value!r}: the relay uses loopback addresses only (127.0.0.0/8, ::1)"


def test_loopback_addresses_are_accepted_and_other_bad_input_is_named():
    assert parse_endpoint("127.0.0.2:4433", "--upstream") == ("127.0.0.2", 4433)
    assert parse_endpoint("[::1]:4433", "--upstream") == ("::1", 4433)
    cases = [
        ({"upstream": "localhost:4433"}, "--upstream 'localhost:4433': expected ADDR:PORT, e.g. 127.0.0.1:4433"),
        ({"upstream": "127.0.0.1"}, "--upstream '127.0.0.1': expected ADDR:PORT, e.g. 127.0.0.1:4433"),
        ({"upstream": "127.0.0.1:0"}, "--upstream '127.0.0.1:0': expected ADDR:PORT, e.g. 127.0.0.1:4433"),
        ({"jitter_ms": 5, "delay_ms": 2},
         "--jitter-ms 5 exceeds the delay to_server (2 ms): a datagram cannot leave before it arrived"),
        ({"queue_bytes": 3000}, "--queue-bytes/--queue-packets bound what waits for a rate limit: give "
                                "--rate-to-client-kbps or --rate-to-server-kbps"),
        ({"rate_to_client_kbps": 0}, "--rate-to-client-kbps 0: a rate must be positive"),
        ({"loss_to_client": 120}, "--loss-to-client 120: a loss percentage is from 0 to 100"),
        ({"burst": 0}, "--burst 0: at least 1 consecutive loss (omit it for no bound)"),
        ({"delay_to_client_ms": -1}, "--delay-to-client-ms -1: a delay cannot be negative"),
    ]
    for given, message in cases:
        options = {"listen": "127.0.0.1:0", "upstream": "127.0.0.1:4433", **given}
        with pytest.raises(QuicackError) as e:
            RelayConfig.from_options(**options)
        assert str(e.value) == message


# --- QUIC packet types, read without keys ---------------------------------------------------

def long_header(first: int, version: int, body: bytes, token: bytes | None = None,
                dcid: bytes = b"\x11" * 8, scid: bytes = b"\x22" * 8) -> bytes:
    """A long-header packet: its Length field covers ``body`` (packet number + payload)."""
    head = bytes([first]) + version.to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
    if token is not None:
        head += bytes([len(token)]) + token  # (a 1-byte varint: under 64 bytes)
    return head + (0x4000 | len(body)).to_bytes(2, "big") + body


def test_datagram_types_from_headers():
    v1, v2 = 0x00000001, 0x6B3343CF
    initial = long_header(0xC3, v1, b"\x00" * 1100, token=b"t" * 10)
    handshake = long_header(0xE3, v1, b"\x01" * 300)
    zero_rtt = long_header(0xD3, v1, b"\x02" * 40)
    short = bytes([0x43]) + b"\x11" * 8 + b"\x00" * 30
    assert datagram_types(initial) == "initial"
    assert datagram_types(initial + handshake) == "initial+handshake"
    assert datagram_types(initial + handshake + short) == "initial+handshake+1RTT"
    assert datagram_types(initial + zero_rtt) == "initial+0RTT"
    assert datagram_types(short) == "1RTT"
    # version 2: Initial 0b01, 0-RTT 0b10, Handshake 0b11, Retry 0b00
    assert datagram_types(long_header(0xD3, v2, b"\x00" * 50, token=b"")
                          + long_header(0xF3, v2, b"\x00" * 50)) == "initial+handshake"
    assert datagram_types(long_header(0xE3, v2, b"\x00" * 20)) == "0RTT"
    assert datagram_types(bytes([0xC0]) + v2.to_bytes(4, "big") + b"\x00\x00" + b"r" * 30) == "retry"
    assert datagram_types(long_header(0xC3, 0xFF00001D, b"\x00" * 20, token=b"")) == "initial"  # draft-29
    # what cannot be read
    assert datagram_types(initial[:-1]) == "unknown"  # Length beyond the datagram
    assert datagram_types(initial + handshake[:20]) == "initial+unknown"
    assert datagram_types(long_header(0xC3, 0x1A2A3A4A, b"\x00" * 20)) == "unknown"  # unknown version
    assert datagram_types(long_header(0xC3, v1, b"", token=b"", dcid=b"\x00" * 21)) == "unknown"
    assert datagram_types(initial + handshake + b"\x00" * 50) == "initial+handshake"  # padding
    assert datagram_types(b"\x00" * 50) == "unknown"
    assert datagram_types(b"\x03GET / HTTP/1.1") == "unknown"  # fixed bit clear: not QUIC
    assert datagram_types(b"") == "unknown"
    assert datagram_types(b"\xc0\x00") == "unknown"


def _aioquic_types(data: bytes) -> str:
    """The same datagram read by aioquic's header parser (an independent reader)."""
    names = {QuicPacketType.INITIAL: "initial", QuicPacketType.ZERO_RTT: "0RTT",
             QuicPacketType.HANDSHAKE: "handshake", QuicPacketType.RETRY: "retry",
             QuicPacketType.VERSION_NEGOTIATION: "version_negotiation", QuicPacketType.ONE_RTT: "1RTT"}
    buf, found = Buffer(data=data), []
    while not buf.eof():
        start = buf.tell()
        if not data[start:].strip(b"\x00"):  # aioquic's padding after the packets
            break
        header = pull_quic_header(buf, host_cid_length=8)
        found.append(names[header.packet_type])
        buf.seek(start + header.packet_length)
    return "+".join(found)


@pytest.mark.parametrize("version", [QuicProtocolVersion.VERSION_1, QuicProtocolVersion.VERSION_2])
def test_datagram_types_of_a_real_handshake(version):
    """An aioquic client and server (sans I/O, in memory) of QUIC v1 and v2: every datagram of
    their handshake and first 1-RTT exchange is named as aioquic's own header parser names it."""
    cert, key = serve.self_signed()
    client = QuicConnection(configuration=QuicConfiguration(
        is_client=True, alpn_protocols=["hq-interop"], verify_mode=ssl.CERT_NONE, server_name="a.test",
        supported_versions=[version]))
    client.connect(("127.0.0.1", 4433), now=0.0)
    server = QuicConnection(
        configuration=QuicConfiguration(is_client=False, alpn_protocols=["hq-interop"], certificate=cert,
                                        private_key=key, supported_versions=[version]),
        original_destination_connection_id=client.original_destination_connection_id)
    seen, now = [], 0.0
    for step in range(8):
        for data, _ in client.datagrams_to_send(now):
            seen.append(data)
            server.receive_datagram(data, ("127.0.0.1", 50000), now)
        for data, _ in server.datagrams_to_send(now):
            seen.append(data)
            client.receive_datagram(data, ("127.0.0.1", 4433), now)
        if step == 4:
            client.send_stream_data(0, b"GET /\r\n", end_stream=True)
        now += 0.005
    named = [datagram_types(d) for d in seen]
    assert named == [_aioquic_types(d) for d in seen]
    # the client's first Initial names the connection before any key: its original DCID
    assert destination_cid(seen[0]) == client.original_destination_connection_id.hex()
    assert [destination_cid(d) for d, name in zip(seen, named) if name == "1RTT"] == [None] * named.count("1RTT")
    assert named[0] == "initial" and "initial+handshake" in named and "1RTT" in named
    retry = encode_quic_retry(version, b"\x01" * 8, b"\x02" * 8, b"\x03" * 8, b"token")
    negotiation = encode_quic_version_negotiation(b"\x01" * 8, b"\x02" * 8, [version])
    assert (datagram_types(retry), datagram_types(negotiation)) == ("retry", "version_negotiation")


# --- the relay on loopback -------------------------------------------------------------------

class Echo:
    """A UDP echo server on loopback (a thread) that keeps the kernel receive time (epoch ms) of
    what it gets."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.received: list[tuple[float, bytes]] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self):
        rxtime.enable(self.sock)
        while self.running:
            try:
                data, ancillary, _, source = self.sock.recvmsg(65535, 64)
            except (socket.timeout, OSError):
                continue
            self.received.append((rxtime.kernel_time(ancillary) * 1000.0, data))
            self.sock.sendto(data, source)

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.close()


def client_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.settimeout(0.01)
    return sock


def send_and_collect(sock, address, payloads, spacing_s, settle_s):
    """Send ``payloads`` ``spacing_s`` apart, reading answers meanwhile; the answers."""
    got = []
    start = time.perf_counter()
    for i, payload in enumerate(payloads):
        while time.perf_counter() < start + i * spacing_s:
            _recv_some(sock, got, 0.0005)
        sock.sendto(payload, address)
    end = time.perf_counter() + settle_s
    while time.perf_counter() < end:
        _recv_some(sock, got, 0.01)
    return got


def _recv_some(sock, got, timeout):
    sock.settimeout(timeout)
    try:
        got.append(sock.recv(65535))
    except socket.timeout:
        pass


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_relay_delays_and_drops_exactly_and_records_every_datagram(echo, tmp_path):
    """300 datagrams through a 15 ms + 15 ms relay with drop lists on both sides: every one
    recorded in both directions, the listed indexes (and only they) dropped, what the client gets
    back exactly the rest; the delays are the configured ones (never less; the median within
    0.5 ms, 90 % within 3 ms — a shared 2-core machine); the records land in the store."""
    drops_up, drops_down = {2, 5, 100}, {1, 3, 4, 250}
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address, delay_ms=15,
                                      drop_to_server="2,5,100", drop_to_client="1,3,4,250")
    payloads = [b"\x40" + i.to_bytes(4, "big") + b"\x00" * 100 for i in range(1, 301)]
    with Relay(config) as relay, client_socket() as sock:
        got = send_and_collect(sock, relay.address, payloads, 0.002, 0.3)
    records = relay.records
    rows = records.rows()
    up = [r for r in rows if r["direction"] == TO_SERVER]
    down = [r for r in rows if r["direction"] == TO_CLIENT]
    assert [r["datagram_index"] for r in up] == list(range(1, 301))
    assert [r["dropped_reason"] for r in up] == [DROP_LIST if i in drops_up else None for i in range(1, 301)]
    assert [r["datagram_index"] for r in down] == list(range(1, 298))
    assert [r["dropped_reason"] for r in down] == [DROP_LIST if i in drops_down else None for i in range(1, 298)]
    forwarded = [p for i, p in enumerate(payloads, 1) if i not in drops_up]
    assert [d for _, d in echo.received] == forwarded
    assert got == [p for i, p in enumerate(forwarded, 1) if i not in drops_down]
    assert {r["quic_types"] for r in rows} == {"1RTT"} and {r["size_bytes"] for r in rows} == {105}
    assert len({r["flow"] for r in rows}) == 1 and records.kernel_drops == 0

    sent = [r for r in rows if r["dropped_reason"] is None]
    delays = [r["time_out_epoch_ms"] - r["time_in_epoch_ms"] for r in sent]
    assert min(delays) >= 15.0 - 0.001
    assert statistics.median(delays) < 15.5 and percentile(delays, 0.9) < 18.0
    assert all(r["planned_out_epoch_ms"] == pytest.approx(r["time_in_epoch_ms"] + 15.0, abs=1e-6)
               for r in sent)
    # seen from the echo server: each datagram 15 ms after the client's send (+ loopback)
    arrivals = {d: t for t, d in echo.received}
    one_way = [arrivals[payloads[r["datagram_index"] - 1]] - r["time_in_epoch_ms"] for r in up
               if r["dropped_reason"] is None]
    assert min(one_way) >= 14.9 and statistics.median(one_way) < 16.5

    run_id = records.write(tmp_path / "relay.duckdb")
    with duckdb.connect(str(tmp_path / "relay.duckdb"), read_only=True) as con:
        stored = con.execute("SELECT direction, count(*), count(time_out_epoch_ms), count(dropped_reason) "
                             "FROM relay_datagrams WHERE relay_run_id = ? GROUP BY ALL ORDER BY 1",
                             [run_id]).fetchall()
        assert stored == [(TO_CLIENT, 297, 293, 4), (TO_SERVER, 300, 297, 3)]
        run = con.execute("SELECT datagrams, kernel_drops, config->>'$.to_client.drops', listen, upstream "
                          "FROM relay_runs").fetchall()
        assert run == [(597, 0, "[1,3,4,250]", f"127.0.0.1:{relay.address[1]}", echo.address)]


def test_rate_limit_on_loopback(echo):
    """60 datagrams of 1250 bytes sent at once through 2000 kbit/s towards the server leave 5 ms
    apart: the rate the echo server sees is within 5 % of the configured one."""
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address, delay_ms=2,
                                      rate_to_server_kbps=2000)
    payloads = [b"\x40" + i.to_bytes(4, "big") + b"\x00" * 1245 for i in range(60)]
    with Relay(config) as relay, client_socket() as sock:
        send_and_collect(sock, relay.address, payloads, 0.0, 0.5)
    times = [t for t, _ in echo.received]
    assert len(times) == 60
    rate_kbps = 59 * 1250 * 8 / (times[-1] - times[0])
    assert rate_kbps == pytest.approx(2000, rel=0.05)
    out = [r["time_out_epoch_ms"] for r in relay.records.rows() if r["direction"] == TO_SERVER]
    gaps = [b - a for a, b in zip(out, out[1:])]
    assert statistics.median(gaps) == pytest.approx(5.0, abs=0.1)


def test_queue_full_on_loopback_is_exact(echo):
    """A burst of 30 datagrams into 500 kbit/s (20 ms per 1250 bytes) with room for 10 waiting:
    the first leaves at once, 10 wait, 19 are dropped."""
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address,
                                      rate_to_server_kbps=500, queue_packets=10)
    payloads = [b"\x40" + b"\x00" * 1249] * 30
    with Relay(config) as relay, client_socket() as sock:
        got = send_and_collect(sock, relay.address, payloads, 0.0, 0.3)
    up = [r["dropped_reason"] for r in relay.records.rows() if r["direction"] == TO_SERVER]
    assert up == [None] * 11 + [QUEUE_FULL] * 19 and len(got) == 11


def test_a_direction_may_have_its_own_queue_bound(echo):
    """The seeds' GEO testbed: one BDP of forward buffer, 50 packets on the return link.  A burst
    of 30 towards the server with room for 5 there (10 elsewhere): the first leaves, 5 wait."""
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address, rate_to_server_kbps=500,
                                      rate_to_client_kbps=500, queue_packets=10, queue_packets_to_server=5)
    assert (config.to_server.queue_packets, config.to_client.queue_packets) == (5, 10)
    payloads = [b"\x40" + b"\x00" * 1249] * 30
    with Relay(config) as relay, client_socket() as sock:
        got = send_and_collect(sock, relay.address, payloads, 0.0, 0.3)
    up = [r["dropped_reason"] for r in relay.records.rows() if r["direction"] == TO_SERVER]
    assert up == [None] * 6 + [QUEUE_FULL] * 24 and len(got) == 6
    with pytest.raises(QuicackError, match="bound what waits for a rate limit"):
        RelayConfig.from_options(listen="127.0.0.1:0", upstream="127.0.0.1:1", queue_packets_to_client=50)


def test_stopping_records_what_is_still_in_flight(echo):
    """Datagrams scheduled when the relay is stopped leave during the drain; with no drain time
    they are recorded as stopped — none is lost either way."""
    for drain_s, reason in ((2.0, None), (0.0, STOPPED)):
        config = RelayConfig(("127.0.0.1", 0), tuple(parse_endpoint(echo.address, "--upstream")),
                             Impairment(delay_ms=300.0), Impairment(), drain_s=drain_s)
        relay = Relay(config).start()
        with client_socket() as sock:
            for _ in range(20):
                sock.sendto(b"\x40hello", relay.address)
            time.sleep(0.05)
            records = relay.stop()
        up = [r for r in records.rows() if r["direction"] == TO_SERVER]
        assert [r["dropped_reason"] for r in up] == [reason] * 20
        assert all(r["planned_out_epoch_ms"] is not None for r in up)
        # answers of the server while the relay drains are recorded, not forwarded
        assert {r["dropped_reason"] for r in records.rows() if r["direction"] == TO_CLIENT} <= {STOPPED}


def test_a_server_that_is_not_there(tmp_path):
    """Nothing listens upstream: the datagrams are forwarded (the kernel answers with ICMP, which
    the relay survives) and recorded; nothing comes back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=f"127.0.0.1:{port}")
    with Relay(config) as relay, client_socket() as sock:
        for _ in range(10):
            sock.sendto(b"\x40x", relay.address)
            time.sleep(0.005)
    reasons = [r["dropped_reason"] for r in relay.records.rows()]
    assert len(reasons) == 10 and set(reasons) <= {None, SEND_ERROR}


def test_relay_in_a_child_process(echo):
    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address, delay_ms=5,
                                      drop_to_client="2")
    with RelayProcess(config) as relay, client_socket() as sock:
        got = send_and_collect(sock, relay.address, [b"\x40%d" % i for i in range(50)], 0.002, 0.2)
    assert len(relay.records) == 100 and len(got) == 49
    assert relay.records.summary()[TO_CLIENT]["dropped"] == {DROP_LIST: 1}
    # the child's errors come back as the caller's
    busy = echo.address
    with pytest.raises(QuicackError) as e:
        RelayProcess(RelayConfig.from_options(listen=busy, upstream=echo.address)).start()
    assert str(e.value) == f"--listen {busy}: cannot bind: Address already in use"


CHILD = """
import sys
from quicack.lab import relay
config = relay.RelayConfig.from_options(listen="127.0.0.1:0", upstream=sys.argv[1], delay_ms=20,
                                        drop_to_server="3")
records = relay.run_until_signal(config, lambda a: print("ready", a[1], flush=True))
print(records.write(sys.argv[2]))
print("\\n".join(records.summary_lines()), flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_relay_and_every_record_is_written(echo, tmp_path, sig):
    db = tmp_path / "relay.duckdb"
    child = subprocess.Popen([sys.executable, "-c", CHILD, echo.address, str(db)], cwd=REPO,
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        port = int(child.stdout.readline().split()[1])
        with client_socket() as sock:
            got = send_and_collect(sock, ("127.0.0.1", port), [b"\x40%d" % i for i in range(40)], 0.002, 0.1)
        child.send_signal(sig)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0 and len(got) == 39
    assert out.splitlines() == ["1", "to_server: 40 in, 39 forwarded, dropped: drop_list 1",
                                "to_client: 39 in, 39 forwarded, dropped: none"]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM relay_datagrams").fetchall() == [(79,)]


def test_ipv6_loopback_and_a_realtime_relay():
    """``[::1]`` on both sides; ``realtime`` takes SCHED_FIFO for the relay's thread where the
    process may (root, CAP_SYS_NICE), else refuses with one line."""
    server = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    server.bind(("::1", 0))
    server.settimeout(2)
    config = RelayConfig.from_options(listen="[::1]:0", upstream=f"[::1]:{server.getsockname()[1]}",
                                      delay_ms=3, realtime=True)
    try:
        relay = Relay(config).start()
    except QuicackError as e:
        assert str(e) == ("--realtime: cannot take a real-time priority (Operation not permitted); "
                          "it needs root or CAP_SYS_NICE")
        relay = Relay(RelayConfig(config.listen, config.upstream, config.to_server)).start()
    with relay, socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(b"\x40ping", relay.address)
        data, source = server.recvfrom(100)
        server.sendto(b"\x40pong", source)
        assert (data, sock.recv(100)) == (b"\x40ping", b"\x40pong")
    server.close()
    rows = relay.records.rows()
    assert [(r["direction"], r["dropped_reason"]) for r in rows] == [(TO_SERVER, None), (TO_CLIENT, None)]
    assert rows[0]["flow"].startswith("[::1]:") and relay.records.config["listen"].startswith("[::1]:")


def test_relay_runs_of_two_stores_merge_with_their_keys_renumbered(echo, tmp_path):
    """`quicack merge` renumbers relay_run_id like the other surrogate keys: two stores that each
    hold relay run 1 merge into runs 1 and 2, each datagram still joined to its run."""
    from quicack.store.merge import merge

    config = RelayConfig.from_options(listen="127.0.0.1:0", upstream=echo.address, drop_to_server="2")
    for name, count in (("a", 3), ("b", 5)):
        with Relay(config) as relay, client_socket() as sock:
            send_and_collect(sock, relay.address, [b"\x40" + bytes(20)] * count, 0.002, 0.2)
        assert relay.records.write(tmp_path / f"{name}.duckdb") == 1
    merge(tmp_path / "all.duckdb", [tmp_path / "a.duckdb", tmp_path / "b.duckdb"])
    with duckdb.connect(str(tmp_path / "all.duckdb"), read_only=True) as con:
        runs = con.execute("SELECT r.relay_run_id, r.datagrams, count(d.arrival_index) FILTER "
                           "(WHERE d.direction = 'to_server') FROM relay_runs r JOIN relay_datagrams d "
                           "USING (relay_run_id) GROUP BY ALL ORDER BY 1").fetchall()
    assert runs == [(1, 3 + 2, 3), (2, 5 + 4, 5)]
