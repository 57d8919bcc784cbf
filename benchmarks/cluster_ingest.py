"""Benchmark `quicack analyze --cluster`: ingest throughput with 1, 2 and 4 Dask worker processes.

Not a test: it prints figures.  It copies the repository's real qlogs under 300 KB (several
producers and qlog generations) --copies times into a folder, each copy made distinct by a
trailing space (so none is skipped as already ingested).  Then, --runs times and alternating
between the worker counts, it starts a real ``dask scheduler`` and N ``dask worker`` processes
(one thread each) on loopback, waits for them to register, and times
:func:`quicack.cluster.ingest.analyze` of the folder into a fresh store (cluster start-up is not
timed; the combine step on the client is).  A local ``quicack analyze`` (one job per core) is
timed alongside for reference.  Prints files/s and MB/s per run and the medians.

    python benchmarks/cluster_ingest.py [--copies 4] [--runs 3] [--workers 1 2 4] [--workdir DIR]
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py)
from small_files import build  # noqa: E402  (the same folder of small qlogs)

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from quicack.cluster import ingest
from quicack.store import ingest as local
t = time.perf_counter()
if sys.argv[3] == "local":
    summary = local.analyze([sys.argv[1]], db=sys.argv[2])
else:
    summary = ingest.analyze([sys.argv[1]], db=sys.argv[2], cluster=sys.argv[3])
print(json.dumps({"wall_s": time.perf_counter() - t, "ingested": summary.count("ingested")}))
"""


def start_cluster(workdir: Path, n: int) -> tuple[str, list[subprocess.Popen]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    info = workdir / "scheduler.json"
    info.unlink(missing_ok=True)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(info)], **quiet)]
    while not info.exists() or not info.read_text().strip():
        time.sleep(0.1)
    time.sleep(0.2)
    address = json.loads(info.read_text())["address"]
    for i in range(n):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--name",
                                       f"w{i}", "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                                       "--no-dashboard", "--local-directory", str(workdir / f"w{i}")], **quiet))
    from distributed import Client
    with Client(address, timeout=30) as client:
        client.wait_for_workers(n, timeout=60)
    return address, procs


def measure(folder: Path, workdir: Path, workers: int | None) -> float:
    db = workdir / f"cluster-{workers}.duckdb"
    for p in (db, Path(f"{db}.wal")):
        p.unlink(missing_ok=True)
    procs: list[subprocess.Popen] = []
    target = "local"
    if workers:
        target, procs = start_cluster(workdir, workers)
    try:
        run = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(db), target], capture_output=True,
                             text=True, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:  # (a worker can hang closing once its scheduler is gone)
                p.kill()
                p.wait()
    return json.loads(run.stdout.strip().splitlines()[-1])["wall_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quicack-cluster-"))
    folder = workdir / "qlogs"
    shutil.rmtree(folder, ignore_errors=True)
    n, size = build(folder, args.copies)
    print(f"machine: {os.cpu_count()} cores; {machine.speed_line()}")
    print(f"{n} small qlogs, {size / 1e6:.1f} MB in {folder}")
    settings: list[int | None] = [*args.workers, None]
    walls: dict[int | None, list[float]] = {w: [] for w in settings}
    label = {w: f"{w} worker{'s' if w != 1 else ''}" if w else "local analyze" for w in settings}
    for run in range(args.runs):
        for workers in settings:
            wall = measure(folder, workdir, workers)
            walls[workers].append(wall)
            print(f"run {run + 1}  {label[workers]:14s} {wall:6.2f} s  {n / wall:6.1f} files/s  "
                  f"{size / 1e6 / wall:5.2f} MB/s")
    for workers in settings:
        wall = statistics.median(walls[workers])
        print(f"median {label[workers]:14s} {wall:6.2f} s  {n / wall:6.1f} files/s  {size / 1e6 / wall:5.2f} MB/s")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
