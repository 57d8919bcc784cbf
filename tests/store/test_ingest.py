"""quicack.store.ingest: a folder's small qlogs ingested several at a time (each in its own transaction)
store exactly what ingesting them one after the other stores."""

from __future__ import annotations

import shutil

import orjson
import pytest

from conftest import DATA, RS
from quicack import Store
from quicack.store import ingest
from quicack.store.schema import CONNECTION_TABLES


def content(db) -> dict[str, list]:
    """Every row of every per-connection table, keyed by its file's path instead of the ids."""
    with Store(db, read_only=True) as s:
        out = {}
        for table in (*CONNECTION_TABLES, "connections"):
            columns = [c for (c,) in s.con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                "AND column_name NOT IN ('connection_id', 'file_id') ORDER BY column_index", [table]).fetchall()]
            out[table] = sorted(map(repr, s.con.execute(
                f"SELECT f.path, c.trace_index, c.group_id, {', '.join('x.' + c for c in columns)} "
                f"FROM {table} x JOIN connections c USING (connection_id) JOIN files f ON f.file_id = c.file_id"
            ).fetchall()))
        out["files"] = s.con.execute("SELECT path, content_sha256, warnings FROM files ORDER BY path").fetchall()
        out["ids"] = s.con.execute("SELECT count(*) = count(DISTINCT connection_id) FROM connections").fetchall()
    return out


@pytest.fixture
def folder(tmp_path):
    """Small real qlogs of several producers and generations, a copy of one, and a broken one."""
    folder = tmp_path / "traces"
    folder.mkdir()
    # (issue 29's traces left out: they would push the multi-connection pcap2qlog file out of the 16;
    # and not the one-connection spelling files written by hand for issue 30)
    later = ("local/aioquic-amplification", "local/quic-go-key-wait")
    sources = sorted(p for p in DATA.rglob("*") if p.suffix in (".qlog", ".sqlog") and p.stat().st_size < 300_000
                     and not any(part in p.as_posix() for part in later) and "careful-resume" not in p.parts)
    assert len(sources) >= 12
    for i, p in enumerate(sources[:16]):
        shutil.copy(p, folder / f"{i:02d}-{p.name}")
    shutil.copy(sources[0], folder / "99-copy.qlog")
    (folder / "50-broken.qlog").write_bytes(b'{"qlog_version": "0.3", "traces": [{"events": [{"time": 1, "na')
    return folder


def test_small_files_ingested_at_once_store_what_one_at_a_time_stores(folder, tmp_path):
    one = ingest.analyze([folder], db=tmp_path / "one.duckdb", jobs=1)
    two = ingest.analyze([folder], db=tmp_path / "two.duckdb", jobs=2)
    # the summary lists the files in their order, with the same outcome
    assert [(f.path, f.status, f.connections, f.packets, f.events, f.error) for f in two.files] == \
        [(f.path, f.status, f.connections, f.packets, f.events, f.error) for f in one.files]
    assert two.count("refused") == 1 and two.count("unchanged") == 1  # the broken file; the copy
    assert [f.status for f in two.files if f.path.endswith("99-copy.qlog")] == ["unchanged"]
    assert two.connections == one.connections > 16
    stored = content(tmp_path / "two.duckdb")
    assert stored == content(tmp_path / "one.duckdb")
    assert stored["ids"] == [(True,)] and len(stored["files"]) == 16
    # analysed again: each file's previous rows are deleted while others are written
    again = ingest.analyze([folder], db=tmp_path / "two.duckdb", jobs=2, reanalyze=True)
    ingest.analyze([folder], db=tmp_path / "one.duckdb", jobs=1, reanalyze=True)
    assert again.count("ingested") == 17 and again.count("refused") == 1
    assert content(tmp_path / "two.duckdb") == content(tmp_path / "one.duckdb")


def test_a_file_that_runs_out_of_memory_among_others_is_read_again_on_its_own(folder, tmp_path, monkeypatch):
    # One 30 MB event needs more than the memory cap (see test_store): among small files ingested
    # at once, the file is left to be read again after them, with the usual limit.
    monkeypatch.setattr(ingest, "PARALLEL_BYTES", 64 << 20)
    header = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ", "trace": {"vantage_point": {"type": "client"}}}
    events = [{"time": float(i), "name": "transport:packet_sent",
               "data": {"header": {"packet_type": "1RTT", "packet_number": i}, "frames": [{"frame_type": "ping"}]}}
              for i in range(3)]
    events.append({"time": 3.0, "name": "transport:blob", "data": {"payload": "ab" * 15_000_000}})
    large = folder / "30-large.sqlog"
    large.write_bytes(b"".join(RS + orjson.dumps(r) + b"\n" for r in [header, *events]))
    summary = ingest.analyze([folder], db=tmp_path / "x.duckdb", jobs=2)
    result = next(f for f in summary.files if f.path == str(large))
    assert result.status == "ingested" and result.packets == 3
    assert result.warnings[0].startswith("DuckDB needed more memory than the 80MB")
    assert summary.count("ingested") == 17  # (and every other file)


def test_a_stored_capture_hashed_while_it_is_read_stops_at_the_next_batch(tmp_path, monkeypatch):
    # a large capture is hashed in a thread while the native reader reads it; once the hash
    # shows it stored, reading stops (its rows not finished) and the file is unchanged, its rows kept
    from quicack.pcap import nativepath, streaming
    from quicack.store import transaction
    capture = tmp_path / "cap.pcapng"
    shutil.copy(DATA / "local/aioquic-aioquic-handshake/cap.pcapng", capture)
    monkeypatch.setattr(transaction, "SYNC_HASH_BYTES", 0)  # (every file hashed in the background)
    monkeypatch.setattr(nativepath, "BATCH_DATAGRAMS", 1)
    normalized, read = [], []
    real, real_open = streaming._Run.finish, nativepath.open_reader
    monkeypatch.setattr(streaming._Run, "finish", lambda self, staged: normalized.append(staged) or real(self, staged))
    monkeypatch.setattr(nativepath, "open_reader", lambda *a: read.append(a[0]) or real_open(*a))
    # (the hash not known before reading starts, known at the first batch: no race with the thread)
    asked = []
    monkeypatch.setattr(transaction._Digest, "ready", lambda self: asked.append(self) or asked.count(self) > 1)
    with Store(tmp_path / "s.duckdb") as store:
        first = store.ingest(capture)
        assert first.status == "ingested" and len(normalized) == 1
        rows = store.con.execute("SELECT count(*) FROM packets").fetchall()
        again = store.ingest(capture)
        # (reading began before the hash was known, and stopped)
        assert again.status == "unchanged" and len(read) == 2 and len(normalized) == 1
        assert store.con.execute("SELECT count(*) FROM packets").fetchall() == rows and rows[0][0] > 0
        assert store.ingest(capture, reanalyze=True).status == "ingested" and len(normalized) == 2
