"""The store's per-connection analyses (quicack/store/analysis.py) and the ACK policy figures
(quicack/report/ackpolicy.py): behaviour the other tests do not reach.  Found by a mutation audit; each
test names the mutants it kills (see the audit report).

The qlog traces here are minimal hand-written JSON-SEQ files (qlog 0.3 event names); every
expected value is read off the events written in the test.
"""

from __future__ import annotations

import polars as pl
import pytest

from conftest import DATA, rows, write_seq
from quicack.report import ackpolicy


def pkt(t, name, ptype, pn, *frames):
    return {"time": t, "name": f"transport:packet_{name}",
            "data": {"header": {"packet_type": ptype, "packet_number": pn}, "frames": list(frames)}}


def header(vantage="client", flow=None):
    vp = {"type": vantage}
    if flow:
        vp["flow"] = flow
    return {"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": vp, "title": "audit"}}


def ack(*ranges, delay=0.0):
    return {"frame_type": "ack", "ack_delay": delay, "acked_ranges": [list(r) for r in ranges]}


def crypto(length):
    return {"frame_type": "crypto", "offset": 0, "length": length}


def stream(sid, length=None):
    f = {"frame_type": "stream", "stream_id": sid, "offset": 0}
    if length is not None:
        f["length"] = length
    return f


def connection(store, tmp_path, events, name="t.sqlog", **vp) -> dict:
    store.ingest(write_seq(tmp_path / name, header(**vp), events))
    (c,) = rows(store, "SELECT * FROM connections ORDER BY connection_id DESC LIMIT 1")
    return c


# --- figures computed in SQL (_fill_sql_figures) -------------------------------------------------

