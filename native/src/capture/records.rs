//! Capture records: pcap and pcapng files read block by block (crate `pcap-parser`).
//!
//! Theory of operation: `Records` streams a capture through a fixed buffer, whatever its size
//! (memory stays flat): each packet record comes out with its link type, its time in
//! nanoseconds since the epoch and its bytes (`Record`); a pcapng Decryption Secrets Block's key
//! log goes to `Secrets` as it is met (it comes before the packets it decrypts).  Damage stops
//! the reading: a record cut short or bytes that are no record are reported with the byte
//! offset where the damaged record starts (`Damage`), after the records before it.

use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

use super::keys::Secrets;

const BUFFER: usize = 1 << 20;
/// pcapng Decryption Secrets Block type "TLSK": an SSLKEYLOGFILE.
const TLS_KEY_LOG: u32 = 0x544c_534b;

/// One captured packet.
pub struct Record<'a> {
    pub linktype: i32,
    pub epoch_ns: i64,
    pub data: &'a [u8],
    /// byte offset of its record in the file
    pub offset: u64,
}

/// Why reading stopped early: the byte offset of the damaged record and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub what: String,
}

struct Interface {
    linktype: i32,
    resolution: u64,
    offset_s: i64,
}

pub struct Records {
    reader: Box<dyn PcapReaderIterator + Send>,
    position: u64,
    info: Info,
}

/// What the blocks read so far say about the next ones, and the last packet's bytes.
#[derive(Default)]
struct Info {
    linktype: i32,
    nanos: bool,
    interfaces: Vec<Interface>,
    data: Vec<u8>,
}

impl Records {
    /// A reader of the capture `file`; Err(Damage) if it is no pcap or pcapng capture.
    pub fn open(file: impl std::io::Read + Send + 'static) -> Result<Records, Damage> {
        match create_reader(BUFFER, file) {
            Ok(reader) => Ok(Records { reader, position: 0, info: Info::default() }),
            Err(e) => Err(Damage { offset: 0, what: format!("not a pcap or pcapng capture ({})", describe(&e)) }),
        }
    }

    /// The next packet record (None at the end), the secrets of Decryption Secrets Blocks met on
    /// the way added to `secrets`; Err(Damage) where the file stops being a capture.
    pub fn next(&mut self, secrets: &mut Secrets) -> Result<Option<Record<'_>>, Damage> {
        loop {
            let (size, found) = match self.reader.next() {
                Ok((size, block)) => (size, self.info.take(block, secrets)),
                Err(PcapError::Eof) => return Ok(None),
                Err(PcapError::Incomplete(_)) => {
                    if let Err(e) = self.reader.refill() {
                        return Err(Damage { offset: self.position, what: format!("unreadable ({})", describe(&e)) });
                    }
                    continue;
                }
                Err(PcapError::UnexpectedEof) => return Err(Damage {
                    offset: self.position, what: "record cut short (the file ends inside it)".into() }),
                Err(PcapError::BufferTooSmall) => return Err(Damage {
                    offset: self.position, what: "record length larger than any packet (wrong length)".into() }),
                Err(e) => return Err(Damage { offset: self.position, what: format!("no capture record here ({})",
                                                                                   describe(&e)) }),
            };
            let offset = self.position;
            self.reader.consume(size);
            self.position += size as u64;
            if let Some((linktype, epoch_ns)) = found {
                return Ok(Some(Record { linktype, epoch_ns, data: &self.info.data, offset }));
            }
        }
    }

}

impl Info {
    /// A block's packet (link type, time; its bytes copied to `self.data`), or None for others.
    fn take(&mut self, block: PcapBlockOwned<'_>, secrets: &mut Secrets) -> Option<(i32, i64)> {
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                self.linktype = h.network.0;
                self.nanos = h.magic_number == 0xa1b2_3c4d || h.magic_number == 0x4d3c_b2a1;
                None
            }
            PcapBlockOwned::Legacy(b) => {
                let frac = if self.nanos { b.ts_usec as i64 } else { b.ts_usec as i64 * 1000 };
                self.data.clear();
                self.data.extend_from_slice(&b.data[..(b.caplen as usize).min(b.data.len())]);
                Some((self.linktype, b.ts_sec as i64 * 1_000_000_000 + frac))
            }
            PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                self.interfaces.clear();
                None
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                self.interfaces.push(Interface { linktype: idb.linktype.0,
                                                 resolution: idb.ts_resolution().unwrap_or(1_000_000),
                                                 offset_s: idb.ts_offset() });
                None
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let iface = self.interfaces.get(epb.if_id as usize)?;
                let ts = ((epb.ts_high as u128) << 32) | epb.ts_low as u128;
                let ns = ts * 1_000_000_000 / iface.resolution.max(1) as u128;
                self.data.clear();
                self.data.extend_from_slice(&epb.data[..(epb.caplen as usize).min(epb.data.len())]);
                Some((iface.linktype, ns as i64 + iface.offset_s * 1_000_000_000))
            }
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                let linktype = self.interfaces.first()?.linktype;
                self.data.clear();
                self.data.extend_from_slice(&spb.data[..(spb.origlen as usize).min(spb.data.len())]);
                Some((linktype, 0))
            }
            PcapBlockOwned::NG(Block::DecryptionSecrets(dsb)) => {
                if dsb.secrets_type.0 == TLS_KEY_LOG {
                    secrets.add_keylog(&dsb.data[..(dsb.secrets_len as usize).min(dsb.data.len())]);
                }
                None
            }
            PcapBlockOwned::NG(_) => None,
        }
    }
}

fn describe<I>(e: &PcapError<I>) -> String {
    match e {
        PcapError::Eof => "end of file".into(),
        PcapError::BufferTooSmall => "a record larger than the reading buffer".into(),
        PcapError::UnexpectedEof => "unexpected end of file".into(),
        PcapError::ReadError => "read error".into(),
        PcapError::Incomplete(_) => "record cut short".into(),
        PcapError::HeaderNotRecognized => "unknown magic number".into(),
        PcapError::NomError(_, kind) => format!("bad record: {kind:?}"),
        PcapError::OwnedNomError(_, kind) => format!("bad record: {kind:?}"),
    }
}

