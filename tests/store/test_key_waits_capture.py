"""Packets that waited for keys, found in a capture next to the receiver (quicack.store.keywaits).

``tests/data/local/quic-go-key-wait-capture``: one testbed attempt (the quic-go client against
``serve-wfc``, the server's first datagram dropped towards the client) captured on the client ↔
relay leg, with the client's own qlog (which logs ``packet_buffered``) and the server's.  The
capture logs no buffering: the detector sees the server's Handshake and 1-RTT packets arrive
before the Initial holding the ServerHello; tshark cannot decrypt them either, so their packet
numbers come from the client's ACKs.  Checked against the facts the client's qlog logs (read with
the json module here): the same packets, the same numbers, the same wait to within the time the
client took to process the keys, the same ACK and the same inflated sample.
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from quicack import Store
from quicack.core.keywait import Captured, key_ready
from quicack.store.keywaits import inflated_samples

CAPTURE = DATA / "local/quic-go-key-wait-capture"


def logged_buffers() -> list[tuple[str, int]]:
    events = [json.loads(r) for r in (CAPTURE / "client.sqlog").read_text().split("\x1e") if r.strip()]
    return [(e["data"]["header"]["packet_type"], e["data"]["raw"]["length"])
            for e in events if e.get("name", "").endswith("packet_buffered")]


@pytest.fixture(scope="module")
def store(tmp_path_factory, tshark):
    with Store(tmp_path_factory.mktemp("kw") / "s.duckdb") as store:
        for name in ("client-leg.pcapng", "client.sqlog", "server.qlog"):
            assert store.ingest(CAPTURE / name).status == "ingested", name
        yield store


def waits(store, source: str) -> list[dict]:
    cur = store.con.execute("SELECT * FROM key_waits WHERE source = ? ORDER BY buffered_event_index", [source])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def test_the_capture_finds_the_packets_the_client_logged_as_buffered(store):
    assert [kind for kind, _ in logged_buffers()] == ["handshake", "1RTT"]
    logged, captured = waits(store, "packet_buffered"), waits(store, "capture")
    assert [(w["receiver"], w["packet_type"], w["packet_number"]) for w in captured] == [
        ("client", w["packet_type"], w["packet_number"]) for w in logged]
    # a capture's sizes are whole packets; quic-go's logged length of a long-header packet leaves
    # part of its header out
    assert all(w["size_bytes"] >= size for w, (_, size) in zip(captured, logged_buffers()))
    for q, c in zip(logged, captured):
        # arrival on the wire, keys on the wire: the wait as long as the client's, give or take
        # the time it took to read the key-bearing datagram and answer
        assert c["wait_ms"] == pytest.approx(q["wait_ms"], abs=2.0)
        assert c["ack_delay_ms"] == pytest.approx(q["ack_delay_ms"], abs=0.01)
        assert c["ack_largest"] == q["ack_largest"]
        assert c["ack_delay_from_receipt_ms"] == pytest.approx(q["ack_delay_from_receipt_ms"], abs=2.0)


def test_the_inflated_sample_is_flagged_from_the_capture_beside_the_rfc_9002_replay(store):
    samples = {s["receiver_connection_id"]: s for s in inflated_samples(store.con)}
    vantage = dict(store.con.execute("SELECT connection_id, vantage FROM connections").fetchall())
    by = {vantage[cid]: s for cid, s in samples.items()}
    assert set(by) == {"client", "network"}
    qlog, capture = by["client"], by["network"]
    assert capture["sampler_connection_id"] == qlog["sampler_connection_id"]  # the server's trace
    # quic-go counted its ACK delay from receipt; the server's replay subtracts only its
    # max_ack_delay (RFC 9002 §5.3), so its sample carries the wait: flagged, by how much
    [cap] = store.con.execute("SELECT max_ack_delay_ms FROM key_waits WHERE source = 'capture' "
                              "AND sample_inflation_ms IS NOT NULL").fetchall()[0]
    assert capture["ack_delay_used_ms"] == pytest.approx(cap)
    assert capture["adjusted_rtt_ms"] - capture["from_receipt_rtt_ms"] == pytest.approx(
        capture["sample_inflation_ms"], abs=1e-6)
    assert capture["adjusted_rtt_ms"] > 4 * capture["from_receipt_rtt_ms"]
    assert capture["from_receipt_rtt_ms"] == pytest.approx(qlog["from_receipt_rtt_ms"], abs=2.0)


def test_keys_come_with_the_whole_hello_and_the_receivers_own_packets():
    """Hand-made: the client's Handshake keys with the server's Initial CRYPTO complete (two
    packets, the second first), its 1-RTT keys when it sends its first 1-RTT packet although the
    capture saw only part of the server's Handshake CRYPTO."""
    packets = [Captured(0, 0.0, "client", "initial", 0, 1200, "initial", ((0, 300),)),
               Captured(1, 9.0, "server", "initial", 1, 80, "initial", ((60, 40),)),
               Captured(2, 9.5, "server", "handshake", None, 500, None),
               Captured(3, 12.0, "server", "initial", 0, 90, "initial", ((0, 60),)),
               Captured(4, 12.0, "server", "handshake", 2, 900, "handshake", ((400, 800),)),
               Captured(5, 13.0, "client", "handshake", 0, 60, "handshake", ((0, 36),)),
               Captured(6, 13.0, "client", "1RTT", 0, 40, "application_data")]
    ready = key_ready(packets)
    assert ready[("client", "handshake")] == (12.0, 3)
    assert ready[("client", "1RTT")] == (13.0, 6)  # the CRYPTO from 0 to 400 was never seen
    assert ready[("server", "handshake")] == (0.0, 0) and ready[("server", "1RTT")] == (13.0, 5)
