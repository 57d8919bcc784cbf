"""Real qlog traces from other producers (tests/data/, see tests/data/MANIFEST.md), ingested end to end.

Every expected value below was read off the files themselves, never computed with quicack:

* traces / events: ``python -c "import json,sys; d=json.load(open(sys.argv[1]));
  print([len(t['events']) for t in d['traces']])" FILE`` (0.1 files: one trace at the root,
  ``len(d['events'])``; the .sqlog: split on the 0x1E record separators, header + 4 records).
* packets: ``grep -o '"packet_sent"\\|"packet_received"\\|"transport:packet_sent"\\|
  "transport:packet_received"\\|"quic:packet_sent"\\|"PACKET_RX"\\|"PACKET_TX"' FILE | wc -l``
  (``grep -o | wc -l``, not ``grep -c``: aioquic and .sqlog files hold many events per line),
  cross-checked by counting event names with the json module.
* first server Initial: printed each packet event's type, header scid/dcid, packet number and
  frame_type list with the json module, in file order, and picked by hand
  - client-vantage trace: the first *received* packet of type initial;
  - server-vantage trace: the first *sent* packet of type initial;
  - network (pcap2qlog) trace: the first Initial whose header scid differs from the scid of the
    client's first Initial.
  Recorded as (trace_index, packet_number, frame types in file order).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from quicack import Store

DATA = Path(__file__).resolve().parents[1] / "data"

PCAP2QLOG = "pcap2qlog/examples"
QVIS = "qvis/visualizations/public/standalone_data/draft-01"
PICO = "picoquic/picoquictest"
AIOQUIC = "local/aioquic-aioquic-handshake"


@dataclass(frozen=True)
class Case:
    path: str
    traces: int  # connections expected: one per trace
    events: int  # all events in the file (all traces)
    packets: int  # packet_sent/packet_received (0.1: PACKET_RX/PACKET_TX) events
    server_initial: tuple[int, int, list[str]] | None  # (trace_index, packet_number, frame types)

    def __str__(self) -> str:  # readable test ids
        return self.path.rsplit("/", 2)[-2] + "/" + self.path.rsplit("/", 1)[-1]


CASES = [
    #    path                                                         traces events packets  first server Initial
    # --- pcap2qlog 0.1 (root fields/events, network vantage, only PACKET_RX events; draft-15)
    Case(f"{PCAP2QLOG}/20181219_handshake_v6_quicker.edm.uhasselt.be.qlog", 1, 13, 12, (0, 0, ["crypto"])),
    #   no Initial with scid != 0e8ac117... at all (server answers with Handshake only): see
    #   test_ngtcp2_pcap_packets for what is asserted instead
    Case(f"{PCAP2QLOG}/ngtcp2-pcap.qlog", 1, 11, 10, None),
    # --- pcap2qlog draft-01 (network vantage, ngtcp2 draft-22)
    Case(f"{PCAP2QLOG}/draft-01/ack_range.qlog", 1, 390, 385, (0, 0, ["crypto", "ack"])),
    Case(f"{PCAP2QLOG}/draft-01/multi_stream.qlog", 1, 52, 48, (0, 0, ["crypto", "ack"])),
    Case(f"{PCAP2QLOG}/draft-01/new_cid.qlog", 1, 34, 27, (0, 0, ["ack", "padding", "crypto"])),
    Case(f"{PCAP2QLOG}/draft-01/ngtcp2_test.qlog", 1, 385, 381, (0, 0, ["crypto", "ack"])),
    Case(f"{PCAP2QLOG}/draft-01/spin_bit.qlog", 1, 34, 21, (0, 0, ["ack", "crypto"])),
    # --- pcap2qlog draft-02-wip: trace 0 = Initial + Retry (no server Initial), trace 1 = after the retry
    Case(f"{PCAP2QLOG}/draft-02/ngtcp2-29-dsb.qlog", 2, 5 + 20, 2 + 17, (1, 0, ["ack", "crypto"])),
    # --- qvis (aioquic draft-01, string-typed numbers)
    Case(f"{QVIS}/doublevantage_100ms.qlog", 2, 2797 + 3940, 985 + 990, (0, 0, ["ack", "crypto"])),
    Case(f"{QVIS}/parallel_10_50KB_f5.qlog", 1, 1549, 513, (0, 0, ["ack"])),
    # --- picoquic draft-00 (server vantage, µs times)
    Case(f"{PICO}/qlog_trace_ref.txt", 1, 104, 35, (0, 0, ["ack", "crypto"])),
    Case(f"{PICO}/qlog_trace_ecn_ref.txt", 1, 104, 35, (0, 0, ["ack", "crypto"])),
    Case(f"{PICO}/multipath_qlog_ref.txt", 1, 200, 68, (0, 0, ["ack", "crypto"])),
    #   frame references: only 1RTT packet_sent (see test_picoquic_binlog_ref) / only "message" events
    Case(f"{PICO}/binlog_ref.qlog", 1, 77, 77, None),
    Case(f"{PICO}/app_msg_overflow_ref.qlog", 1, 16, 0, None),
    # --- quiche qlog crate, main-schema JSON-SEQ: 4 synthetic Handshake packet_sent (see test_quiche_sqlog)
    Case("quiche-qlog-crate/streamer_test_expected_main-schema.sqlog", 1, 4, 4, None),
    # --- aioquic 1.7.2, qlog 0.3, same connection from both ends
    Case(f"{AIOQUIC}/qlog_client/e60faf3e02b8978c.qlog", 1, 50, 11, (0, 0, ["ack", "crypto"])),
    Case(f"{AIOQUIC}/qlog_server/e60faf3e02b8978c.qlog", 1, 53, 11, (0, 0, ["ack", "crypto"])),
]

SERVER_INITIALS = """
    SELECT p.event_index, p.packet_number, p.size_bytes, p.direction, f.position, f.frame_type
    FROM packets p JOIN frames f USING (connection_id, event_index)
    WHERE p.connection_id = (SELECT connection_id FROM connections WHERE trace_index = $trace)
      AND p.sender = 'server' AND p.packet_type = 'initial'
    ORDER BY p.event_index, f.position
