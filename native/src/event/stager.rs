//! The stager: a slice's records, one after another, into events.
//!
//! Theory of operation: the slice is checked for UTF-8 once, then cut into records as it is laid
//! out (`Records`: one per line or after each JSON-SEQ record separator, a JSON array, or the
//! elements of one without its brackets) and each record parsed into the one reused tape.  A
//! record's time, name, group and data are read as the trace's `Layout` says (`fields::header`),
//! its name routed once per distinct name (`canonical`, Python's mapping), and its data read into
//! its kind's columns (`fields::body`).  Delta times are summed as they come, carried from the
//! previous slice, so that the sums do not depend on where a file was cut.  Any parse failure
//! refuses the whole slice, with the byte and the record where it happened.

use std::borrow::Cow;
use rustc_hash::FxHashMap as HashMap;

use super::{fields, Canon, Data, Event, Staged};
use crate::json::{self, Doc, Tok};

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
    /// the member of the record the bad token belongs to (`data.frames[0].ack_delay`), if known
    pub field: String,
    /// the slice ended inside the record (a cut in the wrong place), rather than a token being wrong
    pub eof: bool,
    /// where the record that failed starts in the slice (`pos` when not known)
    pub at: usize,
}

impl StageError {
    fn new(pos: usize, record: usize, what: impl Into<String>) -> StageError {
        StageError { pos, record, what: what.into(), field: String::new(), eof: false, at: pos }
    }

    fn parse(e: json::Error, record: usize, at: usize) -> StageError {
        StageError { pos: e.pos, record, what: e.what.into(), field: e.field, eof: e.eof, at }
    }
}

/// Stage `buf`; `canonical(name)` routes an event name (asked once per distinct name).
pub fn stage(buf: Vec<u8>, opts: &StageOptions, canonical: &mut dyn FnMut(&str) -> Result<Canon, String>)
             -> Result<Staged, StageError> {
    if let Err(e) = std::str::from_utf8(&buf) {
        let pos = e.valid_up_to();
        // (in a slice of lines, the record it is in starts after the line end before it)
        let at = if opts.records == Records::Lines {
            json::skip_ws(&buf, memchr::memrchr2(b'\n', 0x1e, &buf[..pos]).map_or(0, |i| i + 1))
        } else {
            pos
        };
        return Err(StageError { at, ..StageError::new(pos, 0, "invalid UTF-8") });
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
        time_token: None,
        canonical,
    };
    fields::take_out_of_range(); // (what an earlier slice refused on this thread left)
    let staged = match opts.records {
        Records::Lines => st.lines(&buf),
        Records::Array => st.array(&buf),
        Records::Elements => st.elements(&buf, json::skip_ws(&buf, 0), 0),
    };
    st.out.out_of_range = fields::take_out_of_range();
    staged?;
    let delta_carry = if opts.delta { st.running } else { None };
    number_rows(&mut st.out.events, opts)?;
    let Stager { mut out, names, groups, .. } = st;
    out.names = names;
    out.groups = groups;
    out.delta_carry = delta_carry;
    out.buf = buf;
    Ok(out)
}

