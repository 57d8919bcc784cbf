//! Normalizing: staged slices into the rows of `schemas/store.sql`, one slice after another.
//!
//! Theory of operation: a file's slices come in file order; what a slice needs from earlier
//! ones is kept per connection (`Conn`: id, time base, the last packet for coalescing, the
//! datagrams counted, the client's CID, the first packet sent, the ODCID found so far) and per
//! file (every `parameters_set`, for the ACK Delay exponent).  Each slice's events become
//! `packets`, `frames`, `logged_metrics`, `lost_packets`, `dropped_packets`, `timers` and
//! `other_events` rows; `connections` and `transport_parameters` are written at the end of the
//! file, by SQL over the per-connection state this hands over (`quicack.normalize`).
//!
//! One connection per (trace, group_id): quinn writes all its connections into one stream, told
//! apart by group_id.  A group first seen in a slice gets the next id, in file order.

use rustc_hash::FxHashMap as HashMap;

use crate::columns::{bools, f64s, i32s, i64s, ranges, texts, Table};
use crate::event::{Body, Canon, Data, FType, PType, ParamValues, Staged, Txt};
use crate::json;

/// RFC 9000 §18.2: "If this value is absent, a default value of 3 is assumed (indicating a
/// multiplier of 8). Values above 20 are invalid."
const DEFAULT_ACK_DELAY_EXPONENT: i32 = 3;
const MAX_ACK_DELAY_EXPONENT: i32 = 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    Ms,
    Us,
    Raw,
}

/// What a trace's header says about reading its events (`quicack.model.TraceInfo`).
#[derive(Clone, Debug)]
pub struct TraceOptions {
    pub vantage: String,
    pub flow: Option<String>,
    pub absolute: bool,
    pub reference_epoch_ms: Option<f64>,
    pub encoding: Encoding,
    pub missing_ack_delay_is_zero: bool,
    pub time_scale_ms: f64,
    pub metric_scale_ms: f64,
    pub latest_rtt_zero_is_unset: bool,
    pub sender_from_cids: bool,
    pub vantage_from_first_packet: bool,
    pub rx_datagram_events_first: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Sent,
    Received,
}

impl Dir {
    fn as_str(self) -> &'static str {
        match self {
            Dir::Sent => "sent",
            Dir::Received => "received",
        }
    }
}

/// The side of the vantage point; a network observer takes the side named by its flow.
fn local_side(vantage: &str, flow: Option<&str>) -> &'static str {
    if vantage == "server" || (vantage == "network" && flow == Some("server")) {
        "server"
    } else {
        "client"
    }
}

fn peer_side(vantage: &str, flow: Option<&str>) -> &'static str {
    if local_side(vantage, flow) == "server" {
        "client"
    } else {
        "server"
    }
}

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
    has_packet: bool,
    client_cid: Option<Box<str>>,
    pub first_sent: Option<i64>,
    last_direction: Option<Dir>,
    last_t: Option<f64>,
    last_rank: Option<i32>,
    last_checksum: Option<i64>,
    last_rx_seq: Option<i64>,
    datagrams: i64,
    rx_datagrams: i64,
    pub odcid: Option<Box<str>>,
}

pub struct TpRow {
    pub connection_id: i64,
    pub conn: usize,
    pub event_index: i64,
    pub owner: Box<str>,
    pub t_ms: Option<f64>,
    pub values: ParamValues,
    pub data: Option<String>,
}

/// An event routed to a table of its own but without a time: the file is refused.
pub struct Untimed {
    pub name: String,
    pub trace: u32,
    pub event: i64,
}

#[derive(Default)]
pub struct Normalizer {
    pub conns: Vec<Conn>,
    by_group: HashMap<(u32, Box<str>), usize>,
    pub tp: Vec<TpRow>,
}

