//! Staging: one slice of qlog records, parsed once, each event's columns taken out.
//!
//! Theory of operation: a slice is a run of whole records (a file of one record per line, or a
//! JSON array of events, see `quicack.reader`).  Each record is parsed into a tape
//! (`crate::json`), its time, name and group read as the trace's layout says (object events of
//! qlog ≥ 0.2, or the `event_fields` arrays of the drafts), and its data read for what its
//! event's table needs: every field spelling of every qlog generation, the first one present
//! winning (newest first).  What is kept is small (`Event`), with byte ranges into the slice for
//! the JSON some columns store verbatim.  Staging is pure: a slice that fails to parse changes
//! nothing, so a cut of a JSON document can be tried and refused.

use std::borrow::Cow;
use rustc_hash::FxHashMap as HashMap;

use crate::json::{self, Doc, Kind, Tok};

/// What an event's canonical name routes it to (`quicack.qlog.canonical_event`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Canon {
    PacketSent,
    PacketReceived,
    ParametersSet,
    MetricsUpdated,
    PacketLost,
    PacketDropped,
    Timer,
    DatagramsReceived,
    ConnectionStarted,
    Other,
}

impl Canon {
    pub fn of(canonical: &str) -> Canon {
        match canonical {
            "packet_sent" => Canon::PacketSent,
            "packet_received" => Canon::PacketReceived,
            "parameters_set" => Canon::ParametersSet,
            "metrics_updated" => Canon::MetricsUpdated,
            "packet_lost" => Canon::PacketLost,
            "packet_dropped" => Canon::PacketDropped,
            "loss_timer_updated" | "timer_updated" => Canon::Timer,
            "datagrams_received" => Canon::DatagramsReceived,
            "connection_started" => Canon::ConnectionStarted,
            _ => Canon::Other,
        }
    }

    /// Events with a table of their own; all others go to `other_events`.
    pub fn routed(self) -> bool {
        !matches!(self, Canon::DatagramsReceived | Canon::ConnectionStarted | Canon::Other)
    }
}

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

/// The packet types the store uses (`packets.packet_type`), others in lower case as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PType {
    Initial,
    Handshake,
    ZeroRtt,
    OneRtt,
    Retry,
    VersionNegotiation,
    StatelessReset,
    Other(Box<str>),
}

impl PType {
    pub fn as_str(&self) -> &str {
        match self {
            PType::Initial => "initial",
            PType::Handshake => "handshake",
            PType::ZeroRtt => "0RTT",
            PType::OneRtt => "1RTT",
            PType::Retry => "retry",
            PType::VersionNegotiation => "version_negotiation",
            PType::StatelessReset => "stateless_reset",
            PType::Other(s) => s,
        }
    }

    /// RFC 9000 §12.2 coalescing order: Initial, 0-RTT, Handshake, then 1-RTT last.
    pub fn rank(&self) -> i32 {
        match self {
            PType::Initial => 0,
            PType::ZeroRtt => 1,
            PType::Handshake => 2,
            PType::OneRtt => 3,
            _ => 9,
        }
    }

    pub fn space(&self) -> Option<&'static str> {
        match self {
            PType::Initial => Some("initial"),
            PType::Handshake => Some("handshake"),
            PType::ZeroRtt | PType::OneRtt => Some("application_data"),
            _ => None,
        }
    }

    /// The type as every generation spells it ('1RTT', '1rtt', 'onertt', 'short', 'PROTECTED_1RTT'…).
    pub fn of(raw: &str) -> PType {
        match raw {
            "initial" => return PType::Initial,
            "handshake" => return PType::Handshake,
            "1RTT" => return PType::OneRtt,
            "0RTT" => return PType::ZeroRtt,
            "retry" => return PType::Retry,
            _ => {}
        }
        let lower = raw.to_lowercase();
        let squeezed: String = lower.chars().filter(|&c| c != '-' && c != '_').collect();
        match squeezed.as_str() {
            "initial" => PType::Initial,
            "handshake" => PType::Handshake,
            "0rtt" | "zerortt" | "0rttprotected" => PType::ZeroRtt,
            "1rtt" | "onertt" | "short" | "1rttprotected" | "protected" => PType::OneRtt,
            "retry" => PType::Retry,
            "versionnegotiation" | "versionnegotation" => PType::VersionNegotiation,
            "statelessreset" => PType::StatelessReset,
            _ => PType::Other(lower.into_boxed_str()),
        }
    }
}

