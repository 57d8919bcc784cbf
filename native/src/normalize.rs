//! Normalizing: staged slices into the rows of `schemas/store.sql`, one slice after another.
//!
//! Theory of operation: a file's slices come in file order; what a slice needs from earlier
//! ones is kept per connection (`Conn`: id, time base, the last packet for coalescing, the
//! datagrams counted, the client's CID, the first packet sent, the ODCID found so far) and per
//! file (every `parameters_set`, for the ACK Delay exponent).  `Normalizer::add` places each
//! event of a slice on its connection (`connections`), keeps its transport parameters
//! (`parameters`), and writes the `packets` rows with each packet's sender and datagram
//! (`packets`), the `frames` rows with each ACK Delay decoded (`frames`), and the
//! `logged_metrics`, `lost_packets`, `dropped_packets`, `timers` and `other_events` rows
//! (`events`); `connections` and `transport_parameters` are written at the end of the file, by
//! SQL over the per-connection state this hands over (`quicack.qlog.normalize`).  Pure: no
//! Python here (the pyo3 glue in `lib.rs` calls in without Python's lock).
//!
//! One connection per (trace, group_id): quinn writes all its connections into one stream, told
//! apart by group_id.  A group first seen in a slice gets the next id, in file order.

mod connections;
mod events;
mod frames;
mod packets;
mod parameters;

use rustc_hash::FxHashMap as HashMap;

use crate::columns::Table;
use crate::event::{Canon, Staged};

pub use connections::Conn;
pub use parameters::TpRow;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    Ms,
    Us,
    Raw,
    /// the encoded field divided by 1000 (quiche: `ack_delay as f32 / 1000.0`)
    RawMs,
}

/// What a trace's header says about reading its events (`quicack.qlog.dialect.TraceInfo`).
#[derive(Clone, Debug)]
pub struct TraceOptions {
    pub vantage: String,
    pub flow: Option<String>,
    pub absolute: bool,
    pub reference_epoch_ms: Option<f64>,
    pub encoding: Encoding,
    pub missing_ack_delay_is_zero: bool,
    pub time_scale_ms: f64,
    pub metric_scale_ms: f64,
    pub latest_rtt_zero_is_unset: bool,
    pub sender_from_cids: bool,
    pub vantage_from_first_packet: bool,
    pub rx_datagram_events_first: bool,
}

/// An event routed to a table of its own but without a time: the file is refused.
pub struct Untimed {
    pub name: String,
    pub trace: u32,
    pub event: i64,
    /// where its record starts in the slice
    pub at: u32,
    /// its time member's value, when it has one that is no time: (where in the slice, its text)
    pub time: Option<(u32, String)>,
}

#[derive(Default)]
pub struct Normalizer {
    pub conns: Vec<Conn>,
    by_group: HashMap<(u32, Box<str>), usize>,
    pub tp: Vec<TpRow>,
}

/// The rows of one slice, table by table.
pub struct Rows {
    pub tables: Vec<(&'static str, Table)>,
}

impl Normalizer {
    /// Normalize one staged slice.  `offset`: events of its trace in earlier slices (0 for a
    /// slice of several whole traces); `allocate(n)`: the first of `n` new connection ids.
    pub fn add(&mut self, staged: &Staged, t: &TraceOptions, offset: i64,
               allocate: &mut dyn FnMut(usize) -> Result<i64, String>) -> Result<Result<Rows, Untimed>, String> {
        let events = &staged.events;
        if events.is_empty() {
            return Ok(Ok(Rows { tables: Vec::new() }));
        }
        // (their rows' time_ms is NOT NULL; every qlog draft requires a time on every event; a
        // parameters_set's row takes the earliest time of its owner's)
        if let Some(e) = events.iter().find(|e| e.canon.routed() && e.canon != Canon::ParametersSet && e.t_ms.is_none()) {
            let time = staged.bad_times.iter().find(|b| b.0 == e.at).map(|&(_, start, end)| {
                let raw = &staged.buf[start as usize..end as usize];
                (start, String::from_utf8_lossy(&raw[..raw.len().min(80)]).into_owned())
            });
            return Ok(Err(Untimed {
                name: staged.names[e.name as usize].0.to_string(),
                trace: e.trace,
                event: offset + e.row as i64 + 1,
                at: e.at,
                time,
            }));
        }
        let placed = self.place(staged, t, offset, allocate)?;
        // transport parameters: kept for the ACK Delay exponent and written at the end
        self.keep_parameters(staged, &placed);

        let mut tables = Vec::new();
        let (pks, packet_rows) = self.packets(staged, t, &placed);
        if let Some(packet_rows) = packet_rows {
            tables.push(("packets", packet_rows));
            tables.push(("frames", self.frames(staged, t, &placed, &pks)));
        }
        tables.extend(self.events(staged, t, &placed));
        self.odcid(staged, &placed, &pks);
        Ok(Ok(Rows { tables }))
    }
}
