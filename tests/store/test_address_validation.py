"""Address validation and the anti-amplification budget of one real connection seen three ways
(``tests/data/local/aioquic-amplification``: the server's qlog, the client's qlog, a capture).

Expected values come from sources quicack does not compute the figures from: the server's own
``transport:datagrams_received``/``datagrams_sent`` events (UDP payloads as aioquic counted them,
read with the json module) and the capture's UDP lengths (tshark ``-T fields -e udp.length``).
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA, rows
from quicack import Store

AMP = DATA / "local/aioquic-amplification"


def _server_events():
    """(direction, payload) of the server's datagram events in order, up to the client's datagram
    that validated the address (its second one: Initial ACK + Handshake ACK)."""
    [path] = (AMP / "qlog_server").glob("*.qlog")
    events = json.loads(path.read_text())["traces"][0]["events"]
    out = []
    for e in events:
        if e["name"] in ("transport:datagrams_received", "transport:datagrams_sent"):
            out.append((e["name"].rsplit("_", 1)[1], sum(r["payload_length"] for r in e["data"]["raw"])))
    return out


@pytest.fixture(scope="module")
def validation(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("amp") / "t.duckdb") as store:
        for path in (AMP / "cap.pcapng", *(AMP / "qlog_server").glob("*.qlog"), *(AMP / "qlog_client").glob("*.qlog")):
            store.ingest(path)
        yield {r["vantage"]: r for r in rows(store, """
            SELECT c.vantage, a.* FROM address_validation a JOIN connections c USING (connection_id)""")}


def test_server_qlog_and_capture_agree_on_the_budget(validation, tshark):
    events = _server_events()
    second_client = [i for i, (d, _) in enumerate(events) if d == "received"][1]
    received = sum(n for d, n in events[:second_client] if d == "received")
    sent = sum(n for d, n in events[:second_client] if d == "sent")
    assert received == 1200 and sent == 3 * received  # what the trace says (not quicack)
    for vantage in ("server", "network"):
        v = validation[vantage]
        assert (v["client_bytes_before_validation"], v["server_bytes_before_validation"]) == (received, sent)
        assert v["validated_by"] == "handshake" and v["amplification_factor"] == 3.0
        assert v["limit_reached"] and not v["limit_exceeded"]
        assert v["blocked_count"] == 1 and v["blocked_ms"] > 0 and not v["ended_blocked"]
        assert v["first_blocked_sent_bytes"] == sent
        assert v["iack_bytes"] == 50 and not v["iack_caused_block"]
        assert v["zero_rtt"] == "not_offered"


def test_capture_sizes_are_whole_udp_payloads(tshark, tmp_path):
    import subprocess
    out = subprocess.run([tshark, "-r", str(AMP / "cap.pcapng"), "-Y", "quic", "-T", "fields",
                          "-e", "udp.length"],
                         capture_output=True, text=True, check=True).stdout.split()
    with Store(tmp_path / "t.duckdb") as store:
        store.ingest(AMP / "cap.pcapng")
        sizes = [r["size_bytes"] for r in rows(store, "SELECT size_bytes FROM datagrams ORDER BY datagram_id")]
    assert sizes == [int(n) - 8 for n in out]


def test_client_qlog_sees_the_server_blocked(validation):
    """aioquic's client logs neither its padding nor its datagrams: its padded Initial counts 1200
    B (RFC 9000 §14.1), and its Initial ACK and Handshake ACK, one datagram on the wire, count as
    two — so it counts 2400 B sent before validation, and the server's 3600 B."""
    v = validation["client"]
    assert v["server_bytes_before_validation"] == 3600 and v["blocked_count"] == 1
    assert v["clock_shift_ms"] > 0 and "packets_padded" in v["size_sources"]


def test_pto_timers_per_space_from_a_quic_go_server_trace(store):
    """quic-go's own server qlog (tests/data/peers/quic-go): its PTO timer events counted per
    packet number space, against the file read with the json module."""
    path = DATA / "peers/quic-go/server.sqlog"
    expected = {"initial": 0, "handshake": 0, "application_data": 0}
    for line in path.read_text().split("\x1e"):
        if not line.strip():
            continue
        event = json.loads(line)
        data = event.get("data", {})
        if event.get("name", "").endswith("loss_timer_updated") and data.get("timer_type") == "pto" \
                and data.get("event_type") == "set":
            expected[data["packet_number_space"]] += 1
    assert sum(expected.values()) > 0
    store.ingest(path)
    [v] = rows(store, "SELECT * FROM address_validation")
    assert (v["pto_set_initial"], v["pto_set_handshake"], v["pto_set_application"]) == \
        (expected["initial"], expected["handshake"], expected["application_data"])
    assert v["pto_fired_initial"] == v["pto_fired_handshake"] == v["pto_fired_application"] == 0
    # nothing blocked this server: no first blocked period to judge the PTO timer in
    assert v["blocked_count"] == 0 and v["pto_armed_while_blocked"] is None


