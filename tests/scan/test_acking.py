"""quicack's aioquic client acknowledging by a schedule (quicack/scan/acking.py), and quicack
serve asking for an ACK frequency (quicack/lab/ackrequest.py), sans I/O.

A client and a server connection exchange datagrams in memory: the server sends a response of
~200 packets, one datagram a millisecond reaches the client, and whatever the client then sends
reaches the server at once.  The ACK ratio each policy should give follows from its definition
(every N ack-eliciting packets), not from the code."""

from __future__ import annotations

import ssl

import pytest
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.logger import QuicLogger

from quicack.core import ackfrequency, ackschedule
from quicack.lab import serve
from quicack.scan import acking
from quicack.scan.connection import ScanConnection

CLIENT, SERVER = ("127.0.0.1", 50000), ("127.0.0.2", 4433)
CERT, KEY = serve.self_signed()
RESPONSE = 250_000


def pair(policy: str, request=None):
    client = acking.connection_class(policy)(configuration=QuicConfiguration(
        is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE, server_name="a.test",
        quic_logger=QuicLogger()))
    if policy != "aioquic":
        client.ack_schedule = ackschedule.make(policy)
    client.connect(SERVER, now=0.0)
    server = serve.ServerConnection(
        spec=serve.ListenerSpec(*SERVER, request_ack_frequency=request),
        configuration=QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, certificate=CERT,
                                        private_key=KEY, quic_logger=QuicLogger()),
        original_destination_connection_id=client.original_destination_connection_id)
    return client, server


def transfer(client, server, one_way_s: float = 0.010) -> float:
    """Handshake, a request, the response at most one datagram a millisecond, ``one_way_s`` each
    way; the time it ended."""
    now = 0.0
    sid = None
    to_server: list[tuple[float, bytes]] = []
    to_client: list[tuple[float, bytes]] = []
    for _ in range(20_000):
        for timed in (client, server):
            timer = timed.get_timer()
            if timer is not None and timer <= now:
                timed.handle_timer(now)
        to_server += [(now + one_way_s, data) for data, _ in client.datagrams_to_send(now)]
        while to_server and to_server[0][0] <= now:
            server.receive_datagram(to_server.pop(0)[1], CLIENT, now)
        if sid is None and client._handshake_complete:
            sid = client.get_next_available_stream_id()
            client.send_stream_data(sid, b"GET /", end_stream=True)
        elif sid is not None and sid in server._streams and server._streams[sid].sender.highest_offset == 0:
            server.send_stream_data(sid, bytes(RESPONSE), end_stream=True)
        to_client += [(now + one_way_s, data) for data, _ in server.datagrams_to_send(now)]
        if to_client and to_client[0][0] <= now:
            client.receive_datagram(to_client.pop(0)[1], SERVER, now)
        stream = client._streams.get(sid) if sid is not None else None
        if stream is not None and stream.receiver.is_finished:
            return now
        now += 0.001
    raise AssertionError("the transfer did not end")


def one_rtt(conn, direction: str) -> list[list[dict]]:
    return [e["data"]["frames"] for e in conn._quic_logger._events
            if e["name"] == f"transport:packet_{direction}" and e["data"]["header"]["packet_type"] == "1RTT"]


def ratio(client) -> float:
    eliciting = [f for f in one_rtt(client, "received")
                 if any(x["frame_type"] not in ("ack", "padding") for x in f)]
    acks = [f for f in one_rtt(client, "sent") if any(x["frame_type"] == "ack" for x in f)]
    return len(eliciting) / len(acks)


@pytest.mark.parametrize("policy, low, high", [
    ("ratio:2", 1.9, 2.1),
    ("ratio:10", 9.0, 10.5),
    ("ack-frequency", 1.9, 2.1),    # nobody asked: RFC 9000's every other packet
])
def test_a_policy_sets_the_clients_ack_ratio(policy, low, high):
    client, server = pair(policy)
    transfer(client, server)
    assert low <= ratio(client) <= high


def test_custura_starts_at_1_to_2_then_1_to_10():
    client, server = pair("custura")
    transfer(client, server)
    # 20 ms RTT: an ACK at least every 5 ms (min_rtt/4), i.e. every ~5 packets arriving one a
    # millisecond, after 100 at 1:2: ~190 packets, 50 + ~18 ACKs
    assert client.ack_schedule.min_rtt_s == pytest.approx(0.020, abs=0.002)
    assert 2.5 <= ratio(client) <= 3.5


def test_custura_on_a_long_path_is_1_to_10_after_the_start():
    client, server = pair("custura")
    transfer(client, server, one_way_s=0.150)
    # min_rtt/4 = 75 ms > max_ack_delay: 1:10 rules after 100 packets at 1:2 (~50 + 9 ACKs)
    assert 3.0 <= ratio(client) <= 3.6


def test_aioquic_is_left_alone():
    client, server = pair("aioquic")
    assert type(client) is ScanConnection
    transfer(client, server)
    # one datagram a millisecond and a 1 ms ACK timer: about every packet is acknowledged
    assert ratio(client) <= 1.5
    assert not hasattr(client, "ack_schedule")


def test_the_server_asks_an_ack_frequency_client_for_1_to_10():
    client, server = pair("ack-frequency", request=(10, 25))
    transfer(client, server)
    assert server.client_min_ack_delay_us == ackschedule.MIN_ACK_DELAY_US
    assert {"owner": "remote", "min_ack_delay": 1000} in [
        e["data"] for e in server._quic_logger._events if e["name"] == "transport:parameters_set"]
    assert server.ack_frequency_sent >= 1
    schedule = client.ack_schedule
    assert schedule.applied[0] == ackfrequency.AckFrequency(0, 9, 25_000, 1)
    frames = [x for f in one_rtt(client, "received") for x in f if x["frame_type"] == "ack_frequency"]
    assert frames[0]["ack_eliciting_threshold"] == 9
    assert 9.0 <= ratio(client) <= 10.5


def test_the_server_does_not_ask_a_client_that_did_not_advertise_min_ack_delay():
    client, server = pair("ratio:2", request=(10, 25))
    transfer(client, server)                            # an ACK_FREQUENCY would close it
    assert server.client_min_ack_delay_us is None and server.ack_frequency_sent == 0
    assert 1.9 <= ratio(client) <= 2.1


def test_immediate_ack_is_answered_at_once():
    client, server = pair("ack-frequency")
    transfer(client, server)
    schedule = client.ack_schedule
    schedule.on_ack_frequency(ackfrequency.AckFrequency(1, 99, 1_000_000, 1), 10.0)
    acks_before = schedule.acks_sent
    server._ping_pending.append(1)  # aioquic writes a PING; an IMMEDIATE_ACK rides with it
    original = server._write_ping_frame

    def ping_and_immediate_ack(builder, uids=[], comment=""):
        original(builder, uids, comment)
        builder.start_frame(ackfrequency.IMMEDIATE_ACK_TYPE, capacity=1)

    server._write_ping_frame = ping_and_immediate_ack
    now = 10.0
    for data, _ in server.datagrams_to_send(now):
        client.receive_datagram(data, SERVER, now)
    assert schedule.immediate_acks == 1
    assert client.ack_due(now)
    client.datagrams_to_send(now)
    assert schedule.acks_sent == acks_before + 1
