//! Frames: the `frames` rows of a slice's packets, each ACK Delay decoded into milliseconds.
//!
//! Theory of operation: every frame of every packet, in file order, with its position in its
//! packet; frames whose every field has a column (ACK, STREAM, CRYPTO, PADDING, PING) leave
//! `details` NULL, others keep the logged frame there.  An ACK frame's delay is logged as the
//! trace's header says (`Encoding`): in ms (times the trace's time scale), in µs, or raw — the
//! field as sent, which RFC 9000 §19.3 decodes with the ack_delay_exponent the ACK's sender
//! announced (3 in Initial packets, or when none was announced; none when the announced one is
//! invalid).

use rustc_hash::FxHashMap as HashMap;

use super::connections::Placed;
use super::packets::Pk;
use super::{Encoding, Normalizer, TraceOptions};
use crate::columns::{bools, f64s, i32s, i64s, ranges, texts, Table};
use crate::event::{FType, Frame, PType, Staged};
use crate::json;

/// RFC 9000 §18.2: "If this value is absent, a default value of 3 is assumed (indicating a
/// multiplier of 8). Values above 20 are invalid."
const DEFAULT_ACK_DELAY_EXPONENT: i32 = 3;
const MAX_ACK_DELAY_EXPONENT: i32 = 20;

/// RFC 9000 §18.2: the default exponent for Initial packets and when none was announced;
/// none (undecodable) when the announced one is invalid.
fn decode_exponent(announced: Option<i32>, ptype: &PType) -> Option<i32> {
    match announced {
        _ if *ptype == PType::Initial => Some(DEFAULT_ACK_DELAY_EXPONENT),
        None => Some(DEFAULT_ACK_DELAY_EXPONENT),
        Some(x) if (0..=MAX_ACK_DELAY_EXPONENT).contains(&x) => Some(x),
        Some(_) => None,
    }
}

/// An ACK frame's delay: (ms, the raw field when the trace logs it raw).
///
/// RFC 9000 §19.3: "ACK Delay: A variable-length integer encoding the acknowledgment delay in
/// microseconds ... decoded by multiplying the value in the field by 2 to the power of the
/// ack_delay_exponent transport parameter sent by the sender of the ACK frame"; 3 in Initial
/// packets (sent before any transport parameter).
fn ack_delay(t: &TraceOptions, f: &Frame, ptype: &PType, announced: Option<i32>) -> (Option<f64>, Option<i64>) {
    match t.encoding {
        Encoding::Ms => {
            let value = f.ack_delay.or(if t.missing_ack_delay_is_zero { Some(0.0) } else { None });
            (value.map(|v| v * t.time_scale_ms), None)
        }
        Encoding::Us => (f.ack_delay.map(|v| v / 1000.0), None),
        Encoding::Raw | Encoding::RawMs => {
            // quiche logs the field / 1000 as an f32: back to the integer field first
            let raw = if t.encoding == Encoding::RawMs { f.ack_delay.map(|v| (v * 1000.0).round()) } else { f.ack_delay };
            let exponent = decode_exponent(announced, ptype);
            let ms = match (raw, exponent) {
                (Some(v), Some(x)) => Some(v * 2f64.powi(x) / 1000.0),
                _ => None,
            };
            (ms, raw.and_then(|v| json::float_to_i64(v.round_ties_even())))
        }
    }
}

impl Normalizer {
    pub(super) fn frames(&self, staged: &Staged, t: &TraceOptions, placed: &[Placed], pks: &[Pk]) -> Table {
        let buf = &staged.buf[..];
        let mut rows = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), i32s("position"), texts("frame_type"), f64s("ack_delay_ms"),
            i64s("ack_delay_raw"), i64s("largest_acknowledged"), ranges("acked_ranges"), i64s("ecn_ce"),
            i64s("offset_bytes"), i64s("length_bytes"), i64s("stream_id"), bools("fin"), i64s("sequence_number"),
            i64s("ack_eliciting_threshold"), f64s("request_max_ack_delay_ms"), i64s("reordering_threshold"),
            texts("details"),
        ]);
        let raw = matches!(t.encoding, Encoding::Raw | Encoding::RawMs);
        let exponents = if raw { self.announced_exponents() } else { HashMap::default() };
        // (in file order)
        let mut order: Vec<&Pk> = pks.iter().collect();
        if !order.windows(2).all(|w| w[0].event < w[1].event) {
            order.sort_by_key(|pk| pk.event);
        }
        for pk in order {
            let packet = staged.packet(&staged.events[pk.event]).expect("a packet event");
            let conn = &self.conns[pk.conn];
            for (position, f) in staged.frames_of(packet).iter().enumerate() {
                let (delay_ms, raw) = if f.ftype == FType::Ack {
                    ack_delay(t, f, &packet.ptype, exponents.get(&(pk.conn, pk.sender)).copied())
                } else {
                    (None, None)
                };
                let c = &mut rows.columns;
                c[0].i64(Some(conn.connection_id));
                c[1].i64(Some(placed[pk.event].event_index));
                c[2].i32(Some(position as i32));
                c[3].text(Some(f.ftype.as_str()));
                c[4].f64(delay_ms);
                c[5].i64(raw);
                c[6].i64(f.largest_acknowledged);
                c[7].ranges(staged.ranges_of(f));
                c[8].i64(f.ce);
                c[9].i64(f.offset);
                c[10].i64(f.length);
                c[11].i64(f.stream_id);
                c[12].bool(f.fin);
                c[13].i64(f.sequence_number);
                c[14].i64(f.ack_eliciting_threshold);
                c[15].f64(f.request_max_ack_delay.map(|v| v * t.time_scale_ms));
                c[16].i64(f.reordering_threshold);
                let details = !f.ftype.has_columns();
                c[17].text_with(details, |out| json::minify_into(&buf[f.raw.0 as usize..f.raw.1 as usize], out));
            }
        }
        rows
    }
}
