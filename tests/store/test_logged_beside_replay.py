"""rtt_samples.logged_*: each replayed sample beside the RTT values the implementation logged after
the same ACK (quicack.store.analysis, native/src/lib.rs ``logged_after``), checked against the rule as
``schemas/README.md`` states it, computed here naively from the stored rows of random traces."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quicack import Store

RS = b"\x1e"
FIELDS = ("latest_rtt", "min_rtt", "smoothed_rtt", "rtt_variance")


@st.composite
def traces(draw):
    """A server's trace: packets it sends, ACKs of them it receives (every ACK a sample), other
    received packets, and metrics events logging some of the RTT fields, in random order."""
    events, pn, t = [], 0, 0.0
    for _ in range(draw(st.integers(5, 40))):
        t += draw(st.sampled_from([0.5, 1.0, 2.0]))
        kind = draw(st.sampled_from(["send", "send", "ack", "other", "metrics", "metrics"]))
        if kind == "send":
            events.append({"time": t, "name": "transport:packet_sent", "data": {
                "header": {"packet_type": "1RTT", "packet_number": pn}, "frames": [{"frame_type": "ping"}]}})
            pn += 1
        elif kind == "ack" and pn:
            events.append({"time": t, "name": "transport:packet_received", "data": {
                "header": {"packet_type": "1RTT", "packet_number": len(events)},
                "frames": [{"frame_type": "ack", "ack_delay": 0.0, "acked_ranges": [[pn - 1, pn - 1]]}]}})
        elif kind == "other":
            events.append({"time": t, "name": "transport:packet_received", "data": {
                "header": {"packet_type": "1RTT", "packet_number": len(events)}, "frames": [{"frame_type": "ping"}]}})
        elif kind == "metrics":
            logged = draw(st.lists(st.sampled_from(FIELDS + ("congestion_window",)), min_size=1, max_size=3,
                                   unique=True))
            events.append({"time": t, "name": "recovery:metrics_updated",
                           "data": {f: draw(st.sampled_from([5.0, 7.5, 10.0, 12.0])) for f in logged}})
    return events


def _expected(store, cid):
    """The rule, naively: the first metrics row (logging latest_rtt or smoothed_rtt) after the ACK's
    packet, if before the next received packet; quic-go (metrics before the packet): the last one
    before it, if after the previous received packet.  Fields a row leaves out carry their last
    logged value."""
    quirks = store.con.execute("SELECT quirks FROM connections WHERE connection_id = ?", [cid]).fetchall()[0][0]
    before = any("metrics_before_packet_received" in q for q in quirks)
    rows = store.con.execute("""SELECT event_index, latest_rtt_ms, min_rtt_ms, smoothed_rtt_ms, rtt_variance_ms
        FROM logged_metrics WHERE connection_id = ? ORDER BY event_index""", [cid]).fetchall()
    filled, m = [None] * 4, []
    for index, *values in rows:
        if all(v is None for v in values):
            continue
        filled = [v if v is not None else f for v, f in zip(values, filled)]
        if values[0] is not None or values[2] is not None:
            m.append((index, tuple(filled)))
    received = [i for (i,) in store.con.execute("""SELECT event_index FROM packets WHERE connection_id = ?
        AND direction = 'received' ORDER BY 1""", [cid]).fetchall()]
    out = {}
    for (e,) in store.con.execute("SELECT event_index FROM rtt_samples WHERE connection_id = ?", [cid]).fetchall():
        k = received.index(e)
        prev = received[k - 1] if k else -1
        nxt = received[k + 1] if k + 1 < len(received) else float("inf")
        if before:
            found = [r for r in m if r[0] < e][-1:]
            found = [r for r in found if r[0] > prev]
        else:
            found = [r for r in m if r[0] > e][:1]
            found = [r for r in found if r[0] < nxt]
        out[e] = (found[0][0], *found[0][1]) if found else (None,) * 5
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=traces(), producer=st.sampled_from(["quic-go", "quicack-test"]))
def test_each_sample_sits_beside_the_metrics_logged_after_its_ack(tmp_path_factory, events, producer):
    path = tmp_path_factory.mktemp("t") / "t.sqlog"
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",
              "trace": {"vantage_point": {"type": "server", "name": producer}}}
    path.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    with Store(path.with_suffix(".duckdb")) as store:
        result = store.ingest(path)
        assert result.status == "ingested", result.error
        got = {e: rest for e, *rest in store.con.execute("""SELECT event_index, logged_event_index,
            logged_latest_rtt_ms, logged_min_rtt_ms, logged_smoothed_rtt_ms, logged_rttvar_ms FROM rtt_samples""")
            .fetchall()}
        assert got == {e: list(v) for e, v in _expected(store, 1).items()}
