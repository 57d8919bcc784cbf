//! Connections: each event of a slice placed on its connection, and what a connection carries.
//!
//! Theory of operation: a connection is a (trace, group_id) pair; the events of a slice are
//! grouped into slots by that pair (runs of one pair cost one comparison each), a pair not seen
//! in an earlier slice becomes a new `Conn` — ids handed out by the caller, in order of first
//! appearance — and every event gets its connection, its position in its trace and its time
//! relative to the connection's first (`Placed`).  A `Conn` outlives its slices: the time base,
//! event count and first/last times the `connections` table takes, and what the next slice's
//! packets need (see `packets`).  The ODCID of a connection is the first candidate in file
//! order.  SQL's `least`/`greatest` ignore NULLs, and so do the time bounds here.

use rustc_hash::FxHashMap as HashMap;

use super::packets::{LastPacket, Pk};
use super::{Normalizer, TraceOptions};
use crate::columns::{f64s, i32s, i64s, texts, Table};
use crate::event::{Body, Event, PType, Staged, Txt};

pub struct Conn {
    pub trace_index: u32,
    pub group_key: Box<str>,
    pub connection_id: i64,
    pub first_event: i64,
    pub events: i64,
    pub base_ms: Option<f64>,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
    pub vantage: String,
    pub flow: Option<String>,
    /// a packet event was seen (the first one can tell the vantage point)
    pub(super) has_packet: bool,
    /// the client's connection ID: the source CID first logged
    pub(super) client_cid: Option<Box<str>>,
    pub first_sent: Option<i64>,
    /// the last packet of the slices so far, which the next slice's first may share a datagram with
    pub(super) last: LastPacket,
    /// datagrams counted so far
    pub(super) datagrams: i64,
    /// datagrams_received events so far (traces that log them before their packets)
    pub(super) rx_datagrams: i64,
    pub odcid: Option<Box<str>>,
}

impl Conn {
    fn new(trace_index: u32, group_key: Box<str>, connection_id: i64, first_event: i64, base_ms: Option<f64>,
           t: &TraceOptions) -> Conn {
        Conn {
            trace_index,
            group_key,
            connection_id,
            first_event,
            events: 0,
            base_ms,
            first_ms: base_ms,
            last_ms: None,
            vantage: t.vantage.clone(),
            flow: t.flow.clone(),
            has_packet: false,
            client_cid: None,
            first_sent: None,
            last: LastPacket::default(),
            datagrams: 0,
            rx_datagrams: 0,
            odcid: None,
        }
    }

    /// The side of the vantage point; a network observer takes the side named by its flow.
    pub(super) fn local_side(&self) -> &'static str {
        local_side(&self.vantage, self.flow.as_deref())
    }

    pub(super) fn peer_side(&self) -> &'static str {
        if self.local_side() == "server" {
            "client"
        } else {
            "server"
        }
    }
}

fn local_side(vantage: &str, flow: Option<&str>) -> &'static str {
    if vantage == "server" || (vantage == "network" && flow == Some("server")) {
        "server"
    } else {
        "client"
    }
}

