//! Staging (`crate::event`): every qlog generation's way of writing the same thing stages as the
//! same value — draft-00/01 array events (`event_fields`), 0.2 objects with `category` and
//! `event`, 0.3 objects with `name`, the main schema (0.4, `quic:` names) — and each column's
//! alternative spellings, newest first.

use super::{canonical, options, stage_lines, stage_with, OBJECT};
use crate::event::{self, Body, Canon, Data, FType, Frame, Layout, PType, Packet, Records, Staged, Txt};

/// Stage one object event of `name` with `data`.
fn event(name: &str, data: &str) -> Staged {
    stage_lines(&format!(r#"{{"time": 0, "name": "{name}", "data": {data}}}"#))
}

fn packet(s: &Staged) -> &Packet {
    s.packet(&s.events[0]).expect("a packet event")
}

/// The first frame of a packet_sent with these frames.
fn frame_of(frames: &str) -> Staged {
    event("transport:packet_sent", &format!(r#"{{"header": {{"packet_type": "1RTT"}}, "frames": [{frames}]}}"#))
}

fn frame(s: &Staged) -> &Frame {
    &s.frames_of(packet(s))[0]
}

fn name(s: &Staged, i: usize) -> &str {
    &s.names[s.events[i].name as usize].0
}

fn text(s: &Staged, t: &Option<Txt>) -> Option<String> {
    t.as_ref().map(|t| t.get(&s.buf).to_string())
}

/// The text of an event's data as staged (`Data::Range`), or what else it is.
fn data(s: &Staged, i: usize) -> String {
    match s.events[i].data {
        Data::Range(a, b) => String::from_utf8(s.buf[a as usize..b as usize].to_vec()).unwrap(),
        other => format!("{other:?}"),
    }
}

/// qlog draft-01: `event_fields: ["relative_time", "category", "event", "data"]`.
const DRAFT_01: Layout = Layout { object: false, time: 0, category: 1, event: 2, data: 3, group: -1 };

#[test]
fn draft_01_array_events_are_read_as_event_fields_say() {
    let record = r#"["250", "transport", "packet_sent", {"packet_type": "initial", "header": {"packet_number": "3", "packet_size": 1252}, "frames": [{"frame_type": "ack", "ack_delay": "12", "acked_ranges": [["0", "2"]]}]}]"#;
    let s = stage_with(record.as_bytes(), &options(Records::Lines, DRAFT_01)).unwrap();
    let e = &s.events[0];
    assert_eq!((name(&s, 0), e.canon, e.t_ms), ("transport:packet_sent", Canon::PacketSent, Some(250.0)));
    let p = packet(&s);
    assert_eq!((&p.ptype, p.packet_number, p.size), (&PType::Initial, Some(3), Some(1252)));
    let f = frame(&s);
    assert_eq!((&f.ftype, f.ack_delay, f.largest_acknowledged), (&FType::Ack, Some(12.0), Some(2)));
    assert_eq!(s.ranges_of(f), Some(&[(Some(0), Some(2))][..]));
    assert!(data(&s, 0).starts_with(r#"{"packet_type": "initial""#));
}

#[test]
fn draft_00_array_events_with_a_trigger_and_a_group_column() {
    // event_fields ["relative_time", "category", "event", "trigger", "data", "group_id"];
    // numbers logged as numbers or as strings alike
    let layout = Layout { object: false, time: 0, category: 1, event: 2, data: 4, group: 5 };
    let record = r#"[1000, "recovery", "metrics_updated", "ack_received", {"cwnd": "14720", "bytes_in_flight": 1200, "smoothed_rtt": 20, "rtt_var": 5, "min_rtt": "18", "latest_rtt": 22}, "conn-1"]"#;
    let s = stage_with(record.as_bytes(), &options(Records::Lines, layout)).unwrap();
    let e = &s.events[0];
    assert_eq!((name(&s, 0), e.canon, e.t_ms), ("recovery:metrics_updated", Canon::MetricsUpdated, Some(1000.0)));
    assert_eq!(&*s.groups[e.group as usize], "conn-1");
    let Body::Metrics(i) = e.body else { panic!("{:?}", e.body) };
    let m = &s.metrics[i as usize];
    assert_eq!((m.congestion_window, m.bytes_in_flight, m.pto_count), (Some(14720), Some(1200), None));
    assert_eq!((m.smoothed_rtt, m.rtt_variance, m.min_rtt, m.latest_rtt), (Some(20.0), Some(5.0), Some(18.0), Some(22.0)));
}

#[test]
fn draft_records_that_are_no_events_are_kept_as_data() {
    let records = [
        r#"{"qlog_version": "draft-01"}"#,               // not an array: {"data": null}
        r#"["5", "transport"]"#,                          // no event name: {"data": null}
        r#"["5", null, "x", {"a": 1}]"#,                  // no category: {"data": {"a": 1}}
        r#"["5", "transport", "packet_sent"]"#,           // no data column: 'null'
    ];
    let text = records.join("\n");
    let s = stage_with(text.as_bytes(), &options(Records::Lines, DRAFT_01)).unwrap();
    let kinds: Vec<_> = s.events.iter().map(|e| (e.canon, format!("{:?}", e.data))).collect();
    let at = text.find(r#"{"a": 1}"#).unwrap();
    assert_eq!(kinds, [
        (Canon::Other, "Wrapped(None)".to_string()),
        (Canon::Other, "Wrapped(None)".into()),
        (Canon::Other, format!("Wrapped(Some(({}, {})))", at, at + 8)),
        (Canon::PacketSent, "NullText".into()),
    ]);
    assert_eq!((name(&s, 0), name(&s, 1), name(&s, 2)), ("", "", ""));
    assert_eq!((s.events[0].t_ms, s.events[1].t_ms), (None, Some(5.0)));
    let p = s.packet(&s.events[3]).unwrap();
    assert_eq!((&p.ptype, p.packet_number), (&PType::Other("unknown".into()), None));
}

#[test]
fn qlog_0_3_object_events_are_named_by_name() {
    let s = stage_lines(r#"{"time": 1.5, "name": "transport:packet_received", "data": {"header": {"packet_type": "1RTT", "packet_number": 7, "dcid": "abcd"}, "frames": [{"frame_type": "ack", "ack_delay": 2.5, "acked_ranges": [[1, 3], [5]]}]}}"#);
    let e = &s.events[0];
    assert_eq!((name(&s, 0), e.canon, e.t_ms), ("transport:packet_received", Canon::PacketReceived, Some(1.5)));
    let p = s.packet(e).unwrap();
    assert_eq!((&p.ptype, p.packet_number, text(&s, &p.dcid)), (&PType::OneRtt, Some(7), Some("abcd".into())));
    let f = frame(&s);
    assert_eq!((f.ack_delay, f.largest_acknowledged), (Some(2.5), Some(5)));
    assert_eq!(s.ranges_of(f), Some(&[(Some(1), Some(3)), (Some(5), Some(5))][..]));
}

#[test]
fn qlog_0_2_object_events_are_named_by_category_and_event_or_type() {
    let s = stage_lines(concat!(
        r#"{"time": 2, "category": "transport", "event": "packet_sent", "data": {"packet_type": "handshake", "header": {"packet_number": 4}}}"#, "\n",
        r#"{"time": 3, "category": "recovery", "type": "metrics_updated", "data": {"rttvar": 5}}"#, "\n",
        r#"{"time": 4, "category": "c", "event": "e", "type": "t"}"#, "\n",
        r#"{"time": 5, "name": "transport:packet_sent", "category": "c", "event": "e", "data": {}}"#,
    ));
    assert_eq!((name(&s, 0), s.events[0].canon), ("transport:packet_sent", Canon::PacketSent));
    assert_eq!((&packet(&s).ptype, packet(&s).packet_number), (&PType::Handshake, Some(4)));
    assert_eq!((name(&s, 1), s.events[1].canon), ("recovery:metrics_updated", Canon::MetricsUpdated));
    assert_eq!(s.metrics[0].rtt_variance, Some(5.0));
    assert_eq!(name(&s, 2), "c:e"); // event before type
    assert_eq!(name(&s, 3), "transport:packet_sent"); // name before both
    assert_eq!(format!("{:?}", s.events[2].data), "Missing");
}

#[test]
fn main_schema_0_4_events_with_raw_and_group_id() {
    let s = stage_lines(concat!(
        r#"{"time": 10, "name": "quic:packet_sent", "group_id": "g1", "data": {"header": {"packet_type": "1RTT", "packet_number": 9, "scid": "", "dcid": "0a0b"}, "raw": {"length": 1200}, "datagram_id": 4, "datagram_payload_checksum": 77, "frames": [{"frame_type": "stream", "stream_id": 0, "offset": 0, "raw": {"payload_length": 100}, "fin": true}, {"frame_type": "ack", "ack_delay": 1.5, "acked_ranges": [[0, 4]]}]}}"#, "\n",
        r#"{"time": 11, "name": "quic:datagrams_received", "group_id": "g2", "data": {"count": 1}}"#,
    ));
    let e = &s.events[0];
    assert_eq!((e.canon, &*s.groups[e.group as usize]), (Canon::PacketSent, "g1"));
    let p = packet(&s);
    assert_eq!((p.size, p.datagram_id, p.checksum, p.frames.1), (Some(1200), Some(4), Some(77), 2));
    assert_eq!((text(&s, &p.scid), text(&s, &p.dcid)), (Some("".into()), Some("0a0b".into())));
    let f = frame(&s);
    assert_eq!((&f.ftype, f.stream_id, f.offset, f.length, f.fin), (&FType::Stream, Some(0), Some(0), Some(100), Some(true)));
    assert_eq!((s.events[1].canon, &*s.groups[s.events[1].group as usize]), (Canon::DatagramsReceived, "g2"));
    assert_eq!(data(&s, 1), r#"{"count": 1}"#);
}

#[test]
fn object_records_that_are_no_events_are_kept_whole() {
    let s = stage_lines("{\"qlog_version\": \"0.3\", \"trace\": {}}\n5\n{\"time\": 1, \"name\": \"transport:x\"}");
    assert_eq!((name(&s, 0), s.events[0].canon), ("", Canon::Other));
    assert_eq!(data(&s, 0), r#"{"qlog_version": "0.3", "trace": {}}"#);
    assert_eq!((name(&s, 1), data(&s, 1), s.events[1].t_ms), ("", "5".into(), None));
    assert_eq!((name(&s, 2), data(&s, 2)), ("transport:x", "Missing".into()));
}

#[test]
fn every_spelling_of_a_packet_type_stages_as_one_type() {
    let spellings: [(&[&str], PType); 8] = [
        (&["1RTT", "1rtt", "onertt", "OneRTT", "one_rtt", "short", "1RTT_PROTECTED", "1rtt-protected", "protected"],
         PType::OneRtt),
        (&["0RTT", "0rtt", "zerortt", "zero_rtt", "0RTT_PROTECTED"], PType::ZeroRtt),
        (&["initial", "Initial", "INITIAL"], PType::Initial),
        (&["handshake", "HANDSHAKE"], PType::Handshake),
        (&["retry", "RETRY"], PType::Retry),
        (&["version_negotiation", "VERSION_NEGOTIATION", "versionnegotiation", "version_negotation"],
         PType::VersionNegotiation),
        (&["stateless_reset", "StatelessReset"], PType::StatelessReset),
        (&["Unknown_Type"], PType::Other("unknown_type".into())),
    ];
    for (names, expected) in spellings {
        for spelling in names {
            let s = event("transport:packet_sent", &format!(r#"{{"header": {{"packet_type": "{spelling}"}}}}"#));
            assert_eq!(packet(&s).ptype, expected, "{spelling}");
        }
    }
    // what each means (RFC 9000 §12.2 coalescing order, §12.3 packet number spaces)
    let meaning = |t: PType| (t.as_str().to_string(), t.rank(), t.space());
    assert_eq!(meaning(PType::of("initial")), ("initial".into(), 0, Some("initial")));
    assert_eq!(meaning(PType::of("zerortt")), ("0RTT".into(), 1, Some("application_data")));
    assert_eq!(meaning(PType::of("HANDSHAKE")), ("handshake".into(), 2, Some("handshake")));
    assert_eq!(meaning(PType::of("short")), ("1RTT".into(), 3, Some("application_data")));
    assert_eq!(meaning(PType::of("retry")), ("retry".into(), 9, None));
}

#[test]
fn a_packet_type_is_read_wherever_a_generation_puts_it() {
    let cases = [
        (r#"{"header": {"packet_type": "handshake"}}"#, PType::Handshake),   // 0.3 and later
        (r#"{"packet_type": "handshake"}"#, PType::Handshake),               // draft-01
        (r#"{"header": {"type": "handshake"}}"#, PType::Handshake),
        (r#"{"packet_type": "initial", "header": {"packet_type": "handshake"}}"#, PType::Handshake),
        (r#"{"packet_type": "handshake", "header": {"type": "initial"}}"#, PType::Handshake),
        (r#"{"header": {"form": "short"}}"#, PType::OneRtt),                 // a short header is 1-RTT
        (r#"{"header": {"form": "long"}}"#, PType::Other("unknown".into())),
        (r#"{"type": "handshake"}"#, PType::Other("unknown".into())),        // not in a packet event
        ("{}", PType::Other("unknown".into())),
    ];
    for (data, expected) in cases {
        assert_eq!(packet(&event("transport:packet_received", data)).ptype, expected, "{data}");
    }
}

#[test]
fn packet_number_spellings() {
    for data in [
        r#"{"header": {"packet_number": 7}}"#,
        r#"{"header": {"packet_number": "7"}}"#,
        r#"{"header": {"packet_number": 7.0}}"#,
        r#"{"packet_number": 7}"#,                                  // draft-00
        r#"{"packet_number": 1, "header": {"packet_number": 7}}"#, // the header's first
    ] {
        assert_eq!(packet(&event("transport:packet_sent", data)).packet_number, Some(7), "{data}");
    }
}

#[test]
fn packet_size_spellings() {
    for data in [
        r#"{"raw": {"length": 1200}}"#,                             // 0.4
        r#"{"header": {"packet_size": 1200}}"#,                     // 0.3
        r#"{"packet_size": 1200}"#,                                 // draft
        r#"{"header": {"length": 1200}}"#,
        r#"{"header": {"packet_size": "1200"}}"#,
        r#"{"raw": {"length": 1200}, "header": {"packet_size": 1, "length": 3}, "packet_size": 2}"#,
        r#"{"header": {"packet_size": 1200, "length": 3}, "packet_size": 2}"#,
        r#"{"header": {"length": 3}, "packet_size": 1200}"#,
    ] {
        assert_eq!(packet(&event("transport:packet_sent", data)).size, Some(1200), "{data}");
    }
}

#[test]
fn ack_delay_spellings() {
    for f in [
        r#"{"frame_type": "ack", "ack_delay": 2.5}"#,
        r#"{"frame_type": "ack", "ack_delay": "2.5"}"#,
        r#"{"frame_type": "ack", "frame_type.ack.ack_delay": 2.5}"#,
        r#"{"frame_type": "ack", "ack_delay": 2.5, "frame_type.ack.ack_delay": 9}"#,
    ] {
        assert_eq!(frame(&frame_of(f)).ack_delay, Some(2.5), "{f}");
    }
    assert_eq!(frame(&frame_of(r#"{"frame_type": "ack"}"#)).ack_delay, None);
}

#[test]
fn acked_ranges_spellings() {
    for ranges in [r#"[[1, 3], [5]]"#, r#"[[1, 3], [5, 5]]"#, r#"[["1", "3"], ["5"]]"#, r#"[[1, "3"], [5.0]]"#] {
        let s = frame_of(&format!(r#"{{"frame_type": "ack", "acked_ranges": {ranges}, "largest_acknowledged": 9}}"#));
        let f = frame(&s);
        assert_eq!(s.ranges_of(f), Some(&[(Some(1), Some(3)), (Some(5), Some(5))][..]), "{ranges}");
        assert_eq!(f.largest_acknowledged, Some(5), "{ranges}"); // the ranges' highest
    }
    // without ranges (pcap2qlog 0.1): the largest acknowledged as logged
    for f in [r#"{"frame_type": "ack", "largest_acknowledged": 5}"#,
              r#"{"frame_type": "ack", "frame_type.ack.largest_acknowledged": "5"}"#,
              r#"{"frame_type": "ack", "acked_ranges": "1-5", "largest_acknowledged": 5}"#] {
        let s = frame_of(f);
        assert_eq!((s.ranges_of(frame(&s)), frame(&s).largest_acknowledged), (None, Some(5)), "{f}");
    }
}

#[test]
fn frame_type_spellings() {
    let cases = [
        (r#"{"frame_type": "ack"}"#, FType::Ack),
        (r#"{"frame_type": "ACK"}"#, FType::Ack),
        (r#"{"type": "ack"}"#, FType::Ack),
        (r#"{"frame_type": "ping", "type": "ack"}"#, FType::Ping),
        (r#"{"frame_type": "MAX_DATA", "type": "ack"}"#, FType::Other("max_data".into())),
        (r#"{"frame_type": "Connection Close"}"#, FType::Other("connection_close".into())),
        ("{}", FType::Other("unknown".into())),
    ];
    for (f, expected) in cases {
        assert_eq!(frame(&frame_of(f)).ftype, expected, "{f}");
    }
    // RFC 9002 §2: all frames but ACK, PADDING and CONNECTION_CLOSE are ack-eliciting
    let eliciting = |f: &str| FType::of(Some(f.into()), None).eliciting();
    assert_eq!(["ack", "padding", "connection_close", "application_close", "ping", "stream", "crypto", "max_data"]
                   .map(eliciting), [false, false, false, false, true, true, true, true]);
}

#[test]
fn stream_and_crypto_field_spellings() {
    for f in [
        r#"{"frame_type": "stream", "stream_id": 4, "offset": 10, "length": 100, "fin": true}"#,
        r#"{"frame_type": "stream", "stream.stream_id": 4, "stream.offset": 10, "stream.length": 100, "fin": "true"}"#,
        r#"{"frame_type": "stream", "id": 4, "offset": "10", "len": 100, "fin": 1}"#,
        r#"{"frame_type": "stream", "stream_id": 4, "offset": 10, "raw": {"payload_length": 100}, "fin": true}"#,
    ] {
        let s = frame_of(f);
        let x = frame(&s);
        assert_eq!((x.stream_id, x.offset, x.length, x.fin), (Some(4), Some(10), Some(100), Some(true)), "{f}");
    }
    let s = frame_of(r#"{"frame_type": "stream", "stream_id": 4}"#);
    assert_eq!(frame(&s).fin, Some(false)); // a STREAM frame without FIN has none
    let s = frame_of(r#"{"frame_type": "crypto", "frame_type.crypto.offset": 0, "frame_type.crypto.length": 300}"#);
    assert_eq!((frame(&s).offset, frame(&s).length, frame(&s).fin), (Some(0), Some(300), None));
    // offsets belong to data frames, lengths to data, PADDING and DATAGRAM frames
    let s = frame_of(r#"{"frame_type": "ack", "offset": 3, "length": 4}"#);
    assert_eq!((frame(&s).offset, frame(&s).length), (None, None));
    let s = frame_of(r#"{"frame_type": "padding", "length": 900, "offset": 1}"#);
    assert_eq!((frame(&s).offset, frame(&s).length), (None, Some(900)));
    let s = frame_of(r#"{"frame_type": "datagram", "length": 50}"#);
    assert_eq!(frame(&s).length, Some(50));
}

#[test]
fn ack_frequency_field_spellings() {
    for f in [
        r#"{"frame_type": "ack_frequency", "sequence_number": 1, "ack_eliciting_threshold": 10, "request_max_ack_delay": 25000, "reordering_threshold": 1}"#,
        r#"{"frame_type": "ack_frequency", "sequence_number": 1, "packet_tolerance": 10, "update_max_ack_delay": 25000, "reorder_threshold": 1}"#,
        r#"{"frame_type": "ack_frequency", "sequence_number": "1", "packet_tolerance": 10, "max_ack_delay": 25000, "reorder_threshold": 1}"#,
    ] {
        let s = frame_of(f);
        let x = frame(&s);
        assert_eq!((x.sequence_number, x.ack_eliciting_threshold, x.request_max_ack_delay, x.reordering_threshold),
                   (Some(1), Some(10), Some(25000.0), Some(1)), "{f}");
    }
}

#[test]
fn metrics_spellings() {
    for data in [
        r#"{"rtt_variance": 5, "congestion_window": 14720}"#,
        r#"{"rttvar": 5, "cwnd": 14720}"#,
        r#"{"rtt_var": "5", "cwnd": "14720"}"#,
        r#"{"rtt_variance": 5, "rttvar": 9, "congestion_window": 14720, "cwnd": 1}"#,
    ] {
        let s = event("recovery:metrics_updated", data);
        assert_eq!((s.metrics[0].rtt_variance, s.metrics[0].congestion_window), (Some(5.0), Some(14720)), "{data}");
    }
    let s = event("recovery:metrics_updated",
                  r#"{"latest_rtt": 22.5, "min_rtt": 18, "smoothed_rtt": 20, "pto_count": 2, "bytes_in_flight": 1200}"#);
    let m = &s.metrics[0];
    assert_eq!((m.latest_rtt, m.min_rtt, m.smoothed_rtt, m.pto_count, m.bytes_in_flight),
               (Some(22.5), Some(18.0), Some(20.0), Some(2), Some(1200)));
}

#[test]
fn transport_parameter_spellings() {
    for data in [
        r#"{"owner": "Remote", "max_udp_payload_size": 1472, "max_idle_timeout": 30000}"#,
        r#"{"initiator": "remote", "max_packet_size": 1472, "idle_timeout": 30000}"#,
    ] {
        let s = event("transport:parameters_set", data);
        let p = &s.params[0];
        assert_eq!((&*p.owner, p.values.max_udp_payload_size, p.values.max_idle_timeout),
                   ("remote", Some(1472), Some(30000.0)), "{data}");
    }
    let s = event("transport:parameters_set", r#"{"max_ack_delay": 25, "ack_delay_exponent": 8, "min_ack_delay": 1000, "initial_max_data": 1048576, "active_connection_id_limit": 4, "original_destination_connection_id": "0a0b"}"#);
    let p = &s.params[0];
    assert_eq!(&*p.owner, "local"); // neither said: the vantage point's own
    let v = p.values;
    assert_eq!((v.max_ack_delay, v.ack_delay_exponent, v.min_ack_delay, v.initial_max_data, v.active_connection_id_limit),
               (Some(25.0), Some(8), Some(1000.0), Some(1048576), Some(4)));
    assert_eq!(text(&s, &p.odcid), Some("0a0b".into()));
}

#[test]
fn lost_and_dropped_packet_spellings() {
    for data in [
        r#"{"header": {"packet_type": "1RTT", "packet_number": 7}, "trigger": "time_threshold"}"#,
        r#"{"packet_type": "1RTT", "packet_number": "7", "trigger": "time_threshold"}"#,
        r#"{"type": "1RTT", "packet_number": 7, "trigger": "time_threshold"}"#, // aioquic
    ] {
        let s = event("recovery:packet_lost", data);
        let l = &s.lost[0];
        assert_eq!((&l.ptype, l.packet_number, text(&s, &l.trigger)),
                   (&Some(PType::OneRtt), Some(7), Some("time_threshold".into())), "{data}");
    }
    for data in [
        r#"{"header": {"packet_type": "initial", "packet_number": 2}, "raw": {"length": 1200}, "trigger": "key_unavailable"}"#,
        r#"{"packet_type": "initial", "packet_number": 2, "packet_size": 1200, "trigger": "key_unavailable"}"#,
        r#"{"header": {"packet_type": "initial", "packet_size": 1200, "packet_number": 2}, "details": "key_unavailable"}"#,
    ] {
        let s = event("transport:packet_dropped", data);
        let d = &s.dropped[0];
        assert_eq!((&d.ptype, d.packet_number, d.size, text(&s, &d.trigger)),
                   (&Some(PType::Initial), Some(2), Some(1200), Some("key_unavailable".into())), "{data}");
    }
    // aioquic's bare "type" is read for lost packets only
    assert_eq!(event("transport:packet_dropped", r#"{"type": "initial"}"#).dropped[0].ptype, None);
}

#[test]
fn timer_spellings() {
    for (name, data) in [
        ("recovery:loss_timer_updated", r#"{"timer_type": "pto", "event_type": "set", "packet_number_space": "handshake", "delta": 12.5}"#),
        ("recovery:timer_updated", r#"{"timer_type": "pto", "type": "set", "pn_space": "handshake", "delta": "12.5"}"#),
    ] {
        let s = event(name, data);
        assert_eq!(s.events[0].canon, Canon::Timer);
        let x = &s.timers[0];
        assert_eq!((text(&s, &x.timer_type), text(&s, &x.event_type), text(&s, &x.space), x.delta),
                   (Some("pto".into()), Some("set".into()), Some("handshake".into()), Some(12.5)), "{data}");
    }
}

#[test]
fn connection_started_odcid_spellings() {
    for data in [r#"{"original_destination_connection_id": "0a0b"}"#, r#"{"dst_cid": "0a0b"}"#, r#"{"dcid": "0a0b"}"#,
                 r#"{"dst_cid": "0a0b", "dcid": "ffff"}"#] {
        let s = event("transport:connection_started", data);
        assert_eq!((s.events[0].canon, text(&s, &s.started[0])), (Canon::ConnectionStarted, Some("0a0b".into())), "{data}");
    }
}

#[test]
fn escaped_and_plain_strings_read_alike() {
    let plain = event("transport:packet_sent", r#"{"header": {"packet_type": "initial", "packet_number": 7, "scid": "abcd"}}"#);
    let escaped = event(r"transport:packet\u005fsent",
                        r#"{"header": {"packet\u005ftype": "in\u0069tial", "packet\u005fnumber": 7, "scid": "ab\u0063d"}}"#);
    for s in [&plain, &escaped] {
        let p = packet(s);
        assert_eq!((name(s, 0), &p.ptype, p.packet_number, text(s, &p.scid)),
                   ("transport:packet_sent", &PType::Initial, Some(7), Some("abcd".into())));
    }
    // (only an escaped string is copied; a plain one stays a range of the slice)
    assert!(matches!(packet(&plain).scid, Some(Txt::Range(..))));
    assert!(matches!(packet(&escaped).scid, Some(Txt::Owned(_))));
}

#[test]
fn every_record_layout_stages_the_same_events() {
    let records = [
        r#"{"time": 1, "name": "transport:packet_sent", "data": {"header": {"packet_type": "initial", "packet_number": 0}}}"#,
        r#"{"time": 2, "name": "recovery:metrics_updated", "data": {"smoothed_rtt": 20}}"#,
        r#"{"time": 3, "name": "transport:packet_received", "data": {"header": {"packet_type": "initial", "packet_number": 0}}}"#,
    ];
    let layouts = [
        (Records::Lines, records.join("\n")),
        (Records::Lines, records.iter().map(|r| format!("\u{1e}{r}\n")).collect()), // JSON-SEQ
        (Records::Array, format!("[\n{}\n]\n", records.join(",\n"))),
        (Records::Elements, records.join(" ,\n")),
    ];
    for (kind, text) in layouts {
        let s = stage_with(text.as_bytes(), &options(kind, OBJECT)).unwrap();
        let seen: Vec<_> = s.events.iter().enumerate()
            .map(|(i, e)| (name(&s, i).to_string(), e.t_ms, e.canon, e.row, s.packet(e).map(|p| p.packet_number)))
            .collect();
        assert_eq!(seen, [
            ("transport:packet_sent".into(), Some(1.0), Canon::PacketSent, 0, Some(Some(0))),
            ("recovery:metrics_updated".into(), Some(2.0), Canon::MetricsUpdated, 1, None),
            ("transport:packet_received".into(), Some(3.0), Canon::PacketReceived, 2, Some(Some(0))),
        ], "{kind:?}");
    }
}

#[test]
fn delta_times_are_summed_and_carried_to_the_next_slice() {
    let mut opts = options(Records::Lines, OBJECT);
    opts.delta = true;
    let s = stage_with(b"{\"name\": \"a\"}\n{\"time\": 10, \"name\": \"a\"}\n{\"name\": \"a\"}\n{\"time\": 5, \"name\": \"a\"}",
                       &opts).unwrap();
    assert_eq!(s.events.iter().map(|e| e.t_ms).collect::<Vec<_>>(), [None, Some(10.0), Some(10.0), Some(15.0)]);
    assert_eq!(s.delta_carry, Some(15.0));
    // the next slice goes on from the carried sum (raw units), then scales
    opts.delta_carry = s.delta_carry;
    opts.time_scale_ms = 0.5;
    let s = stage_with(b"{\"time\": 1, \"name\": \"a\"}", &opts).unwrap();
    assert_eq!((s.events[0].t_ms, s.delta_carry), (Some(8.0), Some(16.0)));
    // absolute times are scaled as they are, and carry nothing
    let mut opts = options(Records::Lines, OBJECT);
    opts.time_scale_ms = 0.5;
    let s = stage_with(b"{\"time\": 10, \"name\": \"a\"}\n{\"time\": 5, \"name\": \"a\"}", &opts).unwrap();
    assert_eq!((s.events[0].t_ms, s.events[1].t_ms, s.delta_carry), (Some(5.0), Some(2.5), None));
}

#[test]
fn whole_traces_in_one_slice_are_numbered_each_from_zero() {
    let text = b"{\"name\": \"a\"}\n{\"name\": \"b\"}\n{\"name\": \"c\"}";
    let mut opts = options(Records::Lines, OBJECT);
    opts.trace_index = 7;
    let s = stage_with(text, &opts).unwrap();
    assert_eq!(s.events.iter().map(|e| (e.trace, e.row)).collect::<Vec<_>>(), [(7, 0), (7, 1), (7, 2)]);
    opts.traces = vec![(3, 2), (4, 1)];
    let s = stage_with(text, &opts).unwrap();
    assert_eq!(s.events.iter().map(|e| (e.trace, e.row)).collect::<Vec<_>>(), [(3, 0), (3, 1), (4, 0)]);
    opts.traces = vec![(3, 2), (4, 2)];
    let e = stage_with(text, &opts).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (0, 0, "3 events staged, 4 expected"));
}

#[test]
fn each_name_is_routed_once_and_a_routing_failure_refuses_the_slice() {
    let text = b"{\"name\": \"transport:packet_sent\"}\n{\"name\": \"x\"}\n{\"name\": \"transport:packet_sent\"}";
    let mut asked = Vec::new();
    let mut route = |n: &str| {
        asked.push(n.to_string());
        canonical(n)
    };
    let s = event::stage(text.to_vec(), &options(Records::Lines, OBJECT), &mut route).unwrap();
    assert_eq!(asked, ["transport:packet_sent", "x"]);
    assert_eq!(s.events.iter().map(|e| e.name).collect::<Vec<_>>(), [0, 1, 0]);
    let mut refuse = |n: &str| if n == "x" { Err("no route".to_string()) } else { canonical(n) };
    let e = event::stage(text.to_vec(), &options(Records::Lines, OBJECT), &mut refuse).err().expect("refused");
    assert_eq!((e.record, e.what.as_str()), (2, "no route"));
}
