//! From a captured frame to its UDP datagram: link layer, IPv4/IPv6, UDP.
//!
//! Theory of operation: `udp` peels the link header of the link types quicack's captures use
//! (Ethernet with VLAN tags, Linux cooked SLL and SLL2, raw IP, BSD loopback/null), then IP
//! headers — the innermost one when IP is tunnelled in IP — down to UDP, and returns the
//! datagram's addresses, ports, the length its UDP header states and the payload captured.
//! A frame that is not UDP (or an IP fragment, or UDP quoted inside an ICMP error) is None.
//! A link type not listed here is `Unsupported`: the tshark path reads such captures.

use std::net::{Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Addr {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Addr {
    /// As tshark writes it (dotted quad; RFC 5952 text for IPv6).
    pub fn write(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = match self {
            Addr::V4(a) => write!(out, "{}", Ipv4Addr::from(*a)),
            Addr::V6(a) => write!(out, "{}", Ipv6Addr::from(*a)),
        };
    }
}

pub struct Udp<'a> {
    pub src: Addr,
    pub dst: Addr,
    pub src_port: u16,
    pub dst_port: u16,
    /// the UDP header's Length field
    pub length: u16,
    pub payload: &'a [u8],
}

pub enum Frame<'a> {
    Udp(Udp<'a>),
    Other,
    Unsupported,
}

/// The UDP datagram in a frame of link type `linktype`.
pub fn udp(linktype: i32, frame: &[u8]) -> Frame<'_> {
    let ip = match linktype {
        1 => ethernet(frame),
        113 => frame.get(14..16).and_then(|t| ethertype(u16::from_be_bytes([t[0], t[1]]), frame.get(16..)?)),
        276 => frame.get(0..2).and_then(|t| ethertype(u16::from_be_bytes([t[0], t[1]]), frame.get(20..)?)),
        12 | 14 | 101 | 228 | 229 => Some(frame),
        0 | 108 => null_family(linktype, frame),
        9 => ppp(frame),
        _ => return Frame::Unsupported,
    };
    match ip.and_then(|p| ip_udp(p, 0)) {
        Some(u) => Frame::Udp(u),
        None => Frame::Other,
    }
}

fn ethernet(frame: &[u8]) -> Option<&[u8]> {
    let mut at = 12;
    loop {
        let t = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        if t == 0x8100 || t == 0x88a8 {
            at += 4;
            continue;
        }
        return ethertype(t, frame.get(at + 2..)?);
    }
}

fn ethertype(t: u16, rest: &[u8]) -> Option<&[u8]> {
    matches!(t, 0x0800 | 0x86dd).then_some(rest)
}

/// PPP (RFC 1661 §2, RFC 1662 §3.1: address 0xff and control 0x03 first, when not left out):
/// protocol 0x0021 IPv4, 0x0057 IPv6.
fn ppp(frame: &[u8]) -> Option<&[u8]> {
    let at = if frame.get(0..2) == Some(&[0xff, 0x03]) { 2 } else { 0 };
    let protocol = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
    matches!(protocol, 0x0021 | 0x0057).then(|| &frame[at + 2..])
}

/// BSD loopback (link type 0: host byte order) and OpenBSD loopback (108: network order):
/// a 4-byte address family, 2 for IPv4, 24, 28 or 30 for IPv6.
fn null_family(linktype: i32, frame: &[u8]) -> Option<&[u8]> {
    let b: [u8; 4] = frame.get(0..4)?.try_into().ok()?;
    let family = if linktype == 108 { u32::from_be_bytes(b) } else {
        let le = u32::from_le_bytes(b);
        if le < 256 { le } else { u32::from_be_bytes(b) }
    };
    matches!(family, 2 | 24 | 28 | 30).then(|| &frame[4..])
}

/// IPv4 or IPv6 (by the version nibble) down to UDP; IP in IP is followed (a few levels).
fn ip_udp(p: &[u8], depth: u8) -> Option<Udp<'_>> {
    if depth > 3 {
        return None;
    }
    let (src, dst, proto, body) = match p.first()? >> 4 {
        4 => {
            let ihl = (p[0] & 0x0f) as usize * 4;
            let total = u16::from_be_bytes([*p.get(2)?, *p.get(3)?]) as usize;
            let flags = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]);
            if ihl < 20 || flags & 0x3fff != 0 {
                return None; // a fragment: tshark reassembles it, this reader does not
            }
            let end = if total >= ihl { total.min(p.len()) } else { p.len() };
            (Addr::V4(p.get(12..16)?.try_into().ok()?), Addr::V4(p.get(16..20)?.try_into().ok()?), *p.get(9)?,
             p.get(ihl..end)?)
        }
        6 => {
            let payload_len = u16::from_be_bytes([*p.get(4)?, *p.get(5)?]) as usize;
            let mut next = *p.get(6)?;
            let end = (40 + payload_len).min(p.len());
            let mut at = 40;
            while matches!(next, 0 | 43 | 60) {
                next = *p.get(at)?;
                at += (*p.get(at + 1)? as usize + 1) * 8;
            }
            if next == 44 {
                return None;
            }
            (Addr::V6(p.get(8..24)?.try_into().ok()?), Addr::V6(p.get(24..40)?.try_into().ok()?), next,
             p.get(at..end.max(at))?)
        }
        _ => return None,
    };
    match proto {
        17 => {
            let h = body.get(0..8)?;
            let length = u16::from_be_bytes([h[4], h[5]]);
            let end = (length as usize).clamp(8, body.len().max(8)).min(body.len());
            Some(Udp { src, dst, src_port: u16::from_be_bytes([h[0], h[1]]), dst_port: u16::from_be_bytes([h[2], h[3]]),
                       length, payload: body.get(8..end.max(8))? })
        }
        4 | 41 => ip_udp(body, depth + 1),
        _ => None,
    }
}
