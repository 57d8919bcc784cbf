"""`quicack export --qlog`: stored connections back out as qlog 0.3 JSON, and in again unchanged."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from conftest import DATA, rows
from quicack import Store
from quicack.cli import main

PARALLEL = DATA / "qvis/visualizations/public/standalone_data/draft-01/parallel_10_50KB_f5.qlog"
TRANSFER = DATA / "local/aioquic-transfer/qlog_server"

# event_index itself may shift (parameters_set events are written first), the order may not
PACKETS = """SELECT p.direction, p.sender, p.packet_type, p.packet_number, p.size_bytes, round(p.time_ms, 6) AS t,
                    list(f.frame_type ORDER BY f.position) AS frames,
                    list(f.acked_ranges ORDER BY f.position) AS ranges
             FROM packets p LEFT JOIN frames f USING (connection_id, event_index)
             WHERE p.connection_id = {cid} GROUP BY p.event_index, p.direction, p.sender, p.packet_type, p.packet_number, p.size_bytes, t ORDER BY p.event_index"""
FIGURES = """SELECT vantage, handshake_class, handshake_reason, ack_sh_gap_ms, first_ack_delay_ms,
                    first_rtt_sample_ms, first_pto_ms, replay_samples FROM connections WHERE connection_id = {cid}"""


def test_export_then_ingest_gives_the_same_connection(tmp_path):
    db = tmp_path / "a.duckdb"
    with Store(db) as store:
        store.ingest(PARALLEL)
        for path in TRANSFER.glob("*.qlog"):
            store.ingest(path)
        ids = [r["connection_id"] for r in rows(store, "SELECT connection_id FROM connections ORDER BY 1")]
        before = {cid: (rows(store, PACKETS.format(cid=cid)), rows(store, FIGURES.format(cid=cid))) for cid in ids}
    out = tmp_path / "export.qlog"
    result = CliRunner().invoke(main, ["export", "--db", str(db), "--qlog", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote 2 connections as qlog 0.3 to {out}\n"
    doc = orjson.loads(out.read_bytes())
    assert doc["qlog_version"] == "0.3" and len(doc["traces"]) == 2
    first = doc["traces"][0]["events"][0]
    assert set(first) == {"time", "name", "data"} and ":" in first["name"]
    with Store(tmp_path / "b.duckdb") as again:
        assert again.ingest(out).status == "ingested"
        for new_id, old_id in zip((1, 2), ids):
            assert rows(again, PACKETS.format(cid=new_id)) == before[old_id][0]
            assert rows(again, FIGURES.format(cid=new_id)) == before[old_id][1]


def test_export_needs_a_choice_when_the_store_is_large(tmp_path):
    db = tmp_path / "a.duckdb"
    with Store(db) as store:
        store.ingest(PARALLEL)
    bad = CliRunner().invoke(main, ["export", "--db", str(db), "--qlog", str(tmp_path / "x.qlog"),
                                    "--connection", "7"])
    assert bad.exit_code == 1 and bad.output == f"error: {db}: no connection 7\n"
    usage = CliRunner().invoke(main, ["export", "--db", str(db)])
    assert usage.exit_code == 2 and "give --parquet DIR and/or --qlog FILE" in usage.output


ACK_DELAYS = """SELECT p.event_index, round(f.ack_delay_ms, 6) AS d FROM frames f JOIN packets p USING (connection_id, event_index)
                WHERE f.connection_id = {cid} AND f.frame_type = 'ack' ORDER BY p.event_index, f.position"""
METRICS = """SELECT round(latest_rtt_ms, 6) AS l, round(smoothed_rtt_ms, 6) AS s, round(min_rtt_ms, 6) AS m,
                    round(rtt_variance_ms, 6) AS v FROM logged_metrics WHERE connection_id = {cid} ORDER BY event_index"""


@pytest.mark.parametrize("source", [
    DATA / "pcap2qlog/examples/draft-01/spin_bit.qlog",  # raw ack_delay (pcap2qlog copies the field)
    DATA / "picoquic/picoquictest/binlog_ref.qlog",  # raw ack_delay (picoquic)
    DATA / "peers/quinn/server.sqlog",  # RTTs logged in seconds (quinn)
])
def test_exported_values_are_not_rescaled_when_read_again(tmp_path, source):
    # the export keeps the producer's name; reading it must not apply its scaling quirk again
    with Store(tmp_path / "a.duckdb") as store:
        assert store.ingest(source).status == "ingested"
        ids = [r["connection_id"] for r in rows(store, "SELECT connection_id FROM connections ORDER BY 1")]
        implementation = rows(store, "SELECT DISTINCT implementation FROM connections")
        delays = [[r["d"] for r in rows(store, ACK_DELAYS.format(cid=cid))] for cid in ids]
        metrics = [rows(store, METRICS.format(cid=cid)) for cid in ids]
    assert any(d is not None and d > 0 for per in delays for d in per) or any(metrics)
    out = tmp_path / "export.qlog"
    result = CliRunner().invoke(main, ["export", "--db", str(tmp_path / "a.duckdb"), "--qlog", str(out)])
    assert result.exit_code == 0, result.output
    with Store(tmp_path / "b.duckdb") as again:
        assert again.ingest(out).status == "ingested"
        assert rows(again, "SELECT DISTINCT implementation FROM connections") == implementation
        new_ids = [r["connection_id"] for r in rows(again, "SELECT connection_id FROM connections ORDER BY 1")]
        assert [[r["d"] for r in rows(again, ACK_DELAYS.format(cid=cid))] for cid in new_ids] == delays
        assert [rows(again, METRICS.format(cid=cid)) for cid in new_ids] == metrics
        quirks = rows(again, "SELECT quirks FROM connections")
        assert all("quicack_export" in r["quirks"] for r in quirks)
        assert not any(q.startswith(("picoquic:", "pcap2qlog:", "quinn:")) for r in quirks for q in r["quirks"])


def test_a_capture_exported_as_qlog_reads_back_as_the_same_network_view(tmp_path):
    capture = DATA / "pcap2qlog/examples/draft-01/spin_bit.pcap"
    with Store(tmp_path / "a.duckdb") as store:
        assert store.ingest(capture).status == "ingested"
        before = rows(store, PACKETS.format(cid=1)), rows(store, FIGURES.format(cid=1))
        who = rows(store, "SELECT vantage, flow, implementation FROM connections")
    out = tmp_path / "capture.qlog"
    assert CliRunner().invoke(main, ["export", "--db", str(tmp_path / "a.duckdb"), "--qlog", str(out)]).exit_code == 0
    with Store(tmp_path / "b.duckdb") as again:
        assert again.ingest(out).status == "ingested"
        assert (rows(again, PACKETS.format(cid=1)), rows(again, FIGURES.format(cid=1))) == before
        assert rows(again, "SELECT vantage, flow, implementation FROM connections") == who
    assert who == [{"vantage": "network", "flow": "client", "implementation": "quicack-capture"}]  # (the reader)
