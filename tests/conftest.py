from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from quicack import Store

DATA = Path(__file__).parent / "data"
RS = b"\x1e"


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "t.duckdb") as s:
        yield s


def write_json(path: Path, doc: dict, gz: bool = False) -> Path:
    raw = orjson.dumps(doc)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def write_seq(path: Path, header: dict, events: list, gz: bool = False, separator: bytes = RS) -> Path:
    """JSON-SEQ (RFC 7464: RS json LF per record) or, with separator b'', NDJSON."""
    raw = b"".join(separator + orjson.dumps(r) + b"\n" for r in [header, *events])
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def rows(store: Store, sql: str) -> list[dict]:
    return store.sql(sql).to_dicts()
