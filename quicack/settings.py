"""DuckDB settings changed for a stretch of work and restored after it.

Theory of operation: a store's connection is shared by everything a command does (several files
in a row, a scan's writer), so a step that needs other settings — one thread for a small file,
a capped buffer pool for a qlog's slices, a checkpoint at commit — reads the current values,
sets its own, and puts the old ones back however the step ends.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .sqltext import quote

if TYPE_CHECKING:
    import duckdb


@contextlib.contextmanager
def changed(con: "duckdb.DuckDBPyConnection", **values):
    """Set the settings ``values`` for the ``with`` block and restore their previous values
    after it; the block gets the previous values (a dict).  A value of None is only saved and
    restored: the block sets it itself."""
    names = list(values)
    saved = dict(zip(names, con.execute(
        "SELECT " + ", ".join(f"current_setting({quote(n)})" for n in names)).fetchall()[0]))
    for name, value in values.items():
        if value is not None:
            con.execute(f"SET {name} = {quote(str(value))}")
    try:
        yield saved
    finally:
        for name, value in saved.items():
            con.execute(f"SET {name} = {quote(str(value))}")
