//! A capture reader of its own: pcap/pcapng → UDP → QUIC packets, decrypted → staged rows.
//!
//! Theory of operation: `Reader` streams a capture's records (`records`), takes each frame's
//! UDP datagram (`link`) and cuts it into its coalesced QUIC packets (`packet`, RFC 9000
//! §12.2): a datagram is QUIC if its first packet is a long header of a known version (or
//! Version Negotiation), or a short header whose DCID belongs to a connection already seen
//! (`conn`) — tshark's heuristics — or if it is UDP on a port given as QUIC (the caller reads
//! the capture again with the ports `quicack.pcap.staging.ports_to_force` finds, as it has
//! tshark do).  A packet after the first must share the first one's DCID and have the fixed bit
//! set; else the rest is padding.  Each packet is decrypted with its connection's keys
//! (`keys`), its frames read (`frames`) and its CRYPTO bytes passed to the TLS handshake
//! reader (`tls`), which yields the client random, cipher suite, server name and transport
//! parameters.  The rows (`rows`) are those the tshark path stages, in batches of datagrams.
//! What this reader does not read — link types, QUIC versions it does not know — is reported
//! (`Reader::unsupported`) so that the caller can have tshark read the capture instead.

pub mod conn;
pub mod frames;
pub mod keys;
pub mod link;
pub mod packet;
pub mod records;
pub mod rows;
pub mod tls;

use rustc_hash::FxHashSet;

use conn::{Conns, Endpoint};
use frames::Frame;
use keys::{Keys, Secrets};
use link::Udp;
use packet::Kind;
use records::{Damage, Records};
use rows::{Datagram, Rows};

/// What one datagram's packets told.
#[derive(Default)]
struct Told {
    packets: i32,
    decrypted: i32,
    starts: bool,
    server_hello: bool,
    client_hello: bool,
    initial: bool,
    undecrypted: bool,
    long_packets: u32,
    long_types: u32,
    malformed: bool,
    connection: Option<u32>,
    server_name: Option<String>,
    parameters: Vec<(u64, Vec<u8>)>,
    /// the packets' types, comma-separated (datagrams.packet_types)
    types: String,
}

pub struct State {
    pub secrets: Secrets,
    conns: Conns,
    pub frames_read: i64,
    events: i64,
    pub rows: Rows,
    quic_ports: FxHashSet<u16>,
    pub unsupported: Option<String>,
    buf: Vec<u8>,
    frames: Vec<Frame>,
    src_ep: Vec<u8>,
    dst_ep: Vec<u8>,
}

pub struct Reader {
    records: Records,
    pub state: State,
    pub damage: Option<Damage>,
    done: bool,
}