fn least(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn greatest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// What one staged event is, once its connection is known.
pub(super) struct Placed {
    pub(super) conn: usize,
    pub(super) event_index: i64,
    pub(super) time_ms: Option<f64>,
}

/// The events of one (trace, group) pair in a slice.
struct Slot {
    trace: u32,
    group: u32,
    first_row: u32,
    n: i64,
    lo: Option<f64>,
    hi: Option<f64>,
}

/// The slice's (trace, group) pairs in order of first appearance, and each event's.
fn slots(events: &[Event]) -> (Vec<Slot>, Vec<usize>) {
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot_of: HashMap<(u32, u32), usize> = HashMap::default();
    let mut last_key = (u32::MAX, u32::MAX, 0usize); // (trace, group, slot) of the event before
    let mut placed_slot: Vec<usize> = Vec::with_capacity(events.len());
    for e in events {
        let slot = if (e.trace, e.group) == (last_key.0, last_key.1) {
            last_key.2
        } else {
            let slot = *slot_of.entry((e.trace, e.group)).or_insert_with(|| {
                slots.push(Slot { trace: e.trace, group: e.group, first_row: e.row, n: 0, lo: None, hi: None });
                slots.len() - 1
            });
            last_key = (e.trace, e.group, slot);
            slot
        };
        let s = &mut slots[slot];
        s.n += 1;
        s.lo = least(s.lo, e.t_ms);
        s.hi = greatest(s.hi, e.t_ms);
        placed_slot.push(slot);
    }
    (slots, placed_slot)
}

impl Normalizer {
    /// Each event's connection, position and relative time; connections first seen here opened
    /// (`allocate(n)`: the first of `n` new ids), every connection's counts and bounds updated.
    pub(super) fn place(&mut self, staged: &Staged, t: &TraceOptions, offset: i64,
                        allocate: &mut dyn FnMut(usize) -> Result<i64, String>) -> Result<Vec<Placed>, String> {
        let events = &staged.events;
        // connections: (trace, group) → conn, new ones numbered in order of first appearance
        let (slots, placed_slot) = slots(events);
        let key = |s: &Slot| (s.trace, staged.groups[s.group as usize].clone());
        let fresh: Vec<usize> = (0..slots.len()).filter(|&i| !self.by_group.contains_key(&key(&slots[i]))).collect();
        let next_id = allocate(fresh.len())?;
        for (k, &i) in fresh.iter().enumerate() {
            let s = &slots[i];
            let c = self.conns.len();
            self.conns.push(Conn::new(s.trace, staged.groups[s.group as usize].clone(), next_id + k as i64,
                                      offset + s.first_row as i64, s.lo, t));
            self.by_group.insert(key(s), c);
        }
        let mut slot_conn: Vec<usize> = Vec::with_capacity(slots.len());
        for s in &slots {
            let c = self.by_group[&key(s)];
            let conn = &mut self.conns[c];
            conn.events += s.n;
            conn.first_ms = least(conn.first_ms, s.lo);
            conn.last_ms = greatest(conn.last_ms, s.hi);
            slot_conn.push(c);
        }
        Ok(events
            .iter()
            .zip(&placed_slot)
            .map(|(e, &slot)| {
                let conn = slot_conn[slot];
                let base = self.conns[conn].base_ms;
                Placed {
                    conn,
                    event_index: offset + e.row as i64,
                    time_ms: match (e.t_ms, base) {
                        (Some(t), Some(b)) => Some(t - b),
                        _ => None,
                    },
                }
            })
            .collect())
    }

    /// The first ODCID candidate in file order: a server's original_destination_connection_id,
    /// connection_started's destination CID, or the DCID of the client's first Initial.  Only
    /// hex text is a candidate: TQUIC 1.6 writes Rust's `Option` debug text ("None") there.
    pub(super) fn odcid<'a>(&mut self, staged: &'a Staged, placed: &[Placed], pks: &[Pk]) {
        let buf = &staged.buf[..];
        let mut best: HashMap<usize, (i64, &'a str)> = HashMap::default();
        let mut offer = |conn: usize, index: i64, value: Option<&'a Txt>| {
            if let Some(v) = value.filter(|v| v.get(buf).bytes().all(|b| b.is_ascii_hexdigit())) {
                let entry = best.entry(conn).or_insert((index, v.get(buf)));
                if index < entry.0 {
                    *entry = (index, v.get(buf));
                }
            }
        };
        for pk in pks {
            let packet = staged.packet(&staged.events[pk.event]).expect("a packet event");
            if pk.sender == "client" && packet.ptype == PType::Initial {
                offer(pk.conn, placed[pk.event].event_index, packet.dcid.as_ref());
            }
        }
        for (e, p) in staged.events.iter().zip(placed) {
            match e.body {
                Body::Params(i) => offer(p.conn, p.event_index, staged.params[i as usize].odcid.as_ref()),
                Body::Started(i) => offer(p.conn, p.event_index, staged.started[i as usize].as_ref()),
                _ => {}
            }
        }
        for (conn, (_, odcid)) in best {
            let c = &mut self.conns[conn];
            if c.odcid.is_none() {
                c.odcid = Some(odcid.into());
            }
        }
    }

    /// Each connection's state, for `connections` (`quicack.qlog.normalize`'s table `conn`).
    pub fn conn_table(&self) -> Table {
        let mut rows = Table::new(vec![
            i32s("trace_index"), texts("group_key"), i64s("connection_id"), i64s("first_event"), i64s("events"),
            f64s("base_ms"), f64s("first_ms"), f64s("last_ms"), texts("vantage"), texts("flow"), i64s("first_sent"),
            texts("odcid"),
        ]);
        for conn in &self.conns {
            let c = &mut rows.columns;
            c[0].i32(Some(conn.trace_index as i32));
            c[1].text(Some(&conn.group_key));
            c[2].i64(Some(conn.connection_id));
            c[3].i64(Some(conn.first_event));
            c[4].i64(Some(conn.events));
            c[5].f64(conn.base_ms);
            c[6].f64(conn.first_ms);
            c[7].f64(conn.last_ms);
            c[8].text(Some(&conn.vantage));
            c[9].text(conn.flow.as_deref());
            c[10].i64(conn.first_sent);
            c[11].text(conn.odcid.as_deref());
        }
        rows
    }
}
