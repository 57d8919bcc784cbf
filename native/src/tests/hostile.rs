//! Hostile input (issue 31): a number a double cannot hold (1e400) is refused like NaN, at its byte and
//! naming its field; a refusal tells a slice cut inside a record (`eof`) from a bad token; a
//! finite value no column can hold (a negative packet number, a fraction, 2^64, an ACK delay of
//! −1 ms, "NaN" in a string) is read as NULL and counted per field; an event whose time is no
//! time says where that time is.

use super::{options, stage_lines, stage_with, OBJECT};
use crate::event::Records;
use crate::json::{parse, Checked, Doc};

fn refusal(text: &str) -> crate::json::Error {
    let mut tape = Vec::new();
    parse(text.as_bytes(), 0, &mut tape).expect_err(text)
}

#[test]
fn a_number_beyond_a_double_is_refused_like_nan_at_its_byte_and_field() {
    let text = r#"{"time": 1, "data": {"frames": [{"frame_type": "ack", "ack_delay": 1e400}]}}"#;
    let e = refusal(text);
    assert_eq!((e.pos, e.what, e.field.as_str(), e.eof), (text.find("1e400").unwrap(), "number out of range",
                                                          "data.frames[0].ack_delay", false));
    for bad in ["-1e400", "1E+309", "123e99999999999999999999", &"9".repeat(400)] {
        assert_eq!(refusal(&format!("[{bad}]")).what, "number out of range", "{bad}");
    }
    // NaN and Infinity are no JSON: refused where they stand, with the same field
    let e = refusal(r#"{"data": {"latest_rtt": NaN}}"#);
    assert_eq!((e.pos, e.field.as_str(), e.eof), (24, "data.latest_rtt", false));
    // what a double holds is read (an underflow is 0)
    let mut tape = Vec::new();
    for fine in ["1e308", "-1e300", "1e-400", &"9".repeat(300), "0.5e2"] {
        parse(format!("[{fine}]").as_bytes(), 0, &mut tape).expect(fine);
    }
}

#[test]
fn a_refusal_names_the_field_and_tells_a_cut_from_a_bad_token() {
    let e = refusal(r#"[1, {"a": [true, x]}]"#);
    assert_eq!((e.pos, e.field.as_str(), e.eof), (17, "[1].a[1]", false));
    let e = refusal(r#"{"name": "x", "data": {"s": "abc"#);
    assert_eq!((e.what, e.field.as_str(), e.eof), ("unterminated string", "data.s", true));
    let e = refusal(r#"{"name": "x", "data": {"a": 1}"#);
    assert!(e.eof);
    let e = refusal(r#"{"a": 1,}"#);
    assert_eq!((e.what, e.eof), ("expected a string key", false));
    // a flipped byte inside a staged event: the record, the byte, the field
    let text = "{\"time\": 1, \"name\": \"a\"}\n{\"time\": 2, \"name\": \"b\", \"data\": {\"x\": [1, 2}}\n";
    let e = stage_with(text.as_bytes(), &options(Records::Lines, OBJECT)).err().unwrap();
    assert_eq!((e.record, e.pos, e.field.as_str(), e.eof), (2, text.find("2}}").unwrap() + 1, "data.x[2]", false));
}

#[test]
fn values_no_column_holds_are_null_and_counted_per_field() {
    let mut tape = Vec::new();
    let text = r#"[-1, 0.5, 18446744073709551616, 7, 7.0, "0x10", " 12 ", "-3", "1.5", "abc", true, null]"#;
    parse(text.as_bytes(), 0, &mut tape).unwrap();
    let d = Doc { buf: text.as_bytes(), tape: &tape };
    let counts: Vec<_> = d.elements(Some(0)).map(|i| d.count(i)).collect();
    use Checked::*;
    assert_eq!(counts, [OutOfRange, OutOfRange, OutOfRange, Value(7), Value(7), Value(16), Value(12), OutOfRange,
                        OutOfRange, NotNumber, Value(1), NotNumber]);
    let text = r#"[-1, 2.5, "NaN", "inf", "1e400", "x"]"#;
    parse(text.as_bytes(), 0, &mut tape).unwrap();
    let d = Doc { buf: text.as_bytes(), tape: &tape };
    let durations: Vec<_> = d.elements(Some(0)).map(|i| d.duration(i)).collect();
    assert_eq!(durations, [OutOfRange, Value(2.5), OutOfRange, OutOfRange, OutOfRange, NotNumber]);

    let s = stage_lines(concat!(
        r#"{"time": 1, "name": "transport:packet_sent", "data": {"header": {"packet_type": "1RTT", "packet_number": -1}, "frames": [{"frame_type": "ack", "ack_delay": -1, "acked_ranges": [[0, 0.5]]}]}}"#, "\n",
        r#"{"time": 2, "name": "transport:packet_sent", "data": {"header": {"packet_type": "1RTT", "packet_number": 18446744073709551616}}}"#, "\n",
        r#"{"time": 3, "name": "recovery:metrics_updated", "data": {"latest_rtt": "NaN", "smoothed_rtt": 5, "min_rtt": 1e305}}"#, "\n",
        r#"{"time": 4, "name": "transport:parameters_set", "data": {"ack_delay_exponent": 21, "max_ack_delay": 25}}"#, "\n",
        r#"{"time": "1e400", "name": "transport:packet_received", "data": {"header": {"packet_type": "1RTT", "packet_number": 3}}}"#,
    ));
    let mut counts = s.out_of_range.clone();
    counts.sort();
    assert_eq!(counts, [("ack_delay", 1), ("acked_ranges", 1), ("latest_rtt", 1), ("min_rtt", 1), ("packet_number", 2),
                        ("time", 1)]);
    assert_eq!((s.packets[0].packet_number, s.packets[1].packet_number, s.packets[2].packet_number), (None, None, Some(3)));
    assert_eq!(s.frames[0].ack_delay, None);
    assert_eq!((s.metrics[0].latest_rtt, s.metrics[0].smoothed_rtt), (None, Some(5.0)));
    // (an invalid ack_delay_exponent is kept as logged: the delays it scales are left undecoded)
    assert_eq!((s.params[0].values.ack_delay_exponent, s.params[0].values.max_ack_delay), (Some(21), Some(25.0)));
    // the event whose time is no time: where its record and its time are
    let e = &s.events[4];
    assert_eq!(e.t_ms, None);
    let at = e.at as usize;
    assert_eq!(s.bad_times, [(e.at, at as u32 + 9, at as u32 + 16)]);
    assert_eq!(&s.buf[at + 9..at + 16], b"\"1e400\"");
    // the next slice counts afresh
    assert!(stage_lines(r#"{"time": 1, "name": "a"}"#).out_of_range.is_empty());
}

#[test]
fn a_delta_time_sum_that_leaves_the_range_is_null() {
    let mut opts = options(Records::Lines, OBJECT);
    opts.delta = true;
    let text = "{\"time\": 1e300, \"name\": \"a\"}\n{\"time\": 1e300, \"name\": \"b\"}\n";
    let s = stage_with(text.as_bytes(), &opts).unwrap();
    assert_eq!((s.events[0].t_ms, s.events[1].t_ms), (Some(1e300), None));
    assert_eq!(s.out_of_range, [("time", 1)]);
}
