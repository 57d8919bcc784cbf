"""What a store holds and under which versions: the DDL, its tables and columns, upgrades.

Theory of operation: ``schemas/store.sql`` is the single source of truth for tables and columns;
this module reads it (from the package in a wheel, from ``schemas/`` in a source tree) and knows
two numbers.  :data:`SCHEMA_VERSION` is recorded in ``store_meta`` when a store is opened; an
older store is upgraded by :data:`MIGRATIONS` one version at a time.  :data:`ANALYSIS_VERSION` is
recorded per file in ``files``: a file is ingested again only when asked (``--reanalyze``) or when
the stored rows were made by another analysis version.  Nothing here loads DuckDB: the package's
``__init__`` imports the versions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: Bumped whenever the mapping from input to rows changes.  4: a ``quicack export --qlog`` file
#: is not rescaled by its producer's quirks, delta-time traces whose first event holds the epoch
#: time keep it, no producer is guessed from a header's shape; handshakes: a failed attempt after a
#: restart is that failure, a ClientHello retransmitted with its CRYPTO frames reordered is one
#: packet, a partial ClientHello needs logged packet numbers.  5: after a HelloRetryRequest, the
#: round of the second ClientHello is classified; raw ACK delays of a sender whose
#: ack_delay_exponent is invalid (above 20) are not decoded; a document cut short keeps no part of
#: an event after one holding an "events" key.  6: the native core — other_events.data and
#: frames.details keep the JSON text as logged (without blanks), delta times are summed on across
#: slices, a raw ACK Delay beyond 64 bits is NULL rather than refusing the file, JSON-SEQ records
#: are split at every RS, an untimed metrics, loss, drop or timer event refuses the file.  7 (issue
#: 31): a value no column holds is NULL and counted in a warning (schemas/README.md, "Values the
#: store cannot hold") — a packet number, size, offset, count or id that is negative, has a
#: fraction (0.5 was rounded to 0) or is 2^63 or more; an ACK delay, RTT or timeout below zero; a
#: time, duration or delta beyond ±1e300 or a string holding NaN/Infinity (was inf/NaN); a number
#: beyond a double (1e400) refuses the file as NaN does; a header's original_uris that is a string
#: is one URI (was read character by character).  8 (issues 29 and 30): tables datagrams and
#: address_validation (the anti-amplification budget, PTOs per space, 0-RTT), key_waits; Careful
#: Resume phase events (``careful_resume_phase_updated`` in every spelling) are read into
#: ``careful_resume_phases``.  9 (issue 29): captures get ``key_waits`` rows (packets that arrived
#: before their receiver's keys), key_waits.receiver and source; a server blocked at its 3× budget
#: needs data waiting that the budget left could not hold and no request ending the block;
#: quicack serve's re-fed 0-RTT packets count no datagram bytes.
ANALYSIS_VERSION = 9

#: Version of ``schemas/store.sql``; recorded in ``store_meta``.  3 added ``runs`` and ``probes``,
#: 4 ``relay_runs`` and ``relay_datagrams`` (the testbed relay), 5 ``testbed_runs`` (experiments),
#: 6 ``careful_resume_phases`` and ``testbed_runs.ttlb_ms`` (Careful Resume), 7 ``ack_policy_runs``
#: (ACK-policy experiments), 8 ``datagrams``, ``address_validation`` and ``key_waits`` (issue 29),
#: 9 ``testbed_runs``' resumption columns (``resumption``, ``zero_rtt``, ``full_ttfb_ms``, …).
#: 10 ``runs.vantage`` and ``probes.vantage`` (scans on a Dask cluster, issue 32).
SCHEMA_VERSION = 10

#: Tables holding rows per connection, deleted together when a file is re-ingested.
CONNECTION_TABLES = ("packets", "frames", "transport_parameters", "logged_metrics", "lost_packets",
                     "dropped_packets", "timers", "other_events", "rtt_samples", "capture_connections",
                     "careful_resume_phases", "datagrams", "address_validation", "key_waits")
#: Tables holding rows per file besides ``files`` (captures).
FILE_TABLES = ("capture_files", "capture_issues")


def schema_sql() -> str:
    """The DDL: shipped inside the package (wheel) or read from ``schemas/`` (source tree)."""
    packaged = resources.files("quicack").joinpath("schemas/store.sql")
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parents[2] / "schemas" / "store.sql").read_text()


def table_names() -> list[str]:
    return re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql())


def schema_columns() -> dict[str, list[tuple[str, str]]]:
    """Table → [(column, type definition)] as the DDL declares them."""
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", schema_sql(), re.S):
        columns = []
        for line in body.splitlines():
            line = line.split("--", 1)[0].strip().rstrip(",")
            if line and not re.match(r"(PRIMARY|UNIQUE|CHECK|FOREIGN)\b", line):  # table constraints
                name, definition = line.split(None, 1)
                columns.append((name, definition.replace(" PRIMARY KEY", "")))
        tables[table] = columns
    return tables


def add_missing_columns(con: duckdb.DuckDBPyConnection) -> None:
    """An additive upgrade: every column the DDL has and the stored table lacks is added (NULL in
    old rows; ``quicack analyze --reanalyze`` fills them).  New tables come from the DDL itself."""
    for table, columns in schema_columns().items():
        have = {name for (name,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND NOT internal", [table]).fetchall()}
        if not have:
            continue  # a new table: created by the DDL
        for name, definition in columns:
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition.replace(' NOT NULL', '')}")


def add_vantage(con: duckdb.DuckDBPyConnection) -> None:
    """9 → 10 (issue 32): the vantage point of a scan's runs and probes (NULL in older rows); a
    store from before version 3 gets both tables, with the column, from the DDL."""
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name IN ('runs', 'probes') "
                                "AND NOT temporary").fetchall():
        con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS vantage VARCHAR")


#: Upgrades from an older schema version to the next one.
#: 1 → 2: handshake classification and RFC 9002 replay columns on connections, table rtt_samples.
#: 2 → 3: tables runs and probes (scans).  3 → 4: tables relay_runs and relay_datagrams.
#: 4 → 5: table testbed_runs.  5 → 6: table careful_resume_phases, testbed_runs' Careful Resume
#: columns.  6 → 7: table ack_policy_runs.  7 → 8: tables datagrams, address_validation, key_waits.
#: 8 → 9: testbed_runs' resumption columns.  9 → 10: runs.vantage, probes.vantage (:func:`add_vantage`).
MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {1: add_missing_columns,
                                                                    2: add_missing_columns,
                                                                    3: add_missing_columns,
                                                                    4: add_missing_columns,
                                                                    5: add_missing_columns,
                                                                    6: add_missing_columns,
                                                                    7: add_missing_columns,
                                                                    8: add_missing_columns, 9: add_vantage}