def test_a_pto_armed_or_not_while_the_server_is_blocked():
    """RFC 9002 §6.2.2.1: a server at its limit MUST NOT arm its PTO until the client sends
    again.  Blocked from 3.0 to 14.0 ms (the trace's timer events as (time, event))."""
    from quicack.core.amplification import Datagram, replay_budget
    from quicack.store.amplification import _pto_armed_while_blocked
    budget = replay_budget([Datagram(0, "client", 1200),
                            *[Datagram(1 + i, "server", 1200, new_data=True) for i in range(3)],
                            Datagram(14, "client", 1200, validates=True), Datagram(15, "server", 900, new_data=True)])
    assert [(b.start_ms, b.end_ms) for b in budget.blocks] == [(3, 14)]
    assert _pto_armed_while_blocked(budget, [(1.0, "set"), (3.0, "cancelled")]) is False  # as the RFC says
    assert _pto_armed_while_blocked(budget, [(1.0, "set"), (2.0, "set")]) is True  # left armed
    assert _pto_armed_while_blocked(budget, [(3.0, "cancelled"), (9.0, "set")]) is True  # re-armed inside
    assert _pto_armed_while_blocked(budget, [(3.0, "cancelled"), (14.5, "set")]) is False


KEY_WAIT = DATA / "local/quic-go-key-wait"


def test_packets_that_waited_for_keys_and_the_samples_they_inflated(store):
    """quic-go buffered the server's Handshake and 1-RTT packets until the resent Initial brought
    the keys (facts read from client.sqlog with the json module below); its ACK of the 1-RTT
    packet counts the delay from receipt, yet aioquic's server, capping that delay at quic-go's
    max_ack_delay (RFC 9002 §5.3), takes a sample inflated by the wait, while the sample with the
    delay counted from receipt is the path's RTT."""
    events = [json.loads(r) for r in (KEY_WAIT / "client.sqlog").read_text().split("\x1e") if r.strip()]
    buffered = [(e["data"]["header"]["packet_type"], e["data"]["raw"]["length"])
                for e in events if e.get("name", "").endswith("packet_buffered")]
    assert buffered == [("handshake", 547), ("1RTT", 49)]
    store.ingest(KEY_WAIT / "client.sqlog")
    store.ingest(KEY_WAIT / "server.qlog")
    waits = rows(store, "SELECT * FROM key_waits ORDER BY buffered_event_index")
    assert [(w["packet_type"], w["size_bytes"]) for w in waits] == buffered
    assert all(w["wait_ms"] > 150 for w in waits)  # the server's Initial PTO (~200 ms) came first
    hs, one = waits
    assert hs["ack_largest"] != hs["packet_number"] and hs["sample_inflation_ms"] is None
    assert one["ack_largest"] == one["packet_number"] and abs(one["uncovered_ms"]) < 5  # from receipt
    assert one["sample_inflation_ms"] == pytest.approx(one["ack_delay_from_receipt_ms"] - one["max_ack_delay_ms"])
    from quicack.store.keywaits import inflated_samples
    [s] = inflated_samples(store.con)
    assert s["packet_number"] == one["packet_number"]
    # the peer's replay subtracted only max_ack_delay: its sample carries the wait
    assert s["ack_delay_used_ms"] == pytest.approx(one["max_ack_delay_ms"])
    assert s["adjusted_rtt_ms"] - s["from_receipt_rtt_ms"] == pytest.approx(one["sample_inflation_ms"], abs=1e-6)
    assert s["from_receipt_rtt_ms"] < s["adjusted_rtt_ms"] / 4


def test_a_pto_that_quic_go_does_not_log_as_expired_is_counted(store):
    """quic-go v0.65 logs no PTO expiry, only the next `set`: in this client trace (testbed,
    experiments/amplification.toml, long-chain-client-flight-lost against serve-wfc: the client's
    first answer dropped while the server waits at its 3× budget) the Handshake PTO armed for
    83.3 ms is set again when it runs out, with its backoff doubled (RFC 9002 §6.2.1) — the
    evidence of one expiry, read from the file."""
    path = DATA / "local/quic-go-blocked/client.sqlog"
    sets = [e["data"] for e in (json.loads(r) for r in path.read_text().split("\x1e") if r.strip())
            if e.get("name", "").endswith("loss_timer_updated") and e["data"].get("timer_type") == "pto"
            and e["data"].get("packet_number_space") == "handshake"]
    deltas = [s["delta"] for s in sets if s.get("event_type") == "set"]
    assert any(b == pytest.approx(2 * a, rel=0.01) for a, b in zip(deltas, deltas[1:]))  # one backoff
    assert not any(s.get("event_type") == "expired" for s in sets)
    store.ingest(path)
    [v] = rows(store, "SELECT * FROM address_validation")
    assert (v["pto_fired_initial"], v["pto_fired_handshake"], v["pto_fired_application"]) == (0, 1, 0)
    assert v["pto_set_handshake"] == len(deltas)


def test_a_packet_buffered_event_without_a_time_is_left_out(store, tmp_path):
    # was "internal error ... TypeError" (the suite's mutation sample: packet_buffered.time = null):
    # the event is kept in other_events, untimed, and no wait can be measured from it
    records = (KEY_WAIT / "client.sqlog").read_text().split("\x1e")
    first = next(i for i, r in enumerate(records) if '"packet_buffered"' in r or ":packet_buffered\"" in r)
    event = json.loads(records[first])
    event["time"] = None
    records[first] = json.dumps(event) + "\n"
    path = tmp_path / "client.sqlog"
    path.write_text("\x1e".join(records))
    assert store.ingest(path).status == "ingested"
    waits = rows(store, "SELECT packet_type FROM key_waits ORDER BY buffered_event_index")
    assert waits == [{"packet_type": "1RTT"}]  # (the Handshake packet's event was the untimed one)
