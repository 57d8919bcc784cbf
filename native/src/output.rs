//! Tables handed to Python (pyo3 glue): each column's Arrow buffers as `bytes`.
//!
//! Theory of operation: a `Table` built by the pure modules (`crate::columns`) becomes a list of
//! columns, each `(name, tag, length, validity, [buffers])`: the tag says how
//! `quicack.core.native.table` lays the buffers out (`int64`, `int32`, `float64`, `bool`,
//! `large_string`, `ranges` for BIGINT[][], `texts` for VARCHAR[]), validity is None when no
//! value is NULL.  Each buffer is copied once, into a Python `bytes`; nothing else is converted.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::columns::{bytes_of, Column, Data, Table, Validity};

fn validity<'py>(py: Python<'py>, v: &Validity) -> Bound<'py, PyAny> {
    match v.bitmap() {
        None => py.None().into_bound(py),
        Some(bits) => PyBytes::new(py, bits).into_any(),
    }
}

fn column<'py>(py: Python<'py>, c: &Column) -> PyResult<Bound<'py, PyTuple>> {
    let n = c.len();
    let valid = validity(py, &c.validity);
    let (tag, buffers): (&str, Vec<Bound<'py, PyAny>>) = match &c.data {
        Data::I64(v) => ("int64", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
        Data::I32(v) => ("int32", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
        Data::F64(v) => ("float64", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
        Data::Bool(bits) => ("bool", vec![PyBytes::new(py, bits.bits()).into_any()]),
        Data::Text { offsets, bytes } => (
            "large_string",
            vec![PyBytes::new(py, bytes_of(offsets)).into_any(), PyBytes::new(py, bytes).into_any()],
        ),
        Data::Ranges { outer, values, value_validity } => (
            "ranges",
            vec![
                PyBytes::new(py, bytes_of(outer)).into_any(),
                PyBytes::new(py, bytes_of(values)).into_any(),
                validity(py, value_validity),
            ],
        ),
        Data::Texts { outer, offsets, bytes } => (
            "texts",
            vec![
                PyBytes::new(py, bytes_of(outer)).into_any(),
                PyBytes::new(py, bytes_of(offsets)).into_any(),
                PyBytes::new(py, bytes).into_any(),
            ],
        ),
    };
    let buffers = PyList::new(py, buffers)?;
    PyTuple::new(py, [c.name.into_pyobject(py)?.into_any(), tag.into_pyobject(py)?.into_any(),
                      n.into_pyobject(py)?.into_any(), valid, buffers.into_any()])
}

/// A table's columns, in order, for `quicack.core.native.table`.
pub fn table<'py>(py: Python<'py>, t: &Table) -> PyResult<Bound<'py, PyList>> {
    let columns: PyResult<Vec<_>> = t.columns.iter().map(|c| column(py, c)).collect();
    PyList::new(py, columns?)
}
