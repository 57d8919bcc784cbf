//! Fields: what each qlog generation calls an event's data, read into the staged columns.
//!
//! Theory of operation: a record's own columns (`header`) sit in an object event's members —
//! `time`, `name` (qlog ≥ 0.3) or `category` with `event` (0.2) or `type`, `group_id`, `data` —
//! or, in the drafts' array events, at the indexes `event_fields` gives (`Layout`; times as
//! strings).  Its data is read for what its event's table needs (`body`): for each column the
//! spellings every generation used, looked up in one pass over an object's members (`keys!`)
//! and taken in a fixed order, newest first, the first one present that converts winning (a
//! number logged as a string, "296", is a number).  Nothing is copied but the text that has
//! escapes; the rest are indexes into the tape or byte ranges into the slice.

use std::borrow::Cow;
use std::cell::RefCell;

use super::{Body, Canon, Data, Dropped, FType, Frame, Layout, Lost, Metrics, PType, Packet, ParamValues, Params,
            Staged, Timer, Txt};
use crate::json::{Checked, Doc, Kind};

/// A record's own columns, as its trace's layout places them.
pub(super) struct Header<'a> {
    pub time: Option<f64>,
    /// the time member's value, if it has one (read or not)
    pub time_token: Option<usize>,
    pub name: Option<Cow<'a, str>>,
    pub group: Option<Cow<'a, str>>,
    /// the value of its data member (column), if any
    pub data: Option<usize>,
    /// what `other_events.data` keeps of it when it has no name
    pub nameless: Data,
}

/// The record just parsed into `d`: an object event, or an array event of a draft (`layout`).
pub(super) fn header<'a>(d: &Doc<'a>, layout: &Layout) -> Header<'a> {
    if layout.object {
        object_header(d)
    } else {
        array_header(d, layout)
    }
}

/// qlog ≥ 0.2: `{"time", "name" | "category" + "event" | "type", "group_id", "data"}`; a record
/// that is no object is kept whole.
fn object_header<'a>(d: &Doc<'a>) -> Header<'a> {
    let whole = Data::Range(d.tape[0].start, d.tape[0].end);
    if d.kind(0) != Kind::Object {
        return Header { time: None, time_token: None, name: None, group: None, data: None, nameless: whole };
    }
    let v: [_; RECORD_KEYS] = members(d, Some(0), record_key);
    let text = |i: usize| v[i].and_then(|x| d.text(x));
    let name = match text(1) {
        Some(n) => Some(n),
        None => match (text(2), text(3).or_else(|| text(4))) {
            (Some(c), Some(e)) => Some(Cow::Owned(format!("{c}:{e}"))),
            _ => None,
        },
    };
    let time = v[0].and_then(|i| finite("time")(d, i));
    Header { time, time_token: v[0], name, group: text(5), data: v[6], nameless: whole }
}

/// Drafts: `[time, category, event, data]` in the order `event_fields` names them (time as a
/// string); a record that is no array becomes `{"data": null}`.
fn array_header<'a>(d: &Doc<'a>, layout: &Layout) -> Header<'a> {
    if d.kind(0) != Kind::Array {
        return Header { time: None, time_token: None, name: None, group: None, data: None, nameless: Data::Wrapped(None) };
    }
    let items: Vec<usize> = d.elements(Some(0)).collect();
    let at = |k: i64| if k >= 0 { items.get(k as usize).copied() } else { None };
    let text = |k: i64| at(k).and_then(|i| d.text(i));
    let time = at(layout.time).and_then(|i| finite("time")(d, i));
    let name = if layout.category >= 0 {
        match (text(layout.category), text(layout.event)) {
            (Some(c), Some(e)) => Some(Cow::Owned(format!("{c}:{e}"))),
            _ => None,
        }
    } else {
        text(layout.event)
    };
    let data = at(layout.data);
    let nameless = Data::Wrapped(data.map(|i| (d.tape[i].start, d.tape[i].end)));
    Header { time, time_token: at(layout.time), name, group: text(layout.group), data, nameless }
}

