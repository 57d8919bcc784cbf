"""Careful Resume phase changes: ``careful_resume_phases`` rows derived from ``other_events``.

Theory of operation: the native core keeps every event without a table of its own in
``other_events`` (its name as logged, its data as JSON text).  After a file's connections are
normalized — same transaction, called from :func:`quicack.store.analysis.classify_and_replay` —
:func:`fill` selects the new connections' events whose name looks like a Careful Resume phase
change (one SQL filter on the name; few rows), maps each one's data to the draft's names with the
pure :func:`quicack.core.resumelog.phase_row`, and inserts the rows in one statement.  The events
stay in ``other_events`` as logged: the new table is a reading of them, not a move.
"""

from __future__ import annotations

import duckdb
import orjson

from quicack.core import resumelog
from quicack.store.rows import insert


def fill(con: duckdb.DuckDBPyConnection, first_connection_id: int) -> int:
    """Rows for every Careful Resume event of connections with id ≥ ``first_connection_id``;
    returns how many."""
    found = con.execute("""
        SELECT connection_id, event_index, time_ms, event_name, data FROM other_events
        WHERE connection_id >= ? AND (lower(event_name) LIKE '%careful_resume_phase%'
                                      OR lower(event_name) LIKE '%cr_phase%')
        ORDER BY connection_id, event_index""", [first_connection_id]).fetchall()
    rows = []
    for cid, index, time_ms, name, data in found:
        if not resumelog.is_phase_event(name):
            continue
        try:
            parsed = orjson.loads(data) if data is not None else {}
        except orjson.JSONDecodeError:
            parsed = {}
        rows.append((cid, index, time_ms, name, *resumelog.phase_row(parsed if isinstance(parsed, dict) else {})))
    insert(con, "careful_resume_phases", rows)
    return len(rows)
