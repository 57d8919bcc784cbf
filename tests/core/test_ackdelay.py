"""The ACK Delay decoding rule (quicack/core/ackdelay.py), evaluated by DuckDB as the normalizers of
qlog traces and captures use it."""

from __future__ import annotations

import duckdb
import pytest

from quicack.core.ackdelay import decoded_ms_sql


@pytest.mark.parametrize("raw, announced, packet_type, expected_ms", [
    (1499, None, "initial", 11.992),    # RFC 9000 §18.2 default 3 (test_pcap's Initial ACK)
    (1499, 10, "initial", 11.992),      # Initial ACKs precede every transport parameter
    (100, None, "1RTT", 0.8),           # nothing announced: 3
    (100, 0, "handshake", 0.1),         # 2^0
    (100, 5, "1RTT", 3.2),
    (1, 20, "1RTT", 2 ** 20 / 1000),    # the largest valid value
    (1, 21, "1RTT", None),              # "Values above 20 are invalid."
    (1, -1, "1RTT", None),              # a variable-length integer is never negative
    (None, 3, "1RTT", None),            # no field, no delay
])
def test_decoded_ms(raw, announced, packet_type, expected_ms):
    sql = decoded_ms_sql("raw", "announced", "packet_type")
    con = duckdb.connect()
    got = con.execute(f"SELECT {sql} FROM (SELECT ?::BIGINT AS raw, ?::INTEGER AS announced, ? AS packet_type)",
                      [raw, announced, packet_type]).fetchall()[0][0]
    assert got == (pytest.approx(expected_ms) if expected_ms is not None else None)
