//! Staging: one slice of qlog records, parsed once, each event's columns taken out.
//!
//! Theory of operation: a slice is a run of whole records (a file of one record per line, or a
//! JSON array of events, see `quicack.qlog.slicing`).  `stage` (`stager`) parses each record into
//! a tape (`crate::json`), reads its time, name and group as the trace's layout says (object
//! events of qlog ≥ 0.2, or the `event_fields` arrays of the drafts), and reads its data for what
//! its event's table needs (`fields`): every field spelling of every qlog generation, the first
//! one present winning (newest first), packet and frame types read into the store's spelling
//! (`vocabulary`).  What is kept is small (`Event`, and the lists of its kind's columns in
//! `Staged`), with byte ranges into the slice for the JSON some columns store verbatim.  Staging
//! is pure (no Python here): a slice that fails to parse changes nothing, so a cut of a JSON
//! document can be tried and refused.

mod fields;
mod stager;
mod vocabulary;

pub use stager::{stage, Layout, Records, StageError, StageOptions};
pub use vocabulary::{Canon, FType, PType};

/// Text of a value: a range of the slice (a string without escapes) or its own copy.
#[derive(Clone, Debug)]
pub enum Txt {
    Range(u32, u32),
    Owned(Box<str>),
}

impl Txt {
    #[inline]
    pub fn get<'a>(&'a self, buf: &'a [u8]) -> &'a str {
        match self {
            Txt::Range(s, e) => unsafe { std::str::from_utf8_unchecked(&buf[*s as usize..*e as usize]) },
            Txt::Owned(s) => s,
        }
    }
}

#[derive(Debug)]
pub struct Frame {
    pub ftype: FType,
    pub ack_delay: Option<f64>,
    /// [low, high] ranges: `Staged::ranges[start..start + count]`
    pub ranges: Option<(u32, u32)>,
    pub largest_acknowledged: Option<i64>,
    pub ce: Option<i64>,
    pub offset: Option<i64>,
    pub length: Option<i64>,
    pub stream_id: Option<i64>,
    pub fin: Option<bool>,
    pub sequence_number: Option<i64>,
    pub ack_eliciting_threshold: Option<i64>,
    pub request_max_ack_delay: Option<f64>,
    pub reordering_threshold: Option<i64>,
    /// the logged frame, for `frames.details`
    pub raw: (u32, u32),
}

#[derive(Debug)]
pub struct Packet {
    pub ptype: PType,
    pub packet_number: Option<i64>,
    pub size: Option<i32>,
    pub datagram_id: Option<i64>,
    pub checksum: Option<i64>,
    pub scid: Option<Txt>,
    pub dcid: Option<Txt>,
    /// `Staged::frames[start..start + count]`
    pub frames: (u32, u32),
}

/// The transport parameters the store has columns for, as logged (`min_ack_delay` in µs).
#[derive(Clone, Copy, Debug)]
pub struct ParamValues {
    pub max_ack_delay: Option<f64>,
    pub ack_delay_exponent: Option<i32>,
    pub min_ack_delay: Option<f64>,
    pub initial_max_data: Option<i64>,
    pub max_udp_payload_size: Option<i64>,
    pub max_idle_timeout: Option<f64>,
    pub active_connection_id_limit: Option<i64>,
}

#[derive(Debug)]
pub struct Params {
    pub owner: Box<str>,
    pub values: ParamValues,
    pub odcid: Option<Txt>,
}

#[derive(Debug)]
pub struct Metrics {
    pub latest_rtt: Option<f64>,
    pub min_rtt: Option<f64>,
    pub smoothed_rtt: Option<f64>,
    pub rtt_variance: Option<f64>,
    pub pto_count: Option<i32>,
    pub congestion_window: Option<i64>,
    pub bytes_in_flight: Option<i64>,
}

#[derive(Debug)]
pub struct Lost {
    pub ptype: Option<PType>,
    pub packet_number: Option<i64>,
    pub trigger: Option<Txt>,
}

#[derive(Debug)]
pub struct Dropped {
    pub ptype: Option<PType>,
    pub packet_number: Option<i64>,
    pub size: Option<i32>,
    pub trigger: Option<Txt>,
}

#[derive(Debug)]
pub struct Timer {
    pub timer_type: Option<Txt>,
    pub event_type: Option<Txt>,
    pub space: Option<Txt>,
    pub delta: Option<f64>,
}

/// An event's columns: an index into the staged slice's list of its kind.
#[derive(Clone, Copy, Debug)]
pub enum Body {
    None,
    Packet(u32),
    Params(u32),
    Started(u32),
    Metrics(u32),
    Lost(u32),
    Dropped(u32),
    Timer(u32),
}

/// What `other_events.data` (and `transport_parameters.parameters`) keeps of an event.
#[derive(Clone, Copy, Debug)]
pub enum Data {
    /// no data member: NULL
    Missing,
    /// the JSON value at this range
    Range(u32, u32),
    /// an array event without its data column: 'null'
    NullText,
    /// a record that is not an event, of a trace of array events: `{"data": X}` (X: null if absent)
    Wrapped(Option<(u32, u32)>),
}

#[derive(Debug)]
pub struct Event {
    pub trace: u32,
    /// the event's position in its trace, counted within the slice
    pub row: u32,
    /// where its record starts in the slice (for messages)
    pub at: u32,
    pub t_ms: Option<f64>,
    pub name: u32,
    pub group: u32,
    pub canon: Canon,
    pub body: Body,
    pub data: Data,
}

/// A staged slice: its bytes, its events, the names and groups they use.
#[derive(Default)]
pub struct Staged {
    pub buf: Vec<u8>,
    pub events: Vec<Event>,
    pub packets: Vec<Packet>,
    pub frames: Vec<Frame>,
    pub ranges: Vec<(Option<i64>, Option<i64>)>,
    pub params: Vec<Params>,
    pub started: Vec<Option<Txt>>,
    pub metrics: Vec<Metrics>,
    pub lost: Vec<Lost>,
    pub dropped: Vec<Dropped>,
    pub timers: Vec<Timer>,
    pub names: Vec<(Box<str>, Canon)>,
    pub groups: Vec<Box<str>>,
    /// the running sum of delta times after this slice (raw units), when one was known
    pub delta_carry: Option<f64>,
    /// values read as NULL because they were out of range (`json::Checked`), per field
    pub out_of_range: Vec<(&'static str, u32)>,
    /// events whose time member did not read as a time: (record start, the value's byte range)
    pub bad_times: Vec<(u32, u32, u32)>,
}

impl Staged {
    pub fn frames_of(&self, p: &Packet) -> &[Frame] {
        &self.frames[p.frames.0 as usize..(p.frames.0 + p.frames.1) as usize]
    }

    pub fn ranges_of(&self, f: &Frame) -> Option<&[(Option<i64>, Option<i64>)]> {
        f.ranges.map(|(s, n)| &self.ranges[s as usize..(s + n) as usize])
    }

    /// The packet of a packet event.
    pub fn packet(&self, e: &Event) -> Option<&Packet> {
        match e.body {
            Body::Packet(i) => Some(&self.packets[i as usize]),
            _ => None,
        }
    }
}
