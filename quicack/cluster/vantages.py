"""`quicack scan --cluster`: the list sharded over Dask workers, each worker one vantage point.

Theory of operation: each vantage point is a name and a worker (``--vantage NAME=WORKER``, the
worker by its ``--name`` or address; without ``--vantage`` every registered worker is one, named
by its worker name).  Vantage K of N (by name order) scans shard K/N of the list with
:func:`quicack.scan.scanner.scan` — one probing process, the politeness limits (rate,
concurrency, per-address) its own — into a store of its own, ``SHARDS/<run>/<name>.duckdb``,
every probe tagged with the vantage's name (``probes.vantage``).  The task is pinned to its
worker.  While the tasks run the client reads each vantage's progress file and checks that its
worker is still registered: a vantage whose worker went away is reported, and its probes stay in
its store.  When a vantage's scan has finished, its store is appended to ``--db``
(:func:`quicack.store.merge.append`; a run (name, shard) is appended once) and deleted; its qlog
files and key log stay where the probes name them.

Resuming is re-running the command: a vantage whose shard ``--db`` holds is done; the others
resume their scan in their own store as a local scan resumes (the key (run, target, repetition)
makes a probe stored at most once), whether the worker or the client had been killed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from quicack.cluster import connection
from quicack.model import QuicackError
from quicack.scan.options import Progress, ScanOptions

#: Seconds between two writes of a vantage's progress file, and between two looks at them.
PROGRESS_EVERY_S = 0.5


@dataclasses.dataclass
class VantageResult:
    name: str
    worker: str
    shard: str
    #: probes of this vantage's shard in ``--db`` after this command (appended now or before)
    probes: int = 0
    outcomes: dict = dataclasses.field(default_factory=dict)
    #: why the vantage did not finish (its worker went away, an error), else None
    error: str | None = None
    ingest_failures: list = dataclasses.field(default_factory=list)


def parse_vantages(values: list[str]) -> dict[str, str]:
    """``NAME=WORKER`` values → {name: worker}."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, worker = value.partition("=")
        if not sep or not name or not worker:
            raise QuicackError(f"--vantage expects NAME=WORKER, got {value!r}")
        if name in out:
            raise QuicackError(f"vantage {name!r} given twice")
        out[name] = worker
    return out


def scan_vantage(opts: ScanOptions, progress_path: str) -> tuple:
    """On a worker: scan this vantage's shard; (outcomes, ingest failures, interrupted)."""
    from quicack.scan import scanner
    last = [0.0]

    def report(p: Progress) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or p.phase == "ingesting":
            last[0] = now
            _write_progress(Path(progress_path), p)

    summary = scanner.scan(opts, on_progress=report)
    return summary.outcomes, summary.ingest_failures, summary.interrupted


def _write_progress(path: Path, p: Progress) -> None:
    fields = ("total", "done", "probed", "ingested", "phase", "files_ingested", "files_to_ingest")
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps({k: getattr(p, k) for k in fields}))
    os.replace(partial, path)


def _read_progress(paths: list[Path]) -> Progress:
    """The vantages' progress files added up."""
    total = Progress()
    phases = []
    for path in paths:
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key in ("total", "done", "probed", "ingested", "files_ingested", "files_to_ingest"):
            setattr(total, key, getattr(total, key) + values[key])
        phases.append(values["phase"])
    total.phase = "ingesting" if phases and all(p == "ingesting" for p in phases) else "probing"
    return total


def scan(opts: ScanOptions, cluster: str, vantages: dict[str, str], shards: str | Path | None = None,
         timeout_s: float = connection.WORKER_TIMEOUT_S,
         on_progress: Callable[[Progress], None] | None = None,
         on_start: Callable[[list[VantageResult]], None] | None = None) -> list[VantageResult]:
    """Scan ``opts.list_path`` from the vantage points of ``cluster`` into ``opts.db``."""
    if opts.shard is not None:
        raise QuicackError("--shard and --cluster exclude each other: the cluster shards the list over its vantages")
    connection.distributed()  # (before anything is written)
    run = opts.run or Path(opts.list_path).stem
    folder = (Path(shards) if shards else Path(f"{opts.db}.shards")).resolve() / run
    with connection.client(cluster, workers=max(1, len(vantages)), timeout_s=timeout_s) as client:
        workers = connection.worker_names(client)
        chosen = _chosen(vantages, workers)
        results = [VantageResult(name, address, f"{k}/{len(chosen)}") for k, (name, address) in
                   enumerate(sorted(chosen.items()), start=1)]
        if on_start:
            on_start(results)
        todo = [r for r in results if not _appended(opts.db, run, r.shard)]
        folder.mkdir(parents=True, exist_ok=True)
        futures = {}
        for r in todo:
            futures[client.submit(scan_vantage, _shard_options(opts, folder, run, r, len(results)),
                                  str(folder / f"{_stem(r.name)}.progress.json"), workers=[r.worker],
                                  allow_other_workers=False, pure=False,
                                  key=f"quicack-scan-{run}-{r.name}-{time.time_ns()}")] = r
        _wait(client, futures, [folder / f"{_stem(r.name)}.progress.json" for r in todo], on_progress)
    _append(opts.db, run, folder, results)
    return results


