"""The native core's rows as Arrow tables: the Python side of ``quicack._native``.

Theory of operation: ``quicack._native`` (Rust, ``native/``) hands each table it builds over as
columns of raw Arrow buffers — ``(name, type, length, validity, buffers)`` with the buffers as
``bytes`` — so that nothing is converted value by value in Python.  :func:`table` wraps them
with ``pyarrow.Array.from_buffers`` (no copy) into a ``pyarrow.Table`` whose columns are in the
order of the store table they go into, ready for ``INSERT INTO … SELECT * FROM``.
"""

from __future__ import annotations

import pyarrow as pa

from ._native import Normalizer, StageError, Staged, UntimedPacket, array_elements, stage  # noqa: F401

_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(), "bool": pa.bool_(),
          "large_string": pa.large_string()}
#: frames.acked_ranges: BIGINT[][]
RANGES = pa.list_(pa.list_(pa.int64()))


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
    return pa.Array.from_buffers(_TYPES[kind], n, [valid, *(pa.py_buffer(b) for b in buffers)])


def _pair_offsets(pairs: int) -> pa.Buffer:
    """Offsets 0, 2, 4, … of ``pairs`` lists of two values each."""
    return pa.array(range(0, 2 * pairs + 1, 2), pa.int32()).buffers()[1]


def table(columns: list[tuple]) -> pa.Table:
    """A table from the native core's columns."""
    return pa.table({name: _array(kind, n, validity, buffers) for name, kind, n, validity, buffers in columns})