/// Frame types: the qlog names, lower case, blanks as '_'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FType {
    Ack,
    Stream,
    Padding,
    Crypto,
    Ping,
    Other(Box<str>),
}

impl FType {
    pub fn as_str(&self) -> &str {
        match self {
            FType::Ack => "ack",
            FType::Stream => "stream",
            FType::Padding => "padding",
            FType::Crypto => "crypto",
            FType::Ping => "ping",
            FType::Other(s) => s,
        }
    }

    fn of(frame_type: Option<Cow<str>>, type_: Option<Cow<str>>) -> FType {
        if let Some(t) = &frame_type {
            if let Some(known) = FType::known(t) {
                return known;
            }
        }
        let name = frame_type.or(type_).unwrap_or(Cow::Borrowed("unknown")).to_lowercase().replace(' ', "_");
        FType::known(&name).unwrap_or_else(|| FType::Other(name.into_boxed_str()))
    }

    fn known(name: &str) -> Option<FType> {
        Some(match name {
            "ack" => FType::Ack,
            "stream" => FType::Stream,
            "padding" => FType::Padding,
            "crypto" => FType::Crypto,
            "ping" => FType::Ping,
            _ => return None,
        })
    }

    /// RFC 9002 §2: "Packets that contain ack-eliciting frames elicit an ACK from the receiver
    /// ... ACK, PADDING, and CONNECTION_CLOSE frames" are the exceptions (draft-era qlogs name
    /// the application CONNECTION_CLOSE, 0x1d, APPLICATION_CLOSE).
    pub fn eliciting(&self) -> bool {
        match self {
            FType::Ack | FType::Padding => false,
            FType::Other(s) => !matches!(&**s, "connection_close" | "application_close"),
            _ => true,
        }
    }

    /// Frames whose every field has a column; others keep the logged frame in `frames.details`.
    pub fn has_columns(&self) -> bool {
        !matches!(self, FType::Other(_))
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
    pub t_ms: Option<f64>,
    pub name: u32,
    pub group: u32,
    pub canon: Canon,
    pub body: Body,
    pub data: Data,
}

/// Where an array event's columns sit (qlog draft `event_fields`): indexes or -1.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub object: bool,
    pub time: i64,
    pub category: i64,
    pub event: i64,
    pub data: i64,
    pub group: i64,
}

/// How a slice's records are laid out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Records {
    /// one per line, or each after a record separator (NDJSON, JSON-SEQ)
    Lines,
    /// a JSON array of events
    Array,
    /// the elements of a JSON array, without its brackets (a stretch of a document's events array)
    Elements,
}

pub struct StageOptions {
    pub records: Records,
    pub layout: Layout,
    pub delta: bool,
    pub time_scale_ms: f64,
    /// the running sum of delta times at the end of the previous slice (raw units), if a time
    /// was seen before
    pub delta_carry: Option<f64>,
    /// several whole traces, one after the other: (trace index, events) each; empty: one trace
    pub traces: Vec<(u32, u32)>,
    pub trace_index: u32,
}

