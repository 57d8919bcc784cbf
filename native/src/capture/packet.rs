//! QUIC packet headers (RFC 9000 §17, RFC 9369 §3.2) and packet protection removal (RFC 9001 §5).
//!
//! Theory of operation: `long_header` reads a long header's invariant fields and, for the
//! versions this reader knows, its type, token and Length: where the packet ends in the
//! datagram (so coalesced packets can be cut, RFC 9000 §12.2).  A short header's Destination
//! Connection ID length is known only from the connection (`quicack`'s `conn`).  `unprotect`
//! removes header protection from a copy of the packet and `decode_pn` expands the truncated
//! packet number; `Keys::open` then authenticates and decrypts the payload in place.

use super::frames::varint;
use super::keys::{initial_salt, is_v2, Keys};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
    VersionNegotiation,
    OneRtt,
}

impl Kind {
    /// quicack's packet type names (quicack.pcap.fields.LONG_TYPES_V1).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Initial => "initial",
            Kind::ZeroRtt => "0RTT",
            Kind::Handshake => "handshake",
            Kind::Retry => "retry",
            Kind::VersionNegotiation => "version_negotiation",
            Kind::OneRtt => "1RTT",
        }
    }

    /// Packet number space: 0 Initial, 1 Handshake, 2 application data.
    pub fn space(self) -> usize {
        match self {
            Kind::Initial => 0,
            Kind::Handshake => 1,
            _ => 2,
        }
    }
}

pub struct Long<'a> {
    pub version: u32,
    pub kind: Kind,
    pub dcid: &'a [u8],
    pub scid: &'a [u8],
    /// packet number offset (Initial, 0-RTT, Handshake)
    pub pn_offset: usize,
    /// end of the packet (its Length field; the datagram's end for Retry and VN)
    pub end: usize,
    /// the Length field points past the datagram's end
    pub cut: bool,
}

/// Whether this reader knows the long header layout of `version` (v1, v2, drafts 23 to 32).
pub fn known_version(version: u32) -> bool {
    initial_salt(version).is_some()
}

/// RFC 9000 §17.2: Header Form (1), Fixed Bit (1), Long Packet Type (2), Type-Specific Bits
/// (4), Version (32), DCID Length (8), DCID (0..160), SCID Length (8), SCID (0..160).  None if
/// the bytes are no long header of a known version (or Version Negotiation).
pub fn long_header(d: &[u8]) -> Option<Long<'_>> {
    let version = u32::from_be_bytes(d.get(1..5)?.try_into().ok()?);
    let mut at = 5;
    let dl = *d.get(at)? as usize;
    let dcid = d.get(at + 1..at + 1 + dl)?;
    at += 1 + dl;
    let sl = *d.get(at)? as usize;
    let scid = d.get(at + 1..at + 1 + sl)?;
    at += 1 + sl;
    if version == 0 {
        return Some(Long { version, kind: Kind::VersionNegotiation, dcid, scid, pn_offset: at, end: d.len(), cut: false });
    }
    if !known_version(version) || dl > 20 || sl > 20 {
        return None;
    }
    let bits = (d[0] >> 4) & 3;
    // RFC 9369 §3.2: "Initial: 0b01, 0-RTT: 0b10, Handshake: 0b11, Retry: 0b00".
    let kind = match (is_v2(version), bits) {
        (false, 0) | (true, 1) => Kind::Initial,
        (false, 1) | (true, 2) => Kind::ZeroRtt,
        (false, 2) | (true, 3) => Kind::Handshake,
        _ => Kind::Retry,
    };
    if kind == Kind::Retry {
        return Some(Long { version, kind, dcid, scid, pn_offset: at, end: d.len(), cut: false });
    }
    if kind == Kind::Initial {
        let n = varint(d, &mut at)?;
        at = at.checked_add(usize::try_from(n).ok()?)?;
    }
    let length = varint(d, &mut at)? as usize;
    let end = at.saturating_add(length);
    Some(Long { version, kind, dcid, scid, pn_offset: at, end: end.min(d.len()), cut: end > d.len() })
}

/// RFC 9001 §5.4.2: "the packet number is assumed to be 4 bytes long" for the sample, which
/// starts 4 bytes after the Packet Number field's start.  §5.4.1: the mask's first byte hides
/// the low 4 bits of a long header's first byte (5 of a short header's), the rest the packet
/// number.  `p` is one packet (a copy: it is changed); returns (first byte, packet number
/// length, truncated packet number).
pub fn unprotect(keys: &Keys, p: &mut [u8], pn_offset: usize) -> Option<(u8, usize, u32)> {
    let sample: &[u8; 16] = p.get(pn_offset + 4..pn_offset + 20)?.try_into().ok()?;
    let mask = keys.mask(sample);
    let long = p[0] & 0x80 != 0;
    p[0] ^= mask[0] & if long { 0x0f } else { 0x1f };
    let pn_len = (p[0] & 3) as usize + 1;
    let mut pn = 0u32;
    for i in 0..pn_len {
        p[pn_offset + i] ^= mask[1 + i];
        pn = (pn << 8) | p[pn_offset + i] as u32;
    }
    Some((p[0], pn_len, pn))
}

/// RFC 9000 Appendix A.3: the packet number closest to the next one expected.
pub fn decode_pn(largest: Option<u64>, truncated: u32, pn_len: usize) -> u64 {
    let expected = largest.map_or(0, |l| l + 1);
    let win = 1u64 << (pn_len * 8);
    let hwin = win / 2;
    let candidate = (expected & !(win - 1)) | truncated as u64;
    if candidate + hwin <= expected && candidate < (1u64 << 62) - win {
        candidate + win
    } else if candidate > expected + hwin && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}
