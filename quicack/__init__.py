"""quicack: measure how QUIC endpoints acknowledge packets.

The Python API used by the CLI and by notebooks::

    import quicack
    summary = quicack.analyze(["traces/"], db="quicack.duckdb")
    with quicack.Store("quicack.duckdb", read_only=True) as store:
        packets = store.table("packets")            # polars.DataFrame
        acks = store.sql("SELECT * FROM frames WHERE frame_type = 'ack'")
"""

from .ingest import analyze
from .model import ANALYSIS_VERSION, SCHEMA_VERSION, QuicackError, Summary
from .store import Store

__all__ = ["analyze", "Store", "QuicackError", "Summary", "ANALYSIS_VERSION", "SCHEMA_VERSION"]