#[derive(Debug)]
pub struct StageError {
    pub pos: usize,
    /// the record (1-based within the slice) that failed, when known
    pub record: usize,
    pub what: String,
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

/// Stage `buf`; `canonical(name)` routes an event name (asked once per distinct name).
pub fn stage(buf: Vec<u8>, opts: &StageOptions, canonical: &mut dyn FnMut(&str) -> Result<Canon, String>)
             -> Result<Staged, StageError> {
    if let Err(e) = std::str::from_utf8(&buf) {
        return Err(StageError { pos: e.valid_up_to(), record: 0, what: "invalid UTF-8".into() });
    }
    let mut st = Stager {
        opts,
        out: Staged::default(),
        names: Vec::new(),
        name_ids: HashMap::default(),
        groups: vec!["".into()],
        group_ids: HashMap::from_iter([(Box::<str>::from(""), 0)]),
        tape: Vec::with_capacity(256),
        running: opts.delta_carry,
        canonical,
    };
    match opts.records {
        Records::Lines => st.lines(&buf)?,
        Records::Array => st.array(&buf)?,
        Records::Elements => st.elements(&buf, json::skip_ws(&buf, 0), 0)?,
    }
    let delta_carry = if opts.delta { st.running } else { None };
    // each event's trace and row: one trace, or several whole ones one after the other
    if opts.traces.is_empty() {
        for (row, e) in st.out.events.iter_mut().enumerate() {
            e.trace = opts.trace_index;
            e.row = row as u32;
        }
    } else {
        let expected: u64 = opts.traces.iter().map(|&(_, n)| n as u64).sum();
        if expected != st.out.events.len() as u64 {
            return Err(StageError {
                pos: 0,
                record: 0,
                what: format!("{} events staged, {} expected", st.out.events.len(), expected),
            });
        }
        let mut k = 0;
        for &(trace, n) in &opts.traces {
            for row in 0..n {
                st.out.events[k].trace = trace;
                st.out.events[k].row = row;
                k += 1;
            }
        }
    }
    let Stager { mut out, names, groups, .. } = st;
    out.names = names;
    out.groups = groups;
    out.delta_carry = delta_carry;
    out.buf = buf;
    Ok(out)
}

struct Stager<'o, 'c> {
    opts: &'o StageOptions,
    /// the staged slice so far (its buf comes last)
    out: Staged,
    names: Vec<(Box<str>, Canon)>,
    name_ids: HashMap<Box<str>, u32>,
    groups: Vec<Box<str>>,
    group_ids: HashMap<Box<str>, u32>,
    tape: Vec<Tok>,
    /// the running sum of delta times, from the trace's first (None until a time was seen)
    running: Option<f64>,
    canonical: &'c mut dyn FnMut(&str) -> Result<Canon, String>,
}

impl Stager<'_, '_> {
    /// One record per line (NDJSON), or records each after a record separator (JSON-SEQ, RFC
    /// 7464: "RS ... is used to separate texts"): every non-blank piece between line ends and
    /// separators is a record.
    fn lines(&mut self, buf: &[u8]) -> Result<(), StageError> {
        let mut start = 0;
        let mut record = 0;
        while start < buf.len() {
            let end = memchr::memchr2(b'\n', 0x1e, &buf[start..]).map_or(buf.len(), |i| start + i);
            let first = json::skip_ws(&buf[..end], start);
            if first < end {
                record += 1;
                let after = json::parse(&buf[..end], first, &mut self.tape)
                    .map_err(|e| StageError { pos: e.pos, record, what: e.what.into() })?;
                if json::skip_ws(&buf[..end], after) != end {
                    return Err(StageError { pos: after, record, what: "characters after the record".into() });
                }
                self.record(buf, record)?;
            }
            start = end + 1;
        }
        Ok(())
    }

    fn array(&mut self, buf: &[u8]) -> Result<(), StageError> {
        let pos = json::skip_ws(buf, 0);
        if buf.get(pos) != Some(&b'[') {
            return Err(StageError { pos, record: 0, what: "expected '['".into() });
        }
        self.elements(buf, json::skip_ws(buf, pos + 1), b']')
    }

    /// Comma-separated elements from `pos`, up to the byte `close` (then only blanks) or, with
    /// `close` 0, up to the end of `buf`.
    fn elements(&mut self, buf: &[u8], mut pos: usize, close: u8) -> Result<(), StageError> {
        let mut record = 0;
        let ends = |pos: usize| if close == 0 { pos >= buf.len() } else { buf.get(pos) == Some(&close) };
        if !ends(pos) {
            loop {
                record += 1;
                let after = json::parse(buf, pos, &mut self.tape)
                    .map_err(|e| StageError { pos: e.pos, record, what: e.what.into() })?;
                self.record(buf, record)?;
                pos = json::skip_ws(buf, after);
                if buf.get(pos) == Some(&b',') {
                    pos += 1;
                } else if ends(pos) {
                    break;
                } else {
                    let what = if close == 0 { "expected ','" } else { "expected ',' or ']'" };
                    return Err(StageError { pos, record, what: what.into() });
                }
            }
        }
        if close != 0 {
            pos += 1;
        }
        if json::skip_ws(buf, pos) != buf.len() {
            return Err(StageError { pos, record, what: "characters after the array".into() });
        }
        Ok(())
    }

    fn name_id(&mut self, name: &str, record: usize) -> Result<(u32, Canon), StageError> {
        if let Some(&id) = self.name_ids.get(name) {
            return Ok((id, self.names[id as usize].1));
        }
        let canon = (self.canonical)(name).map_err(|what| StageError { pos: 0, record, what })?;
        let id = self.names.len() as u32;
        self.names.push((name.into(), canon));
        self.name_ids.insert(name.into(), id);
        Ok((id, canon))
    }

