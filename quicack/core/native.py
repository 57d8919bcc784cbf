"""The native core's rows as Arrow tables: the Python side of ``quicack._native``.

Theory of operation: ``quicack._native`` (Rust, ``native/``) hands each table it builds over as
columns of raw Arrow buffers — ``(name, type, length, validity, buffers)`` with the buffers as
``bytes`` — so that nothing is converted value by value in Python.  :func:`table` wraps them
with ``pyarrow.Array.from_buffers`` (no copy) into a ``pyarrow.Table`` whose columns are in the
order of the store table they go into, ready for ``INSERT INTO … SELECT * FROM``.  The other
way, :func:`column` hands an Arrow column's buffers in (the RFC 9002 replay's input).
"""

from __future__ import annotations

import pyarrow as pa

from quicack._native import (Normalizer, Replayer, RttEstimator, StageError, Staged, UntimedPacket, array_elements, stage)

_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(), "bool": pa.bool_(),
          "large_string": pa.large_string()}
#: frames.acked_ranges: BIGINT[][]
RANGES = pa.list_(pa.list_(pa.int64()))
#: rtt_samples.flags: VARCHAR[]
TEXTS = pa.list_(pa.large_string())


def _array(kind: str, n: int, validity: bytes | None, buffers: list) -> pa.Array:
    valid = None if validity is None else pa.py_buffer(validity)
    if kind == "ranges":
        outer, values, values_valid = buffers
        count = len(values) // 8
        flat = pa.Array.from_buffers(pa.int64(), count, [None if values_valid is None else pa.py_buffer(values_valid),
                                                         pa.py_buffer(values)])
        pairs = pa.Array.from_buffers(pa.list_(pa.int64()), count // 2,
                                      [None, _pair_offsets(count // 2)], children=[flat])
        return pa.Array.from_buffers(RANGES, n, [valid, pa.py_buffer(outer)], children=[pairs])
    if kind == "texts":
        outer, offsets, data = buffers
        items = pa.Array.from_buffers(pa.large_string(), len(offsets) // 8 - 1, [None, pa.py_buffer(offsets),
                                                                             pa.py_buffer(data)])
        return pa.Array.from_buffers(TEXTS, n, [valid, pa.py_buffer(outer)], children=[items])
    return pa.Array.from_buffers(_TYPES[kind], n, [valid, *(pa.py_buffer(b) for b in buffers)])


def _pair_offsets(pairs: int) -> pa.Buffer:
    """Offsets 0, 2, 4, … of ``pairs`` lists of two values each."""
    return pa.array(range(0, 2 * pairs + 1, 2), pa.int32()).buffers()[1]


def table(columns: list[tuple]) -> pa.Table:
    """A table from the native core's columns."""
    return pa.table({name: _array(kind, n, validity, buffers) for name, kind, n, validity, buffers in columns})


def column(array: pa.Array | pa.ChunkedArray) -> tuple:
    """An int64, float64 or bool column (or a list of int64) as the native core reads it:
    (length, offset, validity, values) or, for a list, (length, offset, validity, offsets, values),
    the buffers ``pyarrow.Buffer`` objects (read in place)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    buffers = array.buffers()  # (read in place through the buffer protocol: not copied)
    validity = buffers[0] if array.null_count and buffers[0] is not None else None
    data = buffers[1] if buffers[1] is not None else pa.py_buffer(b"")
    if pa.types.is_list(array.type):
        return len(array), array.offset, validity, data, column(array.values)
    return len(array), array.offset, validity, data
