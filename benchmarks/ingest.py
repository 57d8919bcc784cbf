"""Benchmark `quicack analyze`: throughput (MB/s, events/s) and peak memory.

Not a test: it prints figures.  Each big file repeats one long real connection's events with
shifted times and packet numbers (its ACK frames' ranges shifted alike, so each copy yields RTT
samples) until it holds at least the asked size:

- JSON-SEQ and JSON, from the aioquic server trace of
  tests/data/qvis/.../doublevantage_100ms.qlog (a 100 ms-RTT transfer; draft-01, written as 0.3
  event objects; ~140 bytes an event);
- JSON-SEQ (quic-go), from a connection recorded here: the quic-go peer (v0.65, built from the Go
  proxy) serving 40 MB to the scanner over loopback, its own server-side qlog in its own format
  (~250 bytes an event, the mix of KNOWLEDGE.md's reference figures: 300 MB, 1.26 M events).

Each is ingested into a fresh store in a child process; wall time (whatever analysis
`quicack analyze` runs included) and that process's peak RSS are reported.

    python benchmarks/ingest.py [--seq-mb 300] [--json-mb 300] [--quic-go-mb 300] [--runs 2] [--workdir DIR]

(a size of 0 skips that file).  Each file is ingested --runs times (a fresh store each time);
every run is printed, then the best,
with how long its classification and replay took, how fast the file is merely read (cut into
slices and staged by the native core, nothing normalized or stored), and the floor of this design: the
run's rows stored alone (from Arrow into a fresh store, committed) plus classification and
replay — what the ingest would cost if parsing and normalizing were free.
The machine is shared: compare the best runs, and rerun when another job was busy (CPU seconds,
user + system of the ingesting process, stay comparable when the wall time does not).

Targets (issue 2): >= 100 MB/s for JSON-SEQ, peak memory below the file size.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py)

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests/data/qvis/visualizations/public/standalone_data/draft-01/doublevantage_100ms.qlog"

CHILD = r"""
import json, resource, sys, time
import machine
from quicack import analyze
from quicack.store import analysis
spent = {"analysis_s": 0.0}
replay = analysis.classify_and_replay
def timed(*args):  # (the classification and RFC 9002 replay that follow normalization)
    t = time.perf_counter()
    try:
        return replay(*args)
    finally:
        spent["analysis_s"] += time.perf_counter() - t
analysis.classify_and_replay = timed
t = time.perf_counter()
summary = analyze([sys.argv[1]], db=sys.argv[2])
wall = time.perf_counter() - t
f = summary.files[0]
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "status": f.status, "events": f.events, "packets": f.packets,
                  "error": f.error, "peak_rss_mb": machine.peak_rss_mb(), "cpu_s": usage.ru_utime + usage.ru_stime,
                  **spent}))
"""

#: Reading alone: the file cut into slices and staged by the native core (parsed, each event's
#: columns taken out), nothing normalized or stored, printed beside the full ingest.
READ_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from quicack.qlog import reader
t = time.perf_counter()
events = 0
with reader.open_source(Path(sys.argv[1])) as source:
    for part, staged in reader.staged_slices(source):
        events += staged.num_rows
wall = time.perf_counter() - t
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "events": events, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


#: Storing alone: the rows an ingest wrote (its store, argv[1]) inserted again into a fresh store
#: under the ingest's settings, from Arrow tables already in memory, and committed — what any
#: normalizer, however fast, still pays (with classification and replay, the floor of the design).
STORE_CHILD = r"""
import json, sys, time
import duckdb
from quicack import Store
from quicack.store import settings
from quicack.store.schema import table_names
from quicack.store.transaction import INGEST_SETTINGS
src = duckdb.connect(sys.argv[1], read_only=True)
# every table the ingest fills (not its bookkeeping, nor rtt_samples: written by the replay)
tables = {t: src.sql(f"SELECT * FROM {t}").to_arrow_table(1 << 14)
          for t in table_names() if t not in ("store_meta", "files", "rtt_samples")}
tables = {t: rows for t, rows in tables.items() if rows.num_rows}
src.close()
with Store(sys.argv[2]) as store, settings.changed(store.con, **INGEST_SETTINGS):
    t = time.perf_counter()
    store.con.execute("BEGIN")
    for name, rows in tables.items():
        store.con.execute(f"INSERT INTO {name} SELECT * FROM rows")
    store.con.execute("COMMIT")
    wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "rows": sum(r.num_rows for r in tables.values())}))