    fn group_id(&mut self, group: Option<Cow<str>>) -> u32 {
        let Some(g) = group else { return 0 };
        if let Some(&id) = self.group_ids.get(&*g) {
            return id;
        }
        let id = self.groups.len() as u32;
        self.groups.push(g.as_ref().into());
        self.group_ids.insert(g.as_ref().into(), id);
        id
    }

    fn record(&mut self, buf: &[u8], record: usize) -> Result<(), StageError> {
        let tape = std::mem::take(&mut self.tape);
        let result = self.event(Doc { buf, tape: &tape }, record);
        self.tape = tape;
        let event = result?;
        self.out.events.push(event);
        Ok(())
    }

    fn event(&mut self, d: Doc, record: usize) -> Result<Event, StageError> {
        let layout = self.opts.layout;
        let root = Some(0);
        let (time, name, group, data, nameless_data) = if layout.object {
            if d.kind(0) != Kind::Object {
                (None, None, None, None, Data::Range(d.tape[0].start as u32, d.tape[0].end as u32))
            } else {
                let v: [_; RECORD_KEYS] = members(&d, root, record_key);
                let text = |i: usize| v[i].and_then(|x| d.text(x));
                let time = v[0].and_then(|i| d.f64(i));
                let name = match text(1) {
                    Some(n) => Some(n),
                    None => match (text(2), text(3).or_else(|| text(4))) {
                        (Some(c), Some(e)) => Some(Cow::Owned(format!("{c}:{e}"))),
                        _ => None,
                    },
                };
                let whole = Data::Range(d.tape[0].start as u32, d.tape[0].end as u32);
                (time, name, text(5), v[6], whole)
            }
        } else {
            // draft events: [time, category, event, data] in the order event_fields name them
            let items: Vec<usize> = d.elements(root).collect();
            let at = |k: i64| if k >= 0 { items.get(k as usize).copied() } else { None };
            if d.kind(0) != Kind::Array {
                (None, None, None, None, Data::Wrapped(None))
            } else {
                let text = |k: i64| at(k).and_then(|i| d.text(i));
                let time = text(layout.time).and_then(|t| json::str_f64(&t));
                let name = if layout.category >= 0 {
                    match (text(layout.category), text(layout.event)) {
                        (Some(c), Some(e)) => Some(Cow::Owned(format!("{c}:{e}"))),
                        _ => None,
                    }
                } else {
                    text(layout.event)
                };
                let data = at(layout.data);
                let wrapped = Data::Wrapped(data.map(|i| (d.tape[i].start as u32, d.tape[i].end as u32)));
                (time, name, text(layout.group), data, wrapped)
            }
        };
        let t_ms = self.time_ms(time);
        let group = self.group_id(group);
        let (name, canon) = match name {
            Some(n) => self.name_id(&n, record)?,
            None => {
                let (id, _) = self.name_id("", record)?;
                (id, Canon::Other)
            }
        };
        let data_text = if self.names[name as usize].0.is_empty() {
            nameless_data
        } else if !layout.object && data.is_none() {
            Data::NullText
        } else {
            data.map_or(Data::Missing, |i| Data::Range(d.tape[i].start as u32, d.tape[i].end as u32))
        };
        let out = &mut self.out;
        fn push<T>(list: &mut Vec<T>, item: T) -> u32 {
            list.push(item);
            (list.len() - 1) as u32
        }
        let body = match canon {
            Canon::PacketSent | Canon::PacketReceived => {
                let p = packet(&d, data, &mut out.frames, &mut out.ranges);
                Body::Packet(push(&mut out.packets, p))
            }
            Canon::ParametersSet => Body::Params(push(&mut out.params, params(&d, data))),
            Canon::ConnectionStarted => Body::Started(push(&mut out.started,
                d.first(data, &["original_destination_connection_id", "dst_cid", "dcid"], txt))),
            Canon::MetricsUpdated => Body::Metrics(push(&mut out.metrics, metrics(&d, data))),
            Canon::PacketLost => Body::Lost(push(&mut out.lost, lost(&d, data))),
            Canon::PacketDropped => Body::Dropped(push(&mut out.dropped, dropped(&d, data))),
            Canon::Timer => Body::Timer(push(&mut out.timers, timer(&d, data))),
            _ => Body::None,
        };
        Ok(Event { trace: 0, row: 0, t_ms, name, group, canon, body, data: data_text })
    }

