//! The TLS handshake inside CRYPTO frames: reassembly and the few messages quicack reads.
//!
//! Theory of operation: each connection has one `Stream` per direction and packet number
//! space; CRYPTO frames add their bytes at their offsets (RFC 9000 §19.6), and every
//! handshake message (RFC 8446 §4: type, 24-bit length, body) completed by the bytes in order
//! is read at once: a ClientHello gives the client random (the key log's key), the server name
//! (RFC 6066 §3) and the client's transport parameters (RFC 9000 §18, extension 57); a
//! ServerHello the cipher suite; EncryptedExtensions the server's transport parameters.  Bytes
//! out of order wait (up to `MAX_PENDING`); what is read is dropped.

use std::collections::BTreeMap;

use super::frames::varint;

const MAX_PENDING: usize = 1 << 18;

#[derive(Default)]
pub struct Stream {
    next: u64,
    buffer: Vec<u8>,
    pending: BTreeMap<u64, Vec<u8>>,
    pending_bytes: usize,
}

/// What the messages completed by one CRYPTO frame said.
#[derive(Default, Debug)]
pub struct Messages {
    pub types: Vec<u8>,
    pub random: Option<[u8; 32]>,
    pub server_name: Option<String>,
    pub suite: Option<u16>,
    /// (transport parameter id, value bytes)
    pub parameters: Vec<(u64, Vec<u8>)>,
    /// set before reading: the transport parameters use the encoding of drafts before 27
    pub old_parameters: bool,
}

impl Stream {
    /// Add CRYPTO bytes at `offset`; read the messages they complete into `out`.
    pub fn add(&mut self, offset: u64, data: &[u8], out: &mut Messages) {
        let end = offset + data.len() as u64;
        if end <= self.next {
            return;
        }
        if offset > self.next {
            if self.pending_bytes + data.len() <= MAX_PENDING && !self.pending.contains_key(&offset) {
                self.pending_bytes += data.len();
                self.pending.insert(offset, data.to_vec());
            }
            return;
        }
        self.buffer.extend_from_slice(&data[(self.next - offset) as usize..]);
        self.next = end;
        while let Some((&o, _)) = self.pending.first_key_value() {
            if o > self.next {
                break;
            }
            let chunk = self.pending.pop_first().map(|(_, c)| c).unwrap_or_default();
            self.pending_bytes -= chunk.len();
            let e = o + chunk.len() as u64;
            if e > self.next {
                self.buffer.extend_from_slice(&chunk[(self.next - o) as usize..]);
                self.next = e;
            }
        }
        self.read_messages(out);
    }

    fn read_messages(&mut self, out: &mut Messages) {
        let mut at = 0;
        while self.buffer.len() >= at + 4 {
            let kind = self.buffer[at];
            let len = u32::from_be_bytes([0, self.buffer[at + 1], self.buffer[at + 2], self.buffer[at + 3]]) as usize;
            if self.buffer.len() < at + 4 + len {
                break;
            }
            out.types.push(kind);
            let body = &self.buffer[at + 4..at + 4 + len];
            let _ = match kind {
                1 => client_hello(body, out),
                2 => server_hello(body, out),
                8 => extensions(body, out, false),
                _ => Some(()),
            };
            at += 4 + len;
        }
        self.buffer.drain(..at);
    }
}

fn get<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let s = b.get(*at..*at + n)?;
    *at += n;
    Some(s)
}

fn u8_len<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = *b.get(*at)? as usize;
    *at += 1;
    get(b, at, n)
}

fn u16_len<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = u16::from_be_bytes(get(b, at, 2)?.try_into().ok()?) as usize;
    get(b, at, n)
}

/// RFC 8446 §4.1.2: legacy_version, random, legacy_session_id, cipher_suites,
/// legacy_compression_methods, extensions.
fn client_hello(b: &[u8], out: &mut Messages) -> Option<()> {
    let mut at = 2;
    out.random = Some(get(b, &mut at, 32)?.try_into().ok()?);
    u8_len(b, &mut at)?;
    u16_len(b, &mut at)?;
    u8_len(b, &mut at)?;
    extensions(&b[at..], out, true)
}

/// RFC 8446 §4.1.3: legacy_version, random, legacy_session_id_echo, cipher_suite, …
fn server_hello(b: &[u8], out: &mut Messages) -> Option<()> {
    let mut at = 34;
    u8_len(b, &mut at)?;
    out.suite = Some(u16::from_be_bytes(get(b, &mut at, 2)?.try_into().ok()?));
    Some(())
}

/// An extensions block (u16 length, then type, u16 length, body each): server_name (0) of a
/// ClientHello, quic_transport_parameters (57; 0xffa5 in drafts).
fn extensions(b: &[u8], out: &mut Messages, client_hello: bool) -> Option<()> {
    let mut at = 0;
    let all = u16_len(b, &mut at)?;
    let mut at = 0;
    while at + 4 <= all.len() {
        let kind = u16::from_be_bytes([all[at], all[at + 1]]);
        at += 2;
        let body = u16_len(all, &mut at)?;
        match kind {
            0 if client_hello => {
                let mut i = 2;
                if body.get(i) == Some(&0) {
                    i += 1;
                    if let Some(name) = u16_len(body, &mut i) {
                        out.server_name = Some(String::from_utf8_lossy(name).into_owned());
                    }
                }
            }
            57 | 0xffa5 => parameters(body, out),
            _ => {}
        }
    }
    Some(())
}

/// RFC 9000 §18: Transport Parameter ID (i), Length (i), Value.  Drafts before 27: a 16-bit
/// length of the list, then 16-bit ids and lengths.
fn parameters(b: &[u8], out: &mut Messages) {
    let mut at = if out.old_parameters { 2 } else { 0 };
    while at < b.len() {
        let (id, len) = if out.old_parameters {
            let Some(h) = b.get(at..at + 4) else { return };
            at += 4;
            (u16::from_be_bytes([h[0], h[1]]) as u64, u16::from_be_bytes([h[2], h[3]]) as u64)
        } else {
            let (Some(id), Some(len)) = (varint(b, &mut at), varint(b, &mut at)) else { return };
            (id, len)
        };
        let Some(value) = b.get(at..at + len as usize) else { return };
        at += len as usize;
        // RFC 9000 §18.1: "Transport parameters with an identifier of the form 31 * N + 27 for
        // integer values of N are reserved" (GREASE: 0xff02de1a among them)
        if id % 31 != 27 {
            out.parameters.push((id, value.to_vec()));
        }
    }
}