"""


@contextmanager
def ingested(tmp_path: Path, rel: str):
    """A fresh store holding only DATA/rel: yields (store, FileResult)."""
    with Store(tmp_path / "t.duckdb") as store:
        yield store, store.ingest(DATA / rel)


def first_server_initial(store: Store, trace: int) -> dict | None:
    """packet_number, size_bytes, direction and frame types of the trace's first server Initial."""
    rows = store.sql(SERVER_INITIALS, {"trace": trace}).to_dicts()
    if not rows:
        return None
    first = [r for r in rows if r["event_index"] == rows[0]["event_index"]]
    return {
        "packet_number": first[0]["packet_number"],
        "size_bytes": first[0]["size_bytes"],
        "direction": first[0]["direction"],
        "frames": [r["frame_type"] for r in first],
    }


def packet_list(store: Store, trace: int = 0) -> list[tuple]:
    return store.sql(
        """SELECT p.sender, p.packet_type, p.packet_number FROM packets p JOIN connections c USING (connection_id)
           WHERE c.trace_index = $trace ORDER BY p.event_index""",
        {"trace": trace},
    ).rows()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_ingest_counts_and_first_server_initial(tmp_path, case: Case):
    with ingested(tmp_path, case.path) as (store, result):
        assert result.status == "ingested", result.error
        assert result.connections == case.traces
        assert store.sql("SELECT count(*) AS n FROM connections").item() == case.traces
        assert sorted(r[0] for r in store.sql("SELECT trace_index FROM connections").rows()) == list(range(case.traces))
        assert result.events == case.events
        assert result.packets == case.packets
        assert store.sql("SELECT count(*) AS n FROM packets").item() == case.packets
        if case.server_initial is None:
            # the file has no server Initial at all: none may be invented
            assert store.sql("SELECT count(*) FROM packets WHERE sender='server' AND packet_type='initial'").item() == 0
        else:
            trace, pn, frames = case.server_initial
            got = first_server_initial(store, trace)
            assert got is not None
            assert (got["packet_number"], got["frames"]) == (pn, frames)


# ---------------------------------------------------------------- files without a server Initial


def test_ngtcp2_pcap_packets(tmp_path):
    # 0.1 file, all PACKET_RX; header type / packet_number read off the file; sender from the
    # CIDs: the client's CID is the root "connectionid" 0e8ac117... (scid of its first Initial), so
    # long headers with that scid and short headers with dcid ac2f4783... are the client's.
    with ingested(tmp_path, f"{PCAP2QLOG}/ngtcp2-pcap.qlog") as (store, _):
        assert packet_list(store) == [
            ("client", "initial", 0),
            ("server", "handshake", 0),
            ("server", "handshake", 1),
            ("client", "initial", 1),
            ("client", "handshake", 0),
            ("server", "handshake", 2),
            ("server", "1RTT", 0),
            ("client", "1RTT", 0),
            ("server", "1RTT", 1),
            ("server", "1RTT", 2),
        ]