"""


class Connection(NamedTuple):
    """One long real connection to repeat: its JSON-SEQ header record, its events (0.3-style
    objects: time, name, data), a period (ms) longer than it lasts and a packet number step
    larger than its largest packet number."""

    header: dict
    events: list[dict]
    period_ms: float
    pn_step: int


def _connection(header: dict, events: list[dict]) -> Connection:
    pns = [int(e["data"]["header"]["packet_number"]) for e in events
           if isinstance(e.get("data"), dict) and "packet_number" in (e["data"].get("header") or {})]
    return Connection(header, events, events[-1]["time"] + 1.0, max(pns) + 1)


@functools.cache
def aioquic_connection() -> Connection:
    """The aioquic server trace of :data:`SOURCE` as 0.3-style event objects (read once for both
    files built from it)."""
    doc = orjson.loads(SOURCE.read_bytes())
    trace = next(t for t in doc["traces"] if t["vantage_point"]["type"] == "server")
    events = [{"time": float(t), "name": f"{category}:{name}", "data": data}
              for t, category, name, data in trace["events"]]
    header = {"qlog_format": "JSON-SEQ", "qlog_version": "0.3",
              "trace": {"vantage_point": {"name": "aioquic", "type": "server"},
                        "common_fields": {"ODCID": "b0bf29d0abe27b8b", "reference_time": 1566844755688}}}
    return _connection(header, events)


def quic_go_connection(workdir: Path, transfer_bytes: int = 40_000_000) -> Connection:
    """A connection recorded here: the quic-go peer (built from the Go proxy on first use) serves
    ``transfer_bytes`` to the scanner over loopback; its server-side qlog, kept in ``workdir``
    (``quic-go.sqlog``) and reused by later runs."""
    kept = workdir / "quic-go.sqlog"
    if not kept.exists():
        from quicack.lab import peers
        from quicack.scan import scanner as scan
        from quicack.scan.options import ScanOptions

        base = workdir / "quic-go-transfer"
        with peers.start("quic-go", base / "peer") as running:
            (running.workdir / "htdocs" / "big.bin").write_bytes(os.urandom(transfer_bytes))
            (base / "list.txt").write_text("quic-go.localhost\n")
            summary = scan.scan(ScanOptions(
                list_path=str(base / "list.txt"), db=str(base / "scan.duckdb"), run="transfer",
                out_dir=str(base / "scan"), repetitions=1, path="/big.bin", response_timeout_s=300.0,
                resolve={"quic-go.localhost": (running.host, running.port)}, allow_private=True))
        if summary.outcomes != {"ok": 1}:
            raise SystemExit(f"the quic-go transfer failed: {summary.outcomes}")
        [qlog] = running.qlog_files()  # (after the peer stopped: flushed)
        qlog.replace(kept)
        shutil.rmtree(base)
    header, *events = [orjson.loads(r) for r in kept.read_bytes().split(b"\x1e") if r.strip()]
    return _connection(header, events)


def _shifted_frame(frame: dict, shift: int) -> dict:
    """An ACK frame acknowledging the copies' packet numbers (so that every repetition yields RTT
    samples, as a real long transfer does, and the replay has them to work on); numbers keep
    their type (strings in draft-01, numbers in quic-go's qlog)."""
    if frame.get("frame_type") != "ack" or not frame.get("acked_ranges"):
        return frame
    return dict(frame, acked_ranges=[[type(x)(int(x) + shift) for x in r] for r in frame["acked_ranges"]])


def _repeated(c: Connection, k: int):
    for e in c.events:
        data = e["data"]
        header = data.get("header") if isinstance(data, dict) else None
        if header and "packet_number" in header:
            data = dict(data, header=dict(header, packet_number=int(header["packet_number"]) + k * c.pn_step))
            if k and data.get("frames"):
                data["frames"] = [_shifted_frame(f, k * c.pn_step) for f in data["frames"]]
        yield dict(e, time=e["time"] + k * c.period_ms, data=data)


def build_seq(path: Path, target_mb: float, c: Connection) -> int:
    n = 0
    with open(path, "wb") as out:
        out.write(b"\x1e" + orjson.dumps(c.header) + b"\n")
        k = 0
        while out.tell() < target_mb * 1e6:
            out.write(b"".join(b"\x1e" + orjson.dumps(e) + b"\n" for e in _repeated(c, k)))
            n += len(c.events)
            k += 1
    return n


def build_json(path: Path, target_mb: float, c: Connection) -> int:
    """A JSON document of one trace (qlog 0.3), with the vantage point and fields of ``c``'s header."""
    n = 0
    head = orjson.dumps({"qlog_format": "JSON", "qlog_version": "0.3", "traces": [dict(c.header["trace"], events=[])]})
    with open(path, "wb") as out:
        out.write(head[:-len(b"]}]}")])
        k = 0
        first = True
        while out.tell() < target_mb * 1e6:
            chunk = b",".join(orjson.dumps(e) for e in _repeated(c, k))
            out.write(chunk if first else b"," + chunk)
            first = False
            n += len(c.events)
            k += 1
        out.write(b"]}]}")
    return n


def measure(path: Path, workdir: Path) -> dict:
    """One ingest into a fresh store, kept as ``<stem>.duckdb`` until the next."""
    db = workdir / (path.stem + ".duckdb")
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    return machine.run_child(CHILD, path, db)


def storing_alone(path: Path, workdir: Path) -> dict:
    """:data:`STORE_CHILD` on the store of the last :func:`measure` of ``path``; both removed."""
    db, again = workdir / (path.stem + ".duckdb"), workdir / (path.stem + "-again.duckdb")
    try:
        again.unlink(missing_ok=True)
        return machine.run_child(STORE_CHILD, db, again)
    finally:
        for p in (db, again, Path(str(db) + ".wal"), Path(str(again) + ".wal")):
            p.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-mb", type=float, default=300)
    parser.add_argument("--json-mb", type=float, default=300)
    parser.add_argument("--quic-go-mb", type=float, default=300)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quicack-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores; files in {workdir}")
    print(machine.speed_line())
    cases = [("JSON-SEQ (aioquic)", workdir / "big.sqlog", build_seq, aioquic_connection, args.seq_mb),
             ("JSON (aioquic)", workdir / "big.qlog", build_json, aioquic_connection, args.json_mb),
             ("JSON-SEQ (quic-go)", workdir / "quic-go-big.sqlog", build_seq,
              lambda: quic_go_connection(workdir), args.quic_go_mb)]
    for label, path, build, connection, mb in cases:
        if mb <= 0:
            continue
        built_events = build(path, mb, connection())
        size_mb = path.stat().st_size / 1e6
        runs = []
        for i in range(args.runs):
            r = measure(path, workdir)
            if r["status"] != "ingested" or r["events"] != built_events:
                print(f"{label}: FAILED {r}")
                break
            runs.append(r)
            _print(f"{label} run {i + 1}", size_mb, r)
        if len(runs) == args.runs:  # (then the store left by the last run holds the file's rows)
            best = min(runs, key=lambda r: r["wall_s"])
            _print(f"{label} best", size_mb, best)
            read = min((machine.run_child(READ_CHILD, path) for _ in range(args.runs)), key=lambda r: r["wall_s"])
            stored = storing_alone(path, workdir)  # (the rows of the last run: every run's are the same)
            print(f"{'':24} of which classification and replay {best['analysis_s']:5.2f} s; "
                  f"reading alone (staging, nothing stored) {read['wall_s']:5.2f} s (CPU {read['cpu_s']:4.1f} s) "
                  f"= {size_mb / read['wall_s']:5.1f} MB/s")
            floor = stored["wall_s"] + best["analysis_s"]
            print(f"{'':24} storing its {stored['rows']:,} rows alone (from Arrow, into a fresh store, committed) "
                  f"{stored['wall_s']:5.2f} s; with classification and replay {floor:5.2f} s "
                  f"= {size_mb / floor:5.1f} MB/s at most for this design, however fast (and overlapped) the parsing")
        else:  # (a failed run's store)
            for p in (workdir / (path.stem + ".duckdb"), workdir / (path.stem + ".duckdb.wal")):
                p.unlink(missing_ok=True)
        path.unlink()


def _print(label: str, size_mb: float, r: dict) -> None:
    print(f"{label:24} {size_mb:7.1f} MB {r['events']:>10,} events {r['packets']:>9,} packets  "
          f"{r['wall_s']:6.2f} s (CPU {r['cpu_s']:5.1f} s)  {size_mb / r['wall_s']:6.1f} MB/s  {r['events'] / r['wall_s']:>9,.0f} events/s  "
          f"peak RSS {r['peak_rss_mb']:6.1f} MB ({r['peak_rss_mb'] / size_mb:.2f} x file size)")


if __name__ == "__main__":
    main()
