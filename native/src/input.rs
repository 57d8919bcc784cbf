//! Arrow columns handed in from Python (`quicack.core.native.column`): read in place.
//!
//! A column comes as `(length, offset, validity, values)` — numbers as int64 or float64, or a
//! bit-packed bool — or, for a list of int64, `(length, offset, validity, offsets, child)`; the
//! buffers are Arrow's own (`pyarrow.Buffer`), read through Python's buffer protocol without a
//! copy, and without Python's lock (pyarrow buffers do not move or change).

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// A read-only byte buffer of a Python object (a `pyarrow.Buffer`, `bytes`).
pub struct Bytes(PyBuffer<i8>);

impl<'py> FromPyObject<'_, 'py> for Bytes {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        Ok(Bytes(PyBuffer::get(&obj)?))
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // (a C-contiguous buffer of bytes, alive as long as self)
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, self.0.len_bytes()) }
    }
}

/// (length, offset, validity, values)
#[derive(FromPyObject)]
pub struct Primitive(usize, usize, Option<Bytes>, Bytes);

#[inline]
fn bit(bytes: &[u8], i: usize) -> bool {
    bytes[i / 8] >> (i % 8) & 1 == 1
}

impl Primitive {
    pub fn len(&self) -> usize {
        self.0
    }

    #[inline]
    pub fn valid(&self, i: usize) -> bool {
        self.2.as_ref().is_none_or(|v| bit(v, self.1 + i))
    }

    #[inline]
    fn word(&self, i: usize) -> [u8; 8] {
        let at = (self.1 + i) * 8;
        self.3[at..at + 8].try_into().expect("8 bytes")
    }

    #[inline]
    pub fn i64(&self, i: usize) -> Option<i64> {
        self.valid(i).then(|| i64::from_le_bytes(self.word(i)))
    }

    #[inline]
    pub fn f64(&self, i: usize) -> Option<f64> {
        self.valid(i).then(|| f64::from_le_bytes(self.word(i)))
    }

    #[inline]
    pub fn bool(&self, i: usize) -> Option<bool> {
        self.valid(i).then(|| bit(&self.3, self.1 + i))
    }
}

/// A list of int64 values: (length, offset, validity, offsets, values).
#[derive(FromPyObject)]
pub struct List(#[allow(dead_code)] usize, usize, Option<Bytes>, Bytes, Primitive);

impl List {
    /// The values of list `i` (None: a NULL list).
    pub fn get(&self, i: usize) -> Option<impl Iterator<Item = Option<i64>> + '_> {
        if self.2.as_ref().is_some_and(|v| !bit(v, self.1 + i)) {
            return None;
        }
        let at = |k: usize| {
            let b = (self.1 + k) * 4;
            i32::from_le_bytes(self.3[b..b + 4].try_into().expect("4 bytes")) as usize
        };
        Some((at(i)..at(i + 1)).map(|j| self.4.i64(j)))
    }
}