/// Each event's trace and row: one trace, or several whole ones one after the other.
fn number_rows(events: &mut [Event], opts: &StageOptions) -> Result<(), StageError> {
    if opts.traces.is_empty() {
        for (row, e) in events.iter_mut().enumerate() {
            e.trace = opts.trace_index;
            e.row = row as u32;
        }
        return Ok(());
    }
    let expected: u64 = opts.traces.iter().map(|&(_, n)| n as u64).sum();
    if expected != events.len() as u64 {
        return Err(StageError::new(0, 0, format!("{} events staged, {} expected", events.len(), expected)));
    }
    let mut k = 0;
    for &(trace, n) in &opts.traces {
        for row in 0..n {
            events[k].trace = trace;
            events[k].row = row;
            k += 1;
        }
    }
    Ok(())
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
    /// the byte range of the time member's value of the event just read, if it has one
    time_token: Option<(u32, u32)>,
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
                let after = json::parse(&buf[..end], first, &mut self.tape).map_err(|e| StageError::parse(e, record, first))?;
                if json::skip_ws(&buf[..end], after) != end {
                    return Err(StageError { at: first, ..StageError::new(after, record, "characters after the record") });
                }
                self.record(buf, record, first)?;
            }
            start = end + 1;
        }
        Ok(())
    }

    fn array(&mut self, buf: &[u8]) -> Result<(), StageError> {
        let pos = json::skip_ws(buf, 0);
        if buf.get(pos) != Some(&b'[') {
            return Err(StageError::new(pos, 0, "expected '['"));
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
                let start = json::skip_ws(buf, pos);
                let after = json::parse(buf, pos, &mut self.tape).map_err(|e| StageError::parse(e, record, start))?;
                self.record(buf, record, start)?;
                pos = json::skip_ws(buf, after);
                if buf.get(pos) == Some(&b',') {
                    pos += 1;
                } else if ends(pos) {
                    break;
                } else {
                    let what = if close == 0 { "expected ','" } else { "expected ',' or ']'" };
                    return Err(StageError { eof: pos >= buf.len(), ..StageError::new(pos, record, what) });
                }
            }
        }
        if close != 0 {
            pos += 1;
        }
        if json::skip_ws(buf, pos) != buf.len() {
            return Err(StageError::new(pos, record, "characters after the array"));
        }
        Ok(())
    }

    fn name_id(&mut self, name: &str, record: usize) -> Result<(u32, Canon), StageError> {
        if let Some(&id) = self.name_ids.get(name) {
            return Ok((id, self.names[id as usize].1));
        }
        let canon = (self.canonical)(name).map_err(|what| StageError::new(0, record, what))?;
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

    fn record(&mut self, buf: &[u8], record: usize, at: usize) -> Result<(), StageError> {
        let tape = std::mem::take(&mut self.tape);
        let result = self.event(Doc { buf, tape: &tape }, record);
        self.tape = tape;
        let mut event = result?;
        event.at = at as u32;
        if let Some((start, end)) = self.time_token.take() {
            if event.t_ms.is_none() {
                self.out.bad_times.push((event.at, start, end));
            }
        }
        self.out.events.push(event);
        Ok(())
    }

    fn event(&mut self, d: Doc, record: usize) -> Result<Event, StageError> {
        let layout = self.opts.layout;
        let header = fields::header(&d, &layout);
        let t_ms = self.time_ms(header.time);
        self.time_token = header.time_token.map(|i| (d.tape[i].start, d.tape[i].end));
        let group = self.group_id(header.group);
        let (name, canon) = match header.name {
            Some(n) => self.name_id(&n, record)?,
            None => {
                let (id, _) = self.name_id("", record)?;
                (id, Canon::Other)
            }
        };
        let data = header.data;
        let data_text = if self.names[name as usize].0.is_empty() {
            header.nameless
        } else if !layout.object && data.is_none() {
            Data::NullText
        } else {
            data.map_or(Data::Missing, |i| Data::Range(d.tape[i].start, d.tape[i].end))
        };
        let body = fields::body(&d, canon, data, &mut self.out);
        Ok(Event { trace: 0, row: 0, at: 0, t_ms, name, group, canon, body, data: data_text })
    }

    fn time_ms(&mut self, time: Option<f64>) -> Option<f64> {
        let scale = self.opts.time_scale_ms;
        // (a time of at most json::MAX_MAGNITUDE stays finite in ms; a running sum may not)
        let finite = |ms: f64| {
            if ms.abs() <= json::MAX_MAGNITUDE {
                Some(ms)
            } else {
                fields::note_out_of_range("time");
                None
            }
        };
        if !self.opts.delta {
            return time.and_then(|t| finite(t * scale));
        }
        // delta times: a running sum (NULL times add nothing), carried over from the last slice
        // as it stood, so that the sums do not depend on where the file was cut
        if let Some(t) = time {
            let sum = self.running.unwrap_or(0.0) + t;
            if sum.abs() > json::MAX_MAGNITUDE {
                fields::note_out_of_range("time");
                return None;
            }
            self.running = Some(sum);
        }
        self.running.and_then(|sum| finite(sum * scale))
    }
}
