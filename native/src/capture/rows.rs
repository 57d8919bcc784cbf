//! The staged rows of a capture: the columns of `c_dgram`, `c_tp`, `c_pkt` and `c_frame`.
//!
//! Theory of operation: the reader appends one row per UDP datagram, transport parameter
//! datagram, QUIC packet and frame, column by column in Arrow's layout (`crate::columns`), in
//! the column order of `quicack.pcap.staging.begin`'s temporary tables, so a batch is inserted
//! with `INSERT INTO … SELECT *` as the tshark path's are (c_dgram's last column, the packet
//! types of `datagrams.packet_types`, left out: `quicack.pcap.streaming` takes it instead of
//! aggregating the packets).  Values are what the tshark path
//! stages for the same datagram (texts as tshark writes them: hexadecimal connection IDs,
//! `0x%08x` versions, decimal transport parameters).

use crate::columns::{bools, i32s, i64s, ranges, texts, Table};

use super::frames::{name, Frame};

/// Transport parameter columns (quicack.pcap.fields.PARAMETER_FIELDS) and their ids
/// (RFC 9000 §18.2, RFC 9221 §3, draft-ietf-quic-ack-frequency's min_ack_delay).
pub const PARAMETERS: [(&str, &[u64]); 15] = [
    ("tp_max_ack_delay", &[0x0b]),
    ("tp_ack_delay_exponent", &[0x0a]),
    ("tp_min_ack_delay", &[0xff04_de1a, 0xff03_de1a, 0xde1a]),
    ("tp_initial_max_data", &[0x04]),
    ("tp_max_udp_payload_size", &[0x03]),
    ("tp_max_idle_timeout", &[0x01]),
    ("tp_active_connection_id_limit", &[0x0e]),
    ("tp_initial_max_stream_data_bidi_local", &[0x05]),
    ("tp_initial_max_stream_data_bidi_remote", &[0x06]),
    ("tp_initial_max_stream_data_uni", &[0x07]),
    ("tp_initial_max_streams_bidi", &[0x08]),
    ("tp_initial_max_streams_uni", &[0x09]),
    ("tp_max_datagram_frame_size", &[0x20]),
    ("tp_original_destination_connection_id", &[0x00]),
    ("tp_initial_source_connection_id", &[0x0f]),
];

/// Parameters whose value is a connection ID (hexadecimal text), not a number.
const CID_PARAMETERS: [u64; 2] = [0x00, 0x0f];

pub fn hex(bytes: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

/// One datagram's row of c_dgram (its endpoints as "address#port" texts).
pub struct Datagram<'a> {
    pub frame_number: i64,
    pub epoch_ns: i64,
    pub src_ep: &'a [u8],
    pub dst_ep: &'a [u8],
    pub src_port: u16,
    pub dst_port: u16,
    pub udp_payload_bytes: i32,
    pub connection: Option<u32>,
    pub server_name: Option<&'a str>,
    pub packets: i32,
    pub starts: bool,
    pub server_hello: bool,
    pub client_hello: bool,
    pub initial: bool,
    pub gso: bool,
    pub decrypted: i32,
    pub malformed: bool,
    pub packet_types: &'a str,
}

/// One QUIC packet's row of c_pkt.
pub struct Packet<'a> {
    pub frame_number: i64,
    pub idx: i64,
    pub kind: &'static str,
    pub long: bool,
    pub size: i32,
    pub version: Option<u32>,
    pub dcid: Option<&'a [u8]>,
    pub packet_number: Option<u64>,
    pub decryption_failed: bool,
    pub frames: &'a [Frame],
    pub decrypted: bool,
    pub event_index: i64,
}

pub struct Rows {
    pub dgram: Table,
    pub tp: Table,
    pub pkt: Table,
    pub frame: Table,
}

impl Default for Rows {
    fn default() -> Self {
        Self::new()
    }
}

impl Rows {
    pub fn new() -> Rows {
        let dgram = Table::new(vec![
            i64s("frame_number"), i64s("epoch_ns"), texts("src_ep"), texts("dst_ep"), i32s("src_port"),
            i32s("dst_port"), i32s("udp_payload_bytes"), i32s("tshark_connection"), texts("server_name"),
            i32s("packets"), bools("split_ok"), bools("starts"), bools("has_server_hello"),
            bools("has_client_hello"), bools("has_initial"), bools("gso"), i32s("parsed"), i32s("decrypted"),
            bools("malformed"), texts("packet_types")]);
        let mut tp_columns = vec![i64s("frame_number")];
        tp_columns.extend(PARAMETERS.iter().map(|(n, _)| texts(n)));
        let pkt = Table::new(vec![
            i64s("frame_number"), i64s("idx"), texts("packet_type"), i32s("header_form"), i32s("size_bytes"),
            i64s("version"), texts("version_text"), texts("dcid"), i64s("packet_number"),
            bools("decryption_failed"), i32s("frame_count"), bools("undecrypted"), bools("eliciting"),
            i64s("event_index")]);
        let frame = Table::new(vec![
            i64s("frame_number"), i64s("idx"), texts("packet_type"), i32s("position"), texts("frame_type"),
            i64s("largest"), i64s("ack_delay_raw"), ranges("ranges"), i64s("ecn_ce"), i64s("offset_bytes"),
            i64s("length_bytes"), i64s("stream_id"), bools("fin"), i64s("sequence_number"),
            i64s("ack_eliciting_threshold"), crate::columns::f64s("request_max_ack_delay_ms"), texts("details")]);
        Rows { dgram, tp: Table::new(tp_columns), pkt, frame }
    }

    pub fn datagrams(&self) -> usize {
        self.dgram.rows()
    }

