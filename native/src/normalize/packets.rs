//! Packets: the `packets` rows of a slice, each with its sender, direction and datagram.
//!
//! Theory of operation: the slice's packet events are taken in (connection, event) order.  A
//! trace without a vantage point takes it from a connection's first packet if that is an
//! Initial.  Each packet's sender and direction come from the event (sent or received, by the
//! vantage point's side) or, for traces that do not say, from the connection IDs (the client's
//! is the source CID first logged).  Packets are told apart into datagrams as RFC 9000 §12.2
//! coalesces them: a packet shares its predecessor's datagram when it goes the same way and is
//! logged at the same time with a later coalescing order, or carries the same datagram payload
//! checksum (quic-go), or follows the same `datagrams_received` event (aioquic); the comparisons
//! are SQL's three-valued ones, as the store's first SQL had them.  What the next slice needs —
//! each connection's last packet, datagrams counted, the client's CID, the first packet sent — is
//! carried over on the connection.

use super::connections::{Conn, Placed};
use super::{Normalizer, TraceOptions};
use crate::columns::{bools, f64s, i32s, i64s, texts, Table};
use crate::event::{Canon, Event, Packet, PType, Staged};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Dir {
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

/// A packet of the slice, with what deciding its datagram takes.
pub(super) struct Pk {
    pub(super) event: usize,
    pub(super) conn: usize,
    pub(super) sender: &'static str,
    direction: Dir,
    rank: i32,
    rx_seq: Option<i64>,
    datagram_id: i64,
}

/// What deciding whether a packet starts a datagram takes of the packet before it.
#[derive(Clone, Copy, Default)]
pub(super) struct LastPacket {
    direction: Option<Dir>,
    t_ms: Option<f64>,
    /// its coalescing order (`PType::rank`)
    rank: Option<i32>,
    checksum: Option<i64>,
    /// the datagrams_received event it followed
    rx_seq: Option<i64>,
}

impl LastPacket {
    fn of(pk: &Pk, e: &Event, packet: &Packet) -> LastPacket {
        LastPacket {
            direction: Some(pk.direction),
            t_ms: e.t_ms,
            rank: Some(pk.rank),
            checksum: packet.checksum,
            rx_seq: pk.rx_seq,
        }
    }
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

/// A packet starts a new datagram unless it follows, in the same direction, a packet of the same
/// datagram: one logged at the same time with an earlier coalescing order (RFC 9000 §12.2), one
/// with the same datagram_payload_checksum (quic-go), or — received, in traces that log
/// datagrams_received before their packets (aioquic) — one after the same datagrams_received
/// event.  Comparisons follow SQL: one with a missing value holds nothing.
fn starts_datagram(prev: &LastPacket, this: &LastPacket) -> bool {
    let direction = this.direction.expect("a direction");
    let same_time_later_rank = and(eq(prev.t_ms, this.t_ms), prev.rank.map(|r| r < this.rank.expect("a rank")));
    let same_checksum = eq(prev.checksum, this.checksum);
    let same_rx = and(and(Some(direction == Dir::Received), this.rx_seq.map(|r| r > 0)), eq(prev.rx_seq, this.rx_seq));
    let follows = and(eq(prev.direction, Some(direction)), or(or(same_time_later_rank, same_checksum), same_rx));
    follows != Some(true)
}

fn epoch_ms(t: &TraceOptions, t_ms: Option<f64>) -> Option<f64> {
    let t_ms = t_ms?;
    if t.absolute {
        Some(t_ms)
    } else {
        t.reference_epoch_ms.map(|r| r + t_ms)
    }
}

/// The slice's packets in file order, and per connection the datagrams_received events among
/// them (aioquic logs datagrams_received before the packets of each datagram: they are counted).
fn collect(staged: &Staged, t: &TraceOptions, placed: &[Placed], n_conns: usize) -> (Vec<Pk>, Vec<i64>) {
    let mut rx_count: Vec<i64> = vec![0; n_conns];
    let mut pks: Vec<Pk> = Vec::with_capacity(staged.packets.len());
    for (k, (e, p)) in staged.events.iter().zip(placed).enumerate() {
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
    (pks, rx_count)
}

/// Who sent a packet, and whether the vantage point sent or received it: as the event says
/// (`logged`), or — without direction in the events — by connection IDs: a long header's source
/// CID equal to the first one logged (the client's first Initial) marks a client packet, and a
/// short header whose destination CID is that one marks a server packet.
fn sender_and_direction(conn: &Conn, packet: &Packet, logged: Dir, buf: &[u8], t: &TraceOptions,
                        running_cid: &mut Option<Box<str>>) -> (&'static str, Dir) {
    let local = conn.local_side();
    if t.sender_from_cids {
        if conn.client_cid.is_none() && running_cid.is_none() {
            *running_cid = packet.scid.as_ref().map(|scid| scid.get(buf).into());
        }
        let client_cid = conn.client_cid.as_deref().or(running_cid.as_deref());
        let sender = match (&packet.scid, &packet.dcid) {
            (Some(scid), _) => if Some(scid.get(buf)) == client_cid { "client" } else { "server" },
            (None, Some(dcid)) if Some(dcid.get(buf)) == client_cid => "server",
            _ => "client",
        };
        (sender, if sender == local { Dir::Sent } else { Dir::Received })
    } else if logged == Dir::Sent {
        (local, Dir::Sent)
    } else {
        (conn.peer_side(), Dir::Received)
    }
}

/// Per connection, what the slice's packets so far left.
struct Progress {
    /// the client's CID seen in this slice
    running_cid: Vec<Option<Box<str>>>,
    /// datagrams started in this slice
    started: Vec<i64>,
    first_sent: Vec<Option<i64>>,
    /// the last packet (index into the slice's packets)
    last_of: Vec<Option<usize>>,
}

fn packet_table() -> Table {
    Table::new(vec![
        i64s("connection_id"), i64s("event_index"), f64s("time_ms"), f64s("epoch_ms"), texts("direction"),
        texts("sender"), texts("packet_type"), texts("packet_number_space"), i64s("packet_number"),
        i32s("size_bytes"), i64s("datagram_id"), bools("ack_eliciting"), i32s("frame_count"),
    ])
}

impl Normalizer {
    /// The slice's packets (in connection, event order, each with its sender) and their rows
    /// (None: the slice has no packet).
    pub(super) fn packets(&mut self, staged: &Staged, t: &TraceOptions, placed: &[Placed]) -> (Vec<Pk>, Option<Table>) {
        let n_conns = self.conns.len();
        let (mut pks, rx_count) = collect(staged, t, placed, n_conns);
        if pks.is_empty() {
            self.count_rx_datagrams(rx_count);
            return (pks, None);
        }
        self.take_vantage(staged, t, &pks);
        // in (connection, event) order (file order already, when the slice is one connection's)
        let key = |pk: &Pk| (self.conns[pk.conn].connection_id, placed[pk.event].event_index);
        if !pks.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            pks.sort_by_key(key);
        }
        let mut rows = packet_table();
        let mut progress = Progress {
            running_cid: vec![None; n_conns],
            started: vec![0; n_conns],
            first_sent: vec![None; n_conns],
            last_of: vec![None; n_conns],
        };
        for i in 0..pks.len() {
            self.packet_row(staged, t, placed, &mut pks, i, &mut progress, &mut rows);
        }
        self.carry_over(staged, &pks, &progress);
        self.count_rx_datagrams(rx_count);
        (pks, Some(rows))
    }

    /// A trace without a vantage point (quinn) takes it from each connection's first packet
    /// event if that is an Initial: a client's first packet is one it sends, a server's one it
    /// receives.
    fn take_vantage(&mut self, staged: &Staged, t: &TraceOptions, pks: &[Pk]) {
        for pk in pks {
            let conn = &mut self.conns[pk.conn];
            if !conn.has_packet {
                conn.has_packet = true;
                let packet = staged.packet(&staged.events[pk.event]).expect("a packet event");
                if t.vantage_from_first_packet && packet.ptype == PType::Initial {
                    conn.vantage = if pk.direction == Dir::Sent { "client" } else { "server" }.into();
                }
            }
        }
    }

    /// Packet `i`: its sender, direction and datagram decided, its row written.
    #[allow(clippy::too_many_arguments)]
    fn packet_row(&self, staged: &Staged, t: &TraceOptions, placed: &[Placed], pks: &mut [Pk], i: usize,
                  progress: &mut Progress, rows: &mut Table) {
        let (conn_i, event) = (pks[i].conn, pks[i].event);
        let e = &staged.events[event];
        let packet = staged.packet(e).expect("a packet event");
        let conn = &self.conns[conn_i];
        let (sender, direction) = sender_and_direction(conn, packet, pks[i].direction, &staged.buf, t,
                                                       &mut progress.running_cid[conn_i]);
        let rx_seq = pks[i].rx_seq.map(|r| conn.rx_datagrams + r);
        let prev = match progress.last_of[conn_i] {
            Some(j) => {
                let pe = &staged.events[pks[j].event];
                LastPacket::of(&pks[j], pe, staged.packet(pe).expect("a packet event"))
            }
            None => conn.last,
        };
        let this = LastPacket {
            direction: Some(direction),
            t_ms: e.t_ms,
            rank: Some(pks[i].rank),
            checksum: packet.checksum,
            rx_seq,
        };
        if starts_datagram(&prev, &this) {
            progress.started[conn_i] += 1;
        }
        let derived = conn.datagrams + progress.started[conn_i] - 1;
        if direction == Dir::Sent && progress.first_sent[conn_i].is_none() {
            progress.first_sent[conn_i] = Some(placed[event].event_index);
        }
        let pk = &mut pks[i];
        pk.sender = sender;
        pk.direction = direction;
        pk.rx_seq = rx_seq;
        pk.datagram_id = packet.datagram_id.unwrap_or(derived);
        progress.last_of[conn_i] = Some(i);

        let p = &placed[event];
        let frames = staged.frames_of(packet);
        let c = &mut rows.columns;
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

    /// What the next slice needs: each connection's last packet, datagrams, first packet sent,
    /// client CID.
    fn carry_over(&mut self, staged: &Staged, pks: &[Pk], progress: &Progress) {
        for (c, last) in progress.last_of.iter().enumerate() {
            let Some(i) = *last else { continue };
            let pk = &pks[i];
            let e = &staged.events[pk.event];
            let packet = staged.packet(e).expect("a packet event");
            let conn = &mut self.conns[c];
            conn.last = LastPacket::of(pk, e, packet);
            conn.datagrams += progress.started[c];
            if conn.first_sent.is_none() {
                conn.first_sent = progress.first_sent[c];
            }
        }
        for pk in pks {
            let conn = &mut self.conns[pk.conn];
            if conn.client_cid.is_none() {
                if let Some(scid) = &staged.packet(&staged.events[pk.event]).expect("a packet event").scid {
                    conn.client_cid = Some(scid.get(&staged.buf).into());
                }
            }
        }
    }

    fn count_rx_datagrams(&mut self, rx_count: Vec<i64>) {
        for (c, n) in rx_count.into_iter().enumerate() {
            self.conns[c].rx_datagrams += n;
        }
    }
}