impl Reader {
    pub fn new(file: impl std::io::Read + Send + 'static, keylog: Option<&[u8]>, quic_ports: &[u16])
               -> Result<Reader, Damage> {
        let mut secrets = Secrets::default();
        if let Some(text) = keylog {
            secrets.add_keylog(text);
        }
        let state = State {
            secrets, conns: Conns::default(), frames_read: 0, events: 0, rows: Rows::new(),
            quic_ports: quic_ports.iter().copied().collect(), unsupported: None,
            buf: Vec::new(), frames: Vec::new(), src_ep: Vec::new(), dst_ep: Vec::new(),
        };
        Ok(Reader { records: Records::open(file)?, state, damage: None, done: false })
    }

    /// The rows of the next `datagrams` UDP datagrams or so (None once the capture is read,
    /// damaged or found unsupported).
    pub fn batch(&mut self, datagrams: usize) -> Option<Rows> {
        if self.done {
            return None;
        }
        while self.state.rows.datagrams() < datagrams {
            match self.records.next(&mut self.state.secrets) {
                Ok(Some(r)) => {
                    self.state.frames_read += 1;
                    match link::udp(r.linktype, r.data) {
                        link::Frame::Udp(u) => self.state.datagram(self.state.frames_read, r.epoch_ns, &u),
                        link::Frame::Other => {}
                        link::Frame::Unsupported => {
                            self.state.unsupported = Some(format!("link type {} is not read natively", r.linktype));
                            self.done = true;
                            break;
                        }
                    }
                    if self.state.unsupported.is_some() {
                        self.done = true;
                        break;
                    }
                }
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Err(d) => {
                    self.damage = Some(d);
                    self.done = true;
                    break;
                }
            }
        }
        let rows = self.state.rows.take();
        (rows.datagrams() > 0 || !self.done).then_some(rows)
    }
}

fn endpoint_text(out: &mut Vec<u8>, e: Endpoint) {
    out.clear();
    e.0.write(out);
    out.push(b'#');
    out.extend_from_slice(e.1.to_string().as_bytes());
}

impl State {
    fn datagram(&mut self, frame_number: i64, epoch_ns: i64, u: &Udp) {
        let d = u.payload;
        let (src, dst) = ((u.src, u.src_port), (u.dst, u.dst_port));
        let mut told = Told::default();
        let mut first_dcid: Option<Vec<u8>> = None;
        let mut at = 0;
        while at < d.len() {
            let rest = &d[at..];
            if first_dcid.is_some() && rest[0] & 0x40 == 0 {
                break; // RFC 9000 §17.2: the fixed bit; zeros after the packets are padding
            }
            let used = if rest[0] & 0x80 != 0 {
                self.long(rest, src, dst, frame_number, &mut first_dcid, &mut told)
            } else {
                self.short(rest, src, dst, frame_number, &mut first_dcid, &mut told)
            };
            match used {
                Some(n) if n > 0 => at += n,
                _ => break,
            }
        }
        endpoint_text(&mut self.src_ep, src);
        endpoint_text(&mut self.dst_ep, dst);
        let udp_payload_bytes = u.length as i32 - 8;
        if !told.parameters.is_empty() {
            self.rows.parameters(frame_number, &told.parameters);
        }
        self.rows.datagram(&Datagram {
            frame_number, epoch_ns, src_ep: &self.src_ep, dst_ep: &self.dst_ep, src_port: u.src_port,
            dst_port: u.dst_port, udp_payload_bytes, connection: told.connection,
            server_name: told.server_name.as_deref(), packets: told.packets, starts: told.starts,
            server_hello: told.server_hello, client_hello: told.client_hello, initial: told.initial,
            gso: udp_payload_bytes > 1472 && (told.undecrypted || told.long_packets > told.long_types.count_ones()),
            decrypted: told.decrypted, malformed: told.malformed, packet_types: &told.types,
        });
    }

