"""Hostile input to a batch (issue 31): a file that breaks the reader, a full disk, special files
and dangling links, a store grown by killed ingests — each refused with one line naming the
file (exit 1) while the batch goes on and prints its summary, nothing stored lost; and the
fuzzing test: a wrong type at every field path of the real traces, sampled each run (all of
them: benchmarks/mutation_sweep.py), each ending in a stored file or one clean line."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import hostile
from conftest import DATA, RS, write_json, write_seq
from quicack import Store
from quicack.cli import main
from quicack.store import ingest, transaction

CLIENT = DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"
SERVER = DATA / "local/aioquic-aioquic-handshake/qlog_server/e60faf3e02b8978c.qlog"
DRAFT_01 = DATA / "pcap2qlog/examples/draft-01/ack_range.qlog"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _counts(db: Path) -> dict:
    with Store(db, read_only=True) as store:
        return {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("files", "connections", "packets", "frames", "other_events")}


# --- 1. a file that breaks the reader: one line, the batch goes on ------------------------------

@pytest.mark.parametrize("jobs", [1, None], ids=["one at a time", "default jobs"])
def test_a_wrong_type_in_a_header_no_longer_stops_the_batch(tmp_path, jobs):
    # configuration.original_uris a number in a draft-01 qlog: was a TypeError traceback, the
    # files after it not ingested and no summary
    doc = orjson.loads(DRAFT_01.read_bytes())
    doc["traces"][0]["configuration"]["original_uris"] = 7
    odd = write_json(tmp_path / "a.qlog", doc)
    shutil.copy(CLIENT, tmp_path / "b.qlog")
    db = tmp_path / "q.duckdb"
    args = ["analyze", odd, tmp_path / "b.qlog", "--db", db, *(["--jobs", jobs] if jobs else [])]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert f"files: 2 (2 ingested, 0 unchanged, 0 refused) into {db}" in result.output


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_bug_met_by_one_file_refuses_it_with_one_line_and_the_batch_goes_on(tmp_path, monkeypatch, jobs):
    # whatever a reader raises that it should not: that file is refused, the others are read
    from quicack.qlog import dialect
    describe = dialect.describe_trace

    def broken(header, trace, index, first_time=None):
        if header.get("title") == "breaks":
            raise TypeError("'int' object is not iterable")
        return describe(header, trace, index, first_time)
    monkeypatch.setattr(dialect, "describe_trace", broken)
    doc = orjson.loads(CLIENT.read_bytes())
    doc["title"] = "breaks"
    files = [write_json(tmp_path / "bad.qlog", doc), SERVER, CLIENT]
    summary = ingest.analyze(files, db=tmp_path / "q.duckdb", jobs=jobs)
    assert [f.status for f in summary.files] == ["refused", "ingested", "ingested"]
    assert summary.files[0].error == (f"{files[0]}: internal error, a bug of quicack (please report it with the file): "
                                      "TypeError: 'int' object is not iterable")


# --- 2. a full disk ------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs of its own (root only), removed after the test."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> None:
    (disk / "filler").unlink(missing_ok=True)
    stat = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))


def test_a_disk_too_full_for_a_file_refuses_it_at_once_saying_how_much_is_needed(small_disk, tmp_path):
    db = small_disk / "q.duckdb"
    run("analyze", CLIENT, "--db", db)
    before = _counts(db)
    _fill(small_disk, 4 << 20)
    large = DATA / "qvis/visualizations/public/standalone_data/draft-01/doublevantage_100ms.qlog"  # 3 MB
    result = run("analyze", large, SERVER, "--db", db)
    assert result.exit_code == 1
    needed = (2 * large.stat().st_size + transaction.SPARE_BYTES) / 1e6
    assert [line for line in result.output.splitlines() if line.startswith("error: ")] == [
        f"error: {large}: not enough free disk space for the store: 4.2 MB free in {small_disk}, about "
        f"{needed:.1f} MB needed for this file"]
    assert f"files: 2 (1 ingested, 0 unchanged, 1 refused) into {db}" in result.output  # (the batch went on)
    assert _counts(db)["files"] == before["files"] + 1


def test_a_disk_that_fills_at_commit_refuses_that_file_with_one_line_and_the_batch_goes_on(
        small_disk, tmp_path, monkeypatch):
    # was "Failed to commit: … No space left on device", then "cannot rollback - no transaction is
    # active" as a traceback (the rows stayed intact)
    monkeypatch.setattr(transaction.Ingest, "_disk_full", lambda self, path, is_capture: None)  # (the check passed)
    db = small_disk / "q.duckdb"
    first = ingest.analyze([CLIENT], db=db)
    assert first.count("ingested") == 1
    before = _counts(db)
    files = sorted(p for p in DATA.rglob("*.qlog") if "qvis" in str(p) or "local" in str(p))
    for leave in (300_000, 1_000_000, 2_000_000):
        _fill(small_disk, leave)
        summary = ingest.analyze(files, db=db, reanalyze=True)  # (every file, already stored or not)
        refused = [f for f in summary.files if f.status == "refused"]
        if refused:
            break
    assert refused, "the disk never filled"
    for f in refused:
        assert "\n" not in f.error and f.error.startswith(f"{f.path}: "), f.error
        assert "disk is full (No space left on device)" in f.error, f.error
        assert " needed for this file" in f.error
    assert len(summary.files) == len(files)  # (every file has its result: the batch went on)
    (small_disk / "filler").unlink()
    after = _counts(db)
    assert after["files"] >= before["files"]  # (what was committed is there)
    again = ingest.analyze(files, db=db)  # (room again: the refused files are read now)
    assert again.count("refused") == 0, [f.error for f in again.files if f.status == "refused"]


# --- 5. special files ----------------------------------------------------------------------------

def test_special_files_named_on_the_command_line_are_refused_at_once(tmp_path):
    # /dev/zero, /dev/urandom, a link to them, a FIFO: no output until killed
    fifo = tmp_path / "pipe.qlog"
    os.mkfifo(fifo)
    link = tmp_path / "random.qlog"
    link.symlink_to("/dev/urandom")
    db = tmp_path / "q.duckdb"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quicack", "analyze", "/dev/zero", fifo, link, CLIENT, "--db", db,
                           "-q"], capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: /dev/zero: not a regular file (a character device)",
        f"error: {fifo}: not a regular file (a FIFO)",
        f"error: {link}: not a regular file (a character device)",
    ]
    assert proc.stdout.splitlines()[0] == f"files: 4 (1 ingested, 0 unchanged, 3 refused) into {db}"


def test_what_a_folder_holds_besides_traces_is_counted_in_the_summary(tmp_path):
    # inside a folder they, and dangling links, were skipped with no word (files: 0, exit 0)
    folder = tmp_path / "traces"
    folder.mkdir()
    os.mkfifo(folder / "pipe.qlog")
    (folder / "gone.qlog").symlink_to(tmp_path / "nothing.qlog")
    (folder / "zero.qlog").symlink_to("/dev/zero")
    (folder / "notes.txt").write_text("notes")
    shutil.copy(CLIENT, folder / "c.qlog")
    db = tmp_path / "q.duckdb"
    result = run("analyze", folder, "--db", db)
    assert result.exit_code == 0, result.output
    assert f"files: 1 (1 ingested, 0 unchanged, 0 refused) into {db}" in result.output
    assert ("skipped in the folders: 4 (2 not regular files (FIFOs, devices, sockets), 1 links to nothing, "
            "1 not named as traces or captures)") in result.output


def test_a_dangling_link_named_directly_is_an_error_naming_it(tmp_path):
    link = tmp_path / "gone.qlog"
    link.symlink_to(tmp_path / "nothing")
    result = run("analyze", link, "--db", tmp_path / "q.duckdb")
    assert result.exit_code == 1
    assert f"{link}: no such file or folder (a link to nothing)" in result.output


# --- 10. space left by killed ingests ------------------------------------------------------------

_KILL_MID_INGEST = """
import os, signal, sys
from quicack.store import transaction
def killed(self, write_through):  # kill -9 when every row is written, before the commit
    os.kill(os.getpid(), signal.SIGKILL)
