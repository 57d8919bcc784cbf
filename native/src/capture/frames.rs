//! QUIC frames of a decrypted packet payload (RFC 9000 §19, RFC 9221, draft-ietf-quic-ack-frequency).
//!
//! Theory of operation: `parse` walks a payload frame by frame and keeps what the store's
//! frame rows hold (ACK ranges and delay, CRYPTO and STREAM offsets and lengths, sequence
//! numbers, CONNECTION_CLOSE codes) plus, by byte range, what other parts of the reader need
//! (CRYPTO data for the TLS handshake, NEW_CONNECTION_ID's connection ID).  A run of PADDING
//! bytes is one frame, as tshark shows it.  An unknown frame type ends the walk (its length
//! is unknown): it is listed as the packet's last frame; a frame cut short ends the walk too
//! and marks the payload malformed.

/// One frame; fields it does not have are None.
#[derive(Default, Clone, Debug, PartialEq)]
pub struct Frame {
    pub ftype: u64,
    pub largest: Option<u64>,
    pub ack_delay: Option<u64>,
    /// ACK ranges [low, high], lowest first
    pub ranges: Vec<(i64, i64)>,
    pub ecn_ce: Option<u64>,
    pub offset: Option<u64>,
    pub length: Option<u64>,
    pub stream_id: Option<u64>,
    pub sequence: Option<u64>,
    pub threshold: Option<u64>,
    pub request_max_ack_delay_us: Option<u64>,
    pub error_code: Option<u64>,
    pub trigger_frame_type: Option<u64>,
    /// CRYPTO data or NEW_CONNECTION_ID's connection ID: (start, end) in the payload
    pub data: Option<(usize, usize)>,
}

/// RFC 9000 §16: a variable-length integer at `*at`, advancing it.
pub fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let first = *b.get(*at)?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(*at..*at + len)?;
    let mut v = (first & 0x3f) as u64;
    for x in &bytes[1..] {
        v = (v << 8) | *x as u64;
    }
    *at += len;
    Some(v)
}

fn skip(b: &[u8], at: &mut usize, n: u64) -> Option<(usize, usize)> {
    let start = *at;
    let end = start.checked_add(usize::try_from(n).ok()?)?;
    if end > b.len() {
        return None;
    }
    *at = end;
    Some((start, end))
}

/// The frames of `payload` into `out` (cleared first); false if a frame was cut short.
pub fn parse(payload: &[u8], out: &mut Vec<Frame>) -> bool {
    out.clear();
    let mut at = 0;
    while at < payload.len() {
        if payload[at] == 0 {
            let start = at;
            while at < payload.len() && payload[at] == 0 {
                at += 1;
            }
            out.push(Frame { ftype: 0, length: Some((at - start) as u64), ..Frame::default() });
            continue;
        }
        let Some(ftype) = varint(payload, &mut at) else { return false };
        let mut f = Frame { ftype, ..Frame::default() };
        let known = frame_body(payload, &mut at, &mut f);
        out.push(f);
        match known {
            Some(true) => {}
            Some(false) => return true, // unknown type: its length is unknown
            None => return false,
        }
    }
    true
}