def test_ngtcp2_29_dsb_first_trace_is_initial_then_retry(tmp_path):
    # trace 0: packet_sent initial pn "0" (scid 43944eda...), then packet_received retry (scid
    # 2e9a32ed..., no packet_number in its header); no server Initial in this trace.
    with ingested(tmp_path, f"{PCAP2QLOG}/draft-02/ngtcp2-29-dsb.qlog") as (store, _):
        assert packet_list(store, 0) == [("client", "initial", 0), ("server", "retry", None)]
        assert first_server_initial(store, 0) is None


# picoquic binlog_ref.qlog: 77 packet_sent 1RTT events (client vantage); packet numbers 0..46
# then 0..29; the frame_type of every frame in file order (67 frames; 10 packets have "frames": []).
BINLOG_PACKET_NUMBERS = list(range(47)) + list(range(30))
BINLOG_FRAME_TYPES = [
    "padding", "reset_stream", "connection_close", "connection_close", "connection_close", "max_data",
    "max_stream_data", "max_streams", "max_streams", "ping", "data_blocked", "stream_data_blocked",
    "streams_blocked", "streams_blocked", "new_connection_id", "stop_sending", "path_challenge",
    "path_response", "new_token", "ack", "ack", "stream", "stream", "crypto", "retire_connection_id",
    "datagram", "datagram", "handshake_done", "ack_frequency", "ack_frequency", "immediate_ack",
    "time_stamp", "path_abandon", "path_abandon", "path_backup", "path_available", "max_path_id",
    "path_new_connection_id", "path_retire_connection_id", "paths_blocked", "path_cid_blocked", "bdp",
    "observed_address_v4", "observed_address_v6", "path_ack", "path_ack", "reset_stream_at",
    "reset_stream", "reset_stream", "max_stream_data", "max_streams", "max_streams", "new_connection_id",
    "new_connection_id", "new_connection_id", "stop_sending", "ack", "ack", "padding", "ack", "crypto",
    "datagram", "ping", "padding", "stream", "bdp", "unknown",
]


def test_picoquic_binlog_ref(tmp_path):
    with ingested(tmp_path, f"{PICO}/binlog_ref.qlog") as (store, _):
        pk = store.sql("SELECT direction, packet_type, packet_number FROM packets ORDER BY event_index").rows()
        assert {(d, t) for d, t, _ in pk} == {("sent", "1RTT")}
        assert [n for _, _, n in pk] == BINLOG_PACKET_NUMBERS
        frames = store.sql("SELECT frame_type FROM frames ORDER BY event_index, position").to_series().to_list()
        assert frames == BINLOG_FRAME_TYPES


def test_picoquic_app_msg_overflow_ref(tmp_path):
    # 16 events, all [0, "info", "message", {"message": "s:xxx…"}] (2545-2547 characters): no packets.
    with ingested(tmp_path, f"{PICO}/app_msg_overflow_ref.qlog") as (store, _):
        assert store.sql("SELECT count(*) FROM frames").item() == 0
        names = store.sql("SELECT event_name FROM other_events").to_series().to_list()
        assert len(names) == 16
        assert all(n.endswith("message") for n in names)


def test_quiche_sqlog(tmp_path):
    # 4 records "quic:packet_sent", header packet_type handshake, packet_number 0, raw.length 1251,
    # one stream frame each: stream_id/offset 40/40 (raw.payload_length 400) then 3 × 0/0 (100), fin true.
    with ingested(tmp_path, "quiche-qlog-crate/streamer_test_expected_main-schema.sqlog") as (store, _):
        rows = store.sql(
            """SELECT p.direction, p.sender, p.packet_type, p.packet_number, p.size_bytes,
                      f.frame_type, f.stream_id, f.offset_bytes, f.length_bytes, f.fin
               FROM packets p JOIN frames f USING (connection_id, event_index)
               ORDER BY p.event_index, f.position"""
        ).rows()
        head = ("sent", "server", "handshake", 0, 1251, "stream")
        assert rows == [head + (40, 40, 400, True)] + [head + (0, 0, 100, True)] * 3


# ---------------------------------------------------------------- qvis specifics