    fn time_ms(&mut self, time: Option<f64>) -> Option<f64> {
        let scale = self.opts.time_scale_ms;
        if !self.opts.delta {
            return time.map(|t| t * scale);
        }
        // delta times: a running sum (NULL times add nothing), carried over from the last slice
        // as it stood, so that the sums do not depend on where the file was cut
        if let Some(t) = time {
            self.running = Some(self.running.unwrap_or(0.0) + t);
        }
        self.running.map(|sum| sum * scale)
    }
}

/// VARCHAR of a value, kept as a range of the slice when it is a plain string.
fn txt(d: &Doc, i: usize) -> Option<Txt> {
    let t = &d.tape[i];
    match t.kind {
        Kind::String if !t.escaped => Some(Txt::Range(t.start as u32 + 1, t.end as u32 - 1)),
        _ => d.text(i).map(|s| Txt::Owned(s.into_owned().into_boxed_str())),
    }
}

fn f64_(d: &Doc, i: usize) -> Option<f64> {
    d.f64(i)
}

fn i64_(d: &Doc, i: usize) -> Option<i64> {
    d.i64(i)
}

fn i32_of(v: Option<i64>) -> Option<i32> {
    v.and_then(|v| i32::try_from(v).ok())
}

/// The packet type as logged: the first spelling present (`extra`: aioquic's `packet_lost` says
/// `{"type": "1RTT", "packet_number": 7}`), or '1RTT' for a short header.
fn raw_packet_type<'a>(d: &Doc<'a>, data: Option<usize>, header: Option<usize>, extra: bool) -> Option<Cow<'a, str>> {
    let text = |obj, key| d.get(obj, key).and_then(|i| d.text(i));
    text(header, "packet_type")
        .or_else(|| text(data, "packet_type"))
        .or_else(|| text(header, "type"))
        .or_else(|| if extra { text(data, "type") } else { None })
        .or_else(|| if text(header, "form").as_deref() == Some("short") { Some(Cow::Borrowed("1RTT")) } else { None })
}

/// Keys of an object read in one pass over its members: `$keys` gets the index of each key (a
/// `match`, so a member costs a comparison or two however many keys are asked for), `$n` their
/// number.
macro_rules! keys {
    ($keys:ident, $n:ident { $($idx:literal => $key:literal),* $(,)? }) => {
        const $n: usize = [$($idx),*].len();
        fn $keys(k: &[u8]) -> Option<usize> {
            match k {
                $($key => Some($idx),)*
                _ => None,
            }
        }
    };
}

/// The value of each key of `index` in object `obj` (the first, if logged twice).
#[inline]
fn members<const N: usize>(d: &Doc, obj: Option<usize>, index: fn(&[u8]) -> Option<usize>) -> [Option<usize>; N] {
    let mut found = [None; N];
    for (key, value) in d.members(obj) {
        if let Some(i) = index(&key) {
            found[i].get_or_insert(value);
        }
    }
    found
}

/// The first of the values `at` (indexes into `found`) that converts with `f`.
#[inline]
fn first_of<T>(d: &Doc, found: &[Option<usize>], at: &[usize], f: impl Fn(&Doc, usize) -> Option<T>) -> Option<T> {
    at.iter().find_map(|&i| found[i].and_then(|v| f(d, v)))
}

keys!(record_key, RECORD_KEYS {
    0 => b"time", 1 => b"name", 2 => b"category", 3 => b"event", 4 => b"type", 5 => b"group_id", 6 => b"data",
});
keys!(packet_key, PACKET_KEYS {
    0 => b"header", 1 => b"raw", 2 => b"packet_type", 3 => b"packet_size", 4 => b"packet_number",
    5 => b"datagram_id", 6 => b"datagram_payload_checksum", 7 => b"frames",
});
keys!(header_key, HEADER_KEYS {
    0 => b"packet_type", 1 => b"type", 2 => b"form", 3 => b"packet_number", 4 => b"packet_size", 5 => b"length",
    6 => b"datagram_id", 7 => b"scid", 8 => b"dcid",
});

