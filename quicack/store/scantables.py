"""The scan's tables in the store: ``runs`` and ``probes`` (see ``schemas/README.md``).

Theory of operation: a run is identified by (name, shard).  Opening a run that exists resumes
it, after checking that the work it describes (list content, repetitions, ClientHello split) is
the same; otherwise the user is told to choose another ``--run``.  The key of ``probes`` is
(run_id, target_index, repetition), so a probe is written at most once, whatever happens.

A probe row names the qlog file and the trace in it that hold the probe's client trace, with
the file's SHA-256.  :func:`link_probes` runs inside :meth:`quicack.store.database.Store.ingest`, in the
ingest transaction, and points ``probes.connection_id`` at the client connection that trace
became — also when a file is ingested again (``--reanalyze``) and its connections get new ids.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb
import pyarrow as pa

from quicack.model import QuicackError

#: ``probes`` columns in DDL order (the table is the contract; see schemas/README.md).
PROBE_COLUMNS = (
    "run_id", "target_index", "repetition", "domain", "rank", "address", "port", "schedule",
    "outcome", "timeout_phase", "error_code", "error_frame_type", "error_reason", "cid_tag",
    "started_epoch_ms", "first_datagram_ms", "first_ack_ms", "server_hello_ms", "handshake_ms",
    "ttfb_ms", "response_ms", "duration_ms", "loop_lag_ms", "http_status", "server_header",
    "alt_svc", "response_bytes", "alpn", "tls_cipher", "cert_subject", "cert_issuer",
    "server_transport_parameters", "clienthello_bytes", "clienthello_packets",
    "split_clienthello", "datagrams_sent", "datagrams_received", "qlog_path", "qlog_trace_index",
    "qlog_sha256", "keylog_path", "connection_id", "worker",
    "ticket_received", "ticket_lifetime_s", "ticket_max_early_data", "token_received", "token_used",
    "zero_rtt", "session_resumed", "resumed_outcome", "resumed_cid_tag", "resumed_handshake_ms",
    "resumed_ttfb_ms", "resumed_http_status", "resumed_response_bytes", "amplification_factor",
    "server_waited_for_validation", "resumed_qlog_path", "resumed_qlog_trace_index", "resumed_qlog_sha256",
    "vantage",
)

#: Arguments whose change would change the set of (target, repetition) pairs of a run.
WORK_KEYS = ("list_sha256", "repetitions", "split_clienthello", "shard")


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def open_run(con: duckdb.DuckDBPyConnection, *, name: str, shard: str, cid_run_tag: int,
             list_path: str | None, list_sha256: str | None, targets: int | None,
             repetitions: int, arguments: dict, host: str, versions: dict, output_dir: str,
             pcap_path: str | None, vantage: str | None = None) -> tuple[int, bool]:
    """(run_id, resumed).  Raises QuicackError if a run of that name describes other work."""
    found = con.execute("SELECT run_id, list_sha256, repetitions, arguments FROM runs "
                        "WHERE name = ? AND shard = ?", [name, shard]).fetchall()
    if found:
        run_id, old_sha, old_reps, old_args = found[0]
        old = json.loads(old_args)
        new = dict(arguments, list_sha256=list_sha256, repetitions=repetitions, shard=shard)
        old = dict(old, list_sha256=old_sha, repetitions=old_reps, shard=shard)
        changed = [k for k in WORK_KEYS if old.get(k) != new.get(k)]
        if changed:
            raise QuicackError(f"run {name!r} exists with other {', '.join(changed)}; resume it with "
                               "the same list and options, or choose another --run")
        con.execute("UPDATE runs SET resumed_at = list_append(resumed_at, ?), finished_at = NULL "
                    "WHERE run_id = ?", [_now(), run_id])
        return run_id, True
    run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchall()[0][0]
    con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, [], NULL, ?, ?, ?, ?, ?, ?, ?)", [
        run_id, name, shard, cid_run_tag, list_path, list_sha256, targets, repetitions,
        json.dumps(arguments, sort_keys=True), host, _now(), versions["quicack"],
        versions["aioquic"], versions.get("tshark"), versions["python"], output_dir, pcap_path, vantage])
    return run_id, False


def finish_run(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    con.execute("UPDATE runs SET finished_at = ? WHERE run_id = ?", [_now(), run_id])


def done_between(con: duckdb.DuckDBPyConnection, run_id: int, first: int, last: int) -> set[tuple[int, int]]:
    """(target_index, repetition) pairs of this run already stored, for targets first…last."""
    rows = con.execute("SELECT target_index, repetition FROM probes WHERE run_id = ? AND "
                       "target_index BETWEEN ? AND ?", [run_id, first, last]).fetchall()
    return set(rows)


def insert_probes(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Insert probe rows (dicts keyed by PROBE_COLUMNS) in one statement (via Arrow, so a
    batch of thousands costs milliseconds); returns how many."""
    if not rows:
        return 0
    columns = {c: [r.get(c) for r in rows] for c in PROBE_COLUMNS}
    columns["server_transport_parameters"] = [
        None if v is None else json.dumps(v) for v in columns["server_transport_parameters"]]
    con.register("probe_batch", pa.Table.from_pydict(columns))
    try:
        con.execute(f"INSERT INTO probes ({', '.join(PROBE_COLUMNS)}) "
                    f"SELECT {', '.join(PROBE_COLUMNS)} FROM probe_batch")
    finally:
        con.unregister("probe_batch")
    return len(rows)