def test_doublevantage_both_vantages_see_same_server_initial(tmp_path):
    # trace 0 (client) packet_received initial pn "0" size "208" frames [ack, crypto];
    # trace 1 (server) packet_sent initial pn "0" size "208" frames [ack, crypto].
    with ingested(tmp_path, f"{QVIS}/doublevantage_100ms.qlog") as (store, _):
        vantages = dict(store.sql("SELECT trace_index, vantage FROM connections").rows())
        assert vantages == {0: "client", 1: "server"}
        client, server = first_server_initial(store, 0), first_server_initial(store, 1)
        assert client["direction"] == "received" and server["direction"] == "sent"
        assert (client["packet_number"], client["frames"]) == (server["packet_number"], server["frames"])
        assert (client["packet_number"], client["frames"], client["size_bytes"]) == (0, ["ack", "crypto"], 208)
        assert server["size_bytes"] == 208



def test_doublevantage_connection_rows(tmp_path):
    # draft-01, two traces, both vantage_point {"name": "aioquic", …}, common_fields ODCID
    # "b0bf29d0abe27b8b" and reference_time "1566844755588" (client) / "1566844755688" (server);
    # relative times as strings from "0"; no title.
    doc = orjson.loads((DATA / QVIS / "doublevantage_100ms.qlog").read_bytes())
    expected = []
    for i, t in enumerate(doc["traces"]):
        times = [float(e[0]) for e in t["events"]]
        reference = float(t["common_fields"]["reference_time"])
        expected.append({"trace_index": i, "group_id": None, "vantage": t["vantage_point"]["type"],
                         "implementation": t["vantage_point"]["name"], "odcid": t["common_fields"]["ODCID"],
                         "title": None, "reference_epoch_ms": reference, "first_event_epoch_ms": reference + min(times),
                         "duration_ms": max(times) - min(times), "events": len(times)})
    assert [e["events"] for e in expected] == [2797, 3940]
    with ingested(tmp_path, f"{QVIS}/doublevantage_100ms.qlog") as (store, _):
        got = store.sql("""SELECT trace_index, group_id, vantage, implementation, odcid, title, reference_epoch_ms,
                                  first_event_epoch_ms, duration_ms, events FROM connections ORDER BY trace_index""")
        assert got.to_dicts() == expected

def test_parallel_first_server_initial_is_ack_only(tmp_path):
    # after the Retry (event 5), event 11: packet_received initial, header packet_number "0",
    # packet_size "47", frames [ack]; the ServerHello comes in Initial pn "1" (event 14, [crypto]).
    with ingested(tmp_path, f"{QVIS}/parallel_10_50KB_f5.qlog") as (store, _):
        got = first_server_initial(store, 0)
        assert got == {"packet_number": 0, "size_bytes": 47, "direction": "received", "frames": ["ack"]}
        second = store.sql(
            """SELECT p.packet_number, list(f.frame_type ORDER BY f.position) AS frames
               FROM packets p JOIN frames f USING (connection_id, event_index)
               WHERE p.sender='server' AND p.packet_type='initial'
               GROUP BY p.event_index, p.packet_number ORDER BY p.event_index LIMIT 1 OFFSET 1"""
        ).rows()
        assert second == [(1, ["crypto"])]


def test_a_replay_view_of_a_stored_connection_gives_its_stored_samples(tmp_path):
    # The store's replay (every connection of a file at once) and replay_view (one connection, its
    # samples returned, e.g. for the peers' server-side views) hand the native replay the same columns.
    from quicack.store import analysis
    with Store(tmp_path / "a.duckdb") as store:
        store.ingest(DATA / f"{QVIS}/doublevantage_100ms.qlog")
        views = store.con.execute("SELECT connection_id, replay_endpoint FROM connections ORDER BY 1").fetchall()
        counts = []
        for cid, endpoint in views:
            stored = store.con.execute("""SELECT event_index, latest_rtt_ms, ack_delay_used_ms, smoothed_rtt_ms,
                                                 rttvar_ms, pto_ms, flags
                                          FROM rtt_samples WHERE connection_id = ? ORDER BY event_index""",
                                       [cid]).fetchall()
            view = analysis.replay_view(store.con, cid, endpoint)
            assert [(s.event_index, s.latest_rtt_ms, s.ack_delay_used_ms, s.smoothed_rtt_ms, s.rttvar_ms, s.pto_ms,
                     list(s.flags)) for s in view.samples] == stored
            counts.append(view.sample_count)
    assert len(views) == 2 and max(counts) > 100  # (the server sent the 100 ms transfer)