def _shard_options(opts: ScanOptions, folder: Path, run: str, r: VantageResult, n: int) -> ScanOptions:
    """A vantage's scan: its shard, its store, one probing process, every path absolute (the
    worker's working folder is its own)."""
    absolute = {k: str(Path(getattr(opts, k)).resolve()) for k in ("list_path", "hosts_file", "exclude_file")
                if getattr(opts, k)}
    if opts.out_dir:
        absolute["out_dir"] = str((Path(opts.out_dir) / _stem(r.name)).resolve())
    if opts.pcap:
        pcap = Path(opts.pcap).resolve()
        absolute["pcap"] = str(pcap.with_name(f"{pcap.stem}-{_stem(r.name)}{pcap.suffix}"))
    return dataclasses.replace(opts, db=str(folder / f"{_stem(r.name)}.duckdb"), run=run,
                               shard=(int(r.shard.split("/")[0]), n), vantage=r.name, workers=1, **absolute)


def _stem(name: str) -> str:
    """A vantage's name as a file name (a worker without --name is named by its address)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _chosen(vantages: dict[str, str], workers: dict[str, str]) -> dict[str, str]:
    """Vantage name → worker address."""
    if not vantages:
        return dict(workers)
    addresses = set(workers.values())
    chosen = {}
    for name, worker in vantages.items():
        address = workers.get(worker) or (worker if worker in addresses else None)
        if address is None:
            raise QuicackError(f"vantage {name!r}: no worker named or at {worker!r} is registered (workers: "
                               f"{', '.join(sorted(workers)) or 'none'})")
        chosen[name] = address
    if len(set(chosen.values())) < len(chosen):
        raise QuicackError("two vantages name the same worker: each vantage needs a worker of its own")
    return chosen


def _wait(client, futures: dict, progress_files: list[Path],
          on_progress: Callable[[Progress], None] | None) -> None:
    """Until every task ended or lost its worker; errors recorded in the results."""
    pending = dict(futures)
    while pending:
        deadline = time.monotonic() + PROGRESS_EVERY_S
        while time.monotonic() < deadline and not any(f.done() for f in pending):
            time.sleep(0.05)
        if on_progress:
            on_progress(_read_progress(progress_files))
        alive = set(client.scheduler_info(n_workers=-1).get("workers", {}))
        for future, r in list(pending.items()):
            if future.done():
                del pending[future]
                try:
                    outcomes, failures, interrupted = future.result()
                except Exception as e:
                    r.error = f"{type(e).__name__}: {e}" if not isinstance(e, QuicackError) else str(e)
                    continue
                r.ingest_failures = list(failures)
                if interrupted:
                    r.error = "interrupted"
            elif r.worker not in alive:
                del pending[future]
                future.cancel()
                r.error = "its worker went away (killed?)"


def _appended(db: str, run: str, shard: str) -> bool:
    """Whether ``db`` holds the run's shard already."""
    if not Path(db).exists():
        return False
    from quicack.store.database import Store
    with Store(db) as store:
        return bool(store.con.execute("SELECT 1 FROM runs WHERE name = ? AND shard = ?", [run, shard]).fetchall())


def _append(db: str, run: str, folder: Path, results: list[VantageResult]) -> None:
    """Append every finished vantage's store to ``db``; count each vantage's probes there."""
    from quicack.store.database import Store
    from quicack.store.merge import append
    with Store(db) as store:
        for r in results:
            held = store.con.execute("SELECT 1 FROM runs WHERE name = ? AND shard = ?", [run, r.shard]).fetchall()
            shard_db = folder / f"{_stem(r.name)}.duckdb"
            if not held and r.error is None and shard_db.exists():
                append(store, shard_db)
                for path in (shard_db, Path(f"{shard_db}.wal"), folder / f"{_stem(r.name)}.progress.json"):
                    path.unlink(missing_ok=True)
            r.outcomes = dict(store.con.execute(
                "SELECT p.outcome, count(*) FROM probes p JOIN runs r USING (run_id) WHERE r.name = ? "
                "AND r.shard = ? GROUP BY 1 ORDER BY 2 DESC, 1", [run, r.shard]).fetchall())
            r.probes = sum(r.outcomes.values())
