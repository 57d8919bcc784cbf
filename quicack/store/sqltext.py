"""SQL text built in Python: the one place a value becomes a SQL string literal.

Theory of operation: DuckDB takes parameters for values, but not where a statement names a
file (``read_json_objects('…')``, ``ATTACH '…'``) nor inside SQL assembled once for many runs
(the normalizer's statements carry a trace's constants); there a value is spelled as a literal,
single quotes doubled (SQL's only escape inside a string literal).
"""

from __future__ import annotations


def quote(text: str) -> str:
    """``text`` as a SQL string literal: ``it's`` → ``'it''s'``."""
    return "'" + str(text).replace("'", "''") + "'"