/// An event's columns, read from its `data` as its kind (`canon`) needs, into `out`'s lists.
pub(super) fn body(d: &Doc, canon: Canon, data: Option<usize>, out: &mut Staged) -> Body {
    fn push<T>(list: &mut Vec<T>, item: T) -> u32 {
        list.push(item);
        (list.len() - 1) as u32
    }
    match canon {
        Canon::PacketSent | Canon::PacketReceived => {
            let p = packet(d, data, &mut out.frames, &mut out.ranges);
            Body::Packet(push(&mut out.packets, p))
        }
        Canon::ParametersSet => Body::Params(push(&mut out.params, params(d, data))),
        Canon::ConnectionStarted => Body::Started(push(&mut out.started,
            d.first(data, &["original_destination_connection_id", "dst_cid", "dcid"], txt))),
        Canon::MetricsUpdated => Body::Metrics(push(&mut out.metrics, metrics(d, data))),
        Canon::PacketLost => Body::Lost(push(&mut out.lost, lost(d, data))),
        Canon::PacketDropped => Body::Dropped(push(&mut out.dropped, dropped(d, data))),
        Canon::Timer => Body::Timer(push(&mut out.timers, timer(d, data))),
        _ => Body::None,
    }
}

/// VARCHAR of a value, kept as a range of the slice when it is a plain string.
fn txt(d: &Doc, i: usize) -> Option<Txt> {
    let t = &d.tape[i];
    match t.kind {
        Kind::String if !t.escaped => Some(Txt::Range(t.start + 1, t.end - 1)),
        _ => d.text(i).map(|s| Txt::Owned(s.into_owned().into_boxed_str())),
    }
}

thread_local! {
    /// Values out of range (`Checked::OutOfRange`) per field while a slice is staged: read as
    /// NULL, and counted for the file's warning (`take_out_of_range`).
    static OUT_OF_RANGE: RefCell<Vec<(&'static str, u32)>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn note_out_of_range(field: &'static str) {
    OUT_OF_RANGE.with_borrow_mut(|counts| match counts.iter_mut().find(|(f, _)| *f == field) {
        Some((_, n)) => *n += 1,
        None => counts.push((field, 1)),
    });
}

/// The values out of range noted on this thread since the last call, per field.
pub(super) fn take_out_of_range() -> Vec<(&'static str, u32)> {
    OUT_OF_RANGE.with_borrow_mut(std::mem::take)
}

/// `read` as a conversion for `first_of`: a value out of range is NULL, noted under `field`.
fn checked<T>(field: &'static str, read: fn(&Doc, usize) -> Checked<T>) -> impl Fn(&Doc, usize) -> Option<T> {
    move |d, i| match read(d, i) {
        Checked::Value(v) => Some(v),
        Checked::NotNumber => None,
        Checked::OutOfRange => {
            note_out_of_range(field);
            None
        }
    }
}

/// A count, packet number, size or id (`Doc::count`).
fn count(field: &'static str) -> impl Fn(&Doc, usize) -> Option<i64> {
    checked(field, |d, i| d.count(i))
}

/// An ACK delay, RTT or timeout (`Doc::duration`).
fn duration(field: &'static str) -> impl Fn(&Doc, usize) -> Option<f64> {
    checked(field, |d, i| d.duration(i))
}

/// A time, or a timer's delta (`Doc::finite`).
fn finite(field: &'static str) -> impl Fn(&Doc, usize) -> Option<f64> {
    checked(field, |d, i| d.finite(i))
}

/// A value of an INTEGER column: beyond 32 bits it is out of range.
fn i32_of(field: &'static str, v: Option<i64>) -> Option<i32> {
    let v = v?;
    i32::try_from(v).map_err(|_| note_out_of_range(field)).ok()
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
    let size = d.first(p[1], &["length"], count("packet_size"))
        .or_else(|| first_of(d, &h, &[4], count("packet_size")))
        .or_else(|| first_of(d, &p, &[3], count("packet_size")))
        .or_else(|| first_of(d, &h, &[5], count("packet_size")));
    let first_frame = frames.len();
    for f in d.elements(p[7]) {
        let f = frame(d, f, ranges);
        frames.push(f);
    }
    Packet {
        ptype: raw_type.map_or(PType::Other("unknown".into()), |t| PType::of(&t)),
        packet_number: first_of(d, &h, &[3], count("packet_number")).or_else(|| first_of(d, &p, &[4], count("packet_number"))),
        size: i32_of("packet_size", size),
        datagram_id: first_of(d, &p, &[5], count("datagram_id")).or_else(|| first_of(d, &h, &[6], count("datagram_id"))),
        checksum: first_of(d, &p, &[6], count("datagram_payload_checksum")),
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
            let lo = values.next().and_then(|i| count("acked_ranges")(d, i));
            let hi = values.next().and_then(|i| count("acked_ranges")(d, i));
            all_ranges.push((lo, hi.or(lo)));
        }
        (start as u32, (all_ranges.len() - start) as u32)
    });
    let largest = ranges.and_then(|(s, n)| all_ranges[s as usize..(s + n) as usize].iter().filter_map(|&(_, hi)| hi).max())
        .or_else(|| first_of(d, &v, &[5, 6], count("largest_acknowledged")));
    let in_data = matches!(ftype, FType::Crypto | FType::Stream);
    let sized = in_data || matches!(&ftype, FType::Padding) || ftype.as_str() == "datagram";
    let length = if sized {
        first_of(d, &v, &[11, 12], count("length"))
            .or_else(|| d.first(v[13], &["payload_length"], count("length")))
            .or_else(|| first_of(d, &v, &[14, 15], count("length")))
    } else {
        None
    };
    Frame {
        ack_delay: first_of(d, &v, &[2, 3], duration("ack_delay")),
        largest_acknowledged: largest,
        ranges,
        ce: first_of(d, &v, &[7], count("ce")),
        offset: if in_data { first_of(d, &v, &[8, 9, 10], count("offset")) } else { None },
        length,
        stream_id: first_of(d, &v, &[16, 17, 18], count("stream_id")),
        fin: if ftype == FType::Stream { Some(v[19].and_then(|i| d.boolean(i)).unwrap_or(false)) } else { None },
        sequence_number: first_of(d, &v, &[20], count("sequence_number")),
        ack_eliciting_threshold: first_of(d, &v, &[21, 22], count("ack_eliciting_threshold")),
        request_max_ack_delay: first_of(d, &v, &[23, 24, 25], duration("request_max_ack_delay")),
        reordering_threshold: first_of(d, &v, &[26, 27], count("reordering_threshold")),
        raw: (d.tape[f].start, d.tape[f].end),
        ftype,
    }
}