    /// One long header packet at the start of `rest`; the bytes it takes (None: not QUIC).
    fn long(&mut self, rest: &[u8], src: Endpoint, dst: Endpoint, frame_number: i64,
            first_dcid: &mut Option<Vec<u8>>, told: &mut Told) -> Option<usize> {
        let Some(h) = packet::long_header(rest) else {
            if first_dcid.is_none() && rest.len() >= 5 {
                let version = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]);
                let unknown = version != 0 && !packet::known_version(version) && version & 0x0f0f_0f0f != 0x0a0a_0a0a;
                if self.unsupported.is_none() && rest[0] & 0x40 != 0 && unknown {
                    self.unsupported = Some(format!("QUIC version 0x{version:08x} (frame {frame_number}) is not read natively"));
                }
            }
            return None;
        };
        match first_dcid {
            Some(first) if first[..] != *h.dcid => return None,
            Some(_) => {}
            None => *first_dcid = Some(h.dcid.to_vec()),
        }
        let mut found = if h.dcid.is_empty() {
            self.conns.by_tuple(src, dst)
        } else if matches!(h.kind, Kind::Initial | Kind::ZeroRtt) {
            self.conns.by_original(h.dcid)
        } else {
            self.conns.by_cid(h.dcid)
        };
        if found.is_none() && matches!(h.kind, Kind::Initial | Kind::ZeroRtt) {
            found = Some((self.conns.create(h.version, h.dcid, h.scid, src, dst), false));
        }
        if let Some((c, true)) = found {
            if matches!(h.kind, Kind::Initial | Kind::Handshake | Kind::Retry) {
                self.conns.server_scid(c, h.scid);
            }
            if h.kind == Kind::Retry {
                self.conns.list[c].initial = Keys::initial(h.version, h.scid);
            }
        }
        told.connection = told.connection.or(found.map(|(c, _)| self.conns.list[c].number));
        told.long_packets += 1;
        told.long_types |= 1 << (h.kind as u32);
        let mut row = PacketRow { kind: h.kind, long: true, size: h.end, version: Some(h.version),
                                  dcid: Some((6, h.dcid.len())), pn: None, failed: false };
        if matches!(h.kind, Kind::Retry | Kind::VersionNegotiation) {
            told.server_hello = true;
            self.frames.clear();
        } else {
            told.malformed |= h.cut;
            row.failed = true;
            if let Some((c, from_server)) = found {
                let decrypted = self.decrypt(c, from_server, h.kind, &rest[..h.end], h.pn_offset, told);
                if let Some(pn) = decrypted {
                    row.pn = Some(pn);
                    row.failed = false;
                }
            }
            if row.failed {
                self.frames.clear();
            }
        }
        self.emit(frame_number, rest, &row, told);
        Some(h.end)
    }

    /// A short header packet (the rest of the datagram); None if it is not taken for QUIC.
    fn short(&mut self, rest: &[u8], src: Endpoint, dst: Endpoint, frame_number: i64,
             first_dcid: &mut Option<Vec<u8>>, told: &mut Told) -> Option<usize> {
        // RFC 9000 §12.2: coalesced packets share the first one's DCID (its length with it)
        let found = match first_dcid {
            Some(first) => {
                if rest.get(1..1 + first.len()) != Some(&first[..]) {
                    return None;
                }
                // the first packet's connection; a DCID of the wrong length for it ends the datagram
                match told.connection {
                    Some(n) => {
                        let conn = &self.conns.list[n as usize];
                        let from_server = conn.client != src;
                        if conn.receiver_cid_len(from_server) != first.len() {
                            return None;
                        }
                        Some((Some(n as usize), from_server, first.len()))
                    }
                    None => Some((None, false, first.len())),
                }
            }
            None => self.conns.short(rest, src, dst).map(|(c, s, n)| (Some(c), s, n)),
        };
        let forced = [src.1, dst.1].iter().any(|p| self.quic_ports.contains(p));
        let mut row = PacketRow { kind: Kind::OneRtt, long: false, size: rest.len(), version: None, dcid: None,
                                  pn: None, failed: false };
        match found {
            Some((c, from_server, len)) => {
                // without its connection tshark does not write the DCID (it cannot know its length)
                row.dcid = c.map(|_| (1, len));
                let decrypted = match c {
                    Some(c) => {
                        told.connection = told.connection.or(Some(self.conns.list[c].number));
                        let pn = self.decrypt(c, from_server, Kind::OneRtt, rest, 1 + len, told);
                        // tshark: "decryption failed" for each packet its keys do not open, but
                        // "secrets are not available" only for a connection's first 1-RTT packet
                        let conn = &mut self.conns.list[c];
                        if pn.is_none() && conn.app[from_server as usize].is_some() {
                            row.failed = true;
                        } else if pn.is_none() {
                            row.failed = !conn.app_keys_missed;
                            conn.app_keys_missed = true;
                        }
                        pn
                    }
                    None => None,
                };
                row.pn = decrypted;
                if decrypted.is_some() {
                    row.failed = false;
                } else {
                    self.frames.clear();
                }
            }
            None if forced && first_dcid.is_none() => self.frames.clear(),
            None => return None,
        }
        let len = row.dcid.map_or(0, |(_, n)| n).min(rest.len() - 1);
        first_dcid.get_or_insert_with(|| rest[1..1 + len].to_vec());
        self.emit(frame_number, rest, &row, told);
        Some(rest.len())
    }
}

/// A packet's row before it is written (the frames are in `State::frames`).
struct PacketRow {
    kind: Kind,
    long: bool,
    size: usize,
    version: Option<u32>,
    /// where the DCID starts in the packet and its length (None: unknown)
    dcid: Option<(usize, usize)>,
    pn: Option<u64>,
    failed: bool,
}

mod decrypt;
