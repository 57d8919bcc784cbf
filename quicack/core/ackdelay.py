"""Decoding the ACK Delay field: the one rule for qlog traces that log it raw and for captures.

Theory of operation: RFC 9000 §19.3: "ACK Delay: A variable-length integer encoding the
acknowledgment delay in microseconds; see Section 13.2.5. It is decoded by multiplying the value
in the field by 2 to the power of the ack_delay_exponent transport parameter sent by the sender
of the ACK frame".  §18.2: "If this value is absent, a default value of 3 is assumed ... Values
above 20 are invalid."  The first server ACK travels in an Initial, before any transport
parameter, so Initial ACKs use 3.  A sender that announced an invalid exponent scaled its delays
by a factor no reader can know: they stay undecoded (NULL; ``frames.ack_delay_raw`` keeps the
field).  :func:`decoded_ms_sql` is SQL text: captures are decoded in DuckDB, and so are a long
qlog's raw delays once its last slice is read (``quicack.qlog.normalize``); while its slices are read,
the native core applies the same rule (``native/src/normalize.rs``, ``decode_exponent``), and the
tests compare a file read in many slices with the same file read whole.
"""

from __future__ import annotations

#: RFC 9000 §18.2
DEFAULT_EXPONENT = 3
MAX_EXPONENT = 20


def exponent_sql(announced: str, packet_type: str) -> str:
    """The exponent that decodes an ACK frame in a packet of type ``packet_type`` (SQL), its sender
    having announced ``announced`` (SQL, NULL if nothing): NULL when that is invalid."""
    return (f"CASE WHEN {packet_type} = 'initial' OR {announced} IS NULL THEN {DEFAULT_EXPONENT} "
            f"WHEN {announced} BETWEEN 0 AND {MAX_EXPONENT} THEN {announced} END")


def decoded_ms_sql(raw: str, announced: str, packet_type: str) -> str:
    """The ACK delay in ms (SQL) of the raw field ``raw``."""
    return f"{raw} * pow(2, {exponent_sql(announced, packet_type)}) / 1000.0"