def test_handshake_done_first_response_byte_and_server_parameters(store, tmp_path):
    # Kills A13 (response byte from the client's STREAM), A14 (any stream id), A15 (a STREAM
    # frame without a length not counted), A16 (an empty STREAM frame counted), A19 (last
    # HANDSHAKE_DONE), A20 (the client's parameters), A22 (min_ack_delay column).
    # schemas/README.md: handshake_done_ms "first packet with a HANDSHAKE_DONE frame";
    # first_response_byte_ms "first server STREAM frame on a client-initiated bidirectional
    # stream (id % 4 = 0)"; both relative to the client's first Initial (here at 5 ms).
    events = [
        pkt(5.0, "sent", "initial", 0, crypto(300)),
        pkt(15.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(15.0, "received", "handshake", 0, crypto(1000)),
        {"time": 16.0, "name": "transport:parameters_set",
         "data": {"owner": "remote", "max_ack_delay": 20, "ack_delay_exponent": 5, "min_ack_delay": 1000}},
        {"time": 16.5, "name": "transport:parameters_set",
         "data": {"owner": "local", "max_ack_delay": 7, "ack_delay_exponent": 2}},
        pkt(20.0, "sent", "handshake", 0, ack((0, 0)), crypto(36)),
        pkt(21.0, "sent", "1RTT", 0, stream(0, 50)),          # the client's own request
        pkt(60.0, "received", "1RTT", 0, {"frame_type": "handshake_done"}),
        pkt(62.0, "received", "1RTT", 1, stream(0, 0)),       # empty: no response byte
        pkt(65.0, "received", "1RTT", 2, stream(3, 10)),      # server-initiated unidirectional
        pkt(70.0, "received", "1RTT", 3, stream(0)),          # length not logged: counts
        pkt(72.0, "received", "1RTT", 4, stream(0, 100)),
        pkt(75.0, "received", "1RTT", 5, {"frame_type": "handshake_done"}),
    ]
    c = connection(store, tmp_path, events)
    assert c["handshake_done_ms"] == pytest.approx(60.0 - 5.0)
    assert c["first_response_byte_ms"] == pytest.approx(70.0 - 5.0)
    # the server's (owner remote for a client) parameters; min_ack_delay is logged in µs
    assert (c["server_max_ack_delay_ms"], c["server_ack_delay_exponent"]) == (20.0, 5)
    assert c["server_min_ack_delay_ms"] == pytest.approx(1.0)
    assert c["ack_frequency_supported"] is True


def test_figures_relative_to_the_client_initial_are_null_without_it(store, tmp_path):
    # Kills A17 (any sender's Initial as time zero) and A18 (any client packet as time zero).
    # schemas/README.md: these figures are relative to the client's first Initial, "NULL
    # without it": a trace that starts after the client's Initials (only the server's Initial
    # and later packets logged).
    events = [
        pkt(10.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(20.0, "sent", "handshake", 0, ack((0, 0)), crypto(36)),
        pkt(40.0, "received", "1RTT", 0, {"frame_type": "handshake_done"}, stream(0, 100)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["handshake_done_ms"], c["first_response_byte_ms"]) == (None, None)


# --- the first CONNECTION_CLOSE (_first_closes) ---------------------------------------------------

def _close(error: dict) -> dict:
    return {"frame_type": "connection_close", "error_space": "transport", **error}


@pytest.mark.parametrize("closes, reason", [
    # Kills A04 (raw_error_code ignored).  The server closes with raw_error_code 0x128 = 296 (no
    # error_code), in RFC 9000 §20.1's CRYPTO_ERROR range 0x0100-0x01ff ("The cryptographic
    # handshake failed").
    ([("received", {"raw_error_code": 296})], "tls_alert"),
    # Kills A03 (the last close's sender).  The server closes first (NO_ERROR); the client's
    # later CONNECTION_CLOSE must not make it "connection_close_by_client".
    ([("received", {"error_code": 0}), ("sent", {"error_code": 0})], "connection_close_by_server"),
], ids=["raw error code", "first close"])
def test_the_first_connection_close_gives_the_failure(store, tmp_path, closes, reason):
    events = [pkt(0.0, "sent", "initial", 0, crypto(300)), pkt(10.0, "received", "initial", 0, ack((0, 0)))]
    events += [pkt(20.0 + 10 * i, direction, "initial", 1, _close(error)) for i, (direction, error) in enumerate(closes)]
    c = connection(store, tmp_path, events)
    assert (c["handshake_class"], c["handshake_reason"]) == ("failed", reason)


# --- the classifier's input (_handshake_inputs, _ranges) ---------------------------------------------

def test_the_last_packet_of_a_trace_keeps_its_frames(store, tmp_path):
    # Kills A06 (frames of the window's last packet dropped).  A trace cut right after the
    # server's first Initial, which carries the ACK and the ServerHello: WFC.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(25.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["handshake_class"], c["first_ack_frames"], c["ack_sh_gap_ms"]) == ("wfc", "ack+crypto", 0.0)


@pytest.mark.parametrize("client_initials, expected", [(399, "wfc"), (400, "failed")])
def test_the_classifier_sees_the_first_400_packets(store, tmp_path, client_initials, expected):
    # Kills A01 (window one packet short).  analysis.HANDSHAKE_WINDOW: "Packets per connection
    # the classifier looks at" = 400.  The server's Initial (ACK + ServerHello) is packet 400
    # (inside) or 401 (outside: no server packet seen, a timeout).
    events = [pkt(float(i), "sent", "initial", i, crypto(300)) for i in range(client_initials)]
    events.append(pkt(1000.0, "received", "initial", 0, ack((0, client_initials - 1)), crypto(90)))
    c = connection(store, tmp_path, events)
    assert c["handshake_class"] == expected


def test_an_ack_logged_with_only_its_largest_acknowledged_is_that_packet(store, tmp_path):
    # Kills A09.  _ranges: "producers that log only the largest acknowledged (pcap2qlog 0.1) get
    # that one packet as their only range": the server's ACK names the client's first Initial.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, {"frame_type": "ack", "largest_acknowledged": 0}),
        pkt(30.0, "received", "initial", 1, crypto(90)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["first_ack_largest_acknowledged"], c["first_ack_acknowledges_first_initial"]) == (0, True)


# --- whose view is replayed (_VIEWS_SQL, _EVENT_SQL) -----------------------------------------------

def _server_events():
    # the server's own trace: it receives the client's Initial, answers with ACK+ServerHello,
    # receives the client's Handshake Finished (which confirms its handshake, RFC 9001 §4.1.2)
    return [
        pkt(0.0, "received", "initial", 0, crypto(300)),
        pkt(1.0, "sent", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(1.0, "sent", "handshake", 0, crypto(1000)),
        pkt(31.0, "received", "handshake", 0, ack((0, 0)), crypto(36)),
        pkt(32.0, "sent", "1RTT", 0, {"frame_type": "handshake_done"}),
        pkt(52.0, "received", "1RTT", 0, ack((0, 0), delay=1.0)),
    ]


def test_a_server_trace_is_replayed_as_the_server(store, tmp_path):
    # Kills A26 (the vantage point ignored: replayed as the client) and A39 (a server's
    # counterfactual first PTO: schemas/README.md "client view only").
    c = connection(store, tmp_path, _server_events(), vantage="server")
    assert c["replay_endpoint"] == "server"
    assert c["counterfactual_first_pto_ms"] is None
    samples = rows(store, f"""SELECT event_index, time_ms, packet_number_space, latest_rtt_ms, smoothed_rtt_ms,
                                    rttvar_ms, handshake_confirmed
                             FROM rtt_samples WHERE connection_id = {c['connection_id']} ORDER BY event_index""")
    # the server's Handshake packet sent at 1 ms, ACKed in the client's packet at 31 ms: 30 ms;
    # RFC 9002 §5.3 first sample: "smoothed_rtt = latest_rtt; rttvar = latest_rtt / 2"
    first = samples[0]
    assert (first["packet_number_space"], first["latest_rtt_ms"]) == ("handshake", pytest.approx(31.0 - 1.0))
    assert (first["smoothed_rtt_ms"], first["rttvar_ms"]) == (pytest.approx(30.0), pytest.approx(15.0))
    # the ACK and the Finished share a packet: its frames are handled in order (the ACK first,
    # as the implementations do), so that sample precedes the confirmation (A37: the order of
    # one event's replay events left to DuckDB)
    assert first["handshake_confirmed"] is False
    # the 1-RTT packet sent at 32 ms, ACKed at 52 ms, after the Finished confirmed the handshake
    assert samples[1]["latest_rtt_ms"] == pytest.approx(52.0 - 32.0)
    assert samples[1]["handshake_confirmed"] is True
    assert len(samples) == 2


@pytest.mark.parametrize("flow, endpoint", [("server", "server"), ("client", "client")])
def test_a_network_trace_is_replayed_from_the_side_its_flow_names(store, tmp_path, flow, endpoint):
    # Kills A25 (flow ignored) and A53 (network traces not replayed).  schemas/README.md:
    # replay_endpoint "the vantage point; a network capture is replayed as the client"; the
    # module docstring: "(its flow, 'client' unless the trace says otherwise)".
    events = [dict(e, name=e["name"]) for e in _server_events()]
    if flow == "client":  # the same packets seen from the client's side of the flow
        for e in events:
            e["name"] = e["name"].replace("received", "tmp").replace("sent", "received").replace("tmp", "sent")
    c = connection(store, tmp_path, events, vantage="network", flow=flow)
    assert c["replay_endpoint"] == endpoint
    assert c["replay_samples"] >= 1


# --- the replay's input (_SENT_SQL, _EVENT_SQL) ------------------------------------------------------

def test_packets_whose_frames_were_not_logged_may_elicit_the_ack(store, tmp_path):
    # Kills A28.  packets.ack_eliciting is "NULL when no frames were logged" (schemas/README.md):
    # unknown is not "not ack-eliciting".  RFC 9002 §5.1: a sample needs the largest acknowledged
    # newly acknowledged and "at least one of the newly acknowledged packets was ack-eliciting".
    events = [
        {"time": 0.0, "name": "transport:packet_sent", "data": {"header": {"packet_type": "initial", "packet_number": 0}}},
        pkt(15.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
    ]
    c = connection(store, tmp_path, events)
    assert rows(store, "SELECT ack_eliciting FROM packets WHERE direction = 'sent'") == [{"ack_eliciting": None}]
    assert (c["replay_samples"], c["first_rtt_sample_ms"]) == (1, 15.0)


def _timer(t, timer_type, event_type):
    return {"time": t, "name": "recovery:loss_timer_updated",
            "data": {"timer_type": timer_type, "event_type": event_type, "packet_number_space": "initial"}}


def _lost(t, pn, trigger):
    return {"time": t, "name": "recovery:packet_lost",
            "data": {"header": {"packet_type": "initial", "packet_number": pn}, "trigger": trigger}}


@pytest.mark.parametrize("pto_events, pto_count", [
    ([_timer(0.0, "pto", "set"), _timer(100.0, "probe", "expired")], 1),  # only the expiry counts
    ([_lost(100.0, 0, "pto_expired")], 1),                                 # no timer events: the loss
    ([_timer(100.0, "pto", "expired"), _lost(100.5, 0, "pto_expired")], 1),  # one PTO, not two
    ([], None),                                                            # not observable: NULL
], ids=["probe timer", "pto loss", "timer and loss", "none"])
def test_pto_expiries_seen_in_the_trace_set_the_pto_count(store, tmp_path, pto_events, pto_count):
    # Kills A27 (PTO losses do not make the PTO observable), A30 (timer_type 'probe' ignored),
    # A31 (a timer set counted as an expiry), A32 (a PTO counted twice, from its timer and its
    # loss).  schemas/README.md rtt_samples.pto_count: "PTO backoff exponent at the sample; NULL
    # unless the trace shows PTO expiries (timer events or PTO-triggered losses)".  The client's
    # PTO fires once at 100 ms; it resends (pn 2), acknowledged at 120 ms: a 20 ms sample; RFC 9002
    # §6.2.1: "a client does not reset the PTO backoff factor on receiving acknowledgments in
    # Initial packets", so the count is still 1 and the backoff PTO × 2^1.
    events = [pkt(0.0, "sent", "initial", 0, crypto(300)), pkt(0.0, "sent", "initial", 1, crypto(300)),
              *pto_events,
              pkt(100.0, "sent", "initial", 2, crypto(300)),
              pkt(120.0, "received", "initial", 0, ack((2, 2)), crypto(90))]
    c = connection(store, tmp_path, events)
    (s,) = rows(store, f"SELECT * FROM rtt_samples WHERE connection_id = {c['connection_id']}")
    assert s["latest_rtt_ms"] == 20.0
    assert s["pto_ms"] == pytest.approx(20.0 + 4 * 10.0)  # smoothed_rtt + 4 × rttvar
    assert s["pto_count"] == pto_count
    assert s["pto_backoff_ms"] == (None if pto_count is None else pytest.approx(60.0 * 2 ** pto_count))


def test_the_application_pto_uses_the_peers_max_ack_delay(store, tmp_path):
    # Kills A35 (the endpoint's own max_ack_delay).  RFC 9002 §6.2.1: PTO = smoothed_rtt +
    # max(4*rttvar, kGranularity) + max_ack_delay, "max_ack_delay ... the maximum amount of time by
    # which the receiver intends to delay acknowledgments" — the peer's (20 ms; the client's own
    # is 7 ms).  First sample 30 ms after the handshake is confirmed: 30 + 4 × 15 + 20.
    events = [
        pkt(0.0, "sent", "1RTT", 0, stream(0, 10)),
        {"time": 1.0, "name": "transport:parameters_set", "data": {"owner": "remote", "max_ack_delay": 20}},
        {"time": 1.0, "name": "transport:parameters_set", "data": {"owner": "local", "max_ack_delay": 7}},
        pkt(5.0, "received", "1RTT", 0, {"frame_type": "handshake_done"}),
        pkt(30.0, "received", "1RTT", 1, ack((0, 0))),
    ]
    c = connection(store, tmp_path, events)
    (s,) = rows(store, f"SELECT * FROM rtt_samples WHERE connection_id = {c['connection_id']}")
    assert (s["packet_number_space"], s["latest_rtt_ms"], s["handshake_confirmed"]) == ("application_data", 30.0, True)
    assert s["pto_ms"] == pytest.approx(30.0 + 4 * 15.0 + 20.0)


def test_a_handshake_ack_after_the_handshake_is_confirmed_gives_no_sample(store, tmp_path):
    # Kills A38.  RFC 9001 §4.9.2: "An endpoint MUST discard its Handshake keys when the TLS
    # handshake is confirmed"; RFC 9002 §6.4: when keys are discarded the packets sent with them
    # are no longer tracked, so the server's late Handshake ACK (65 ms, after HANDSHAKE_DONE at
    # 60 ms) of the client's Handshake packet 0 yields no RTT sample.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(10.0, "received", "handshake", 0, crypto(1000)),
        pkt(40.0, "sent", "handshake", 0, ack((0, 0)), crypto(36)),
        pkt(60.0, "received", "1RTT", 0, {"frame_type": "handshake_done"}),
        pkt(65.0, "received", "handshake", 1, ack((0, 0))),
    ]
    c = connection(store, tmp_path, events)
    samples = rows(store, f"SELECT packet_number_space, latest_rtt_ms FROM rtt_samples WHERE connection_id = {c['connection_id']}")
    assert samples == [{"packet_number_space": "initial", "latest_rtt_ms": 10.0}]


def test_an_initial_ack_after_the_clients_first_handshake_packet_gives_no_sample(store, tmp_path):
    # Kills A57.  RFC 9001 §4.9.1: "a client MUST discard Initial keys when it first sends a
    # Handshake packet"; RFC 9002 §6.4: its Initial packets are then no longer tracked.  The
    # server's second Initial ACK (30 ms, of the client's Initial 1) comes after the client's
    # Handshake packet (25 ms): only the first ACK (20 ms) is a sample.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(5.0, "sent", "initial", 1, {"frame_type": "ping"}),
        pkt(20.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(25.0, "sent", "handshake", 0, crypto(36)),
        pkt(30.0, "received", "initial", 1, ack((0, 1))),
    ]
    c = connection(store, tmp_path, events)
    samples = rows(store, f"SELECT time_ms, latest_rtt_ms FROM rtt_samples WHERE connection_id = {c['connection_id']}")
    assert samples == [{"time_ms": 20.0, "latest_rtt_ms": 20.0}]


def test_a_server_is_not_confirmed_by_the_clients_initial(store, tmp_path):
    # Kills A34 (any client CRYPTO confirms the server).  RFC 9001 §4.1.2: the server's handshake
    # is confirmed when it completes, i.e. on the client's Finished, which comes in a Handshake
    # packet (31 ms); the client's Initial ACK at 21 ms comes before it.
    events = [
        pkt(0.0, "received", "initial", 0, crypto(300)),
        pkt(1.0, "sent", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(1.0, "sent", "handshake", 0, crypto(1000)),
        pkt(21.0, "received", "initial", 1, ack((0, 0))),
        pkt(31.0, "received", "handshake", 0, ack((0, 0)), crypto(36)),
        pkt(32.0, "sent", "1RTT", 0, {"frame_type": "handshake_done"}),
        pkt(52.0, "received", "1RTT", 0, ack((0, 0))),
    ]
    c = connection(store, tmp_path, events, vantage="server")
    samples = rows(store, f"""SELECT time_ms, packet_number_space, handshake_confirmed FROM rtt_samples
                             WHERE connection_id = {c['connection_id']} ORDER BY event_index""")
    assert samples[0] == {"time_ms": 21.0, "packet_number_space": "initial", "handshake_confirmed": False}
    assert samples[-1] == {"time_ms": 52.0, "packet_number_space": "application_data", "handshake_confirmed": True}


def _metrics(t, **fields):
    return {"time": t, "name": "recovery:metrics_updated", "data": fields}


def test_each_sample_beside_the_metrics_the_endpoint_logged_after_the_same_ack(store, tmp_path):
    # Kills A45 (metrics after the next received packet taken), A47 (a field not logged again
    # not carried), A48 (an event with only smoothed_rtt not taken), A49 (a *sent* packet ends the
    # search), A50 (rttvar diff sign), A56 (logged min_rtt).  schemas/README.md logged_event_index: "the first with an
    # RTT value before the endpoint's next received packet ... NULL if none; fields that event did
    # not carry keep their last logged value"; *_diff_ms: "replay − logged".
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),                        # 0
        pkt(20.0, "received", "initial", 0, ack((0, 0)), crypto(90)),       # 1  sample A: 20 ms
        pkt(20.0, "sent", "initial", 1, ack((0, 0))),                       # 2  (sent: does not end it)
        _metrics(20.0, latest_rtt=19, min_rtt=18.5, smoothed_rtt=19, rtt_variance=9.5),  # 3
        pkt(25.0, "sent", "handshake", 0, crypto(36)),                      # 4
        pkt(26.0, "sent", "1RTT", 0, stream(0, 10)),                        # 5
        pkt(50.0, "received", "1RTT", 0, ack((0, 0))),                      # 6  sample B: 24 ms
        _metrics(50.0, smoothed_rtt=19.5),                                  # 7  only smoothed_rtt
        pkt(52.0, "sent", "1RTT", 1, stream(0, 10)),                        # 8
        pkt(70.0, "received", "1RTT", 1, ack((1, 1))),                      # 9  sample C: 18 ms
        pkt(71.0, "received", "1RTT", 2, stream(0, 100)),                   # 10 next received packet
        _metrics(71.0, latest_rtt=18, min_rtt=18, smoothed_rtt=19, rtt_variance=9),  # 11: too late for C
    ]
    c = connection(store, tmp_path, events)
    a, b, c_ = rows(store, f"SELECT * FROM rtt_samples WHERE connection_id = {c['connection_id']} ORDER BY event_index")
    assert [s["event_index"] for s in (a, b, c_)] == [1, 6, 9]
    # A: RFC 9002 §5.3 first sample: min 20, smoothed 20, rttvar 10; logged 19 / 18.5 / 19 / 9.5
    assert (a["logged_event_index"], a["logged_latest_rtt_ms"], a["logged_min_rtt_ms"],
            a["logged_smoothed_rtt_ms"], a["logged_rttvar_ms"]) == (3, 19.0, 18.5, 19.0, 9.5)
    assert (a["latest_rtt_diff_ms"], a["min_rtt_diff_ms"], a["smoothed_rtt_diff_ms"], a["rttvar_diff_ms"]) == (1.0, 1.5, 1.0, 0.5)
    # B: event 7 logged only smoothed_rtt; the others keep event 3's values
    assert (b["logged_event_index"], b["logged_latest_rtt_ms"], b["logged_min_rtt_ms"],
            b["logged_smoothed_rtt_ms"], b["logged_rttvar_ms"]) == (7, 19.0, 18.5, 19.5, 9.5)
    # §5.3: smoothed = 7/8 × 20 + 1/8 × 24 = 20.5
    assert b["smoothed_rtt_diff_ms"] == pytest.approx(20.5 - 19.5)
    # C: the next metrics event comes after the next received packet: nothing beside it
    assert (c_["logged_event_index"], c_["logged_latest_rtt_ms"], c_["smoothed_rtt_diff_ms"]) == (None, None, None)


# --- replay side results (_replay_row) --------------------------------------------------------------

def test_acks_of_packets_not_in_the_trace_are_noted(store, tmp_path):
    # Kills A54.  schemas/README.md replay_notes: "e.g. acks_of_packets_not_in_trace:N", N the
    # ACKs naming packets the endpoint never sent in the trace (quicack.core.recovery.Replay): the
    # server acknowledges the client's Initial 0 (logged), then 1-RTT packets 7 and 9 (never logged).
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, ack((0, 0)), crypto(90)),
        pkt(30.0, "received", "1RTT", 0, ack((7, 7))),
        pkt(35.0, "received", "1RTT", 1, ack((9, 9))),
    ]
    c = connection(store, tmp_path, events)
    assert c["replay_notes"] == ["acks_of_packets_not_in_trace:2"]


def test_iack_counterfactual_adds_the_gap_from_the_first_ack_to_the_serverhello(store, tmp_path):
    # Kills A41 (gap not added).  schemas/README.md counterfactual_first_pto_ms, iack: "the first
    # PTO with WFC, i.e. from first sample + ack_sh_gap_ms".  RFC 9002 §6.2.1: PTO = smoothed_rtt +
    # max(4 × rttvar, kGranularity) (+ max_ack_delay only in the application space); after the first
    # sample smoothed_rtt = s, rttvar = s/2: PTO = 3 s.  ACK at 10 ms (s = 10), ServerHello at 30 ms.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, ack((0, 0), delay=2.0)),
        pkt(30.0, "received", "initial", 1, crypto(90)),
        pkt(40.0, "sent", "handshake", 0, ack((0, 0)), crypto(36)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["handshake_class"], c["ack_sh_gap_ms"]) == ("iack", 20.0)
    assert (c["first_rtt_sample_ms"], c["first_pto_ms"]) == (10.0, 30.0)
    assert c["counterfactual_first_pto_ms"] == pytest.approx(3 * (10.0 + 20.0))


@pytest.mark.usefixtures("tshark")
def test_packets_a_capture_could_not_decrypt_do_not_hide_the_handshake(store, tmp_path):
    # Kills A24 (every capture issue taken for a GSO super-frame).  Only `gso_superframe` rows make
    # the class unknown (_unreadable_from: "a capture with UDP GSO super-frames"); `not_decrypted`
    # rows (schemas/README.md capture_issues.kind) are packets stored without payload.  The aioquic
    # handshake capture without its key log: the Initials decrypt (client Initial, then the
    # server's ACK + ServerHello: WFC), its Handshake and 1-RTT packets do not.  As in
    # test_pcap.py's GSO test, the issues are then moved before the ServerHello and the
    # connection analyzed again: still WFC.
    from quicack.store import analysis
    copy = tmp_path / "cap.pcapng"
    copy.write_bytes((DATA / "local/aioquic-aioquic-handshake/cap.pcapng").read_bytes())  # no keys.log beside it
    store.ingest(copy)
    assert rows(store, "SELECT DISTINCT kind FROM capture_issues") == [{"kind": "not_decrypted"}]
    store.con.execute("UPDATE capture_issues SET epoch_ms = (SELECT first_event_epoch_ms FROM connections)")
    store.con.execute("DELETE FROM rtt_samples")
    analysis.classify_and_replay(store.con, 1)
    (c,) = rows(store, "SELECT handshake_class, handshake_reason FROM connections")
    assert (c["handshake_class"], c["handshake_reason"]) == ("wfc", "ack_with_server_hello")


def test_iack_ping_counterfactual_adds_the_gap_too(store, tmp_path):
    # Kills A43.  An instant ACK bundled with a PING is class iack_ping; the counterfactual of
    # schemas/README.md ("iack: ... from first sample + ack_sh_gap_ms") applies to it as to iack.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, ack((0, 0)), {"frame_type": "ping"}),
        pkt(30.0, "received", "initial", 1, crypto(90)),
        pkt(40.0, "sent", "handshake", 0, ack((0, 0)), crypto(36)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["handshake_class"], c["first_rtt_sample_ms"]) == ("iack_ping", 10.0)
    assert c["counterfactual_first_pto_ms"] == pytest.approx(3 * (10.0 + 20.0))


def test_wfc_counterfactual_never_goes_below_the_later_min_rtt(store, tmp_path):
    # Kills A42.  schemas/README.md, wfc: "from first sample − first_ack_delay_ms (never below the
    # later min_rtt)".  ACK + ServerHello at 20 ms reporting a 15 ms ACK delay: 20 − 15 = 5 ms, but
    # a later sample is 12 ms (1-RTT packet sent at 40 ms, acknowledged at 52 ms): 3 × 12 ms.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(20.0, "received", "initial", 0, ack((0, 0), delay=15.0), crypto(90)),
        pkt(30.0, "sent", "handshake", 0, crypto(36)),
        pkt(40.0, "sent", "1RTT", 0, stream(0, 10)),
        pkt(52.0, "received", "1RTT", 0, ack((0, 0))),
    ]
    c = connection(store, tmp_path, events)
    assert (c["handshake_class"], c["first_rtt_sample_ms"], c["first_ack_delay_ms"]) == ("wfc", 20.0, 15.0)
    assert c["counterfactual_first_pto_ms"] == pytest.approx(3 * 12.0)


