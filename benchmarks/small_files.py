"""Benchmark `quicack analyze` on a folder of small qlogs (one file per connection, as QLOGDIR gives).

Not a test: it prints figures.  It copies the repository's real qlogs under 300 KB (several
producers and qlog generations) --copies times into a folder, each copy made distinct by a trailing
space (so none is skipped as already ingested), then ingests the folder into a fresh store in a
child process with --jobs 1 and with one job per core, alternately, --runs times each, and prints
the wall time, the time per file and the ratio of the two (medians), in one run of this script.

    python benchmarks/small_files.py [--copies 4] [--runs 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py)

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from quicack import analyze
t = time.perf_counter()
summary = analyze([sys.argv[1]], db=sys.argv[2], jobs=int(sys.argv[3]))
print(json.dumps({"wall_s": time.perf_counter() - t, "files": len(summary.files),
                  "ingested": summary.count("ingested"), "connections": summary.connections}))
"""


def build(folder: Path, copies: int) -> tuple[int, int]:
    sources = sorted(p for p in (ROOT / "tests/data").rglob("*")
                     if p.suffix in (".qlog", ".sqlog") and p.stat().st_size < 300_000)
    folder.mkdir(parents=True, exist_ok=True)
    size = 0
    for k in range(copies):
        for i, p in enumerate(sources):
            data = p.read_bytes() + b" " * (k + 1)
            (folder / f"{k:02d}-{i:03d}{p.suffix}").write_bytes(data)
            size += len(data)
    return len(sources) * copies, size


def measure(folder: Path, workdir: Path, jobs: int) -> dict:
    db = workdir / f"small-{jobs}.duckdb"
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    run = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(db), str(jobs)], capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quicack-small-"))
    folder = workdir / "qlogs"
    shutil.rmtree(folder, ignore_errors=True)
    n, size = build(folder, args.copies)
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores; {machine.speed_line()}")
    print(f"{n} small qlogs, {size / 1e6:.1f} MB in {folder}")
    walls: dict[int, list[float]] = {1: [], cores: []}
    for run in range(args.runs):
        for jobs in (1, cores):
            r = measure(folder, workdir, jobs)
            walls[jobs].append(r["wall_s"])
            print(f"run {run + 1}  --jobs {jobs}  {r['wall_s']:6.2f} s  {r['wall_s'] / n * 1000:6.1f} ms a file  "
                  f"({r['ingested']} ingested, {r['connections']} connections)")
    one, many = statistics.median(walls[1]), statistics.median(walls[cores])
    print(f"median --jobs 1: {one:.2f} s ({one / n * 1000:.1f} ms a file); --jobs {cores}: {many:.2f} s "
          f"({many / n * 1000:.1f} ms a file); {one / many:.2f}x")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
