"""Captures made into rows batch by batch (quicack.pcap.streaming) against the same captures staged
whole: every table equal (the files row's warnings and events too), also with batches of a few
datagrams, so that connections, held first flights, first times and exponents cross batches; a
capture whose rows made early would differ (a packet earlier than its connection's first) is
staged whole instead, with the same rows."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from quicack import Store
from quicack.pcap import nativepath, streaming

from test_native_capture import _captures, _ports, _tables

pytestmark = pytest.mark.usefixtures("tshark")

ROOT = Path(__file__).resolve().parents[2]
HANDSHAKE = ROOT / "tests/data/local/aioquic-aioquic-handshake/cap.pcapng"


def _stored(store: Store) -> dict[str, list]:
    tables = _tables(store)
    tables["files"] = store.con.execute("SELECT events, warnings FROM files").fetchall()
    return tables


def _read(path: Path, db: Path, monkeypatch, stream: bool, batch: int | None = None) -> tuple[dict, list[str]]:
    """The stored rows of ``path`` and, if it was streamed, nothing; else why it was staged whole."""
    why: list[str] = []
    real = streaming.ingest

    def ingest(*args, **kwargs):
        if not stream:
            raise streaming.Unstreamable("asked by the test")
        try:
            return real(*args, **kwargs)
        except streaming.Unstreamable as e:
            why.append(str(e))
            raise

    with monkeypatch.context() as m:
        m.setattr(streaming, "ingest", ingest)
        if batch:
            m.setattr(nativepath, "BATCH_DATAGRAMS", batch)
        with Store(db) as store:
            result = store.ingest(path, quic_ports=_ports(path))
            assert result.status in ("ingested", "refused")
            return _stored(store), why


@pytest.mark.parametrize("path", _captures(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_streamed_rows_equal_the_rows_staged_whole(path, tmp_path, monkeypatch):
    whole, _ = _read(path, tmp_path / "whole.duckdb", monkeypatch, stream=False)
    streamed, why = _read(path, tmp_path / "streamed.duckdb", monkeypatch, stream=True, batch=7)
    for table, rows in whole.items():
        assert streamed[table] == rows, (table, why)


def test_an_ordinary_capture_is_streamed(tmp_path, monkeypatch):
    finished = []
    real = streaming._Run.finish
    monkeypatch.setattr(streaming._Run, "finish", lambda self, staged: finished.append(staged) or real(self, staged))
    _, why = _read(HANDSHAKE, tmp_path / "s.duckdb", monkeypatch, stream=True, batch=3)
    assert why == [] and len(finished) == 1 and finished[0].events > 0


def _pcap_with_last_record_first(source: Path, target: Path) -> None:
    """``source`` as a pcap whose last record's time is a second before the first's."""
    plain = target.with_suffix(".plain.pcap")
    subprocess.run(["editcap", "-F", "pcap", str(source), str(plain)], check=True, capture_output=True)
    data = bytearray(plain.read_bytes())
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    at, records = 24, []
    while at + 16 <= len(data):
        records.append(at)
        at += 16 + struct.unpack_from(endian + "I", data, at + 8)[0]
    first_seconds = struct.unpack_from(endian + "I", data, records[0])[0]
    struct.pack_into(endian + "I", data, records[-1], first_seconds - 1)
    target.write_bytes(bytes(data))
    plain.unlink()


def test_a_packet_earlier_than_its_connections_first_makes_the_capture_staged_whole(tmp_path, monkeypatch):
    capture = tmp_path / "late.pcap"
    _pcap_with_last_record_first(HANDSHAKE, capture)
    shutil.copy(HANDSHAKE.parent / "keys.log", tmp_path / "keys.log")
    whole, _ = _read(capture, tmp_path / "whole.duckdb", monkeypatch, stream=False)
    streamed, why = _read(capture, tmp_path / "streamed.duckdb", monkeypatch, stream=True, batch=2)
    assert why == ["a packet earlier than the first of its connection"]
    assert streamed == whole and whole["packets"]


def test_a_buffer_pool_too_small_for_a_streamed_capture_streams_it_again_with_the_usual_limit(tmp_path, monkeypatch):
    from quicack.store import transaction
    whole, _ = _read(HANDSHAKE, tmp_path / "whole.duckdb", monkeypatch, stream=False)
    batches = []
    real = streaming._Run.batch
    monkeypatch.setattr(streaming._Run, "batch", lambda self, *tables: batches.append(1) or real(self, *tables))
    monkeypatch.setattr(transaction, "STREAM_MEMORY", "2MB")
    with Store(tmp_path / "again.duckdb") as store:
        usual = store.con.execute("SELECT current_setting('memory_limit')").fetchall()
        result = store.ingest(HANDSHAKE)
        assert result.status == "ingested" and len(batches) == 2  # (streamed, out of memory, streamed again)
        assert _stored(store) == whole
        assert store.con.execute("SELECT current_setting('memory_limit')").fetchall() == usual
