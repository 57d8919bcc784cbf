"""Cross-validation: a capture and the qlogs of the same connections, taken on the same host.

tests/data/local/aioquic-aioquic-handshake: one aioquic connection captured on loopback and
logged by client and server.  By hand (tshark -V on cap.pcapng with keys.log, and the qlogs'
packet_sent/packet_received events printed with the json module): 11 packets, the same
(sender, space, packet number, frames) on all three; tshark's frame times differ from the
qlog times of the same packet's *sender* by less than 0.2 ms (e.g. client Initial 0: frame 1 at
…835.087973 s, client qlog packet_sent at …835.004 ms), while the *receiver* logs up to 8.8 ms
later (server Initial 0: frame 2 at …848.864 ms, client packet_received at …854.477 ms).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from quicack import QuicackError, Store
from quicack.cli import main
from quicack.store.compare import compare_files

DATA = Path(__file__).resolve().parents[1] / "data/local"

pytestmark = pytest.mark.usefixtures("tshark")
ONE = DATA / "aioquic-aioquic-handshake"
TWO = DATA / "aioquic-two-connections"


def _qlog(folder: Path, side: str) -> Path:
    return next((folder / f"qlog_{side}").glob("*.qlog"))


def test_capture_and_qlogs_of_one_connection_agree():
    with Store(":memory:") as store:
        for path in (ONE / "cap.pcapng", _qlog(ONE, "client"), _qlog(ONE, "server")):
            assert store.ingest(path).status == "ingested"
        client = compare_files(store.con, 1, 2)
        server = compare_files(store.con, 1, 3)
    for (pair,), side in ((client, "client"), (server, "server")):
        assert (pair.odcid, pair.a_vantage, pair.b_vantage) == ("e60faf3e02b8978c", "network", side)
        assert (pair.matched, pair.only_a, pair.only_b) == (11, 0, 0)
        assert pair.differences == []
        sent_by_vantage = pair.time_stats[side]
        assert sent_by_vantage[2] < 1.0  # max |Δt| of the packets the qlog's side sent
    assert client.pop().time_stats["server"][2] > 1.0  # the client logs received packets late
    assert server.pop().time_stats["client"][2] > 1.0


def test_strict_compare_flags_late_receive_times():
    with Store(":memory:") as store:
        store.ingest(ONE / "cap.pcapng")
        store.ingest(_qlog(ONE, "client"))
        (pair,) = compare_files(store.con, 1, 2, strict=True)
    assert pair.differences and {d.kind for d in pair.differences} == {"time"}
    assert {d.sender for d in pair.differences} == {"server"}


def test_connections_are_paired_by_odcid():
    """Two connections in one capture, each paired with its own qlog (named by ODCID)."""
    with Store(":memory:") as store:
        store.ingest(TWO / "cap.pcapng")
        for path in sorted((TWO / "qlog_client").glob("*.qlog")):
            store.ingest(path)
        odcids = [store.con.execute("SELECT odcid FROM connections WHERE file_id = ?", [f]).fetchall()[0][0]
                  for f in (2, 3)]
        pairs = [compare_files(store.con, 1, f) for f in (2, 3)]
    for odcid, (pair,) in zip(odcids, pairs):
        assert pair.odcid == odcid
        assert pair.only_a == pair.only_b == 0 and pair.matched > 0
        assert [d for d in pair.differences if d.kind != "time"] == []


def test_different_connections_are_not_compared():
    with Store(":memory:") as store:
        store.ingest(ONE / "cap.pcapng")
        store.ingest(sorted((TWO / "qlog_client").glob("*.qlog"))[0])
        with pytest.raises(QuicackError) as refused:
            compare_files(store.con, 1, 2)
    assert str(refused.value) == ("no connection of the first file has the original destination connection ID of one "
                       "in the second file: nothing to compare")


def test_compare_command():
    runner = CliRunner()
    ok = runner.invoke(main, ["compare", str(ONE / "cap.pcapng"), str(_qlog(ONE, "client"))])
    assert ok.exit_code == 0, ok.output
    lines = ok.output.splitlines()
    assert lines[0] == "connection e60faf3e02b8978c: A network, B client: 11 packets in both, 0 only in A, 0 only in B"
    assert lines[-1] == "  no differences"
    strict = runner.invoke(main, ["compare", "--strict", str(ONE / "cap.pcapng"), str(_qlog(ONE, "client"))])
    assert strict.exit_code == 1
    assert "differences:" in strict.output and "time differs by" in strict.output
    other = runner.invoke(main, ["compare", str(ONE / "cap.pcapng"), str(sorted((TWO / "qlog_client").glob("*.qlog"))[0])])
    assert other.exit_code == 1
    assert other.output.strip().splitlines()[-1] == (
        "error: no connection of the first file has the original destination connection ID of one "
        "in the second file: nothing to compare")


def _ack_trace(vantage: str, ranges: list, extra_frames: list | None = None) -> dict:
    """One connection with one received ACK (the frames as given) in a 0.3 JSON qlog."""
    direction = "transport:packet_received" if vantage == "server" else "transport:packet_sent"
    frames = [{"frame_type": "ack", "ack_delay": 0.0, "acked_ranges": ranges}, *(extra_frames or [])]
    return {"qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": vantage}, "common_fields": {"ODCID": "aa"},
        "events": [{"time": 1.0, "name": direction, "data": {
            "header": {"packet_type": "1RTT", "packet_number": 5}, "frames": frames}}]}]}


def test_acked_ranges_listed_in_either_order_are_the_same(tmp_path):
    # aioquic lists ACK ranges highest first, tshark lowest first: the same ACK
    from conftest import write_json
    with Store(":memory:") as store:
        store.ingest(write_json(tmp_path / "a.qlog", _ack_trace("client", [[25, 39], [4, 23]])))
        store.ingest(write_json(tmp_path / "b.qlog", _ack_trace("server", [[4, 23], [25, 39]])))
        same = compare_files(store.con, 1, 2)[0]
        store.ingest(write_json(tmp_path / "c.qlog", _ack_trace("server", [[4, 22], [25, 39]])))
        other = compare_files(store.con, 1, 3)[0]
    assert same.matched == 1 and same.differences == []
    assert [d.kind for d in other.differences] == ["ack"]