def test_no_counterfactual_when_the_first_sample_is_not_from_the_first_ack(store, tmp_path):
    # Kills A40.  schemas/README.md: counterfactual_first_pto_ms is "NULL ... when the first sample
    # did not come from the first ACK".  The server's first ACK (10 ms) names only packet 5, which
    # the trace does not hold: no sample; the first sample is the ACK at 30 ms.
    events = [
        pkt(0.0, "sent", "initial", 0, crypto(300)),
        pkt(10.0, "received", "initial", 0, ack((5, 5))),
        pkt(30.0, "received", "initial", 1, ack((0, 0)), crypto(90)),
        pkt(40.0, "sent", "handshake", 0, ack((0, 1)), crypto(36)),
    ]
    c = connection(store, tmp_path, events)
    assert (c["first_ack_event_index"], c["first_rtt_sample_ms"]) == (1, 30.0)
    assert c["counterfactual_first_pto_ms"] is None


# --- ackpolicy.summarize / over_time ------------------------------------------------------------------

def transfer() -> pl.DataFrame:
    """A server sending 4 packets of 1200 bytes (two coalesced in datagram 10), one not
    ack-eliciting and one with ack_eliciting unknown (NULL); the client answering with two ACKs
    (1 and 3 ranges) and one packet without an ACK coalesced with the second ACK."""
    return pl.DataFrame({
        "time_ms": [0.0, 5.0, 10.0, 20.0, 25.0, 30.0, 40.0],
        "sender": ["server", "client", "server", "server", "client", "server", "client"],
        "size_bytes": [1200, 50, 1200, 1200, 60, 1200, 100],
        "datagram_id": [10, 20, 10, 11, 21, 12, 21],
        "ack_eliciting": [True, False, None, True, False, False, True],
        "has_ack": [False, True, False, False, True, False, False],
        "ack_ranges": [None, 1, None, None, 3, None, None],
    })


