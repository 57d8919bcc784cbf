//! quicack's native core (`quicack._native`): qlog events parsed and normalized into rows.
//!
//! Theory of operation: `quicack.qlog.slicing` cuts a qlog file into slices of whole records and
//! hands each slice's file to `stage`, which parses it (`json`) and takes each event's columns
//! out (`event`) on a thread of its own, without Python's lock.  `Normalizer.add` then turns a
//! staged slice into the rows of the store's tables (`normalize`), given what earlier slices
//! left, built as Arrow buffers (`columns`) and handed over as `bytes` (`output`) that
//! `quicack.core.native` wraps for DuckDB.  After the rows are stored, `Replayer` (`replayer`)
//! replays RFC 9002 (`recovery`) for every connection from columns the store hands back
//! (`input`).  Python keeps everything around this: sniffing formats, headers and producer
//! quirks (`quicack.qlog`), cutting files, transactions, and the SQL that runs once per file.
//!
//! Only this file, `input`, `output` and `replayer` know Python (pyo3); `json`, `event`,
//! `normalize`, `columns` and `recovery` are plain Rust, unit-tested by `cargo test` (`tests`).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

pub mod capture;
pub mod columns;
pub mod event;
mod input;
pub mod json;
pub mod normalize;
mod output;
pub mod recovery;
mod replayer;
#[cfg(test)]
mod tests;

use event::{Canon, Layout, Records, StageOptions};
use normalize::{Encoding, TraceOptions};

create_exception!(_native, StageError, PyException,
                  "A slice that is not valid JSON: (message, byte, record, field, the slice ended inside the record, \
                   byte where that record starts).");
create_exception!(_native, UntimedPacket, PyException,
                  "An event for a table of its own without a time: (name, trace, event, byte of its record, \
                   (byte, text) of a time member that is no time, or None).");

/// A staged slice (opaque to Python but for its size).
#[pyclass(frozen, module = "quicack._native")]
struct Staged {
    inner: event::Staged,
}

#[pymethods]
impl Staged {
    /// Events in the slice.
    #[getter]
    fn num_rows(&self) -> usize {
        self.inner.events.len()
    }

    /// Values read as NULL because no column holds them: [(field, count)].
    #[getter]
    fn out_of_range(&self) -> Vec<(&'static str, u32)> {
        self.inner.out_of_range.clone()
    }

    /// The running sum of delta times after this slice (raw units), or None.
    #[getter]
    fn delta_carry(&self) -> Option<f64> {
        self.inner.delta_carry
    }

    fn __len__(&self) -> usize {
        self.inner.events.len()
    }
}

fn read(path: &str, range: Option<(u64, u64)>) -> PyResult<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let failed = |e: std::io::Error| pyo3::exceptions::PyOSError::new_err(format!("{path}: {e}"));
    match range {
        None => std::fs::read(path).map_err(failed),
        Some((start, end)) => {
            let mut f = std::fs::File::open(path).map_err(failed)?;
            f.seek(SeekFrom::Start(start)).map_err(failed)?;
            let mut buf = vec![0u8; end.saturating_sub(start) as usize];
            f.read_exact(&mut buf).map_err(failed)?;
            Ok(buf)
        }
    }
}

/// Stage the slice in the file `path` (its bytes `range` [start, end), or all of it): `kind`
/// 'lines' (one record per line, or after each record separator), 'array' (a JSON array of
/// events) or 'elements' (the elements of one, without its brackets).  `layout`: None for
/// object events, else the indexes of (time, category, event, data, group) in draft array
/// events.  `canonical(name)` gives an event name's canonical name.
#[pyfunction]
#[pyo3(signature = (path, kind, layout, delta, time_scale_ms, delta_carry, traces, trace_index, canonical,
                    range=None))]
#[allow(clippy::too_many_arguments)]
fn stage(py: Python<'_>, path: &str, kind: &str, layout: Option<(i64, i64, i64, i64, i64)>, delta: bool,
         time_scale_ms: f64, delta_carry: Option<f64>, traces: Vec<(u32, u32)>, trace_index: u32,
         canonical: Py<PyAny>, range: Option<(u64, u64)>) -> PyResult<Staged> {
    let layout = match layout {
        None => Layout { object: true, time: -1, category: -1, event: -1, data: -1, group: -1 },
        Some((time, category, event, data, group)) => Layout { object: false, time, category, event, data, group },
    };
    let records = match kind {
        "lines" => Records::Lines,
        "array" => Records::Array,
        "elements" => Records::Elements,
        other => return Err(pyo3::exceptions::PyValueError::new_err(format!("not a kind of slice: {other:?}"))),
    };
    let opts = StageOptions { records, layout, delta, time_scale_ms, delta_carry, traces, trace_index };
    let buf = py.detach(|| read(path, range))?;
    let result = py.detach(|| {
        let mut route = |name: &str| -> Result<Canon, String> {
            Python::attach(|py| {
                canonical.call1(py, (name,)).and_then(|c| c.extract::<String>(py)).map(|c| Canon::of(&c))
                    .map_err(|e| e.to_string())
            })
        };
        event::stage(buf, &opts, &mut route)
    });
    match result {
        Ok(inner) => Ok(Staged { inner }),
        Err(e) => Err(StageError::new_err((e.what, e.pos, e.record, e.field, e.eof, e.at))),
    }
}

