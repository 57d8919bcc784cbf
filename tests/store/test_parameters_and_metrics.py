"""transport_parameters and logged_metrics from real qlog files, every column.

Expected values were read off the files (the events quoted above each test), and the column
meanings are schemas/README.md's: several ``parameters_set`` events of one owner merge (last
value wins per parameter), ``min_ack_delay`` is µs on the wire (column in ms), older drafts spell
``max_packet_size`` and ``idle_timeout``; metrics are kept as logged, NULL where not logged, and
``latest_rtt``/``min_rtt`` logged before the endpoint's first ``packet_sent`` are NULL (so is
ngtcp2's ``latest_rtt`` 0 without ``min_rtt``).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from conftest import DATA, read_seq, rows, write_seq
from quicack import Store

PICOQUIC = DATA / "picoquic/picoquictest/qlog_trace_ref.txt"
NGTCP2 = DATA / "peers/ngtcp2/server.sqlog"
AIOQUIC_DRAFT01 = DATA / "qvis/visualizations/public/standalone_data/draft-01/parallel_10_50KB_f5.qlog"

PARAMETERS = """SELECT owner, endpoint, time_ms, max_ack_delay_ms, ack_delay_exponent, min_ack_delay_ms,
        initial_max_data_bytes, max_udp_payload_size_bytes, max_idle_timeout_ms, active_connection_id_limit,
        parameters
    FROM transport_parameters ORDER BY owner"""


def ingest(tmp_path: Path, path: Path) -> Store:
    store = Store(tmp_path / "t.duckdb")
    result = store.ingest(path)
    assert result.status == "ingested", result.error
    return store


def parameters(store: Store) -> dict[str, dict]:
    out = {}
    for r in rows(store, PARAMETERS):
        r["parameters"] = orjson.loads(r["parameters"])
        out[r.pop("owner")] = r
    return out


def test_picoquic_draft00_parameters_merge_per_owner_with_old_spellings(tmp_path):
    # A server trace (draft-00, times in µs, all these at 0).  Two "remote" parameters_set events:
    # {"owner": "remote", "sni": …, "alpn": …}, then {"owner": "remote", "initial_max_data" :
    # 1048576, "idle_timeout" : 30000, "max_packet_size" : 1440, "active_connection_id_limit" : 8,
    # "max_ack_delay" : 10, "min_ack_delay" : 1000, …}; one "local" event with the same values.
    # No ack_delay_exponent logged.
    doc = orjson.loads(PICOQUIC.read_bytes())
    logged = [e[3] for e in doc["traces"][0]["events"] if e[2] == "parameters_set"]
    with ingest(tmp_path, PICOQUIC) as store:
        got = parameters(store)
    same = {"time_ms": 0.0, "max_ack_delay_ms": 10.0, "ack_delay_exponent": None, "min_ack_delay_ms": 1.0,
            "initial_max_data_bytes": 1048576, "max_udp_payload_size_bytes": 1440, "max_idle_timeout_ms": 30000.0,
            "active_connection_id_limit": 8}
    assert got == {
        "local": {"endpoint": "server", **same, "parameters": [d for d in logged if d["owner"] == "local"]},
        "remote": {"endpoint": "client", **same, "parameters": [d for d in logged if d["owner"] == "remote"]}}
    assert len(got["remote"]["parameters"]) == 2


def test_ngtcp2_parameters_of_both_endpoints(tmp_path):
    # ngtcp2 server (0.3 JSON-SEQ), both at time 0:
    # remote (the client, aioquic): max_idle_timeout 60000, max_udp_payload_size 65527,
    #   ack_delay_exponent 3, max_ack_delay 25, active_connection_id_limit 8, initial_max_data 1048576;
    # local (the server): max_idle_timeout 30000, max_udp_payload_size 65527, ack_delay_exponent 3,
    #   max_ack_delay 25, active_connection_id_limit 7, initial_max_data 1048576.
    logged = [e["data"] for e in read_seq(NGTCP2) if e["name"] == "transport:parameters_set"]
    with ingest(tmp_path, NGTCP2) as store:
        got = parameters(store)
    common = {"time_ms": 0.0, "max_ack_delay_ms": 25.0, "ack_delay_exponent": 3, "min_ack_delay_ms": None,
              "initial_max_data_bytes": 1048576, "max_udp_payload_size_bytes": 65527}
    assert got == {
        "local": {"endpoint": "server", **common, "max_idle_timeout_ms": 30000.0, "active_connection_id_limit": 7,
                  "parameters": [logged[1]]},
        "remote": {"endpoint": "client", **common, "max_idle_timeout_ms": 60000.0, "active_connection_id_limit": 8,
                   "parameters": [logged[0]]}}


def test_aioquic_draft01_parameters_absent_ones_are_null(tmp_path):
    # aioquic client (draft-01, times as strings, first event at "0"): "local" parameters_set at
    # "0" and again at "172" (idle_timeout 60000, initial_max_data 1048576, ack_delay_exponent 3,
    # max_ack_delay 25, active_connection_id_limit 8); "remote" at "350": idle_timeout 10000,
    # max_packet_size 1472, initial_max_data 131072 — no max_ack_delay, ack_delay_exponent nor
    # active_connection_id_limit.
    with ingest(tmp_path, AIOQUIC_DRAFT01) as store:
        got = parameters(store)
    assert {owner: len(r.pop("parameters")) for owner, r in got.items()} == {"local": 2, "remote": 1}
    assert got == {
        "local": {"endpoint": "client", "time_ms": 0.0, "max_ack_delay_ms": 25.0, "ack_delay_exponent": 3,
                  "min_ack_delay_ms": None, "initial_max_data_bytes": 1048576, "max_udp_payload_size_bytes": None,
                  "max_idle_timeout_ms": 60000.0, "active_connection_id_limit": 8},
        "remote": {"endpoint": "server", "time_ms": 350.0, "max_ack_delay_ms": None, "ack_delay_exponent": None,
                   "min_ack_delay_ms": None, "initial_max_data_bytes": 131072, "max_udp_payload_size_bytes": 1472,
                   "max_idle_timeout_ms": 10000.0, "active_connection_id_limit": None}}



def test_later_parameters_set_events_win_per_parameter(tmp_path):
    # Hand-written (no real file updates a parameter): a client logs its own parameters, then
    # again with a new max_ack_delay and without ack_delay_exponent; the server's come between.
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"type": "client"}, "common_fields": {"ODCID": "01"}}}
    events = [{"time": 0.0, "name": "transport:parameters_set",
               "data": {"owner": "local", "max_ack_delay": 25, "ack_delay_exponent": 3}},
              {"time": 5.0, "name": "transport:parameters_set", "data": {"owner": "remote", "min_ack_delay": 2500}},
              {"time": 7.0, "name": "transport:parameters_set", "data": {"owner": "local", "max_ack_delay": 10}}]
    path = write_seq(tmp_path / "t.sqlog", header, events)
    with ingest(tmp_path, path) as store:
        got = {owner: (r["endpoint"], r["time_ms"], r["max_ack_delay_ms"], r["ack_delay_exponent"],
                       r["min_ack_delay_ms"], len(r["parameters"])) for owner, r in parameters(store).items()}
    assert got == {"local": ("client", 0.0, 10.0, 3, None, 2), "remote": ("server", 5.0, None, None, 2.5, 1)}

METRICS = """SELECT time_ms, latest_rtt_ms, min_rtt_ms, smoothed_rtt_ms, rtt_variance_ms, pto_count,
        congestion_window_bytes, bytes_in_flight_bytes FROM logged_metrics ORDER BY event_index"""


def test_ngtcp2_metrics_every_column(tmp_path):
    # 15 recovery:metrics_updated events, each logging smoothed_rtt, latest_rtt, rtt_variance,
    # pto_count, congestion_window and bytes_in_flight (ms, bytes); the first four
    # {"smoothed_rtt":333,"latest_rtt":0,"rtt_variance":166,…} (no min_rtt: no sample yet), the
    # fifth {"min_rtt":3,"smoothed_rtt":3,"latest_rtt":3,"rtt_variance":1,"pto_count":0,
    # "congestion_window":14707,"bytes_in_flight":1013}.  Times count from the first event.
    events = read_seq(NGTCP2)
    first_sent = next(i for i, e in enumerate(events) if e["name"] == "transport:packet_sent")
    expected = []
    for i, e in enumerate(events):
        if e["name"] != "recovery:metrics_updated":
            continue
        d = e["data"]
        sample = i > first_sent and not (d.get("min_rtt") is None and d["latest_rtt"] == 0)
        expected.append({"time_ms": e["time"] - events[0]["time"],
                         "latest_rtt_ms": d["latest_rtt"] if sample else None,
                         "min_rtt_ms": d.get("min_rtt") if i > first_sent else None,
                         "smoothed_rtt_ms": d["smoothed_rtt"], "rtt_variance_ms": d["rtt_variance"],
                         "pto_count": d["pto_count"], "congestion_window_bytes": d["congestion_window"],
                         "bytes_in_flight_bytes": d["bytes_in_flight"]})
    assert len(expected) == 15 and expected[4]["latest_rtt_ms"] == 3 and expected[0]["latest_rtt_ms"] is None
    with ingest(tmp_path, NGTCP2) as store:
        assert rows(store, METRICS) == expected


def test_aioquic_draft01_metrics_cwnd_spelling_and_fields_not_logged(tmp_path):
    # 45 metrics_updated events, all with bytes_in_flight and cwnd (the old spelling of
    # congestion_window), 19 of them with latest_rtt, min_rtt, smoothed_rtt and rtt_variance:
    # ["2", …, {"bytes_in_flight": 1280, "cwnd": 12800}], …, ["346", …, {"bytes_in_flight": 1280,
    # "cwnd": 14080, "latest_rtt": 172, "min_rtt": 172, "smoothed_rtt": 172, "rtt_variance": 86}].
    # No pto_count.  The client's first event is at "0"; the first metrics_updated comes before its
    # first packet_sent (and logs no RTT: the rule for values logged before it changes nothing).
    events = orjson.loads(AIOQUIC_DRAFT01.read_bytes())["traces"][0]["events"]
    first_sent = [e[2] for e in events].index("packet_sent")
    assert events[0][0] == "0"
    expected = [{"time_ms": float(t), "latest_rtt_ms": d.get("latest_rtt") if i > first_sent else None,
                 "min_rtt_ms": d.get("min_rtt") if i > first_sent else None,
                 "smoothed_rtt_ms": d.get("smoothed_rtt"), "rtt_variance_ms": d.get("rtt_variance"),
                 "pto_count": None, "congestion_window_bytes": d["cwnd"], "bytes_in_flight_bytes": d["bytes_in_flight"]}
                for i, (t, _, name, d) in enumerate(events) if name == "metrics_updated"]
    assert len(expected) == 45 and sum(m["smoothed_rtt_ms"] is not None for m in expected) == 19
    with ingest(tmp_path, AIOQUIC_DRAFT01) as store:
        assert rows(store, METRICS) == expected