def link_probes(con: duckdb.DuckDBPyConnection, file_id: int, sha256: str) -> None:
    """Point the probes whose client trace lies in this file at its connections."""
    # the probe's trace; a resumed connection's own (scan --resumption) is in a file of its own
    for prefix in ("", "resumed_"):
        con.execute(f"""
            UPDATE probes SET {prefix}connection_id = c.connection_id
            FROM connections c
            WHERE c.file_id = $file_id AND probes.{prefix}qlog_sha256 = $sha
              AND c.trace_index = probes.{prefix}qlog_trace_index AND c.vantage = 'client'""",
                    {"file_id": file_id, "sha": sha256})
    # the first connection's address validation, as the client saw it (schemas/README.md)
    con.execute("""
        UPDATE probes SET amplification_factor = a.amplification_factor,
                          server_waited_for_validation = a.blocked_count > 0
        FROM connections c JOIN address_validation a USING (connection_id)
        WHERE c.file_id = $file_id AND probes.connection_id = c.connection_id""", {"file_id": file_id})


def unlinked_files(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    """qlog files of this run holding probes not yet linked to a connection (a scan killed
    between writing probes and ingesting their file)."""
    rows = con.execute("""
        SELECT DISTINCT p.qlog_path FROM probes p
        WHERE p.run_id = ? AND p.qlog_path IS NOT NULL AND p.connection_id IS NULL
          AND p.qlog_sha256 NOT IN (SELECT content_sha256 FROM files)
        ORDER BY 1""", [run_id]).fetchall()
    return [r[0] for r in rows]


def unlinked_resumed_files(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    """Files of this run's resumed connections' traces (``scan --resumption``) not ingested yet."""
    rows = con.execute("""
        SELECT DISTINCT resumed_qlog_path FROM probes
        WHERE run_id = ? AND resumed_qlog_path IS NOT NULL AND resumed_connection_id IS NULL
          AND resumed_qlog_sha256 NOT IN (SELECT content_sha256 FROM files)
        ORDER BY 1""", [run_id]).fetchall()
    return [r[0] for r in rows]


def pending_batches(con: duckdb.DuckDBPyConnection, paths: list[str]) -> dict[str, tuple[int, str | None]]:
    """Per qlog file: how many probes' traces it holds, and its SHA-256 — None unless every
    probe naming it agrees on one and their trace indexes are exactly 0…n-1 (a file the writer
    wrote in one piece)."""
    rows = con.execute("""
        SELECT qlog_path, count(*), any_value(qlog_sha256),
               count(DISTINCT qlog_sha256) = 1 AND min(qlog_trace_index) = 0
               AND max(qlog_trace_index) = count(*) - 1 AND count(DISTINCT qlog_trace_index) = count(*)
        FROM probes WHERE qlog_path IN (SELECT unnest($paths)) GROUP BY 1""", {"paths": paths}).fetchall()
    return {path: (n, sha if whole else None) for path, n, sha, whole in rows}


def repoint_probes(con: duckdb.DuckDBPyConnection, moves: list[tuple[str, int]], new_path: str,
                   new_sha256: str) -> None:
    """Point the probes whose traces were in the files ``moves`` (path, index of its first trace
    in the new file) at ``new_path``, in one transaction."""
    con.execute("BEGIN")
    try:
        for old_path, offset in moves:
            con.execute("""UPDATE probes SET qlog_path = $new, qlog_sha256 = $sha,
                                  qlog_trace_index = qlog_trace_index + $offset
                           WHERE qlog_path = $old""",
                        {"new": new_path, "sha": new_sha256, "offset": offset, "old": old_path})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def outcome_counts(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, int]:
    return dict(con.execute("SELECT outcome, count(*) FROM probes WHERE run_id = ? "
                            "GROUP BY 1 ORDER BY 2 DESC, 1", [run_id]).fetchall())
