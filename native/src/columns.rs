//! Column builders: rows as Arrow buffers, handed to Python as bytes.
//!
//! Theory of operation: each table a slice yields is built column by column in Arrow's memory
//! layout (values, a validity bitmap, offsets for text and lists), then each buffer is copied
//! once into a Python `bytes`; `quicack.native.table` wraps them with `pyarrow.Array.from_buffers`
//! and DuckDB reads the Arrow table without another copy.  Text columns are Arrow `large_string`
//! (64-bit offsets: an `other_events.data` of a slice may hold a long event).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// A validity bitmap (bit set: a value, clear: NULL), as Arrow lays it out.
#[derive(Default)]
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl Validity {
    #[inline]
    pub fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bits.push(0);
        }
        if valid {
            self.bits[self.len / 8] |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    fn to_py<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        if self.nulls == 0 {
            py.None().into_bound(py)
        } else {
            PyBytes::new(py, &self.bits).into_any()
        }
    }
}

fn bytes_of<T: Copy>(values: &[T]) -> &[u8] {
    // (plain numbers: their in-memory bytes are Arrow's little-endian layout on this machine)
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

pub enum Data {
    I64(Vec<i64>),
    I32(Vec<i32>),
    F64(Vec<f64>),
    Bool(Validity),
    Text { offsets: Vec<i64>, bytes: Vec<u8> },
    /// BIGINT[][]: ranges of two values each
    Ranges { outer: Vec<i32>, values: Vec<i64>, value_validity: Validity },
    /// VARCHAR[] (never NULL inside)
    Texts { outer: Vec<i32>, offsets: Vec<i64>, bytes: Vec<u8> },
}

pub struct Column {
    pub name: &'static str,
    pub data: Data,
    pub validity: Validity,
}

impl Column {
    pub fn len(&self) -> usize {
        self.validity.len
    }

    pub fn is_empty(&self) -> bool {
        self.validity.len == 0
    }

    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.len();
        let validity = self.validity.to_py(py);
        let (tag, buffers): (&str, Vec<Bound<'py, PyAny>>) = match &self.data {
            Data::I64(v) => ("int64", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
            Data::I32(v) => ("int32", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
            Data::F64(v) => ("float64", vec![PyBytes::new(py, bytes_of(v)).into_any()]),
            Data::Bool(bits) => ("bool", vec![PyBytes::new(py, &bits.bits).into_any()]),
            Data::Text { offsets, bytes } => (
                "large_string",
                vec![PyBytes::new(py, bytes_of(offsets)).into_any(), PyBytes::new(py, bytes).into_any()],
            ),
            Data::Ranges { outer, values, value_validity } => (
                "ranges",
                vec![
                    PyBytes::new(py, bytes_of(outer)).into_any(),
                    PyBytes::new(py, bytes_of(values)).into_any(),
                    value_validity.to_py(py),
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
        PyTuple::new(py, [self.name.into_pyobject(py)?.into_any(), tag.into_pyobject(py)?.into_any(),
                          n.into_pyobject(py)?.into_any(), validity, buffers.into_any()])
    }
}

pub fn i64s(name: &'static str) -> Column {
    Column { name, data: Data::I64(Vec::new()), validity: Validity::default() }
}
pub fn i32s(name: &'static str) -> Column {
    Column { name, data: Data::I32(Vec::new()), validity: Validity::default() }
}
pub fn f64s(name: &'static str) -> Column {
    Column { name, data: Data::F64(Vec::new()), validity: Validity::default() }
}
pub fn bools(name: &'static str) -> Column {
    Column { name, data: Data::Bool(Validity::default()), validity: Validity::default() }
}
pub fn texts(name: &'static str) -> Column {
    Column { name, data: Data::Text { offsets: vec![0], bytes: Vec::new() }, validity: Validity::default() }
}
pub fn ranges(name: &'static str) -> Column {
    Column {
        name,
        data: Data::Ranges { outer: vec![0], values: Vec::new(), value_validity: Validity::default() },
        validity: Validity::default(),
    }
}

pub fn text_lists(name: &'static str) -> Column {
    Column {
        name,
        data: Data::Texts { outer: vec![0], offsets: vec![0], bytes: Vec::new() },
        validity: Validity::default(),
    }
}

impl Column {
    /// A list of texts (never NULL).
    #[inline]
    pub fn texts<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) {
        if let Data::Texts { outer, offsets, bytes } = &mut self.data {
            for item in items {
                bytes.extend_from_slice(item.as_bytes());
                offsets.push(bytes.len() as i64);
            }
            outer.push((offsets.len() - 1) as i32);
            self.validity.push(true);
        } else {
            unreachable!("{}: not VARCHAR[]", self.name)
        }
    }

    #[inline]
    pub fn i64(&mut self, v: Option<i64>) {
        if let Data::I64(values) = &mut self.data {
            values.push(v.unwrap_or(0));
            self.validity.push(v.is_some());
        } else {
            unreachable!("{}: not BIGINT", self.name)
        }
    }

    #[inline]
    pub fn i32(&mut self, v: Option<i32>) {
        if let Data::I32(values) = &mut self.data {
            values.push(v.unwrap_or(0));
            self.validity.push(v.is_some());
        } else {
            unreachable!("{}: not INTEGER", self.name)
        }
    }

    #[inline]
    pub fn f64(&mut self, v: Option<f64>) {
        if let Data::F64(values) = &mut self.data {
            values.push(v.unwrap_or(0.0));
            self.validity.push(v.is_some());
        } else {
            unreachable!("{}: not DOUBLE", self.name)
        }
    }

    #[inline]
    pub fn bool(&mut self, v: Option<bool>) {
        if let Data::Bool(bits) = &mut self.data {
            bits.push(v.unwrap_or(false));
            self.validity.push(v.is_some());
        } else {
            unreachable!("{}: not BOOLEAN", self.name)
        }
    }

    #[inline]
    pub fn text(&mut self, v: Option<&str>) {
        self.text_with(v.is_some(), |bytes| bytes.extend_from_slice(v.unwrap_or("").as_bytes()));
    }

    /// A text value written by `write` (NULL when not `valid`).
    #[inline]
    pub fn text_with(&mut self, valid: bool, write: impl FnOnce(&mut Vec<u8>)) {
        if let Data::Text { offsets, bytes } = &mut self.data {
            if valid {
                write(bytes);
            }
            offsets.push(bytes.len() as i64);
            self.validity.push(valid);
        } else {
            unreachable!("{}: not VARCHAR", self.name)
        }
    }

    /// A list of [low, high] ranges (NULL: None).
    #[inline]
    pub fn ranges(&mut self, v: Option<&[(Option<i64>, Option<i64>)]>) {
        if let Data::Ranges { outer, values, value_validity } = &mut self.data {
            if let Some(list) = v {
                for (lo, hi) in list {
                    for x in [lo, hi] {
                        values.push(x.unwrap_or(0));
                        value_validity.push(x.is_some());
                    }
                }
            }
            outer.push((values.len() / 2) as i32);
            self.validity.push(v.is_some());
        } else {
            unreachable!("{}: not BIGINT[][]", self.name)
        }
    }
}

/// Columns in the order of the table they are inserted into.
pub struct Table {
    pub columns: Vec<Column>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Self {
        Table { columns }
    }

    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, |c| c.len())
    }

    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let columns: PyResult<Vec<_>> = self.columns.iter().map(|c| c.to_py(py)).collect();
        PyList::new(py, columns?)
    }
}