/// The rows of one slice, table by table.
pub struct Rows {
    pub tables: Vec<(&'static str, Table)>,
}

/// SQL's three-valued comparisons: unknown when either side is NULL.
fn eq<T: PartialEq>(a: Option<T>, b: Option<T>) -> Option<bool> {
    Some(a? == b?)
}

fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
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
struct Placed {
    conn: usize,
    event_index: i64,
    time_ms: Option<f64>,
}

/// A packet of the slice, with what deciding its datagram takes.
struct Pk {
    event: usize,
    conn: usize,
    sender: &'static str,
    direction: Dir,
    rank: i32,
    rx_seq: Option<i64>,
    datagram_id: i64,
}

impl Normalizer {
    /// Normalize one staged slice.  `offset`: events of its trace in earlier slices (0 for a
    /// slice of several whole traces); `allocate(n)`: the first of `n` new connection ids.
    pub fn add(&mut self, staged: &Staged, t: &TraceOptions, offset: i64,
               allocate: &mut dyn FnMut(usize) -> Result<i64, String>) -> Result<Result<Rows, Untimed>, String> {
        let events = &staged.events;
        let buf = &staged.buf[..];
        if events.is_empty() {
            return Ok(Ok(Rows { tables: Vec::new() }));
        }
        // (their rows' time_ms is NOT NULL; every qlog draft requires a time on every event; a
        // parameters_set's row takes the earliest time of its owner's)
        if let Some(e) = events.iter().find(|e| e.canon.routed() && e.canon != Canon::ParametersSet && e.t_ms.is_none()) {
            return Ok(Err(Untimed {
                name: staged.names[e.name as usize].0.to_string(),
                trace: e.trace,
                event: offset + e.row as i64 + 1,
            }));
        }

        // connections: (trace, group) → conn, new ones numbered in order of first appearance
        struct Slot {
            trace: u32,
            group: u32,
            first_row: u32,
            n: i64,
            lo: Option<f64>,
            hi: Option<f64>,
            conn: usize,
        }
        let mut slots: Vec<Slot> = Vec::new();
        let mut slot_of: HashMap<(u32, u32), usize> = HashMap::default();
        let mut last_key = (u32::MAX, u32::MAX, 0usize); // (trace, group, slot) of the event before
        let mut placed_slot: Vec<usize> = Vec::with_capacity(events.len());
        for e in events {
            let slot = if (e.trace, e.group) == (last_key.0, last_key.1) {
                last_key.2
            } else {
                let slot = *slot_of.entry((e.trace, e.group)).or_insert_with(|| {
                    slots.push(Slot { trace: e.trace, group: e.group, first_row: e.row, n: 0, lo: None, hi: None,
                                      conn: usize::MAX });
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
        let key = |s: &Slot| (s.trace, staged.groups[s.group as usize].clone());
        let fresh: Vec<usize> = (0..slots.len()).filter(|&i| !self.by_group.contains_key(&key(&slots[i]))).collect();
        let next_id = allocate(fresh.len())?;
        for (k, &i) in fresh.iter().enumerate() {
            let s = &slots[i];
            let c = self.conns.len();
            self.conns.push(Conn {
                trace_index: s.trace,
                group_key: staged.groups[s.group as usize].clone(),
                connection_id: next_id + k as i64,
                first_event: offset + s.first_row as i64,
                events: 0,
                base_ms: s.lo,
                first_ms: s.lo,
                last_ms: None,
                vantage: t.vantage.clone(),
                flow: t.flow.clone(),
                has_packet: false,
                client_cid: None,
                first_sent: None,
                last_direction: None,
                last_t: None,
                last_rank: None,
                last_checksum: None,
                last_rx_seq: None,
                datagrams: 0,
                rx_datagrams: 0,
                odcid: None,
            });
            self.by_group.insert(key(s), c);
        }
        for s in slots.iter_mut() {
            s.conn = self.by_group[&key(s)];
            let conn = &mut self.conns[s.conn];
            conn.events += s.n;
            conn.first_ms = least(conn.first_ms, s.lo);
            conn.last_ms = greatest(conn.last_ms, s.hi);
        }
        let slot_conn: Vec<usize> = slots.iter().map(|s| s.conn).collect();
        let placed: Vec<Placed> = events
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
            .collect();

        // transport parameters: kept for the ACK Delay exponent and written at the end
        for (e, p) in events.iter().zip(&placed) {
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

        let mut tables = Vec::new();
        let packets = self.packets(staged, t, &placed);
        if let Some((packet_rows, frame_rows)) = packets.1 {
            tables.push(("packets", packet_rows));
            tables.push(("frames", frame_rows));
        }
        let pks = packets.0;
        tables.extend(self.events(staged, t, &placed));
        self.odcid(staged, &placed, &pks);
        Ok(Ok(Rows { tables }))
    }

    fn packets(&mut self, staged: &Staged, t: &TraceOptions, placed: &[Placed]) -> (Vec<Pk>, Option<(Table, Table)>) {
        let events = &staged.events;
        let buf = &staged.buf[..];
        let n_conns = self.conns.len();
        // aioquic logs datagrams_received before the packets of each datagram: count them
        let mut rx_count: Vec<i64> = vec![0; n_conns];
        let mut pks: Vec<Pk> = Vec::with_capacity(staged.packets.len());
        for (k, (e, p)) in events.iter().zip(placed).enumerate() {
            if t.rx_datagram_events_first && e.canon == Canon::DatagramsReceived {
                rx_count[p.conn] += 1;
            }
            if let Some(packet) = staged.packet(e) {
                pks.push(Pk {
                    event: k,
                    conn: p.conn,
                    sender: "",
                    direction: if e.canon == Canon::PacketSent { Dir::Sent } else { Dir::Received },
                    rank: packet.ptype.rank(),
                    rx_seq: if t.rx_datagram_events_first { Some(rx_count[p.conn]) } else { None },
                    datagram_id: 0,
                });
            }
        }
        if pks.is_empty() {
            for (c, n) in rx_count.into_iter().enumerate() {
                self.conns[c].rx_datagrams += n;
            }
            return (pks, None);
        }

        // A trace without a vantage point (quinn) takes it from each connection's first packet
        // event if that is an Initial: a client's first packet is one it sends, a server's one
        // it receives.
        for pk in &pks {
            let conn = &mut self.conns[pk.conn];
            if !conn.has_packet {
                conn.has_packet = true;
                let packet = staged.packet(&events[pk.event]).expect("a packet event");
                if t.vantage_from_first_packet && packet.ptype == PType::Initial {
                    conn.vantage = if pk.direction == Dir::Sent { "client" } else { "server" }.into();
                }
            }
        }

        // in (connection, event) order (file order already, when the slice is one connection's)
        let key = |pk: &Pk| (self.conns[pk.conn].connection_id, placed[pk.event].event_index);
        if !pks.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            pks.sort_by_key(key);
        }
        let mut packet_rows = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), f64s("epoch_ms"), texts("direction"),
            texts("sender"), texts("packet_type"), texts("packet_number_space"), i64s("packet_number"),
            i32s("size_bytes"), i64s("datagram_id"), bools("ack_eliciting"), i32s("frame_count"),
        ]);
        let mut running_cid: Vec<Option<Box<str>>> = vec![None; n_conns]; // the client's CID seen in this slice
        let mut started: Vec<i64> = vec![0; n_conns]; // datagrams started in this slice
        let mut first_sent: Vec<Option<i64>> = vec![None; n_conns];
        let mut last_of: Vec<Option<usize>> = vec![None; n_conns]; // each connection's last packet (index into pks)
        for i in 0..pks.len() {
            let (conn_i, event) = (pks[i].conn, pks[i].event);
            let e = &events[event];
            let packet = staged.packet(e).expect("a packet event");
            let conn = &self.conns[conn_i];
            let local = local_side(&conn.vantage, conn.flow.as_deref());
            let peer = peer_side(&conn.vantage, conn.flow.as_deref());
            let (sender, direction) = if t.sender_from_cids {
                // Without direction in the events, a long header's source CID equal to the first
                // one logged (the client's first Initial) marks a client packet, and a short
                // header whose destination CID is that one marks a server packet.
                if conn.client_cid.is_none() && running_cid[conn_i].is_none() {
                    running_cid[conn_i] = packet.scid.as_ref().map(|scid| scid.get(buf).into());
                }
                let client_cid = conn.client_cid.as_deref().or(running_cid[conn_i].as_deref());
                let sender = match (&packet.scid, &packet.dcid) {
                    (Some(scid), _) => if Some(scid.get(buf)) == client_cid { "client" } else { "server" },
                    (None, Some(dcid)) if Some(dcid.get(buf)) == client_cid => "server",
                    _ => "client",
                };
                (sender, if sender == local { Dir::Sent } else { Dir::Received })
            } else if pks[i].direction == Dir::Sent {
                (local, Dir::Sent)
            } else {
                (peer, Dir::Received)
            };
            let rx_seq = pks[i].rx_seq.map(|r| conn.rx_datagrams + r);
            let (prev_dir, prev_t, prev_rank, prev_checksum, prev_rx) = match last_of[conn_i] {
                Some(j) => {
                    let pe = &events[pks[j].event];
                    let pp = staged.packet(pe).expect("a packet event");
                    (Some(pks[j].direction), pe.t_ms, Some(pks[j].rank), pp.checksum, pks[j].rx_seq)
                }
                None => (conn.last_direction, conn.last_t, conn.last_rank, conn.last_checksum, conn.last_rx_seq),
            };
            // A packet starts a new datagram unless it follows, in the same direction, a packet
            // of the same datagram: one logged at the same time with an earlier coalescing order
            // (RFC 9000 §12.2), one with the same datagram_payload_checksum (quic-go), or —
            // received, in traces that log datagrams_received before their packets (aioquic) —
            // one after the same datagrams_received event.  Comparisons follow SQL: one with a
            // missing value holds nothing.
            let rank = pks[i].rank;
            let same_time_later_rank = and(eq(prev_t, e.t_ms), prev_rank.map(|r| r < rank));
            let same_checksum = eq(prev_checksum, packet.checksum);
            let same_rx = and(and(Some(direction == Dir::Received), rx_seq.map(|r| r > 0)), eq(prev_rx, rx_seq));
            let follows = and(eq(prev_dir, Some(direction)), or(or(same_time_later_rank, same_checksum), same_rx));
            let starts = follows != Some(true);
            if starts {
                started[conn_i] += 1;
            }
            let derived = conn.datagrams + started[conn_i] - 1;
            if direction == Dir::Sent && first_sent[conn_i].is_none() {
                first_sent[conn_i] = Some(placed[event].event_index);
            }
            let pk = &mut pks[i];
            pk.sender = sender;
            pk.direction = direction;
            pk.rx_seq = rx_seq;
            pk.datagram_id = packet.datagram_id.unwrap_or(derived);
            last_of[conn_i] = Some(i);

            let p = &placed[event];
            let frames = staged.frames_of(packet);
            let c = &mut packet_rows.columns;
            c[0].i64(Some(conn.connection_id));
            c[1].i64(Some(p.event_index));
            c[2].f64(p.time_ms);
            c[3].f64(epoch_ms(t, e.t_ms));
            c[4].text(Some(direction.as_str()));
            c[5].text(Some(sender));
            c[6].text(Some(packet.ptype.as_str()));
            c[7].text(packet.ptype.space());
            c[8].i64(packet.packet_number);
            c[9].i32(packet.size);
            c[10].i64(Some(pk.datagram_id));
            c[11].bool(if frames.is_empty() { None } else { Some(frames.iter().any(|f| f.ftype.eliciting())) });
            c[12].i32(Some(frames.len() as i32));
        }

        // what the next slice needs: each connection's last packet, datagrams, client CID
        for (c, last) in last_of.iter().enumerate() {
            let Some(i) = *last else { continue };
            let pk = &pks[i];
            let e = &events[pk.event];
            let packet = staged.packet(e).expect("a packet event");
            let conn = &mut self.conns[c];
            conn.last_direction = Some(pk.direction);
            conn.last_t = e.t_ms;
            conn.last_rank = Some(pk.rank);
            conn.last_checksum = packet.checksum;
            conn.last_rx_seq = pk.rx_seq;
            conn.datagrams += started[c];
            if conn.first_sent.is_none() {
                conn.first_sent = first_sent[c];
            }
        }
        for pk in &pks {
            let conn = &mut self.conns[pk.conn];
            if conn.client_cid.is_none() {
                if let Some(scid) = &staged.packet(&events[pk.event]).expect("a packet event").scid {
                    conn.client_cid = Some(scid.get(buf).into());
                }
            }
        }
        for (c, n) in rx_count.into_iter().enumerate() {
            self.conns[c].rx_datagrams += n;
        }
        let frame_rows = self.frames(staged, t, placed, &pks);
        (pks, Some((packet_rows, frame_rows)))
    }

    /// The ack_delay_exponent each endpoint of a connection announced so far (last value wins).
    fn announced_exponents(&self) -> HashMap<(usize, &'static str), i32> {
        let mut last: HashMap<(usize, &'static str), (i64, i32)> = HashMap::default();
        for row in &self.tp {
            let Some(exponent) = row.values.ack_delay_exponent else { continue };
            let conn = &self.conns[row.conn];
            let endpoint = if &*row.owner == "local" {
                local_side(&conn.vantage, conn.flow.as_deref())
            } else {
                peer_side(&conn.vantage, conn.flow.as_deref())
            };
            let entry = last.entry((row.conn, endpoint)).or_insert((row.event_index, exponent));
            if row.event_index >= entry.0 {
                *entry = (row.event_index, exponent);
            }
        }
        last.into_iter().map(|(k, (_, x))| (k, x)).collect()
    }

    fn frames(&self, staged: &Staged, t: &TraceOptions, placed: &[Placed], pks: &[Pk]) -> Table {
        let events = &staged.events;
        let buf = &staged.buf[..];
        let mut rows = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), i32s("position"), texts("frame_type"), f64s("ack_delay_ms"),
            i64s("ack_delay_raw"), i64s("largest_acknowledged"), ranges("acked_ranges"), i64s("ecn_ce"),
            i64s("offset_bytes"), i64s("length_bytes"), i64s("stream_id"), bools("fin"), i64s("sequence_number"),
            i64s("ack_eliciting_threshold"), f64s("request_max_ack_delay_ms"), i64s("reordering_threshold"),
            texts("details"),
        ]);
        let exponents = if t.encoding == Encoding::Raw { self.announced_exponents() } else { HashMap::default() };
        // (in file order)
        let mut order: Vec<&Pk> = pks.iter().collect();
        if !order.windows(2).all(|w| w[0].event < w[1].event) {
            order.sort_by_key(|pk| pk.event);
        }
        for pk in order {
            let e = &events[pk.event];
            let packet = staged.packet(e).expect("a packet event");
            let conn = &self.conns[pk.conn];
            for (position, f) in staged.frames_of(packet).iter().enumerate() {
                let ack = f.ftype == FType::Ack;
                let c = &mut rows.columns;
                c[0].i64(Some(conn.connection_id));
                c[1].i64(Some(placed[pk.event].event_index));
                c[2].i32(Some(position as i32));
                c[3].text(Some(f.ftype.as_str()));
                // RFC 9000 §19.3: "ACK Delay: A variable-length integer encoding the acknowledgment
                // delay in microseconds ... decoded by multiplying the value in the field by 2 to
                // the power of the ack_delay_exponent transport parameter sent by the sender of the
                // ACK frame"; 3 in Initial packets (sent before any transport parameter).
                let (delay_ms, raw) = if !ack {
                    (None, None)
                } else {
                    match t.encoding {
                        Encoding::Ms => {
                            let value = f.ack_delay.or(if t.missing_ack_delay_is_zero { Some(0.0) } else { None });
                            (value.map(|v| v * t.time_scale_ms), None)
                        }
                        Encoding::Us => (f.ack_delay.map(|v| v / 1000.0), None),
                        Encoding::Raw => {
                            let announced = exponents.get(&(pk.conn, pk.sender)).copied();
                            let exponent = decode_exponent(announced, &packet.ptype);
                            let ms = match (f.ack_delay, exponent) {
                                (Some(v), Some(x)) => Some(v * 2f64.powi(x) / 1000.0),
                                _ => None,
                            };
                            (ms, f.ack_delay.and_then(|v| json::float_to_i64(v.round_ties_even())))
                        }
                    }
                };
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

    fn events(&self, staged: &Staged, t: &TraceOptions, placed: &[Placed]) -> Vec<(&'static str, Table)> {
        let events = &staged.events;
        let buf = &staged.buf[..];
        let scale = t.time_scale_ms;
        let rtt = t.time_scale_ms * t.metric_scale_ms;
        let mut metrics = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), f64s("latest_rtt_ms"), f64s("min_rtt_ms"),
            f64s("smoothed_rtt_ms"), f64s("rtt_variance_ms"), i32s("pto_count"), i64s("congestion_window_bytes"),
            i64s("bytes_in_flight_bytes"),
        ]);
        let mut lost = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("packet_type"),
            texts("packet_number_space"), i64s("packet_number"), texts("trigger"),
        ]);
        let mut dropped = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("packet_type"), i64s("packet_number"),
            i32s("size_bytes"), texts("trigger"),
        ]);
        let mut timers = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("timer_type"), texts("event_type"),
            texts("packet_number_space"), f64s("delta_ms"),
        ]);
        let mut other = Table::new(vec![
            i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("event_name"), texts("data"),
        ]);
        for (e, p) in events.iter().zip(placed) {
            let conn = &self.conns[p.conn];
            let id = Some(conn.connection_id);
            let index = Some(p.event_index);
            fn text<'b>(x: &'b Option<Txt>, buf: &'b [u8]) -> Option<&'b str> {
                x.as_ref().map(|x| x.get(buf))
            }
            match e.body {
                Body::Metrics(i) => {
                    let m = &staged.metrics[i as usize];
                    // RFC 9002 §5.1: an RTT sample needs an ACK of a packet the endpoint sent, so
                    // latest_rtt and min_rtt logged before its first packet_sent are initial values,
                    // not samples (quinn logs its 333 ms initial RTT as both in a connection's first
                    // event).  A later slice can only move that first packet earlier than "never":
                    // quicack.normalize's finish clears the values logged before a first packet_sent
                    // found in a later slice.
                    let before = conn.first_sent.is_some_and(|first| p.event_index < first);
                    let unset = t.latest_rtt_zero_is_unset && m.min_rtt.is_none() && m.latest_rtt == Some(0.0);
                    let c = &mut metrics.columns;
                    c[0].i64(id);
                    c[1].i64(index);
                    c[2].f64(p.time_ms);
                    c[3].f64(if unset || before { None } else { m.latest_rtt.map(|v| v * rtt) });
                    c[4].f64(if before { None } else { m.min_rtt.map(|v| v * rtt) });
                    c[5].f64(m.smoothed_rtt.map(|v| v * rtt));
                    c[6].f64(m.rtt_variance.map(|v| v * rtt));
                    c[7].i32(m.pto_count);
                    c[8].i64(m.congestion_window);
                    c[9].i64(m.bytes_in_flight);
                }
                Body::Lost(i) => {
                    let l = &staged.lost[i as usize];
                    let c = &mut lost.columns;
                    c[0].i64(id);
                    c[1].i64(index);
                    c[2].f64(p.time_ms);
                    c[3].text(l.ptype.as_ref().map(|x| x.as_str()));
                    c[4].text(l.ptype.as_ref().and_then(|x| x.space()));
                    c[5].i64(l.packet_number);
                    c[6].text(text(&l.trigger, buf));
                }
                Body::Dropped(i) => {
                    let d = &staged.dropped[i as usize];
                    let c = &mut dropped.columns;
                    c[0].i64(id);
                    c[1].i64(index);
                    c[2].f64(p.time_ms);
                    c[3].text(d.ptype.as_ref().map(|x| x.as_str()));
                    c[4].i64(d.packet_number);
                    c[5].i32(d.size);
                    c[6].text(text(&d.trigger, buf));
                }
                Body::Timer(i) => {
                    let x = &staged.timers[i as usize];
                    let c = &mut timers.columns;
                    c[0].i64(id);
                    c[1].i64(index);
                    c[2].f64(p.time_ms);
                    c[3].text(text(&x.timer_type, buf));
                    c[4].text(text(&x.event_type, buf));
                    c[5].text(text(&x.space, buf));
                    c[6].f64(x.delta.map(|v| v * scale));
                }
                _ => {}
            }
            if !e.canon.routed() {
                let c = &mut other.columns;
                c[0].i64(id);
                c[1].i64(index);
                c[2].f64(p.time_ms);
                c[3].text(Some(&staged.names[e.name as usize].0));
                write_data(&mut c[4], buf, e.data);
            }
        }
        [("logged_metrics", metrics), ("lost_packets", lost), ("dropped_packets", dropped), ("timers", timers),
         ("other_events", other)]
            .into_iter()
            .filter(|(_, t)| t.rows() > 0)
            .collect()
    }

    /// The first ODCID candidate in file order: a server's original_destination_connection_id,
    /// connection_started's destination CID, or the DCID of the client's first Initial.
    fn odcid<'a>(&mut self, staged: &'a Staged, placed: &[Placed], pks: &[Pk]) {
        let buf = &staged.buf[..];
        let mut best: HashMap<usize, (i64, &'a str)> = HashMap::default();
        let mut offer = |conn: usize, index: i64, value: Option<&'a Txt>| {
            if let Some(v) = value {
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

    /// Each connection's state, for `connections` (`quicack.normalize`'s table `conn`).
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

    /// Every parameters_set event (`quicack.normalize`'s table `tp_ev`).
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

fn epoch_ms(t: &TraceOptions, t_ms: Option<f64>) -> Option<f64> {
    let t_ms = t_ms?;
    if t.absolute {
        Some(t_ms)
    } else {
        t.reference_epoch_ms.map(|r| r + t_ms)
    }
}

fn data_text(buf: &[u8], data: Data) -> Option<String> {
    match data {
        Data::Missing => None,
        Data::Range(s, e) => Some(json::minified(&buf[s as usize..e as usize])),
        Data::NullText | Data::Wrapped(None) => Some("null".into()),
        Data::Wrapped(Some((s, e))) => Some(json::minified(&buf[s as usize..e as usize])),
    }
}

/// `other_events.data`: the event's data (minified), or a record that is not an event whole.
fn write_data(column: &mut crate::columns::Column, buf: &[u8], data: Data) {
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
