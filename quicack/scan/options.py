"""A scan's options, its progress and summary, and the jobs its executors run.

Theory of operation: everything here is plain data and small rules about it (shards, worker
counts, the default output folder), with no import of aioquic or DuckDB.  The command line reads
:data:`USER_AGENT` and builds a :class:`ScanOptions` before it knows whether it will scan (its
``--help`` must stay cheap), and a probing process receives its options and jobs pickled: both
sides import this module and nothing heavier for it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from quicack.core import ackschedule
from quicack.model import QuicackError

#: The scanner's HTTP ``user-agent``.
USER_AGENT = "quicack/0.1 (QUIC ACK measurement research scanner)"
#: What a probe can speak after the handshake: an HTTP/3 GET, or the QUIC interop runner's
#: HTTP/0.9 (``GET /path`` on a bidirectional stream) for servers without HTTP/3.
ALPNS = ("h3", "hq-interop")


@dataclass
class ScanOptions:
    list_path: str
    db: str = "quicack.duckdb"
    run: str | None = None
    out_dir: str | None = None
    repetitions: int = 3
    spacing_s: float = 1.0
    schedule: str = "spaced"  # or 'cold-warm'
    cold_idle_s: float = 30.0
    concurrency: int = 100
    rate: float = 100.0
    per_address: int = 4
    first_response_timeout_s: float = 3.0
    handshake_timeout_s: float = 5.0
    response_timeout_s: float = 5.0
    path: str = "/"
    user_agent: str = USER_AGENT
    split_clienthello: int = 1
    #: 'h3' (HTTP/3 GET) or 'hq-interop' (the interop runner's ``GET /path`` line)
    alpn: str = "h3"
    #: how the client acknowledges application data: aioquic, ratio:N, custura, ack-frequency
    #: (:mod:`quicack.core.ackschedule`)
    ack_policy: str = "aioquic"
    #: each probe a pair: a full handshake keeping the session ticket and NEW_TOKEN, then a
    #: resumed connection offering 0-RTT (quicack.scan.resumption)
    resumption: bool = False
    resolve: dict = field(default_factory=dict)
    hosts_file: str | None = None
    family: str = "any"  # '4', '6', 'any'
    exclude_file: str | None = None
    allow_private: bool = False
    shard: tuple[int, int] | None = None
    #: probing processes, or 'auto' (:func:`auto_workers`)
    workers: int | str = "auto"
    pcap: str | None = None
    pcap_interface: str | None = None
    #: probes per batch qlog file: ingesting a file costs ~0.3 s whatever its size plus ~0.7 ms
    #: a probe, so larger files amortize it; a batch also goes out once its first probe is
    #: ``batch_age_s`` old (a scan killed with SIGKILL probes the unwritten ones again), or
    #: once its qlogs reach ``batch_bytes``: a batch file stays below
    #: ``reader.WHOLE_JSON_BYTES`` (16 MB), so it is parsed whole (~0.1 ms a probe) and not by
    #: the streaming pass (~3 ms a trace), whatever size the probes' qlogs have (real servers'
    #: longer certificate chains and responses make them several times the local servers')
    batch_size: int = 2000
    batch_age_s: float = 10.0
    batch_bytes: int = 14 << 20
    #: ingest each batch's qlog file while probing (probes join connections as the scan goes);
    #: by default the files are ingested once probing ends, so that ingest (classification and
    #: replay included) does not take CPU from the probes and bend their timing
    ingest_during: bool = False
    #: the vantage point probing this shard (``scan --cluster``: a Dask worker), in every probe row
    vantage: str | None = None

    def __post_init__(self) -> None:
        if self.alpn not in ALPNS:
            raise QuicackError(f"alpn must be one of {', '.join(ALPNS)}, not {self.alpn!r}")
        ackschedule.make(self.ack_policy)  # QuicackError for an unknown policy

    def shard_text(self) -> str:
        return f"{self.shard[0]}/{self.shard[1]}" if self.shard else ""

    def record(self) -> dict:
        """The arguments as recorded in ``runs.arguments``."""
        out = asdict(self)
        out["shard"] = self.shard_text()
        out["resolve"] = {k: f"{a}:{p}" for k, (a, p) in self.resolve.items()}
        return out


@dataclass
class Progress:
    total: int = 0
    done: int = 0
    probed: int = 0
    ingested: int = 0
    outcomes: dict = field(default_factory=dict)
    stopping: bool = False
    phase: str = "probing"  # then 'ingesting'
    files_ingested: int = 0
    files_to_ingest: int = 0
    #: CPU seconds the writer thread spent on files, rows and ingest (the rest is probing)
    writer_cpu_s: float = 0.0
    #: with worker processes: CPU seconds they spent probing, and starting up
    worker_cpu_s: float = 0.0
    worker_startup_cpu_s: float = 0.0
    #: probing CPU of each worker process (with workers > 1)
    worker_cpu_s_each: list = field(default_factory=list)
    failures: list = field(default_factory=list)


@dataclass
class ScanSummary:
    run_id: int
    run: str
    resumed: bool
    out_dir: str
    probes: int
    outcomes: dict
    ingest_failures: list
    interrupted: bool
    pcap: str | None


@dataclass(frozen=True)
class Job:
    """One target and the repetitions it still needs."""

    target_index: int
    domain: str
    rank: int | None
    address: str
    port: int
    repetitions: tuple[int, ...]


def parse_shard(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        raise QuicackError(f"--shard expects K/N with 1 ≤ K ≤ N, got {value!r}") from None
    return k, n


def in_shard(index: int, shard: tuple[int, int] | None) -> bool:
    return shard is None or index % shard[1] == shard[0] - 1


def auto_workers() -> int:
    """``--workers auto``: one probing process per core this process may use, less one for the
    parent (dispatch, the writer thread, DuckDB) — so on two cores the probes run in the parent
    itself.  Measured on two shared cores with the servers on the same host (benchmarks/scan.py):
    one process probes faster and at less CPU per probe than two workers, which add a pickle
    and a pipe per probe and compete with the servers and the parent."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def worker_count(workers: int | str) -> int:
    if workers == "auto":
        return auto_workers()
    try:
        count = int(workers)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise QuicackError(f"--workers expects a count ≥ 1 or 'auto', got {workers!r}")
    return count


def default_out_dir(db: str, run: str, shard: str) -> Path:
    db_path = Path(db)
    suffix = f"-shard{shard.replace('/', 'of')}" if shard else ""
    return db_path.parent / f"{db_path.stem}-scans" / f"{run}{suffix}"