/// The elements of the JSON array in the file `path` (a candidate cut of a document's events):
/// (count, raw text of the first one or None); StageError if it is not one.
#[pyfunction]
fn array_elements<'py>(py: Python<'py>, path: &str) -> PyResult<(usize, Option<Bound<'py, PyBytes>>)> {
    let buf = py.detach(|| read(path, None))?;
    /// (elements, the first one's byte range) or (what is wrong, where, in which field, cut short?)
    type Found = Result<(usize, Option<(usize, usize)>), (String, usize, String, bool)>;
    let result = py.detach(|| -> Found {
        std::str::from_utf8(&buf).map_err(|e| ("invalid UTF-8".to_string(), e.valid_up_to(), String::new(), false))?;
        let mut tape = Vec::new();
        let mut pos = json::skip_ws(&buf, 0);
        if buf.get(pos) != Some(&b'[') {
            return Err(("expected '['".into(), pos, String::new(), false));
        }
        pos = json::skip_ws(&buf, pos + 1);
        let (mut n, mut first) = (0, None);
        if buf.get(pos) == Some(&b']') {
            pos += 1;
        } else {
            loop {
                let start = json::skip_ws(&buf, pos);
                let end = json::parse(&buf, pos, &mut tape).map_err(|e| (e.what.to_string(), e.pos, e.field, e.eof))?;
                if n == 0 {
                    first = Some((start, end));
                }
                n += 1;
                pos = json::skip_ws(&buf, end);
                match buf.get(pos) {
                    Some(b',') => pos += 1,
                    Some(b']') => {
                        pos += 1;
                        break;
                    }
                    _ => return Err(("expected ',' or ']'".into(), pos, String::new(), pos >= buf.len())),
                }
            }
        }
        if json::skip_ws(&buf, pos) != buf.len() {
            return Err(("characters after the array".into(), pos, String::new(), false));
        }
        Ok((n, first))
    });
    match result {
        Ok((n, first)) => Ok((n, first.map(|(s, e)| PyBytes::new(py, &buf[s..e])))),
        Err((what, pos, field, eof)) => Err(StageError::new_err((what, pos, 0, field, eof, pos))),
    }
}

/// One file's normalizer: staged slices in, rows out (see `normalize`).
#[pyclass(module = "quicack._native")]
struct Normalizer {
    inner: normalize::Normalizer,
}

#[pymethods]
impl Normalizer {
    #[new]
    fn new() -> Self {
        Normalizer { inner: normalize::Normalizer::default() }
    }

    /// The rows of one staged slice: [(table, columns)]; `allocate(n)` gives the first of n new
    /// connection ids.  Raises UntimedPacket for a packet event without a time.
    #[pyo3(signature = (staged, offset, allocate, *, vantage, flow, absolute, reference_epoch_ms, ack_delay_encoding,
                        missing_ack_delay_is_zero, time_scale_ms, metric_scale_ms, latest_rtt_zero_is_unset,
                        sender_from_cids, vantage_from_first_packet, rx_datagram_events_first))]
    #[allow(clippy::too_many_arguments)]
    fn add<'py>(&mut self, py: Python<'py>, staged: &Staged, offset: i64, allocate: Py<PyAny>, vantage: String,
                flow: Option<String>, absolute: bool, reference_epoch_ms: Option<f64>, ack_delay_encoding: &str,
                missing_ack_delay_is_zero: bool, time_scale_ms: f64, metric_scale_ms: f64,
                latest_rtt_zero_is_unset: bool, sender_from_cids: bool, vantage_from_first_packet: bool,
                rx_datagram_events_first: bool) -> PyResult<Bound<'py, PyList>> {
        let encoding = match ack_delay_encoding {
            "ms" => Encoding::Ms,
            "us" => Encoding::Us,
            "raw" => Encoding::Raw,
            "raw_ms" => Encoding::RawMs,
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("ack_delay_encoding {other}"))),
        };
        let t = TraceOptions {
            vantage, flow, absolute, reference_epoch_ms, encoding, missing_ack_delay_is_zero, time_scale_ms,
            metric_scale_ms, latest_rtt_zero_is_unset, sender_from_cids, vantage_from_first_packet,
            rx_datagram_events_first,
        };
        let inner = &mut self.inner;
        let staged = &staged.inner;
        // (without Python's lock: the thread staging the next slice, and DuckDB, go on meanwhile)
        let (result, failure) = py.detach(|| {
            let mut failure: Option<PyErr> = None;
            let mut alloc = |n: usize| -> Result<i64, String> {
                Python::attach(|py| allocate.call1(py, (n,)).and_then(|v| v.extract::<i64>(py))).map_err(|e| {
                    let message = e.to_string();
                    failure = Some(e);
                    message
                })
            };
            let result = inner.add(staged, &t, offset, &mut alloc);
            (result, failure)
        });
        let rows = match result {
            Ok(Ok(rows)) => rows,
            Ok(Err(u)) => return Err(UntimedPacket::new_err((u.name, u.trace, u.event, u.at, u.time))),
            Err(message) => return Err(failure.unwrap_or_else(|| PyException::new_err(message))),
        };
        let tables: PyResult<Vec<Bound<'py, PyTuple>>> = rows
            .tables
            .iter()
            .map(|(name, table)| PyTuple::new(py, [name.into_pyobject(py)?.into_any(), output::table(py, table)?.into_any()]))
            .collect();
        PyList::new(py, tables?)
    }

    /// Each connection's state (trace_index, group_key, connection_id, first_event, events,
    /// base_ms, first_ms, last_ms, vantage, flow, first_sent, odcid).
    fn conn_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        output::table(py, &self.inner.conn_table())
    }

    /// Every parameters_set event so far.
    fn tp_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        output::table(py, &self.inner.tp_table())
    }

}