def test_summarize_counts_ratios_and_wire_bytes():
    # Kills P01 (the smaller sender as forward), P03 (unknown ack_eliciting not counted), P04
    # (every forward packet counted), P05/P06 (28 bytes per packet, or none, instead of per
    # datagram), P07 (share of QUIC bytes instead of wire bytes), P08 (every return packet an
    # ACK per second), P09 (median of ACK sizes only), P17 (every return packet an ACK), P18.
    p = ackpolicy.summarize(transfer())
    assert p.forward_sender == "server"  # 4800 bytes against 210
    assert (p.forward_packets, p.forward_ack_eliciting_packets) == (4, 3)  # True, NULL, True
    assert (p.return_packets, p.return_ack_packets) == (3, 2)
    assert p.ack_ratio == pytest.approx(3 / 2)
    assert (p.forward_bytes, p.return_bytes) == (4800, 210)
    # "add the IPv4 + UDP headers (28 bytes) once per datagram": 3 datagrams each way
    assert (p.forward_wire_bytes, p.return_wire_bytes) == (4800 + 3 * 28, 210 + 2 * 28)
    assert p.return_share_pct == pytest.approx(100 * (210 + 56) / (4800 + 84 + 210 + 56))
    assert p.duration_ms == 40.0
    assert p.acks_per_second == pytest.approx(2 / 0.040)
    assert p.median_return_packet_bytes == 60.0  # of 50, 60, 100
    assert p.median_ack_ranges == 2.0  # of 1 and 3


