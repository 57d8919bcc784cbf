//! QUIC connections of a capture, followed by their connection IDs, with their keys.
//!
//! Theory of operation: as tshark does, a connection is made by a client's Initial (or 0-RTT)
//! whose Destination Connection ID no connection has, and numbered in that order from 0.  Each
//! connection ID is owned by the endpoint that chose it: the client's first DCID and the
//! server's SCIDs (long headers, Retry, NEW_CONNECTION_ID frames it sends) are the server's,
//! the client's SCIDs and its NEW_CONNECTION_ID frames' IDs the client's.  A packet whose DCID
//! is the server's goes to the server.  Short headers carry no DCID length: every length a
//! known ID has is tried.  A zero-length DCID is matched by the address/port 4-tuple.
//! Keys: Initial from the client's DCID (again after a Retry); Handshake, 0-RTT and 1-RTT from
//! the secrets of the client random of the ClientHello, with the ServerHello's cipher suite;
//! 1-RTT keys follow key updates by the Key Phase bit (RFC 9001 §6).

use rustc_hash::FxHashMap;

use super::keys::{Keys, Label, Secrets, Suite};
use super::link::Addr;
use super::tls::Stream;

pub type Endpoint = (Addr, u16);

pub struct AppKeys {
    pub phase: bool,
    pub current: Keys,
    pub next: Option<Keys>,
    pub previous: Option<Keys>,
}

pub struct Conn {
    pub number: u32,
    pub version: u32,
    pub client: Endpoint,
    pub initial: Option<(Keys, Keys)>,
    pub handshake: [Option<Keys>; 2],
    pub early: Option<Keys>,
    pub app: [Option<AppKeys>; 2],
    pub suite: Option<Suite>,
    pub random: Option<[u8; 32]>,
    /// largest packet number decrypted, per direction (0 client, 1 server) and space
    pub largest: [[Option<u64>; 3]; 2],
    pub crypto: [[Stream; 3]; 2],
    /// length of the connection IDs each side chose (0 client, 1 server)
    pub cid_len: [Option<usize>; 2],
    /// a 1-RTT packet was met without 1-RTT keys (tshark reports that once per connection)
    pub app_keys_missed: bool,
}

#[derive(Default)]
pub struct Conns {
    pub list: Vec<Conn>,
    /// connection ID → (connection, chosen by the server)
    cids: FxHashMap<Vec<u8>, (usize, bool)>,
    /// the client's first DCID of each connection: matches its Initial and 0-RTT packets only
    original: FxHashMap<Vec<u8>, usize>,
    lengths: u32,
    tuples: FxHashMap<(Endpoint, Endpoint), usize>,
}

fn tuple(a: Endpoint, b: Endpoint) -> (Endpoint, Endpoint) {
    if a <= b { (a, b) } else { (b, a) }
}

impl Conns {
    /// The connection a DCID belongs to and whether the packet comes from the server.
    pub fn by_cid(&self, dcid: &[u8]) -> Option<(usize, bool)> {
        self.cids.get(dcid).map(|&(c, server_owned)| (c, !server_owned))
    }

    /// A client's Initial or 0-RTT packet's connection: by its DCID, or the connection it
    /// opened with that DCID (a retransmission).
    pub fn by_original(&self, dcid: &[u8]) -> Option<(usize, bool)> {
        self.by_cid(dcid).or_else(|| self.original.get(dcid).map(|&c| (c, false)))
    }

    /// A short header's connection: the known connection ID the bytes after the first begin
    /// with (shortest length first), else the 4-tuple's connection if the receiver chose
    /// zero-length IDs or none is known yet (as tshark does).  (connection, from server, DCID
    /// length).
    pub fn short(&self, d: &[u8], src: Endpoint, dst: Endpoint) -> Option<(usize, bool, usize)> {
        let mut lengths = self.lengths;
        while lengths != 0 {
            let len = lengths.trailing_zeros() as usize;
            lengths &= lengths - 1;
            if let Some(cid) = d.get(1..1 + len) {
                if let Some((c, from_server)) = self.by_cid(cid) {
                    return Some((c, from_server, len));
                }
            }
        }
        let &c = self.tuples.get(&tuple(src, dst))?;
        let from_server = self.list[c].client != src;
        let receiver = if from_server { 0 } else { 1 };
        matches!(self.list[c].cid_len[receiver], None | Some(0)).then_some((c, from_server, 0))
    }

