//! Event tables: the rows of `logged_metrics`, `lost_packets`, `dropped_packets`, `timers` and
//! `other_events` of a slice.
//!
//! Theory of operation: one pass over the slice's events in file order; each routed event
//! writes a row of its kind's table from its staged columns, times scaled to ms (metrics by the
//! trace's metric scale too), and every event without a table of its own goes to
//! `other_events` with its data as minified JSON.  RTT metrics logged before the connection's
//! first packet sent are initial values, not samples, and are left out (RFC 9002 §5.1); a later
//! slice that finds an earlier first packet is mended by `quicack.qlog.normalize`'s finish.

use super::connections::{Conn, Placed};
use super::{Normalizer, TraceOptions};
use crate::columns::{f64s, i32s, i64s, texts, Column, Table};
use crate::event::{Body, Data, Dropped, Lost, Metrics, Staged, Timer, Txt};
use crate::json;

fn text<'b>(x: &'b Option<Txt>, buf: &'b [u8]) -> Option<&'b str> {
    x.as_ref().map(|x| x.get(buf))
}

/// `other_events.data`: the event's data (minified), or a record that is not an event whole.
fn write_data(column: &mut Column, buf: &[u8], data: Data) {
    match data {
        Data::Missing => column.text(None),
        Data::NullText => column.text(Some("null")),
        Data::Range(s, e) => column.text_with(true, |out| json::minify_into(&buf[s as usize..e as usize], out)),
        Data::Wrapped(inner) => column.text_with(true, |out| {
            out.extend_from_slice(b"{\"data\":");
            match inner {
                Some((s, e)) => json::minify_into(&buf[s as usize..e as usize], out),
                None => out.extend_from_slice(b"null"),
            }
            out.push(b'}');
        }),
    }
}

/// The five tables, filled one row at a time.
struct Tables {
    metrics: Table,
    lost: Table,
    dropped: Table,
    timers: Table,
    other: Table,
}

impl Tables {
    fn new() -> Tables {
        Tables {
            metrics: Table::new(vec![
                i64s("connection_id"), i64s("event_index"), f64s("time_ms"), f64s("latest_rtt_ms"), f64s("min_rtt_ms"),
                f64s("smoothed_rtt_ms"), f64s("rtt_variance_ms"), i32s("pto_count"), i64s("congestion_window_bytes"),
                i64s("bytes_in_flight_bytes"),
            ]),
            lost: Table::new(vec![
                i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("packet_type"),
                texts("packet_number_space"), i64s("packet_number"), texts("trigger"),
            ]),
            dropped: Table::new(vec![
                i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("packet_type"), i64s("packet_number"),
                i32s("size_bytes"), texts("trigger"),
            ]),
            timers: Table::new(vec![
                i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("timer_type"), texts("event_type"),
                texts("packet_number_space"), f64s("delta_ms"),
            ]),
            other: Table::new(vec![
                i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("event_name"), texts("data"),
            ]),
        }
    }

    /// The first three columns every one of these tables starts with.
    fn key(table: &mut Table, conn: &Conn, p: &Placed) {
        let c = &mut table.columns;
        c[0].i64(Some(conn.connection_id));
        c[1].i64(Some(p.event_index));
        c[2].f64(p.time_ms);
    }

    fn metrics(&mut self, m: &Metrics, conn: &Conn, p: &Placed, t: &TraceOptions) {
        let rtt = t.time_scale_ms * t.metric_scale_ms;
        // RFC 9002 §5.1: an RTT sample needs an ACK of a packet the endpoint sent, so latest_rtt
        // and min_rtt logged before its first packet_sent are initial values, not samples (quinn
        // logs its 333 ms initial RTT as both in a connection's first event).  A later slice can
        // only move that first packet earlier than "never": quicack.qlog.normalize's finish
        // clears the values logged before a first packet_sent found in a later slice.
        let before = conn.first_sent.is_some_and(|first| p.event_index < first);
        let unset = t.latest_rtt_zero_is_unset && m.min_rtt.is_none() && m.latest_rtt == Some(0.0);
        Tables::key(&mut self.metrics, conn, p);
        let c = &mut self.metrics.columns;
        c[3].f64(if unset || before { None } else { m.latest_rtt.map(|v| v * rtt) });
        c[4].f64(if before { None } else { m.min_rtt.map(|v| v * rtt) });
        c[5].f64(m.smoothed_rtt.map(|v| v * rtt));
        c[6].f64(m.rtt_variance.map(|v| v * rtt));
        c[7].i32(m.pto_count);
        c[8].i64(m.congestion_window);
        c[9].i64(m.bytes_in_flight);
    }

    fn lost(&mut self, l: &Lost, conn: &Conn, p: &Placed, buf: &[u8]) {
        Tables::key(&mut self.lost, conn, p);
        let c = &mut self.lost.columns;
        c[3].text(l.ptype.as_ref().map(|x| x.as_str()));
        c[4].text(l.ptype.as_ref().and_then(|x| x.space()));
        c[5].i64(l.packet_number);
        c[6].text(text(&l.trigger, buf));
    }

    fn dropped(&mut self, d: &Dropped, conn: &Conn, p: &Placed, buf: &[u8]) {
        Tables::key(&mut self.dropped, conn, p);
        let c = &mut self.dropped.columns;
        c[3].text(d.ptype.as_ref().map(|x| x.as_str()));
        c[4].i64(d.packet_number);
        c[5].i32(d.size);
        c[6].text(text(&d.trigger, buf));
    }

    fn timer(&mut self, x: &Timer, conn: &Conn, p: &Placed, buf: &[u8], t: &TraceOptions) {
        Tables::key(&mut self.timers, conn, p);
        let c = &mut self.timers.columns;
        c[3].text(text(&x.timer_type, buf));
        c[4].text(text(&x.event_type, buf));
        c[5].text(text(&x.space, buf));
        c[6].f64(x.delta.map(|v| v * t.time_scale_ms));
    }

    fn other(&mut self, name: &str, data: Data, conn: &Conn, p: &Placed, buf: &[u8]) {
        Tables::key(&mut self.other, conn, p);
        let c = &mut self.other.columns;
        c[3].text(Some(name));
        write_data(&mut c[4], buf, data);
    }

    /// The tables that got rows, in the order they are inserted.
    fn into_tables(self) -> Vec<(&'static str, Table)> {
        [("logged_metrics", self.metrics), ("lost_packets", self.lost), ("dropped_packets", self.dropped),
         ("timers", self.timers), ("other_events", self.other)]
            .into_iter()
            .filter(|(_, t)| t.rows() > 0)
            .collect()
    }
}

impl Normalizer {
    pub(super) fn events(&self, staged: &Staged, t: &TraceOptions, placed: &[Placed]) -> Vec<(&'static str, Table)> {
        let buf = &staged.buf[..];
        let mut tables = Tables::new();
        for (e, p) in staged.events.iter().zip(placed) {
            let conn = &self.conns[p.conn];
            match e.body {
                Body::Metrics(i) => tables.metrics(&staged.metrics[i as usize], conn, p, t),
                Body::Lost(i) => tables.lost(&staged.lost[i as usize], conn, p, buf),
                Body::Dropped(i) => tables.dropped(&staged.dropped[i as usize], conn, p, buf),
                Body::Timer(i) => tables.timer(&staged.timers[i as usize], conn, p, buf, t),
                _ => {}
            }
            if !e.canon.routed() {
                tables.other(&staged.names[e.name as usize].0, e.data, conn, p, buf);
            }
        }
        tables.into_tables()
    }
}