def test_summarize_needs_both_sides_and_a_duration():
    # Kills P11 (one-sided connections summarized), P16 (ACKs per second of a zero duration),
    # P15 (a median of nothing but NULLs).
    one_sided = transfer().filter(pl.col("sender") == "server")
    assert ackpolicy.summarize(one_sided) is None
    assert ackpolicy.summarize(transfer().head(0)) is None
    instant = transfer().with_columns(pl.lit(7.0).alias("time_ms"))
    assert ackpolicy.summarize(instant).acks_per_second is None
    sizes_unknown = transfer().with_columns(
        pl.when(pl.col("sender") == "client").then(None).otherwise(pl.col("size_bytes")).alias("size_bytes"))
    p = ackpolicy.summarize(sizes_unknown)
    assert p.median_return_packet_bytes is None and p.return_bytes == 0


def test_equal_bytes_make_the_forward_sender_the_first_by_name():
    # Kills P02: ties are broken by name (deterministic whatever the row order)
    tie = pl.DataFrame({"time_ms": [0.0, 1.0], "sender": ["server", "client"], "size_bytes": [100, 100],
                        "datagram_id": [1, 2], "ack_eliciting": [True, True], "has_ack": [True, True],
                        "ack_ranges": [1, 1]})
    assert ackpolicy.summarize(tie).forward_sender == "client"
    assert ackpolicy.summarize(tie.reverse()).forward_sender == "client"


def test_over_time_bins():
    # Kills P12 (bin index instead of bin start), P13 (unknown ack_eliciting not counted), P14
    # (ACKs per ms).  Bins of 20 ms: [0, 20) holds server packets at 0 (eliciting) and 10
    # (NULL: counted) and the ACK at 5; [20, 40) the server's packet at 20 (eliciting), 30 (not)
    # and the ACK at 25; [40, 60) the client's packet without an ACK.
    out = ackpolicy.over_time(transfer(), "server", 20.0)
    assert out["bin_ms"].to_list() == [0.0, 20.0, 40.0]
    assert out["eliciting"].to_list() == [2, 1, 0]
    assert out["acks"].to_list() == [1, 1, 0]
    assert out["ack_ratio"].to_list() == [2.0, 1.0, None]
    assert out["acks_per_second"].to_list() == pytest.approx([1 / 0.020, 1 / 0.020, 0.0])
