"""Python rows into a DuckDB table in one statement, through Arrow.

Theory of operation: ``executemany`` runs its statement once per row (~0.8 ms each), which made
writing a few small per-connection tables cost more than normalizing a scan's batch of probes.
:func:`insert` turns the rows into one Arrow table typed after the target table's columns and
inserts it with a single ``INSERT … SELECT``.
"""

from __future__ import annotations

import contextlib

import duckdb
import pyarrow as pa

#: DuckDB column types → Arrow types.
ARROW_TYPES = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
                "BOOLEAN": pa.bool_(), "VARCHAR[]": pa.list_(pa.string())}


def arrow_table(columns: list[tuple[str, str]], rows: list[tuple]) -> pa.Table:
    """``rows`` (tuples) as an Arrow table with ``columns`` (name, DuckDB type) in that order."""
    return pa.table({name: pa.array([row[i] for row in rows], type=ARROW_TYPES[kind])
                     for i, (name, kind) in enumerate(columns)})


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    """Insert ``rows`` (tuples in the table's column order) into ``table``."""
    if not rows:
        return
    arrow = arrow_table([(name, kind) for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall()], rows)
    con.register("quicack_rows", arrow)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM quicack_rows")
    except BaseException:
        # (an INSERT that failed aborted the transaction: unregistering would fail too, and its
        # error would hide the first — DuckDB out of memory, which the ingest reads again for)
        with contextlib.suppress(duckdb.Error):
            con.unregister("quicack_rows")
        raise
    con.unregister("quicack_rows")
