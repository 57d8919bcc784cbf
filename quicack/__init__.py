"""quicack: measure how QUIC endpoints acknowledge packets.

The Python API used by the CLI and by notebooks::

    import quicack
    summary = quicack.analyze(["traces/"], db="quicack.duckdb")
    with quicack.Store("quicack.duckdb", read_only=True) as store:
        packets = store.table("packets")            # polars.DataFrame
        acks = store.sql("SELECT * FROM frames WHERE frame_type = 'ack'")
"""

from quicack.model import QuicackError, Summary
from quicack.store.schema import ANALYSIS_VERSION, SCHEMA_VERSION

__all__ = ["analyze", "Store", "QuicackError", "Summary", "ANALYSIS_VERSION", "SCHEMA_VERSION"]


def __getattr__(name: str):
    # analyze and Store load DuckDB and pyarrow (~0.3 s) on first use, not with every submodule:
    # a scan's probing processes and the command line's start-up import only what they need.
    if name == "analyze":
        from quicack.store.ingest import analyze
        return analyze
    if name == "Store":
        from quicack.store.database import Store
        return Store
    raise AttributeError(f"module 'quicack' has no attribute {name!r}")
