//! The capture reader: RFC 9001 Appendix A's keys and packets, frames, damaged captures, and a
//! real capture of tests/data read whole (with its key log, and with wrong keys).

use crate::capture::frames::{parse, varint, Frame};
use crate::capture::keys::{expand_label, Keys, Secrets, Suite};
use crate::capture::packet::{decode_pn, unprotect};
use crate::capture::Reader;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn initial_secrets_are_those_of_rfc_9001_appendix_a1() {
    // A.1: client_initial_secret from DCID 0x8394c8f03e515708
    let (prk, _) = hkdf::Hkdf::<sha2::Sha256>::extract(
        Some(&unhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")), &unhex("8394c8f03e515708"));
    let client = expand_label(&prk, "client in", 32).unwrap();
    assert_eq!(client, unhex("c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea"));
    assert_eq!(expand_label(&client, "quic key", 16).unwrap(), unhex("1f369613dd76d5467730efcbe3b1a22d"));
    assert_eq!(expand_label(&client, "quic iv", 12).unwrap(), unhex("fa044b2f42a3fd3b46fb255c"));
    assert_eq!(expand_label(&client, "quic hp", 16).unwrap(), unhex("9f50449e04a0e810283a1e9933adedd2"));
    let server = expand_label(&prk, "server in", 32).unwrap();
    assert_eq!(expand_label(&server, "quic key", 16).unwrap(), unhex("cf3a5331653c364c88f0f379b6067e37"));
    // A.2: header protection sample → mask
    let client_keys = Keys::initial(1, &unhex("8394c8f03e515708")).unwrap().0;
    let sample: [u8; 16] = unhex("d1b1c98dd7689fb8ec11d242b123dc9b").try_into().unwrap();
    assert_eq!(client_keys.mask(&sample).to_vec(), unhex("437b9aec36"));
}

#[test]
fn a_chacha20_short_header_packet_of_rfc_9001_appendix_a5_decrypts() {
    let secret = unhex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b");
    let keys = Keys::from_secret(&secret, Suite::ChaCha20, false).unwrap();
    let mut packet = unhex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb");
    let original = packet.clone();
    let (first, pn_len, truncated) = unprotect(&keys, &mut packet, 1).unwrap();
    assert_eq!((first, pn_len, truncated), (0x42, 3, 0x00bff4));
    let pn = decode_pn(Some(654360563), truncated, pn_len);
    assert_eq!(pn, 654360564);
    let (header, payload) = packet.split_at_mut(4);
    assert_eq!(keys.open(pn, header, payload), Some(1));
    assert_eq!(payload[0], 0x01); // a PING frame
    // the key update secret of A.5
    assert_eq!(expand_label(&secret, "quic ku", 32).unwrap(),
               unhex("1223504755036d556342ee9361d253421a826c9ecdf3c7148684b36b714881f9"));
    // a wrong key does not open it
    let other = Keys::from_secret(&unhex(&"11".repeat(32)), Suite::ChaCha20, false).unwrap();
    let mut again = original.clone();
    let _ = unprotect(&keys, &mut again, 1).unwrap();
    let (header, payload) = again.split_at_mut(4);
    assert_eq!(other.open(pn, header, payload), None);
}

#[test]
fn packet_numbers_are_decoded_as_rfc_9000_appendix_a3_shows() {
    // A.3: largest 0xa82f30ea, truncated 0x9b32 (16 bits) → 0xa82f9b32
    assert_eq!(decode_pn(Some(0xa82f30ea), 0x9b32, 2), 0xa82f9b32);
    assert_eq!(decode_pn(None, 0, 1), 0);
}

#[test]
fn frames_padding_runs_ack_ranges_and_unknown_types() {
    let mut at = 0;
    assert_eq!(varint(&unhex("c2197c5eff14e88c"), &mut at), Some(151288809941952652));
    // PADDING×3, ACK largest 10 delay 5, 1 more range (gap 1, len 2), first range 3, CRYPTO
    let payload = unhex("0000000200a0050103010206000261620000");
    let mut frames: Vec<Frame> = Vec::new();
    assert!(parse(&payload[..3], &mut frames));
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].length, Some(3));
    let ack = unhex("020a050103010206000261620000");
    assert!(parse(&ack, &mut frames));
    assert_eq!(frames.iter().map(|f| f.ftype).collect::<Vec<_>>(), vec![2, 6, 0]);
    assert_eq!(frames[0].ranges, vec![(2, 4), (7, 10)]); // 7 - gap 1 - 2 = 4, 4 - length 2 = 2
    assert_eq!(frames[1].offset, Some(0));
    assert_eq!(frames[1].data, Some((10, 12)));
    // a frame type unknown to the reader ends the packet; a cut frame marks it malformed
    assert!(parse(&unhex("01402100ff"), &mut frames));
    assert_eq!(frames.iter().map(|f| f.ftype).collect::<Vec<_>>(), vec![1, 0x21]);
    assert!(!parse(&unhex("0206"), &mut frames));
}

