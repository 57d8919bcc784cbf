"""DuckDB settings changed for a stretch of work and restored after it.

Theory of operation: a store's connection is shared by everything a command does (several files
in a row, a scan's writer), so a step that needs other settings — one thread for a small file,
a capped buffer pool for a qlog's slices, a checkpoint at commit — reads the current values,
sets its own, and puts the old ones back however the step ends.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from quicack.store.sqltext import quote

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
    saved = {name: _SET_AS.get((name, str(value)), value) for name, value in saved.items()}
    for name, value in values.items():
        if value is not None:
            con.execute(f"SET {name} = {quote(str(value))}")
    try:
        yield saved
    finally:
        for name, value in saved.items():
            try:
                restore(con, name, value)
            except Exception as e:  # noqa: BLE001 - DuckDB's, imported only here
                import duckdb
                if not isinstance(e, duckdb.FatalException):
                    raise
                break  # (a fatal error invalidated the database: it keeps no settings to restore)


#: (setting, value as read back) -> the value set: sizes read back rounded down
_SET_AS: dict[tuple[str, str], str] = {}


def restore(con: "duckdb.DuckDBPyConnection", name: str, value) -> None:
    """Set ``name`` back to ``value`` as :func:`changed` read it.  A size reads rounded down
    ('18.8 GiB' is 18.79… GiB once set, read back as '18.7 GiB'), so setting what was read would
    shrink it a little every time: a size that the setting's default reads as is reset instead,
    and another is remembered as set, so the next save takes it rather than its rounding."""
    text = str(value)
    if not text.endswith("iB"):
        con.execute(f"SET {name} = {quote(text)}")
        return
    con.execute(f"RESET {name}")
    if con.execute(f"SELECT current_setting({quote(name)})").fetchall()[0][0] == text:
        return
    con.execute(f"SET {name} = {quote(text)}")
    read = con.execute(f"SELECT current_setting({quote(name)})").fetchall()[0][0]
    if read != text:
        _SET_AS[(name, read)] = text