/// A capture read by the native reader (`capture`): batches of staged rows.  It may be read on
/// another thread than the one that opened it (Python reads the next batch while the previous
/// one is inserted); the mutex makes it shareable.
#[pyclass(module = "quicack._native")]
struct CaptureReader {
    inner: std::sync::Mutex<capture::Reader>,
}

#[pymethods]
impl CaptureReader {
    /// Open `path` (pcap or pcapng, also gzip-compressed: byte offsets are then those of the
    /// uncompressed capture), with the key log text `keylog` and UDP ports read as QUIC;
    /// ValueError((byte offset, what)) if it is no capture.
    #[new]
    #[pyo3(signature = (path, keylog=None, quic_ports=Vec::new()))]
    fn new(path: &str, keylog: Option<Vec<u8>>, quic_ports: Vec<u16>) -> PyResult<Self> {
        let file = std::fs::File::open(path)
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{path}: {e}")))?;
        let mut file = std::io::BufReader::with_capacity(1 << 20, file);
        let gzipped = std::io::BufRead::fill_buf(&mut file).map(|b| b.starts_with(&[0x1f, 0x8b])).unwrap_or(false);
        let opened = if gzipped {
            let inflated = std::io::BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(file));
            capture::Reader::new(inflated, keylog.as_deref(), &quic_ports)
        } else {
            capture::Reader::new(file, keylog.as_deref(), &quic_ports)
        };
        opened
            .map(|inner| CaptureReader { inner: std::sync::Mutex::new(inner) })
            .map_err(|d| pyo3::exceptions::PyValueError::new_err((d.offset, d.what)))
    }

    /// The next batch: (datagrams, transport parameters, packets, frames) as columns for
    /// `quicack.core.native.table`, or None at the end.
    fn batch<'py>(&self, py: Python<'py>, datagrams: usize) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let inner = &self.inner;
        let Some(rows) = py.detach(|| inner.lock().unwrap_or_else(|e| e.into_inner()).batch(datagrams)) else {
            return Ok(None);
        };
        let tables = [output::table(py, &rows.dgram)?, output::table(py, &rows.tp)?, output::table(py, &rows.pkt)?,
                      output::table(py, &rows.frame)?];
        Ok(Some(PyTuple::new(py, tables)?))
    }

    /// Captured frames read so far.
    #[getter]
    fn frames(&self) -> i64 {
        self.reader().state.frames_read
    }

    /// Where reading stopped on damage: (byte offset, what), or None.
    #[getter]
    fn damage(&self) -> Option<(u64, String)> {
        self.reader().damage.as_ref().map(|d| (d.offset, d.what.clone()))
    }

    /// Why the capture is left to tshark (a link type, a QUIC version), or None.
    #[getter]
    fn unsupported(&self) -> Option<String> {
        self.reader().state.unsupported.clone()
    }
}

impl CaptureReader {
    fn reader(&self) -> std::sync::MutexGuard<'_, capture::Reader> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stage, m)?)?;
    m.add_function(wrap_pyfunction!(array_elements, m)?)?;
    m.add_class::<Staged>()?;
    m.add_class::<CaptureReader>()?;
    m.add_class::<Normalizer>()?;
    m.add_class::<replayer::RttEstimator>()?;
    m.add_class::<replayer::Replayer>()?;
    m.add("StageError", m.py().get_type::<StageError>())?;
    m.add("UntimedPacket", m.py().get_type::<UntimedPacket>())?;
    Ok(())
}