/// The fields of one frame after its type; Some(false) for a type this reader does not know.
fn frame_body(b: &[u8], at: &mut usize, f: &mut Frame) -> Option<bool> {
    match f.ftype {
        0x01 | 0x1e | 0x1f => {}
        0x02 | 0x03 => return ack(b, at, f).map(|_| true),
        0x04 => {
            varint(b, at)?;
            varint(b, at)?;
            varint(b, at)?;
        }
        0x05 | 0x11 | 0x15 => {
            varint(b, at)?;
            varint(b, at)?;
        }
        0x06 => {
            f.offset = Some(varint(b, at)?);
            let n = varint(b, at)?;
            f.length = Some(n);
            f.data = Some(skip(b, at, n)?);
        }
        0x07 => {
            let n = varint(b, at)?;
            skip(b, at, n)?;
        }
        0x08..=0x0f => {
            f.stream_id = Some(varint(b, at)?);
            f.offset = Some(if f.ftype & 4 != 0 { varint(b, at)? } else { 0 });
            let n = if f.ftype & 2 != 0 {
                let n = varint(b, at)?;
                f.length = Some(n);
                n
            } else {
                (b.len() - *at) as u64
            };
            skip(b, at, n)?;
        }
        0x10 | 0x12 | 0x13 | 0x14 | 0x16 | 0x17 => {
            varint(b, at)?;
        }
        0x18 => {
            f.sequence = Some(varint(b, at)?);
            varint(b, at)?;
            let n = *b.get(*at)? as u64;
            *at += 1;
            f.data = Some(skip(b, at, n)?);
            skip(b, at, 16)?;
        }
        0x19 => f.sequence = Some(varint(b, at)?),
        0x1a | 0x1b => {
            skip(b, at, 8)?;
        }
        0x1c | 0x1d => {
            f.error_code = Some(varint(b, at)?);
            if f.ftype == 0x1c {
                f.trigger_frame_type = Some(varint(b, at)?);
            }
            let n = varint(b, at)?;
            skip(b, at, n)?;
        }
        0x30 => *at = b.len(),
        0x31 => {
            let n = varint(b, at)?;
            skip(b, at, n)?;
        }
        0xaf => {
            f.sequence = Some(varint(b, at)?);
            f.threshold = Some(varint(b, at)?);
            f.request_max_ack_delay_us = Some(varint(b, at)?);
            varint(b, at)?; // Reordering Threshold (Ignore Order in early drafts)
        }
        _ => return Some(false),
    }
    Some(true)
}

/// RFC 9000 §19.3: Largest Acknowledged, ACK Delay, ACK Range Count, First ACK Range, then
/// ACK Range Count (Gap, ACK Range Length) pairs "in descending packet number order"; ECN
/// counts for type 0x03.  §19.3.1: "the smallest value is determined by the following formula:
/// smallest = largest - ack_range" and "largest = previous_smallest - gap - 2".
fn ack(b: &[u8], at: &mut usize, f: &mut Frame) -> Option<()> {
    let largest = varint(b, at)?;
    f.largest = Some(largest);
    f.ack_delay = Some(varint(b, at)?);
    let count = varint(b, at)?;
    let first = varint(b, at)?;
    let mut low = largest as i64 - first as i64;
    f.ranges.push((low, largest as i64));
    for _ in 0..count {
        let gap = varint(b, at)?;
        let len = varint(b, at)?;
        let high = low - gap as i64 - 2;
        low = high - len as i64;
        f.ranges.push((low, high));
    }
    f.ranges.reverse();
    if f.ftype == 0x03 {
        varint(b, at)?;
        varint(b, at)?;
        f.ecn_ce = Some(varint(b, at)?);
    }
    Some(())
}

/// RFC 9002 §2: ACK, PADDING and CONNECTION_CLOSE frames are not ack-eliciting.
pub fn eliciting(ftype: u64) -> bool {
    !matches!(ftype, 0x00 | 0x02 | 0x03 | 0x1c | 0x1d)
}

/// The qlog name of a frame type (as quicack.pcap.fields.FRAME_NAMES).
pub fn name(ftype: u64) -> &'static str {
    match ftype {
        0x00 => "padding",
        0x01 => "ping",
        0x02 | 0x03 => "ack",
        0x04 => "reset_stream",
        0x05 => "stop_sending",
        0x06 => "crypto",
        0x07 => "new_token",
        0x08..=0x0f => "stream",
        0x10 => "max_data",
        0x11 => "max_stream_data",
        0x12 | 0x13 => "max_streams",
        0x14 => "data_blocked",
        0x15 => "stream_data_blocked",
        0x16 | 0x17 => "streams_blocked",
        0x18 => "new_connection_id",
        0x19 => "retire_connection_id",
        0x1a => "path_challenge",
        0x1b => "path_response",
        0x1c | 0x1d => "connection_close",
        0x1e => "handshake_done",
        0x1f => "immediate_ack",
        0x30 | 0x31 => "datagram",
        0xaf => "ack_frequency",
        _ => "unknown",
    }
}