    /// The 4-tuple's connection (a zero-length DCID), and whether `src` is its server.
    pub fn by_tuple(&self, src: Endpoint, dst: Endpoint) -> Option<(usize, bool)> {
        let &c = self.tuples.get(&tuple(src, dst))?;
        Some((c, self.list[c].client != src))
    }

    /// A new connection opened by a client's Initial or 0-RTT from `client`.
    pub fn create(&mut self, version: u32, dcid: &[u8], scid: &[u8], client: Endpoint, server: Endpoint) -> usize {
        let c = self.list.len();
        self.list.push(Conn {
            number: c as u32, version, client, initial: Keys::initial(version, dcid), handshake: [None, None],
            early: None, app: [None, None], suite: None, random: None, largest: [[None; 3]; 2],
            crypto: Default::default(), cid_len: [Some(scid.len()), None], app_keys_missed: false,
        });
        self.original.entry(dcid.to_vec()).or_insert(c);
        self.add_cid(c, scid, false);
        self.tuples.insert(tuple(client, server), c);
        c
    }

    /// Record a connection ID of connection `c` chosen by the server (or the client).
    pub fn add_cid(&mut self, c: usize, cid: &[u8], by_server: bool) {
        if cid.is_empty() || cid.len() > 20 {
            return;
        }
        self.lengths |= 1 << cid.len();
        self.cids.entry(cid.to_vec()).or_insert((c, by_server));
    }

    /// A long header packet of connection `c` from the server: its SCID is the server's.
    pub fn server_scid(&mut self, c: usize, scid: &[u8]) {
        if self.list[c].cid_len[1].is_none() {
            self.list[c].cid_len[1] = Some(scid.len());
        }
        self.add_cid(c, scid, true);
    }
}

impl Conn {
    /// The length of the DCIDs of packets to the receiver (0 while it is not known).
    pub fn receiver_cid_len(&self, from_server: bool) -> usize {
        self.cid_len[if from_server { 0 } else { 1 }].unwrap_or(0)
    }

    /// Handshake (space 1) or 0-RTT/1-RTT (space 2) keys of a direction, derived when the
    /// secrets, the client random and the cipher suite are known.
    pub fn derive(&mut self, secrets: &Secrets, from_server: bool, space: usize, zero_rtt: bool) {
        let (Some(random), suite) = (self.random, self.suite) else { return };
        let v2 = super::keys::is_v2(self.version);
        let d = from_server as usize;
        if zero_rtt {
            if self.early.is_none() {
                if let Some(s) = secrets.get(&random, Label::ClientEarly) {
                    // 0-RTT is sent before the ServerHello: the suite is the first one that fits the secret
                    let suite = suite.unwrap_or(if s.len() == 48 { Suite::Aes256Gcm } else { Suite::Aes128Gcm });
                    self.early = Keys::from_secret(s, suite, v2);
                }
            }
            return;
        }
        let Some(suite) = suite else { return };
        let label = match (space, from_server) {
            (1, false) => Label::ClientHandshake,
            (1, true) => Label::ServerHandshake,
            (_, false) => Label::ClientTraffic,
            (_, true) => Label::ServerTraffic,
        };
        let Some(s) = secrets.get(&random, label) else { return };
        if space == 1 && self.handshake[d].is_none() {
            self.handshake[d] = Keys::from_secret(s, suite, v2);
        } else if space == 2 && self.app[d].is_none() {
            if let Some(current) = Keys::from_secret(s, suite, v2) {
                self.app[d] = Some(AppKeys { phase: false, current, next: None, previous: None });
            }
        }
    }
}
