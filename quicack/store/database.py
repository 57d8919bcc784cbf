"""The DuckDB store: open (creating or upgrading the schema), query, export; ingest delegated.

Theory of operation: a :class:`Store` is one DuckDB database file.  Opening it for writing applies
``schemas/store.sql`` (:mod:`quicack.store.schema`) and upgrades an older schema version one step
at a time, in one transaction; opening it read-only only checks that this quicack understands its
version.  Files are ingested by :class:`quicack.store.transaction.Ingest` on the store's
connection (:meth:`Store.ingest`, :meth:`Store.ingest_many` are its public face).  Queries come
back as polars DataFrames (polars is imported when a result is asked for).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from quicack.model import FileResult, QuicackError
from quicack.store.schema import MIGRATIONS, SCHEMA_VERSION, schema_sql, table_names
from quicack.store.transaction import Ingest

if TYPE_CHECKING:  # polars loads in a few tenths of a second; .pl() imports it when a result is asked for
    import polars as pl

    from quicack.pcap.tshark import Dissection


class Store:
    """A quicack DuckDB database.  Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path = "quicack.duckdb", read_only: bool = False):
        self.path = str(path)
        try:
            self.con = duckdb.connect(self.path, read_only=read_only)
        except duckdb.Error as e:
            raise QuicackError(f"cannot open store: {str(e).splitlines()[0]}", self.path) from None
        if not read_only:
            self._ensure_schema()
        else:
            self._check_version()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    # --- schema ------------------------------------------------------------------------------

    def _stored_version(self) -> int | None:
        exists = self.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'store_meta'").fetchall()[0][0]
        if not exists:
            return None
        found = self.con.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchall()
        return int(found[0][0]) if found else None

    def _check_version(self) -> int | None:
        version = self._stored_version()
        if version is not None and version > SCHEMA_VERSION:
            raise QuicackError(f"store has schema version {version}, newer than this quicack "
                               f"understands ({SCHEMA_VERSION}); upgrade quicack", self.path)
        return version

    def _ensure_schema(self) -> None:
        version = self._check_version()
        if version is None:
            user_tables = self.con.execute("SELECT count(*) FROM duckdb_tables() WHERE NOT temporary").fetchall()[0][0]
            if user_tables:
                raise QuicackError("not a quicack store (no store_meta table); choose another --db",
                                   self.path)
        self.con.execute("BEGIN")
        try:
            while version is not None and version < SCHEMA_VERSION:
                if version not in MIGRATIONS:
                    raise QuicackError(f"store has schema version {version} and no upgrade to "
                                       f"{SCHEMA_VERSION} exists; re-create it", self.path)
                MIGRATIONS[version](self.con)
                version += 1
            self.con.execute(schema_sql())
            self.con.execute("INSERT OR REPLACE INTO store_meta VALUES ('schema_version', ?)",
                             [str(SCHEMA_VERSION)])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    # --- ingest ------------------------------------------------------------------------------

    def ingest(self, path: str | Path, reanalyze: bool = False, keylog: str | Path | None = None,
               quic_ports: tuple[int, ...] = (), progress: Callable[[int], None] | None = None,
               dissection: Dissection | None = None, dissector: str = "native",
               sha256: str | None = None) -> FileResult:
        """Ingest one qlog file or capture in one transaction (:meth:`Ingest.file`; ``sha256``: the
        file's, when the caller hashed it): a refused file is a result, not an exception."""
        ingest = Ingest(self.con)
        try:
            return ingest.file(path, reanalyze, keylog, quic_ports, progress, dissection, dissector, sha256)
        finally:
            self._reopen_if(ingest)

    def ingest_many(self, paths: list[Path], jobs: int, reanalyze: bool = False,
                    progress: Callable[[Path, int], None] | None = None) -> list[FileResult]:
        """Ingest small qlog files ``jobs`` at a time, each in its own transaction
        (:meth:`Ingest.many`); results in the order of ``paths``."""
        ingest = Ingest(self.con)
        try:
            return ingest.many(paths, jobs, reanalyze, progress)
        finally:
            self._reopen_if(ingest)

    def _reopen_if(self, ingest: Ingest) -> None:
        """Open the store again after a fatal error (a full disk at a checkpoint) invalidated its
        database: what was committed before is there, and the next file is read into it."""
        if not ingest.invalidated:
            return
        try:
            self.con.close()
        except duckdb.Error:
            pass
        try:
            self.con = duckdb.connect(self.path)
        except duckdb.Error as e:
            raise QuicackError(f"cannot open store again: {str(e).splitlines()[0]}", self.path) from None

    # --- reading -----------------------------------------------------------------------------

    def sql(self, query: str, params: dict | list | None = None) -> pl.DataFrame:
        """Run a query and return a polars DataFrame."""
        return self.con.sql(query, params=params).pl()

    def handshakes_by_class(self, file_ids: list[int] | None = None) -> pl.DataFrame:
        """Connections per handshake class with median gap, first ACK delay and first PTO (ms),
        for the given files (all files when None)."""
        return self._handshakes_by_class(file_ids).pl()

    def handshake_class_rows(self, file_ids: list[int] | None = None) -> tuple[list[str], list[tuple]]:
        """:meth:`handshakes_by_class` as column names and rows (no polars: the CLI summary)."""
        relation = self._handshakes_by_class(file_ids)
        return relation.columns, relation.fetchall()

    def _handshakes_by_class(self, file_ids: list[int] | None) -> duckdb.DuckDBPyRelation:
        where = "true" if file_ids is None else \
            f"file_id IN ({', '.join(str(int(i)) for i in file_ids) or 'NULL'})"
        return self.con.sql(f"""
            SELECT handshake_class AS class, count(*) AS connections,
                   median(ack_sh_gap_ms) AS median_gap_ms,
                   median(first_ack_delay_ms) AS median_first_ack_delay_ms,
                   median(first_pto_ms) AS median_first_pto_ms
            FROM connections WHERE {where}
            GROUP BY ALL ORDER BY connections DESC, class""")

    def table(self, name: str) -> pl.DataFrame:
        if name not in table_names():
            raise QuicackError(f"no table {name!r}; tables: {', '.join(table_names())}", self.path)
        return self.con.sql(f"SELECT * FROM {name}").pl()

    def unused_bytes(self) -> int:
        """Bytes of the database file that hold no rows: blocks freed, and what ingests killed
        mid-commit wrote past the last block in use (:func:`vacuum` gives them back)."""
        if self.path == ":memory:" or not Path(self.path).exists():
            return 0
        _, block, total, used, _ = self.con.execute("PRAGMA database_size").fetchall()[0][1:6]
        return max(0, Path(self.path).stat().st_size - used * block) if total else 0

    def export_parquet(self, directory: str | Path) -> list[Path]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name in table_names():
            target = directory / f"{name}.parquet"
            self.con.execute(f"COPY {name} TO '{str(target).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)")
            written.append(target)
        return written




