"""quicack.qlog.normalize: datagram ids derived from the packets a trace logs (RFC 9000 §12.2
coalescing as logged), over hand-written traces whose expected datagrams are spelled out per case."""

from __future__ import annotations

import orjson
import pytest

from quicack import Store
from quicack.qlog import slicing

RS = b"\x1e"


def _write(path, events, name="quicack-test", vantage="client"):
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",
              "trace": {"vantage_point": {"type": vantage, "name": name}, "common_fields": {"ODCID": "aa"}}}
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    return path


def _packet(t, direction, kind, pn, checksum=None, group=None):
    data = {"header": {"packet_type": kind, "packet_number": pn}, "frames": [{"frame_type": "ping"}]}
    if checksum is not None:
        data["datagram_payload_checksum"] = checksum
    event = {"time": t, "name": f"transport:packet_{direction}", "data": data}
    if group is not None:
        event["group_id"] = group
    return event


def _datagrams(store, path):
    result = store.ingest(path)
    assert result.status == "ingested", result.error
    return store.con.execute("""SELECT c.group_id, p.packet_number, p.datagram_id FROM packets p
        JOIN connections c USING (connection_id) WHERE c.file_id = ? ORDER BY p.event_index""",
                             [result.file_id]).fetchall()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.duckdb") as s:
        yield s


def test_same_time_in_coalescing_order_shares_a_datagram(store, tmp_path):
    path = _write(tmp_path / "t.sqlog", [
        _packet(5.0, "received", "initial", 0),
        _packet(5.0, "received", "handshake", 1),  # coalesced behind the Initial
        _packet(5.0, "received", "initial", 2),  # Initial after Handshake: a new datagram
        _packet(5.0, "sent", "1RTT", 3),  # the other direction: a new datagram
    ])
    assert [d for _, _, d in _datagrams(store, path)] == [0, 0, 1, 2]


def test_checksum_groups_packets_and_a_missing_one_never_does(store, tmp_path):
    path = _write(tmp_path / "t.sqlog", [
        _packet(1.0, "received", "1RTT", 0, checksum=7),
        _packet(2.0, "received", "1RTT", 1, checksum=7),  # same checksum (quic-go)
        _packet(3.0, "received", "1RTT", 2),  # no checksum: not the same
        _packet(4.0, "received", "1RTT", 3),
    ])
    assert [d for _, _, d in _datagrams(store, path)] == [0, 0, 1, 2]


def test_packets_after_one_datagrams_received_share_it(store, tmp_path):
    # aioquic logs datagrams_received before the packets of each datagram (and each packet at
    # the time it was handled, so coalesced packets differ in time)
    received = {"name": "transport:datagrams_received", "data": {"count": 1, "byte_length": 1252}}
    path = _write(tmp_path / "t.sqlog", [
        _packet(0.5, "received", "1RTT", 0),  # none logged yet: times decide
        _packet(0.6, "received", "1RTT", 1),
        dict(received, time=1.0),
        _packet(1.1, "received", "initial", 2),
        _packet(1.2, "received", "handshake", 3),  # after the same datagrams_received
        dict(received, time=2.0),
        _packet(2.1, "received", "handshake", 4),
        _packet(2.2, "sent", "handshake", 5),  # sent: never grouped by datagrams_received
        _packet(2.3, "sent", "1RTT", 6),
    ], name="aioquic")
    assert [d for _, _, d in _datagrams(store, path)] == [0, 1, 2, 2, 3, 4, 5]


def test_each_connection_counts_its_own_datagrams_across_slices(store, tmp_path, monkeypatch):
    # Two connections in one stream (quinn's group_id); slices of ~1 kB, so that the packets of
    # one datagram fall into two slices: the first packet of a slice continues the datagram the
    # previous slice ended with.
    events = []
    for k in range(6):
        t = 10.0 * k
        events += [_packet(t, "sent", "initial", 2 * k, group="one"),
                   _packet(t + 1, "received", "initial", k, group="two"),
                   _packet(t, "sent", "handshake", 2 * k + 1, group="one"),
                   _packet(t + 1, "received", "1RTT", 100 + k, group="two"),
                   _packet(t + 2, "received", "1RTT", 200 + k, group="two")]
    path = _write(tmp_path / "t.sqlog", events)
    monkeypatch.setattr(slicing, "SLICE_BYTES", 1000)
    got = _datagrams(store, path)
    one = [d for g, _, d in got if g == "one"]
    two = [d for g, _, d in got if g == "two"]
    assert one == [k for k in range(6) for _ in range(2)]
    assert two == [2 * k + j for k in range(6) for j in (0, 0, 1)]
    monkeypatch.undo()  # the same rows from one slice
    with Store(tmp_path / "whole.duckdb") as whole:
        assert _datagrams(whole, path) == got


def test_a_trace_without_packets_has_no_datagrams(store, tmp_path):
    path = _write(tmp_path / "t.sqlog", [{"time": 1.0, "name": "transport:connection_started", "data": {}}])
    assert _datagrams(store, path) == []
