"""The testbed relay's records and their tables in the store: ``relay_runs``, ``relay_datagrams``.

Theory of operation: a relay (:mod:`quicack.lab.relay`) keeps its records in memory while it
runs and returns them as :class:`RelayRecords` when it stops — the ``relay_datagrams`` columns
of the run, and the facts of its ``relay_runs`` row.  :meth:`RelayRecords.write` stores them:
one row in ``relay_runs`` (the configuration as JSON, the run's times, CPU and the kernel's drop
count) and one row per datagram in ``relay_datagrams``, inserted through Arrow in one
transaction, so a store holds a whole run or none of it.  ``relay_run_id`` numbers the runs of a
store from 1.  The columns are the contract (see ``schemas/README.md``).  Nothing here loads
DuckDB or Arrow until records are written: a relay's process does not need them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from quicack.core.impairment import DIRECTIONS

if TYPE_CHECKING:
    import duckdb

    from quicack.store.database import Store

#: ``relay_runs`` columns in DDL order
RUN_COLUMNS = ("relay_run_id", "listen", "upstream", "seed", "config", "started_epoch_ms",
               "stopped_epoch_ms", "datagrams", "kernel_drops", "cpu_ms", "quicack_version")
#: ``relay_datagrams`` columns after relay_run_id, in DDL order
DATAGRAM_COLUMNS = ("arrival_index", "flow", "direction", "datagram_index", "size_bytes", "quic_types",
                    "time_in_epoch_ms", "planned_out_epoch_ms", "time_out_epoch_ms", "dropped_reason")


@dataclass
class RelayRecords:
    """Every datagram a relay run read, as columns (:data:`DATAGRAM_COLUMNS`), and the run's facts."""

    #: every setting (``relay_runs.config``), the listening address as bound
    config: dict
    started_epoch_ms: float
    stopped_epoch_ms: float
    #: CPU time of the relay's thread
    cpu_ms: float
    #: datagrams the kernel dropped on the relay's sockets (SO_RXQ_OVFL)
    kernel_drops: int
    columns: dict[str, list]
    #: flow → the Destination Connection ID (hex) of its first client datagram, the connection's
    #: original DCID, read without keys: what names a server's qlog when the client wrote none
    #: (not stored)
    initial_dcids: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns["arrival_index"])

    def rows(self) -> list[dict]:
        names = DATAGRAM_COLUMNS
        return [dict(zip(names, values)) for values in zip(*(self.columns[n] for n in names))]

    def summary(self) -> dict[str, dict]:
        """Per direction: datagrams in, forwarded, and dropped per reason."""
        out = {d: {"in": 0, "forwarded": 0, "dropped": {}} for d in DIRECTIONS}
        for direction, reason in zip(self.columns["direction"], self.columns["dropped_reason"]):
            counts = out[direction]
            counts["in"] += 1
            if reason is None:
                counts["forwarded"] += 1
            else:
                counts["dropped"][reason] = counts["dropped"].get(reason, 0) + 1
        return out

    def summary_lines(self) -> list[str]:
        """One line per direction, e.g. ``to_client: 297 in, 293 forwarded, dropped: drop_list 4``."""
        lines = []
        for direction, counts in self.summary().items():
            dropped = ", ".join(f"{r} {n}" for r, n in sorted(counts["dropped"].items())) or "none"
            lines.append(f"{direction}: {counts['in']} in, {counts['forwarded']} forwarded, "
                         f"dropped: {dropped}")
        return lines

    def write(self, db: str | Path | Store) -> int:
        """Store the run and its datagrams (a store, or the path of one, created if missing) in
        one transaction; returns its ``relay_run_id``."""
        from quicack.store.database import Store

        if isinstance(db, Store):
            return insert(db.con, self)
        with Store(db) as store:
            return insert(store.con, self)


def _version() -> str:
    try:
        return metadata.version("quicack")
    except metadata.PackageNotFoundError:
        return "unknown"


def insert(con: duckdb.DuckDBPyConnection, records: RelayRecords) -> int:
    """Store one relay run and its datagrams in one transaction; returns its ``relay_run_id``."""
    import pyarrow as pa

    types = {"relay_run_id": pa.int64(), "arrival_index": pa.int64(), "flow": pa.string(),
             "direction": pa.string(), "datagram_index": pa.int64(), "size_bytes": pa.int32(),
             "quic_types": pa.string(), "time_in_epoch_ms": pa.float64(),
             "planned_out_epoch_ms": pa.float64(), "time_out_epoch_ms": pa.float64(),
             "dropped_reason": pa.string()}
    config = records.config
    con.execute("BEGIN")
    try:
        run_id = con.execute("SELECT coalesce(max(relay_run_id), 0) + 1 FROM relay_runs").fetchall()[0][0]
        values = {"relay_run_id": run_id, "listen": config["listen"], "upstream": config["upstream"],
                  "seed": config["seed"], "config": json.dumps(config, sort_keys=True),
                  "started_epoch_ms": records.started_epoch_ms,
                  "stopped_epoch_ms": records.stopped_epoch_ms, "datagrams": len(records),
                  "kernel_drops": records.kernel_drops, "cpu_ms": records.cpu_ms,
                  "quicack_version": _version()}
        con.execute(f"INSERT INTO relay_runs ({', '.join(RUN_COLUMNS)}) VALUES "
                    f"({', '.join('?' * len(RUN_COLUMNS))})", [values[c] for c in RUN_COLUMNS])
        data = {"relay_run_id": [run_id] * len(records), **records.columns}
        batch = pa.Table.from_pydict({c: pa.array(data[c], type=t) for c, t in types.items()})
        con.register("relay_batch", batch)
        try:
            names = ", ".join(types)
            con.execute(f"INSERT INTO relay_datagrams ({names}) SELECT {names} FROM relay_batch")
        finally:
            con.unregister("relay_batch")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return run_id
