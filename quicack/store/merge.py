"""Merging stores: the databases of a sharded scan (``--shard K/N`` on several machines) → one.

Theory of operation: each source is attached read-only and its rows are appended, table by
table, in one transaction per source; the surrogate keys (``file_id``, ``connection_id``,
``run_id``, ``relay_run_id``, and columns naming one of them: :data:`REFERENCES`) are shifted
past the ones already in the target, so every join keeps working.  A
source must have this quicack's schema version (open it with ``quicack analyze`` once to
upgrade it), and a run (name, shard) can only be merged once.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from quicack.model import QuicackError
from quicack.store.schema import SCHEMA_VERSION
from quicack.store.database import Store
from quicack.store.schema import table_names
from quicack.store.sqltext import quote

#: surrogate keys and the table that numbers them
KEYS = {"file_id": "files", "connection_id": "connections", "run_id": "runs", "relay_run_id": "relay_runs"}
#: columns under another name that hold one of those keys (testbed_runs: both ends' connections)
REFERENCES = {"client_connection_id": "connection_id", "server_connection_id": "connection_id"}


def merge(target: str | Path, sources: list[str | Path]) -> dict[str, int]:
    """Append every source store to ``target`` (created if missing); rows added per table."""
    added: dict[str, int] = {}
    with Store(target) as store:
        for source in sources:
            for table, n in append(store, source).items():
                added[table] = added.get(table, 0) + n
    return added


def append(store: Store, source: str | Path) -> dict[str, int]:
    """Append one source store to the open ``store`` in one transaction; rows added per table.
    The source is read through ``ATTACH`` only (no connection of its own: a cluster's combine
    step appends thousands of small stores), and its empty tables are left out."""
    source = str(source)
    con = store.con
    if not Path(source).exists():
        raise QuicackError("no such store", source)
    if Path(source).resolve() == Path(store.path).resolve():
        raise QuicackError("cannot merge a store into itself", source)
    added: dict[str, int] = {}
    try:
        con.execute(f"ATTACH {quote(source)} AS src (READ_ONLY)")
    except duckdb.Error as e:
        raise QuicackError(f"cannot merge: {str(e).splitlines()[0]}", source) from None
    try:
        tables = {t: n for t, n in con.execute(
            "SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = 'src' "
            "AND schema_name = 'main'").fetchall()}
        if "store_meta" not in tables:
            raise QuicackError("not a quicack store (no store_meta table)", source)
        version = con.execute("SELECT max(value) FROM src.store_meta WHERE key = 'schema_version'").fetchall()[0][0]
        if version != str(SCHEMA_VERSION):
            raise QuicackError(f"store has schema version {version}, this quicack writes "
                               f"{SCHEMA_VERSION}; open it with this quicack first", source)
        clash = con.execute("SELECT s.name, s.shard FROM src.runs s JOIN runs r "
                            "USING (name, shard) LIMIT 1").fetchall()
        if clash:
            raise QuicackError(f"run {clash[0][0]!r} shard {clash[0][1]!r} is already in "
                               f"{store.path}", source)
        offsets = {k: con.execute(f"SELECT coalesce(max({k}), 0) FROM {t}").fetchall()[0][0]
                   for k, t in KEYS.items()}
        columns: dict[str, list[str]] = {}
        for table, column in con.execute(
                "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
                "AND schema_name = 'main' ORDER BY table_name, column_index").fetchall():
            columns.setdefault(table, []).append(column)
        con.execute("BEGIN")
        try:
            for table in table_names():
                if table == "store_meta" or not tables.get(table):
                    continue  # (estimated_size: the exact count of a table no transaction is changing)
                key = {c: REFERENCES.get(c, c) for c in columns[table]}
                select = ", ".join(f"{c} + {offsets[key[c]]}" if key[c] in KEYS else c for c in columns[table])
                added[table] = con.execute(f"INSERT INTO main.{table} ({', '.join(columns[table])}) "
                                           f"SELECT {select} FROM src.{table}").fetchall()[0][0]
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    except duckdb.Error as e:
        raise QuicackError(f"cannot merge: {str(e).splitlines()[0]}", source) from None
    finally:
        con.execute("DETACH src")
    return added