fn pcap(records: &[(&[u8], u32, u32)]) -> Vec<u8> {
    let mut out = unhex("d4c3b2a1020004000000000000000000ffff000065000000"); // raw IP
    for (data, caplen, origlen) in records {
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&caplen.to_le_bytes());
        out.extend_from_slice(&origlen.to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

fn read_all(bytes: Vec<u8>, keylog: Option<&[u8]>) -> (usize, usize, Option<crate::capture::records::Damage>, i64) {
    let mut reader = Reader::new(std::io::Cursor::new(bytes), keylog, &[]).unwrap();
    let (mut datagrams, mut packets) = (0, 0);
    while let Some(rows) = reader.batch(1000) {
        datagrams += rows.dgram.rows();
        packets += rows.pkt.rows();
    }
    (datagrams, packets, reader.damage.clone(), reader.state.frames_read)
}

#[test]
fn damaged_captures_are_read_up_to_the_damage_with_its_byte_offset() {
    // an IPv4/UDP datagram of 8 payload bytes (not QUIC)
    let ip = unhex("4500002400004000401100007f0000017f000001d43101bb0010000001020304050607ff");
    let ip = &ip[..36];
    let good = pcap(&[(ip, 36, 36), (ip, 36, 36)]);
    assert_eq!(read_all(good.clone(), None), (2, 0, None, 2));
    // cut inside the second record: the first is kept, the damage is where the second starts
    let cut = good[..good.len() - 10].to_vec();
    let (d, _, damage, frames) = read_all(cut, None);
    assert_eq!((d, frames), (1, 1));
    assert_eq!(damage.unwrap().offset, 24 + 16 + 36);
    // garbage after a valid header
    let mut garbage = good[..24 + 16 + 36].to_vec();
    garbage.extend_from_slice(&[0xee; 7]);
    let (d, _, damage, _) = read_all(garbage, None);
    assert_eq!(d, 1);
    assert_eq!(damage.unwrap().offset, 24 + 16 + 36);
    // a record length larger than anything: refused there, not read past
    let wrong = pcap(&[(ip, 36, 36), (ip, 0x7fff_0000, 36)]);
    let (d, _, damage, _) = read_all(wrong, None);
    assert_eq!(d, 1);
    assert!(damage.is_some());
    // not a capture at all
    assert!(Reader::new(std::io::Cursor::new(b"hello world, not a capture".to_vec()), None, &[]).is_err());
}

fn repo_file(path: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).unwrap()
}

#[test]
fn a_real_capture_decrypts_whole_with_its_key_log_and_not_with_wrong_keys() {
    let cap = repo_file("tests/data/local/aioquic-aioquic-handshake/cap.pcapng");
    let keys = repo_file("tests/data/local/aioquic-aioquic-handshake/keys.log");
    let mut reader = Reader::new(std::io::Cursor::new(cap.clone()), Some(&keys), &[]).unwrap();
    let rows = reader.batch(1000).unwrap();
    assert_eq!(rows.dgram.rows(), 7);
    assert_eq!(rows.pkt.rows(), 11);
    assert_eq!(rows.frame.rows(), 38); // every packet decrypted: tshark lists 38 frames too
    // wrong secrets: the Initial packets still decrypt, nothing else; no crash
    let text = String::from_utf8(keys).unwrap();
    let wrong: String = text.lines().map(|l| {
        let mut p: Vec<String> = l.split(' ').map(String::from).collect();
        if p.len() == 3 {
            p[2] = "ab".repeat(p[2].len() / 2);
        }
        p.join(" ") + "\n"
    }).collect();
    let mut secrets = Secrets::default();
    secrets.add_keylog(wrong.as_bytes());
    assert!(!secrets.is_empty());
    let mut reader = Reader::new(std::io::Cursor::new(cap), Some(wrong.as_bytes()), &[]).unwrap();
    let rows = reader.batch(1000).unwrap();
    assert_eq!(rows.pkt.rows(), 11);
    assert!(rows.frame.rows() > 0 && rows.frame.rows() < 38);
}
