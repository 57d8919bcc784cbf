"""The DuckDB store: schema, per-file transactions, content hashes, export.

Theory of operation: ``schemas/store.sql`` is applied when a store is opened and its version is
recorded in ``store_meta``.  Each input file is ingested in one transaction — staged by
``quicack.reader``, normalized by ``quicack.normalize``, recorded in ``files`` with its SHA-256
and the analysis version — so a file that fails leaves the store exactly as it was.  A file whose
hash was already ingested by this analysis version is skipped; ``reanalyze`` deletes its rows
and ingests it again.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import duckdb
import polars as pl

from . import normalize, reader, scanstore
from .model import ANALYSIS_VERSION, SCHEMA_VERSION, FileResult, QuicackError

#: Tables holding rows per connection, deleted together when a file is re-ingested.
CONNECTION_TABLES = ("packets", "frames", "transport_parameters", "logged_metrics", "lost_packets",
                     "dropped_packets", "timers", "other_events")

#: Upgrades from an older schema version to the next one.  New tables need no statement here:
#: ``store.sql`` (``CREATE TABLE IF NOT EXISTS``) runs after the migrations.
MIGRATIONS: dict[int, str] = {
    1: "SELECT 'version 2 adds the tables runs and probes'",
}


def schema_sql() -> str:
    """The DDL: shipped inside the package (wheel) or read from ``schemas/`` (source tree)."""
    packaged = resources.files("quicack").joinpath("schemas/store.sql")
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parent.parent / "schemas" / "store.sql").read_text()


def table_names() -> list[str]:
    return re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql())


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
                self.con.execute(MIGRATIONS[version])
                version += 1
            self.con.execute(schema_sql())
            self.con.execute("INSERT OR REPLACE INTO store_meta VALUES ('schema_version', ?)",
                             [str(SCHEMA_VERSION)])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    # --- ingest ------------------------------------------------------------------------------

    def ingest(self, path: str | Path, reanalyze: bool = False) -> FileResult:
        """Ingest one qlog file in one transaction.  A refused file is a result, not an exception."""
        path = Path(path)
        name = str(path)
        try:
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            size = path.stat().st_size
        except OSError as e:
            return FileResult(name, "refused", error=str(QuicackError(f"cannot read: {e.strerror}", name)))
        previous = self.con.execute(
            "SELECT file_id, analysis_version FROM files WHERE content_sha256 = ?", [digest]).fetchall()
        if previous and not reanalyze and all(v == ANALYSIS_VERSION for _, v in previous):
            return FileResult(name, "unchanged")

        self.con.execute("BEGIN")
        try:
            for file_id, _ in previous:
                self._delete_file(file_id)
            staged = reader.stage(self.con, path)
            normalize.load_traces(self.con, staged.traces)
            file_id = self.con.execute("SELECT coalesce(max(file_id), 0) + 1 FROM files").fetchall()[0][0]
            first_connection = self.con.execute(
                "SELECT coalesce(max(connection_id), 0) + 1 FROM connections").fetchall()[0][0]
            normalize.normalize(self.con, file_id, first_connection)
            scanstore.link_probes(self.con, file_id, digest)
            self.con.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                file_id, name, digest, size, staged.format, staged.qlog_version, ANALYSIS_VERSION,
                datetime.now(timezone.utc).replace(tzinfo=None), staged.events, staged.warnings])
            result = self._file_result(file_id, name, staged.warnings)
            self.con.execute("COMMIT")
            return result
        except QuicackError as e:
            self.con.execute("ROLLBACK")
            return FileResult(name, "refused", error=str(e))
        except duckdb.Error as e:
            self.con.execute("ROLLBACK")
            return FileResult(name, "refused", error=str(QuicackError(
                f"cannot normalize: {str(e).splitlines()[0]}", name)))
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def _delete_file(self, file_id: int) -> None:
        ids = "(SELECT connection_id FROM connections WHERE file_id = ?)"
        for table in CONNECTION_TABLES:
            self.con.execute(f"DELETE FROM {table} WHERE connection_id IN {ids}", [file_id])
        self.con.execute("DELETE FROM connections WHERE file_id = ?", [file_id])
        self.con.execute("DELETE FROM files WHERE file_id = ?", [file_id])

    def _file_result(self, file_id: int, name: str, warnings: list[str]) -> FileResult:
        ids = "(SELECT connection_id FROM connections WHERE file_id = $id)"
        connections, events = self.con.execute(
            "SELECT count(*), coalesce(sum(events), 0) FROM connections WHERE file_id = $id",
            {"id": file_id}).fetchall()[0]
        packets = self.con.execute(f"SELECT count(*) FROM packets WHERE connection_id IN {ids}",
                                   {"id": file_id}).fetchall()[0][0]
        skipped = dict(self.con.execute(
            f"SELECT event_name, count(*) FROM other_events WHERE connection_id IN {ids} "
            "GROUP BY event_name ORDER BY 2 DESC, 1", {"id": file_id}).fetchall())
        return FileResult(name, "ingested", connections, packets, int(events), skipped, list(warnings))

    # --- reading -----------------------------------------------------------------------------

    def sql(self, query: str, params: dict | list | None = None) -> pl.DataFrame:
        """Run a query and return a polars DataFrame."""
        return self.con.sql(query, params=params).pl()

    def table(self, name: str) -> pl.DataFrame:
        if name not in table_names():
            raise QuicackError(f"no table {name!r}; tables: {', '.join(table_names())}", self.path)
        return self.con.sql(f"SELECT * FROM {name}").pl()

    def export_parquet(self, directory: str | Path) -> list[Path]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name in table_names():
            target = directory / f"{name}.parquet"
            self.con.execute(f"COPY {name} TO '{str(target).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)")
            written.append(target)
        return written