fn params(d: &Doc, data: Option<usize>) -> Params {
    let lower = |key| d.get(data, key).and_then(|i| d.text(i)).map(|t| t.to_lowercase());
    Params {
        owner: lower("owner").or_else(|| lower("initiator")).unwrap_or_else(|| "local".into()).into_boxed_str(),
        values: ParamValues {
            max_ack_delay: d.first(data, &["max_ack_delay"], duration("max_ack_delay")),
            // (kept as logged, even an invalid one: the ACK delays it scales are then left undecoded)
            ack_delay_exponent: i32_of("ack_delay_exponent", d.first(data, &["ack_delay_exponent"], |d, i| d.i64(i))),
            min_ack_delay: d.first(data, &["min_ack_delay"], duration("min_ack_delay")),
            initial_max_data: d.first(data, &["initial_max_data"], count("initial_max_data")),
            max_udp_payload_size: d.first(data, &["max_udp_payload_size", "max_packet_size"], count("max_udp_payload_size")),
            max_idle_timeout: d.first(data, &["max_idle_timeout", "idle_timeout"], duration("max_idle_timeout")),
            active_connection_id_limit: d.first(data, &["active_connection_id_limit"], count("active_connection_id_limit")),
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
        latest_rtt: first_of(d, &v, &[0], duration("latest_rtt")),
        min_rtt: first_of(d, &v, &[1], duration("min_rtt")),
        smoothed_rtt: first_of(d, &v, &[2], duration("smoothed_rtt")),
        rtt_variance: first_of(d, &v, &[3, 4, 5], duration("rtt_variance")),
        pto_count: i32_of("pto_count", first_of(d, &v, &[6], count("pto_count"))),
        congestion_window: first_of(d, &v, &[7, 8], count("congestion_window")),
        bytes_in_flight: first_of(d, &v, &[9], count("bytes_in_flight")),
    }
}

fn packet_number(d: &Doc, data: Option<usize>, header: Option<usize>) -> Option<i64> {
    d.first(header, &["packet_number"], count("packet_number")).or_else(|| d.first(data, &["packet_number"], count("packet_number")))
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
    let size = d.first(d.get(data, "raw"), &["length"], count("packet_size"))
        .or_else(|| d.first(data, &["packet_size"], count("packet_size")))
        .or_else(|| d.first(header, &["packet_size"], count("packet_size")));
    Dropped {
        ptype: raw_packet_type(d, data, header, false).map(|t| PType::of(&t)),
        packet_number: packet_number(d, data, header),
        size: i32_of("packet_size", size),
        trigger: d.first(data, &["trigger", "details"], txt),
    }
}

fn timer(d: &Doc, data: Option<usize>) -> Timer {
    Timer {
        timer_type: d.first(data, &["timer_type"], txt),
        event_type: d.first(data, &["event_type", "type"], txt),
        space: d.first(data, &["packet_number_space", "pn_space"], txt),
        delta: d.first(data, &["delta"], finite("delta")),
    }
}
