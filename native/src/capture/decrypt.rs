//! Decrypting one packet with its connection's keys, and writing its rows.
//!
//! Theory of operation: `State::decrypt` picks the keys of the packet's space and direction
//! (deriving them the first time the secrets allow), removes header protection, expands the
//! packet number against the largest one decrypted so far in that space and direction, and
//! opens the payload.  1-RTT packets whose Key Phase bit differs from the current one are
//! opened with the next generation of keys (RFC 9001 §6.3: "an endpoint … uses the next packet
//! protection keys"), or the previous one for a late packet.  The frames read then feed the TLS
//! handshake (CRYPTO), the connection ID table (NEW_CONNECTION_ID) and the datagram's flags.

use super::conn::AppKeys;
use super::frames;
use super::keys::{Keys, Suite};
use super::packet::{self, Kind};
use super::rows::Packet;
use super::tls::Messages;
use super::{PacketRow, State, Told};

/// Open `buf[hdr..]` (the header before it unprotected) with `keys`; on failure the ciphertext
/// is restored from `original`.
fn open_with(keys: &Keys, pn: u64, buf: &mut [u8], hdr: usize, original: &[u8]) -> Option<usize> {
    let (header, payload) = buf.split_at_mut(hdr);
    let r = keys.open(pn, header, payload);
    if r.is_none() {
        payload.copy_from_slice(&original[hdr..]);
    }
    r
}

/// RFC 9001 §6: a Key Phase bit other than the current one is a key update (or a packet sent
/// before the last one).
fn open_app(app: &mut AppKeys, phase: bool, pn: u64, buf: &mut [u8], hdr: usize, original: &[u8]) -> Option<usize> {
    if phase == app.phase {
        return open_with(&app.current, pn, buf, hdr, original);
    }
    if let Some(previous) = &app.previous {
        if let Some(n) = open_with(previous, pn, buf, hdr, original) {
            return Some(n);
        }
    }
    if app.next.is_none() {
        app.next = app.current.next_generation();
    }
    let n = open_with(app.next.as_ref()?, pn, buf, hdr, original)?;
    let next = app.next.take()?;
    app.previous = Some(std::mem::replace(&mut app.current, next));
    app.phase = phase;
    Some(n)
}

impl State {
    /// Decrypt one packet (`packet`: its bytes) of connection `c`; its frames into
    /// `self.frames`.  The packet number, or None if it could not be decrypted.
    pub(super) fn decrypt(&mut self, c: usize, from_server: bool, kind: Kind, packet: &[u8], pn_offset: usize,
                          told: &mut Told) -> Option<u64> {
        let d = from_server as usize;
        let space = kind.space();
        let conn = &mut self.conns.list[c];
        match kind {
            Kind::Handshake => conn.derive(&self.secrets, from_server, 1, false),
            Kind::ZeroRtt => conn.derive(&self.secrets, false, 2, true),
            Kind::OneRtt => conn.derive(&self.secrets, from_server, 2, false),
            _ => {}
        }
        self.buf.clear();
        self.buf.extend_from_slice(packet);
        let hp: &Keys = match kind {
            Kind::Initial => conn.initial.as_ref().map(|(cl, sv)| if from_server { sv } else { cl })?,
            Kind::Handshake => conn.handshake[d].as_ref()?,
            Kind::ZeroRtt => conn.early.as_ref()?,
            Kind::OneRtt => &conn.app[d].as_ref()?.current,
            _ => return None,
        };
        let (first, pn_len, truncated) = packet::unprotect(hp, &mut self.buf, pn_offset)?;
        let pn = packet::decode_pn(conn.largest[d][space], truncated, pn_len);
        let hdr = pn_offset + pn_len;
        let len = if kind == Kind::OneRtt {
            open_app(conn.app[d].as_mut()?, first & 0x04 != 0, pn, &mut self.buf, hdr, packet)?
        } else {
            open_with(hp, pn, &mut self.buf, hdr, packet)?
        };
        conn.largest[d][space] = Some(conn.largest[d][space].map_or(pn, |l| l.max(pn)));
        let payload = &self.buf[hdr..hdr + len];
        told.malformed |= !frames::parse(payload, &mut self.frames);
        let mut messages = Messages { old_parameters: super::keys::old_parameters(conn.version), ..Messages::default() };
        let mut new_ids = Vec::new();
        for f in &self.frames {
            match (f.ftype, f.offset, f.data) {
                (6, Some(offset), Some((s, e))) => {
                    told.starts |= kind == Kind::Initial && offset == 0;
                    conn.crypto[d][space].add(offset, &payload[s..e], &mut messages);
                }
                (0x18, _, Some((s, e))) => new_ids.push((s, e)),
                _ => {}
            }
        }
        told.client_hello |= messages.types.contains(&1);
        told.server_hello |= messages.types.contains(&2);
        if !from_server && messages.random.is_some() {
            conn.random = messages.random;
        }
        if let Some(code) = messages.suite {
            conn.suite = Suite::from_code(code);
        }
        if told.server_name.is_none() {
            told.server_name = messages.server_name;
        }
        told.parameters.extend(messages.parameters);
        for (s, e) in new_ids {
            self.conns.add_cid(c, &self.buf[hdr + s..hdr + e], from_server);
        }
        Some(pn)
    }

    /// Write a packet's row (and its frames') and count it in the datagram's flags.
    pub(super) fn emit(&mut self, frame_number: i64, rest: &[u8], row: &PacketRow, told: &mut Told) {
        told.packets += 1;
        if !told.types.is_empty() {
            told.types.push(',');
        }
        told.types.push_str(row.kind.name());
        told.initial |= row.kind == Kind::Initial;
        told.client_hello |= row.kind == Kind::ZeroRtt;
        let undecrypted = self.frames.is_empty() && !matches!(row.kind, Kind::Retry | Kind::VersionNegotiation);
        told.undecrypted |= undecrypted;
        told.decrypted += !undecrypted as i32;
        self.rows.packet(&Packet {
            frame_number, idx: told.packets as i64, kind: row.kind.name(), long: row.long, size: row.size as i32,
            version: row.version, dcid: row.dcid.and_then(|(s, n)| rest.get(s..s + n)), packet_number: row.pn,
            decryption_failed: row.failed && undecrypted, frames: &self.frames, decrypted: !undecrypted,
            event_index: self.events,
        });
        self.events += 1;
    }
}