fn packet(d: &Doc, data: Option<usize>, frames: &mut Vec<Frame>, ranges: &mut Vec<(Option<i64>, Option<i64>)>)
          -> Packet {
    let p: [_; PACKET_KEYS] = members(d, data, packet_key);
    let h: [_; HEADER_KEYS] = members(d, p[0], header_key);
    let text = |v: Option<usize>| v.and_then(|i| d.text(i));
    // the packet type as logged: the first spelling present, or '1RTT' for a short header
    let raw_type = text(h[0]).or_else(|| text(p[2])).or_else(|| text(h[1])).or_else(|| {
        if text(h[2]).as_deref() == Some("short") { Some(Cow::Borrowed("1RTT")) } else { None }
    });
    let size = d.first(p[1], &["length"], i64_)
        .or_else(|| first_of(d, &h, &[4], i64_))
        .or_else(|| first_of(d, &p, &[3], i64_))
        .or_else(|| first_of(d, &h, &[5], i64_));
    let first_frame = frames.len();
    for f in d.elements(p[7]) {
        let f = frame(d, f, ranges);
        frames.push(f);
    }
    Packet {
        ptype: raw_type.map_or(PType::Other("unknown".into()), |t| PType::of(&t)),
        packet_number: first_of(d, &h, &[3], i64_).or_else(|| first_of(d, &p, &[4], i64_)),
        size: i32_of(size),
        datagram_id: first_of(d, &p, &[5], i64_).or_else(|| first_of(d, &h, &[6], i64_)),
        checksum: first_of(d, &p, &[6], i64_),
        scid: first_of(d, &h, &[7], txt),
        dcid: first_of(d, &h, &[8], txt),
        frames: (first_frame as u32, (frames.len() - first_frame) as u32),
    }
}

keys!(frame_key, FRAME_KEYS {
    0 => b"frame_type", 1 => b"type", 2 => b"ack_delay", 3 => b"frame_type.ack.ack_delay", 4 => b"acked_ranges",
    5 => b"largest_acknowledged", 6 => b"frame_type.ack.largest_acknowledged", 7 => b"ce", 8 => b"offset",
    9 => b"frame_type.crypto.offset", 10 => b"stream.offset", 11 => b"length", 12 => b"len", 13 => b"raw",
    14 => b"frame_type.crypto.length", 15 => b"stream.length", 16 => b"stream_id", 17 => b"stream.stream_id",
    18 => b"id", 19 => b"fin", 20 => b"sequence_number", 21 => b"ack_eliciting_threshold",
    22 => b"packet_tolerance", 23 => b"request_max_ack_delay", 24 => b"update_max_ack_delay",
    25 => b"max_ack_delay", 26 => b"reordering_threshold", 27 => b"reorder_threshold",
});

fn frame(d: &Doc, f: usize, all_ranges: &mut Vec<(Option<i64>, Option<i64>)>) -> Frame {
    let v: [_; FRAME_KEYS] = members(d, Some(f), frame_key);
    let text = |i: usize| v[i].and_then(|x| d.text(x));
    let ftype = FType::of(text(0), text(1));
    let ranges = v[4].filter(|&i| d.kind(i) == Kind::Array).map(|r| {
        let start = all_ranges.len();
        for range in d.elements(Some(r)) {
            let mut values = d.elements(Some(range).filter(|&i| d.kind(i) == Kind::Array));
            let lo = values.next().and_then(|i| d.i64(i));
            let hi = values.next().and_then(|i| d.i64(i));
            all_ranges.push((lo, hi.or(lo)));
        }
        (start as u32, (all_ranges.len() - start) as u32)
    });
    let largest = ranges.and_then(|(s, n)| all_ranges[s as usize..(s + n) as usize].iter().filter_map(|&(_, hi)| hi).max())
        .or_else(|| first_of(d, &v, &[5, 6], i64_));
    let in_data = matches!(ftype, FType::Crypto | FType::Stream);
    let sized = in_data || matches!(&ftype, FType::Padding) || ftype.as_str() == "datagram";
    let length = if sized {
        first_of(d, &v, &[11, 12], i64_)
            .or_else(|| d.first(v[13], &["payload_length"], i64_))
            .or_else(|| first_of(d, &v, &[14, 15], i64_))
    } else {
        None
    };
    Frame {
        ack_delay: first_of(d, &v, &[2, 3], f64_),
        largest_acknowledged: largest,
        ranges,
        ce: first_of(d, &v, &[7], i64_),
        offset: if in_data { first_of(d, &v, &[8, 9, 10], i64_) } else { None },
        length,
        stream_id: first_of(d, &v, &[16, 17, 18], i64_),
        fin: if ftype == FType::Stream { Some(v[19].and_then(|i| d.boolean(i)).unwrap_or(false)) } else { None },
        sequence_number: first_of(d, &v, &[20], i64_),
        ack_eliciting_threshold: first_of(d, &v, &[21, 22], i64_),
        request_max_ack_delay: first_of(d, &v, &[23, 24, 25], f64_),
        reordering_threshold: first_of(d, &v, &[26, 27], i64_),
        raw: (d.tape[f].start as u32, d.tape[f].end as u32),
        ftype,
    }
}