def vacuum(path: str | Path) -> tuple[int, int]:
    """Give back the space a store's file holds beyond its rows (left by ingests killed while
    committing, or by rows deleted): its tables are copied into a new file, which then replaces
    it.  Returns the file's size (bytes) before and after.  A kill during the copy leaves the
    store as it was (the partial copy is removed by the next vacuum)."""
    import os

    path = Path(path)
    if not path.exists():
        raise QuicackError("no such store", str(path))
    fresh = path.with_name(path.name + ".vacuum")
    for leftover in (fresh, fresh.with_name(fresh.name + ".wal")):
        leftover.unlink(missing_ok=True)
    before = path.stat().st_size
    with Store(path) as store:
        store.con.execute("CHECKPOINT")
        _, block, _, used, _ = store.con.execute("PRAGMA database_size").fetchall()[0][1:6]
        stat = os.statvfs(path.parent)
        if stat.f_bavail * stat.f_frsize < used * block + (16 << 20):
            raise QuicackError(f"not enough free disk space for a copy of the store: "
                               f"{stat.f_bavail * stat.f_frsize / 1e6:.0f} MB free, about "
                               f"{(used * block + (16 << 20)) / 1e6:.0f} MB needed", str(path))
        name = store.con.execute("SELECT current_database()").fetchall()[0][0]
        store.con.execute(f"ATTACH {_quote(str(fresh))} AS quicack_vacuum")
        try:
            store.con.execute(f"COPY FROM DATABASE {_ident(name)} TO quicack_vacuum")
            store.con.execute("CHECKPOINT quicack_vacuum")
        finally:
            store.con.execute("DETACH quicack_vacuum")
    os.replace(fresh, path)
    return before, path.stat().st_size


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