transaction.Ingest._commit = killed
from quicack import Store
with Store(sys.argv[1]) as s:
    s.ingest(sys.argv[2], reanalyze=True)
"""


def test_the_space_killed_ingests_leave_is_given_back_by_vacuum(tmp_path):
    # five kill -9 mid-ingest grew a store from 8.1 to 24.1 MB with the same content, never reclaimed
    # (more rows than a DuckDB row group holds, 122,880: full row groups go to the database file
    # before the commit, and are what a kill leaves there)
    big = tmp_path / "big.sqlog"
    header = orjson.dumps({"qlog_format": "JSON-SEQ", "qlog_version": "0.3", "trace": {"vantage_point": {"type": "client"}}})
    big.write_bytes(RS + header + b"\n" + b"".join(b'\x1e{"time":%d,"name":"app:tick","data":{"n":%d}}\n' % (i, i)
                                                 for i in range(400_000)))
    db = tmp_path / "q.duckdb"
    run("analyze", CLIENT, SERVER, "--db", db)
    content, size = _counts(db), db.stat().st_size
    for _ in range(3):
        killed = subprocess.run([sys.executable, "-c", _KILL_MID_INGEST, str(db), str(big)], timeout=300)
        assert killed.returncode == -signal.SIGKILL
    assert _counts(db) == content  # (killed before its commit: nothing of it, nothing lost)
    grown = db.stat().st_size
    assert grown > size + (2 << 20), (size, grown)  # (the kills left space behind)
    result = run("vacuum", "--db", db)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"vacuum: {db} {grown / 1e6:.1f} MB → ")
    assert db.stat().st_size <= size + (1 << 20), (size, db.stat().st_size)
    assert _counts(db) == content
    again = run("analyze", CLIENT, "--db", db)
    assert "(0 ingested, 1 unchanged, 0 refused)" in again.output


# --- the fuzzing test ----------------------------------------------------------------------------

#: Mutations tried per run (drawn anew each run; QUICACK_FUZZ_SEED replays one).
SAMPLE = 200


def test_a_wrong_type_at_any_field_path_of_a_real_trace_ends_in_a_stored_file_or_one_line(tmp_path):
    seed = int(os.environ.get("QUICACK_FUZZ_SEED", random.randrange(1 << 30)))
    failures = []
    with Store(tmp_path / "fuzz.duckdb") as store:
        for k, (origin, label, data) in enumerate(hostile.sample(SAMPLE, seed)):
            path = tmp_path / f"m{k}{'.sqlog' if origin.suffix == '.sqlog' else '.qlog'}"
            path.write_bytes(data)
            try:
                result = store.ingest(path)
            except Exception as e:  # noqa: BLE001 - what the test looks for
                failures.append(f"{origin.name}: {label}: {type(e).__name__}: {e}")
                continue
            if result.status == "refused" and ("\n" in result.error or not result.error.startswith(str(path))
                                               or "internal error" in result.error):
                failures.append(f"{origin.name}: {label}: {result.error}")
            path.unlink()
    assert failures == [], f"QUICACK_FUZZ_SEED={seed}"