    pub fn datagram(&mut self, d: &Datagram) {
        let c = &mut self.dgram.columns;
        c[0].i64(Some(d.frame_number));
        c[1].i64(Some(d.epoch_ns));
        c[2].text_with(true, |b| b.extend_from_slice(d.src_ep));
        c[3].text_with(true, |b| b.extend_from_slice(d.dst_ep));
        c[4].i32(Some(d.src_port as i32));
        c[5].i32(Some(d.dst_port as i32));
        c[6].i32(Some(d.udp_payload_bytes));
        c[7].i32(d.connection.map(|n| n as i32));
        c[8].text(d.server_name);
        c[9].i32(Some(d.packets));
        c[10].bool(Some(true));
        c[11].bool(Some(d.starts));
        c[12].bool(Some(d.server_hello));
        c[13].bool(Some(d.client_hello));
        c[14].bool(Some(d.initial));
        c[15].bool(Some(d.gso));
        c[16].i32(Some(d.packets));
        c[17].i32(Some(d.decrypted));
        c[18].bool(Some(d.malformed));
        c[19].text(Some(d.packet_types)); // (not staged: the streamed datagrams row takes it)
    }

    /// A c_tp row: the first value of each parameter the datagram's handshake messages carried.
    pub fn parameters(&mut self, frame_number: i64, values: &[(u64, Vec<u8>)]) {
        let c = &mut self.tp.columns;
        c[0].i64(Some(frame_number));
        for (i, (_, ids)) in PARAMETERS.iter().enumerate() {
            let found = values.iter().find(|(id, _)| ids.contains(id));
            c[i + 1].text_with(found.is_some(), |b| {
                if let Some((id, v)) = found {
                    if CID_PARAMETERS.contains(id) && v.is_empty() {
                        b.extend_from_slice(b"<MISSING>"); // as tshark writes an empty bytes field
                    } else if CID_PARAMETERS.contains(id) {
                        hex(v, b);
                    } else {
                        let mut at = 0;
                        let n = super::frames::varint(v, &mut at).unwrap_or(0);
                        b.extend_from_slice(n.to_string().as_bytes());
                    }
                }
            });
        }
    }

    pub fn packet(&mut self, p: &Packet) {
        let c = &mut self.pkt.columns;
        c[0].i64(Some(p.frame_number));
        c[1].i64(Some(p.idx));
        c[2].text(Some(p.kind));
        c[3].i32(Some(p.long as i32));
        c[4].i32(Some(p.size));
        c[5].i64(p.version.map(|v| v as i64));
        c[6].text_with(p.version.is_some(), |b| b.extend_from_slice(format!("0x{:08x}", p.version.unwrap_or(0)).as_bytes()));
        // tshark writes no DCID for a zero-length one
        c[7].text_with(p.dcid.is_some_and(|d| !d.is_empty()), |b| hex(p.dcid.unwrap_or(&[]), b));
        c[8].i64(p.packet_number.map(|n| n as i64));
        c[9].bool(Some(p.decryption_failed));
        c[10].i32(Some(p.frames.len() as i32));
        let retry = p.kind == "retry" || p.kind == "version_negotiation";
        c[11].bool(Some(p.frames.is_empty() && !retry));
        c[12].bool((!p.frames.is_empty()).then(|| p.frames.iter().any(|f| super::frames::eliciting(f.ftype))));
        c[13].i64(Some(p.event_index));
        for (position, f) in p.frames.iter().enumerate() {
            self.frame_row(p, position, f);
        }
    }

    fn frame_row(&mut self, p: &Packet, position: usize, f: &Frame) {
        let c = &mut self.frame.columns;
        let t = f.ftype;
        let stream = (0x08..=0x0f).contains(&t);
        let n = |v: Option<u64>| v.map(|x| x as i64);
        c[0].i64(Some(p.frame_number));
        c[1].i64(Some(p.idx));
        c[2].text(Some(p.kind));
        c[3].i32(Some(position as i32));
        c[4].text(Some(name(t)));
        c[5].i64(n(f.largest));
        c[6].i64(n(f.ack_delay));
        let r: Vec<(Option<i64>, Option<i64>)> = f.ranges.iter().map(|&(l, h)| (Some(l), Some(h))).collect();
        c[7].ranges((t == 2 || t == 3).then_some(&r[..]));
        c[8].i64(n(f.ecn_ce));
        c[9].i64(n(f.offset));
        c[10].i64(n(f.length));
        c[11].i64(n(f.stream_id));
        c[12].bool(stream.then_some(t & 1 == 1));
        c[13].i64(n(f.sequence));
        c[14].i64(n(f.threshold));
        c[15].f64(f.request_max_ack_delay_us.map(|us| us as f64 / 1000.0));
        let plain = matches!(t, 0..=3 | 6 | 8..=15);
        c[16].text_with(!plain, |b| b.extend_from_slice(details(f).as_bytes()));
    }

    /// The rows so far, and empty tables for the next batch.
    pub fn take(&mut self) -> Rows {
        std::mem::take(self)
    }
}

/// A frame's details as the tshark path writes them (quicack.pcap.fastpath._details).
fn details(f: &Frame) -> String {
    let n = |v: Option<u64>| v.map_or("null".to_string(), |x| x.to_string());
    match f.ftype {
        0x1c => format!("{{\"frame_type_value\":28,\"error_space\":\"transport\",\"error_code\":{},\"trigger_frame_type\":{}}}",
                        n(f.error_code), n(f.trigger_frame_type)),
        0x1d => format!("{{\"frame_type_value\":29,\"error_space\":\"application\",\"error_code\":{}}}", n(f.error_code)),
        t => format!("{{\"frame_type_value\":{t}}}"),
    }
}