fn params(d: &Doc, data: Option<usize>) -> Params {
    let lower = |key| d.get(data, key).and_then(|i| d.text(i)).map(|t| t.to_lowercase());
    Params {
        owner: lower("owner").or_else(|| lower("initiator")).unwrap_or_else(|| "local".into()).into_boxed_str(),
        values: ParamValues {
            max_ack_delay: d.first(data, &["max_ack_delay"], f64_),
            ack_delay_exponent: i32_of(d.first(data, &["ack_delay_exponent"], i64_)),
            min_ack_delay: d.first(data, &["min_ack_delay"], f64_),
            initial_max_data: d.first(data, &["initial_max_data"], i64_),
            max_udp_payload_size: d.first(data, &["max_udp_payload_size", "max_packet_size"], i64_),
            max_idle_timeout: d.first(data, &["max_idle_timeout", "idle_timeout"], f64_),
            active_connection_id_limit: d.first(data, &["active_connection_id_limit"], i64_),
        },
        odcid: d.first(data, &["original_destination_connection_id"], txt),
    }
}

keys!(metrics_key, METRICS_KEYS {
    0 => b"latest_rtt", 1 => b"min_rtt", 2 => b"smoothed_rtt", 3 => b"rtt_variance", 4 => b"rttvar",
    5 => b"rtt_var", 6 => b"pto_count", 7 => b"congestion_window", 8 => b"cwnd", 9 => b"bytes_in_flight",
});

fn metrics(d: &Doc, data: Option<usize>) -> Metrics {
    let v: [_; METRICS_KEYS] = members(d, data, metrics_key);
    Metrics {
        latest_rtt: first_of(d, &v, &[0], f64_),
        min_rtt: first_of(d, &v, &[1], f64_),
        smoothed_rtt: first_of(d, &v, &[2], f64_),
        rtt_variance: first_of(d, &v, &[3, 4, 5], f64_),
        pto_count: i32_of(first_of(d, &v, &[6], i64_)),
        congestion_window: first_of(d, &v, &[7, 8], i64_),
        bytes_in_flight: first_of(d, &v, &[9], i64_),
    }
}

fn packet_number(d: &Doc, data: Option<usize>, header: Option<usize>) -> Option<i64> {
    d.first(header, &["packet_number"], i64_).or_else(|| d.first(data, &["packet_number"], i64_))
}

fn lost(d: &Doc, data: Option<usize>) -> Lost {
    let header = d.get(data, "header");
    Lost {
        ptype: raw_packet_type(d, data, header, true).map(|t| PType::of(&t)),
        packet_number: packet_number(d, data, header),
        trigger: d.first(data, &["trigger"], txt),
    }
}

fn dropped(d: &Doc, data: Option<usize>) -> Dropped {
    let header = d.get(data, "header");
    let size = d.first(d.get(data, "raw"), &["length"], i64_)
        .or_else(|| d.first(data, &["packet_size"], i64_))
        .or_else(|| d.first(header, &["packet_size"], i64_));
    Dropped {
        ptype: raw_packet_type(d, data, header, false).map(|t| PType::of(&t)),
        packet_number: packet_number(d, data, header),
        size: i32_of(size),
        trigger: d.first(data, &["trigger", "details"], txt),
    }
}

fn timer(d: &Doc, data: Option<usize>) -> Timer {
    Timer {
        timer_type: d.first(data, &["timer_type"], txt),
        event_type: d.first(data, &["event_type", "type"], txt),
        space: d.first(data, &["packet_number_space", "pn_space"], txt),
        delta: d.first(data, &["delta"], f64_),
    }
}
