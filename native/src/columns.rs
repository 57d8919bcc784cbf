//! Column builders: rows as Arrow buffers.
//!
//! Theory of operation: each table a slice yields is built column by column in Arrow's memory
//! layout (values, a validity bitmap, offsets for text and lists); `crate::output` then copies
//! each buffer once into a Python `bytes`, `quicack.core.native.table` wraps them with
//! `pyarrow.Array.from_buffers` and DuckDB reads the Arrow table without another copy.  Text
//! columns are Arrow `large_string` (64-bit offsets: an `other_events.data` of a slice may hold a
//! long event).  Pure: no Python here.

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

    /// The bitmap, or None when every value is valid (Arrow's "no validity buffer").
    pub fn bitmap(&self) -> Option<&[u8]> {
        (self.nulls != 0).then_some(&self.bits[..])
    }

    /// The bits as they are, also when none is clear (a BOOLEAN column's values).
    pub fn bits(&self) -> &[u8] {
        &self.bits
    }
}

/// The in-memory bytes of plain numbers: Arrow's little-endian layout on this machine.
pub fn bytes_of<T: Copy>(values: &[T]) -> &[u8] {
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
}
