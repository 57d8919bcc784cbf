"""`quicack scan` as a Python function: targets → probes → qlog files → the store.

Theory of operation, one process (``workers = 1``; what ``'auto'`` gives on two cores) or several:

    list (streamed) ─► dispatcher ─► executor(s) ─► results ─► writer thread ─► DuckDB
      resolve, exclude,   (asyncio)   probes with          batch qlog file,     probes rows,
      refuse private,                 rate, concurrency,   key log lines        Store.ingest
      skip done pairs                 per-address limits

- The **dispatcher** (asyncio, main thread; :mod:`quicack.scan.dispatcher`) streams the list,
  keeps the targets of this shard, resolves names (``--resolve``, hosts file, system resolver),
  applies the address policy and skips (target, repetition) pairs the run already holds, a
  thousand targets at a time (resume without holding the run in memory).  A target refused by
  the policy becomes rows with that outcome, so every (target, repetition) of a run ends with
  exactly one row.  At most ``window`` targets are in flight, and dispatching pauses while the
  writer is behind.
- An **executor** (:mod:`quicack.scan.executor`) runs a target's repetitions (spaced, or cold
  then warm) under a token bucket (global rate), a concurrency limit and a per-address limit.
  With ``workers > 1`` each executor is a child process (:mod:`quicack.scan.worker`, spawned by
  :mod:`quicack.scan.pool`; it dies with its parent: ``PR_SET_PDEATHSIG`` and the pipe closing),
  targets are assigned to workers by address so the per-address limit holds, and the rate is
  shared out.
- The **writer** (one thread, the only one touching the database; :mod:`quicack.scan.writer`)
  collects results into batches: it writes the batch's client traces as one qlog file
  (aioquic's JSON layout, one trace per probe), appends the TLS secrets to the run's key log and
  inserts the probe rows.
- When probing ends (or is interrupted) every qlog file of the run not yet ingested goes
  through :meth:`quicack.store.database.Store.ingest` — the path of ``quicack analyze``,
  classification and replay included — which links each probe to its connection; consecutive
  small files are merged first, up to a batch's size
  (:func:`quicack.scan.batches.merge_batches`).  (Ingest costs far more CPU than a probe; doing
  it during the scan would take cores from the probes and bend their timing.  ``ingest_during``
  does it batch by batch instead.)  A scan killed at any moment leaves either no row for a probe
  (it is probed again) or a row whose file is ingested when the run resumes; the key (run,
  target, repetition) makes duplicates impossible.

The probing phase itself is a :class:`quicack.scan.session.Session`; this module opens the run,
starts the capture (``--pcap``) and ingests what the session stored.  It is on the DuckDB side:
probing processes import :mod:`quicack.scan.worker`, never this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import platform
import socket
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from quicack.core import cidtag
from quicack.core import gctuning as collector
from quicack.pcap import dumpcap
from quicack.scan import targets
from quicack.scan.batches import merge_batches
from quicack.scan.connection import quiet_aioquic
from quicack.scan.options import Progress, ScanOptions, ScanSummary, default_out_dir, in_shard, worker_count
from quicack.scan.session import Session
from quicack.store import scantables
from quicack.store.database import Store


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def versions() -> dict:
    import aioquic
    try:
        mine = metadata.version("quicack")
    except metadata.PackageNotFoundError:
        mine = "unknown"
    return {"quicack": mine, "aioquic": aioquic.__version__, "tshark": dumpcap.tshark_version(),
            "python": platform.python_version()}


def scan(opts: ScanOptions, on_progress: Callable[[Progress], None] | None = None,
         on_start: Callable[[dict], None] | None = None) -> ScanSummary:
    """Run (or resume) a scan; return what happened.  Raises QuicackError for bad input."""
    quiet_aioquic()
    list_path = Path(opts.list_path)
    total_targets = sum(1 for t in targets.read_list(list_path) if in_shard(t.index, opts.shard))
    list_sha = file_sha256(list_path)
    run_name = opts.run or list_path.stem
    shard = opts.shard_text()
    worker_count(opts.workers)  # errors before anything is written
    if opts.hosts_file:
        targets.read_hosts(opts.hosts_file)
    if opts.exclude_file:
        targets.Exclusions.read(opts.exclude_file)
    out_dir = (Path(opts.out_dir) if opts.out_dir else default_out_dir(opts.db, run_name, shard)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)  # absolute: probes name their files from anywhere
    pcap_path = Path(opts.pcap) if opts.pcap else None
    run_tag = cidtag.run_tag(run_name, shard)
    with Store(opts.db) as store:
        run_id, resumed = scantables.open_run(
            store.con, name=run_name, shard=shard, cid_run_tag=run_tag,
            list_path=str(list_path), list_sha256=list_sha, targets=total_targets,
            repetitions=opts.repetitions, arguments=opts.record(), host=socket.gethostname(),
            versions=versions(), output_dir=str(out_dir),
            pcap_path=str(pcap_path) if pcap_path else None, vantage=opts.vantage)
        stored = store.con.execute("SELECT count(*) FROM probes WHERE run_id = ?",
                                   [run_id]).fetchall()[0][0]
        progress = Progress(total=total_targets * opts.repetitions, done=stored)
        if on_start:
            on_start({"run": run_name, "run_id": run_id, "resumed": resumed, "stored": stored,
                      "total": progress.total, "out_dir": str(out_dir)})
        cap = _start_capture(opts, pcap_path)
        try:
            with collector.tuned(collect_first=True):
                session = Session(opts, store, run_id, run_tag, out_dir, progress, on_progress)
                interrupted = asyncio.run(session.run())
        finally:
            if cap is not None:
                cap.stop()
        failures = list(progress.failures) + _ingest_pending(store, run_id, opts, progress, on_progress)
        if not interrupted:
            scantables.finish_run(store.con, run_id)
        outcomes = scantables.outcome_counts(store.con, run_id)
    return ScanSummary(run_id, run_name, resumed, str(out_dir), sum(outcomes.values()), outcomes,
                       failures, interrupted, str(pcap_path) if pcap_path else None)


def _start_capture(opts: ScanOptions, pcap_path: Path | None):
    """``--pcap``: dumpcap on the scan's ports (443 and those of ``--resolve``), on ``lo`` when
    every ``--resolve`` address is a special one (:func:`quicack.scan.targets.is_special`), else
    on any interface (unless ``--pcap-interface``); None without ``--pcap``."""
    if pcap_path is None:
        return None
    ports = {targets.DEFAULT_PORT} | {p for _, p in opts.resolve.values()}
    interface = opts.pcap_interface or ("lo" if opts.resolve and all(
        targets.is_special(a) for a, _ in opts.resolve.values()) else "any")
    return dumpcap.start(pcap_path, ports, interface)


def _ingest_pending(store: Store, run_id: int, opts: ScanOptions, progress: Progress,
                    on_progress: Callable[[Progress], None] | None) -> list[str]:
    """Ingest every qlog file of the run whose probes are not linked yet (this scan's, or those
    of a scan killed before it got there), small ones merged first; return the errors of
    refused files."""
    pending = (merge_batches(store, scantables.unlinked_files(store.con, run_id), opts)
               + scantables.unlinked_resumed_files(store.con, run_id))
    progress.phase, progress.files_to_ingest, progress.files_ingested = "ingesting", len(pending), 0
    failures = []
    for path in pending:
        if on_progress:
            on_progress(progress)
        result = store.ingest(path)
        if result.status == "refused":
            failures.append(result.error or path)
        progress.files_ingested += 1
    if on_progress:
        on_progress(progress)
    return failures
