"""schemas/README.md documents every table and column of schemas/store.sql."""

from __future__ import annotations

import re
from pathlib import Path

from quicack.store.schema import schema_columns

DOC = (Path(__file__).resolve().parents[2] / "schemas" / "README.md").read_text()


def test_every_table_has_a_section_and_every_column_is_named():
    missing = []
    for table, columns in schema_columns().items():
        if not re.search(rf"^## {table}\b", DOC, re.M):
            missing.append(table)
        missing += [f"{table}.{c}" for c, _ in columns if not re.search(rf"\b{c}\b", DOC)]
    assert missing == []
