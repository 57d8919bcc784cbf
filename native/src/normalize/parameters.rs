//! Transport parameters: every `parameters_set` of a file, kept until its end.
//!
//! Theory of operation: each `parameters_set` event becomes a `TpRow` (its connection, owner —
//! local or remote — time, the values the store has columns for, and its data as minified
//! JSON).  They serve twice: while the file is read, the last `ack_delay_exponent` each endpoint
//! announced decodes the ACK Delay of the frames it sends (`frames`); at its end, they are handed
//! over whole (`tp_table`) for SQL to write `transport_parameters`.

use rustc_hash::FxHashMap as HashMap;

use super::connections::Placed;
use super::Normalizer;
use crate::columns::{f64s, i32s, i64s, texts, Table};
use crate::event::{Body, Data, ParamValues, Staged};
use crate::json;

pub struct TpRow {
    pub connection_id: i64,
    pub conn: usize,
    pub event_index: i64,
    pub owner: Box<str>,
    pub t_ms: Option<f64>,
    pub values: ParamValues,
    pub data: Option<String>,
}

fn data_text(buf: &[u8], data: Data) -> Option<String> {
    match data {
        Data::Missing => None,
        Data::Range(s, e) => Some(json::minified(&buf[s as usize..e as usize])),
        Data::NullText | Data::Wrapped(None) => Some("null".into()),
        Data::Wrapped(Some((s, e))) => Some(json::minified(&buf[s as usize..e as usize])),
    }
}

impl Normalizer {
    /// Keep the slice's parameters_set events.
    pub(super) fn keep_parameters(&mut self, staged: &Staged, placed: &[Placed]) {
        let buf = &staged.buf[..];
        for (e, p) in staged.events.iter().zip(placed) {
            if let Body::Params(i) = e.body {
                let params = &staged.params[i as usize];
                self.tp.push(TpRow {
                    connection_id: self.conns[p.conn].connection_id,
                    conn: p.conn,
                    event_index: p.event_index,
                    owner: params.owner.clone(),
                    t_ms: e.t_ms,
                    values: params.values,
                    data: data_text(buf, e.data),
                });
            }
        }
    }

    /// The ack_delay_exponent each endpoint of a connection announced so far (last value wins).
    pub(super) fn announced_exponents(&self) -> HashMap<(usize, &'static str), i32> {
        let mut last: HashMap<(usize, &'static str), (i64, i32)> = HashMap::default();
        for row in &self.tp {
            let Some(exponent) = row.values.ack_delay_exponent else { continue };
            let conn = &self.conns[row.conn];
            let endpoint = if &*row.owner == "local" { conn.local_side() } else { conn.peer_side() };
            let entry = last.entry((row.conn, endpoint)).or_insert((row.event_index, exponent));
            if row.event_index >= entry.0 {
                *entry = (row.event_index, exponent);
            }
        }
        last.into_iter().map(|(k, (_, x))| (k, x)).collect()
    }

    /// Every parameters_set event (`quicack.qlog.normalize`'s table `tp_ev`).
    pub fn tp_table(&self) -> Table {
        let mut rows = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), texts("owner"), f64s("t_ms"), f64s("max_ack_delay"),
            i32s("ack_delay_exponent"), f64s("min_ack_delay"), i64s("initial_max_data"), i64s("max_udp_payload_size"),
            f64s("max_idle_timeout"), i64s("active_connection_id_limit"), texts("data"),
        ]);
        for tp in &self.tp {
            let c = &mut rows.columns;
            c[0].i64(Some(tp.connection_id));
            c[1].i64(Some(tp.event_index));
            c[2].text(Some(&tp.owner));
            c[3].f64(tp.t_ms);
            let v = &tp.values;
            c[4].f64(v.max_ack_delay);
            c[5].i32(v.ack_delay_exponent);
            c[6].f64(v.min_ack_delay.map(|us| us / 1000.0));
            c[7].i64(v.initial_max_data);
            c[8].i64(v.max_udp_payload_size);
            c[9].f64(v.max_idle_timeout);
            c[10].i64(v.active_connection_id_limit);
            c[11].text(tp.data.as_deref());
        }
        rows
    }
}
