//! QUIC packet protection keys: Initial secrets, TLS traffic secrets, header protection, AEAD.
//!
//! Theory of operation: a `Keys` holds one direction's packet protection for one packet number
//! space — an AEAD key and IV, a header protection key and the secret they came from (for key
//! updates).  Initial keys derive from the client's first Destination Connection ID
//! (`initial`); Handshake, 0-RTT and 1-RTT keys from the TLS traffic secrets of a key log
//! (`from_secret`) with the cipher suite of the ServerHello.  Every cipher is a RustCrypto crate
//! (`aes-gcm`, `chacha20poly1305`, `aes`, `chacha20`, `hkdf`, `sha2`); nothing is hand-written.

use aes::cipher::{BlockEncrypt, KeyIvInit, StreamCipher, StreamCipherSeek};
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm};
use chacha20poly1305::ChaCha20Poly1305;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};

/// RFC 9001 §5.2: initial_salt = 0x38762cf7f55934b34d179ae6a4c80cadccbb7f0a (QUIC v1).
const SALT_V1: [u8; 20] = hex20("38762cf7f55934b34d179ae6a4c80cadccbb7f0a");
/// RFC 9369 §3.3.1: initial_salt = 0x0dede3def700a6db819381be6e269dcbf9bd2ed9 (QUIC v2).
const SALT_V2: [u8; 20] = hex20("0dede3def700a6db819381be6e269dcbf9bd2ed9");
/// draft-ietf-quic-tls-29 §5.2 (drafts 29 to 32).
const SALT_D29: [u8; 20] = hex20("afbfec289993d24c9e9786f19c6111e04390a899");
/// draft-ietf-quic-tls-23 §5.2 (drafts 23 to 28).
const SALT_D23: [u8; 20] = hex20("c3eef712c72ebb5a11a7d2432bb46365bef9f502");
/// draft-ietf-quic-tls-21 §5.2 (drafts 21 and 22).
const SALT_D21: [u8; 20] = hex20("7fbcdb0e7c66bbe9193a96cd21519ebd7a02644a");

pub const V1: u32 = 1;
pub const V2: u32 = 0x6b33_43cf;

const fn hex20(s: &str) -> [u8; 20] {
    let b = s.as_bytes();
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = (nibble(b[2 * i]) << 4) | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// The Initial salt of a QUIC version this reader decrypts, None for others.
pub fn initial_salt(version: u32) -> Option<&'static [u8; 20]> {
    match version {
        V1 => Some(&SALT_V1),
        V2 => Some(&SALT_V2),
        0xff00_001d..=0xff00_0020 => Some(&SALT_D29),
        0xff00_0017..=0xff00_001c => Some(&SALT_D23),
        0xff00_0015..=0xff00_0016 => Some(&SALT_D21),
        _ => None,
    }
}

/// Whether transport parameters are encoded as in drafts before 27 (a 16-bit length of them
/// all, then 16-bit ids and lengths) rather than with variable-length integers (RFC 9000 §18).
pub fn old_parameters(version: u32) -> bool {
    (0xff00_0015..=0xff00_001a).contains(&version)
}

/// Whether the long header packet types of `version` are those of RFC 9369 (v2).
pub fn is_v2(version: u32) -> bool {
    version == V2
}

/// TLS 1.3 cipher suites QUIC uses (RFC 9001 §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20,
}

impl Suite {
    /// The suite of a ServerHello's cipher_suite code, None for others.
    pub fn from_code(code: u16) -> Option<Suite> {
        match code {
            0x1301 => Some(Suite::Aes128Gcm),
            0x1302 => Some(Suite::Aes256Gcm),
            0x1303 => Some(Suite::ChaCha20),
            _ => None,
        }
    }

    fn key_len(self) -> usize {
        if self == Suite::Aes128Gcm { 16 } else { 32 }
    }
}

/// RFC 8446 §7.1: HKDF-Expand-Label(Secret, Label, Context, Length) with an empty Context, the
/// label prefixed with "tls13 "; SHA-384 for secrets of 48 bytes (TLS_AES_256_GCM_SHA384).
pub fn expand_label(secret: &[u8], label: &str, len: usize) -> Option<Vec<u8>> {
    let full = 6 + label.len();
    let mut info = Vec::with_capacity(4 + full);
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push(full as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label.as_bytes());
    info.push(0);
    let mut out = vec![0u8; len];
    if secret.len() == 48 {
        Hkdf::<Sha384>::from_prk(secret).ok()?.expand(&info, &mut out).ok()?;
    } else {
        Hkdf::<Sha256>::from_prk(secret).ok()?.expand(&info, &mut out).ok()?;
    }
    Some(out)
}

enum Aead {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
    ChaCha(Box<ChaCha20Poly1305>),
}

enum Hp {
    A128(Box<aes::Aes128>),
    A256(Box<aes::Aes256>),
    ChaCha([u8; 32]),
}

/// One direction's keys of one packet number space.
pub struct Keys {
    aead: Aead,
    iv: [u8; 12],
    hp: Hp,
    secret: Vec<u8>,
    suite: Suite,
    v2: bool,
}

impl Keys {
    /// RFC 9001 §5.1: key = HKDF-Expand-Label(secret, "quic key", "", key length), iv with
    /// "quic iv" (12 bytes), hp with "quic hp"; RFC 9369 §3.3.2: "quicv2 key", "quicv2 iv",
    /// "quicv2 hp" for QUIC v2.
    pub fn from_secret(secret: &[u8], suite: Suite, v2: bool) -> Option<Keys> {
        let (lk, li, lh) = if v2 { ("quicv2 key", "quicv2 iv", "quicv2 hp") } else { ("quic key", "quic iv", "quic hp") };
        let n = suite.key_len();
        let key = expand_label(secret, lk, n)?;
        let iv_v = expand_label(secret, li, 12)?;
        let hp_key = expand_label(secret, lh, n)?;
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&iv_v);
        let (aead, hp) = match suite {
            Suite::Aes128Gcm => (Aead::A128(Box::new(Aes128Gcm::new_from_slice(&key).ok()?)),
                                 Hp::A128(Box::new(aes::Aes128::new_from_slice(&hp_key).ok()?))),
            Suite::Aes256Gcm => (Aead::A256(Box::new(Aes256Gcm::new_from_slice(&key).ok()?)),
                                 Hp::A256(Box::new(aes::Aes256::new_from_slice(&hp_key).ok()?))),
            Suite::ChaCha20 => {
                let mut k = [0u8; 32];
                k.copy_from_slice(&hp_key);
                (Aead::ChaCha(Box::new(ChaCha20Poly1305::new_from_slice(&key).ok()?)), Hp::ChaCha(k))
            }
        };
        Some(Keys { aead, iv, hp, secret: secret.to_vec(), suite, v2 })
    }

    /// RFC 9001 §5.2: initial_secret = HKDF-Extract(initial_salt, client_dst_connection_id);
    /// client_initial_secret = HKDF-Expand-Label(initial_secret, "client in", "", Hash.length),
    /// server_initial_secret with "server in".  Keys of (client, server).
    pub fn initial(version: u32, dcid: &[u8]) -> Option<(Keys, Keys)> {
        let salt = initial_salt(version)?;
        let (prk, _) = Hkdf::<Sha256>::extract(Some(salt), dcid);
        let client = expand_label(&prk, "client in", 32)?;
        let server = expand_label(&prk, "server in", 32)?;
        let v2 = is_v2(version);
        Some((Keys::from_secret(&client, Suite::Aes128Gcm, v2)?, Keys::from_secret(&server, Suite::Aes128Gcm, v2)?))
    }

    /// RFC 9001 §6.1: secret_<n+1> = HKDF-Expand-Label(secret_<n>, "quic ku", "", Hash.length)
    /// ("quicv2 ku" for v2, RFC 9369 §3.3.2); the header protection key does not change.
    pub fn next_generation(&self) -> Option<Keys> {
        let label = if self.v2 { "quicv2 ku" } else { "quic ku" };
        let secret = expand_label(&self.secret, label, self.secret.len())?;
        let mut next = Keys::from_secret(&secret, self.suite, self.v2)?;
        next.hp = match &self.hp {
            Hp::A128(k) => Hp::A128(k.clone()),
            Hp::A256(k) => Hp::A256(k.clone()),
            Hp::ChaCha(k) => Hp::ChaCha(*k),
        };
        Some(next)
    }

    /// RFC 9001 §5.4.3: for AES, mask = AES-ECB(hp_key, sample); §5.4.4: for ChaCha20,
    /// counter = sample[0..3], nonce = sample[4..15], mask = ChaCha20(hp_key, counter, nonce, {0,0,0,0,0}).
    pub fn mask(&self, sample: &[u8; 16]) -> [u8; 5] {
        let mut out = [0u8; 5];
        match &self.hp {
            Hp::A128(k) => {
                let mut block = aes::Block::clone_from_slice(sample);
                k.encrypt_block(&mut block);
                out.copy_from_slice(&block[..5]);
            }
            Hp::A256(k) => {
                let mut block = aes::Block::clone_from_slice(sample);
                k.encrypt_block(&mut block);
                out.copy_from_slice(&block[..5]);
            }
            Hp::ChaCha(k) => {
                let counter = u32::from_le_bytes([sample[0], sample[1], sample[2], sample[3]]);
                let mut c = chacha20::ChaCha20::new(k.into(), (&sample[4..16]).into());
                c.seek(counter as u64 * 64);
                c.apply_keystream(&mut out);
            }
        }
        out
    }

    /// RFC 9001 §5.3: the nonce is the IV XORed with the packet number (left-padded); the
    /// associated data is the header up to and including the packet number.  The plaintext
    /// length, written over `payload` (ciphertext and tag), or None if authentication fails.
    pub fn open(&self, pn: u64, header: &[u8], payload: &mut [u8]) -> Option<usize> {
        if payload.len() < 16 {
            return None;
        }
        let mut nonce = self.iv;
        for (i, b) in pn.to_be_bytes().iter().enumerate() {
            nonce[4 + i] ^= b;
        }
        let (text, tag) = payload.split_at_mut(payload.len() - 16);
        let tag = aes_gcm::Tag::clone_from_slice(tag);
        let n = aes_gcm::Nonce::from_slice(&nonce);
        let ok = match &self.aead {
            Aead::A128(a) => a.decrypt_in_place_detached(n, header, text, &tag).is_ok(),
            Aead::A256(a) => a.decrypt_in_place_detached(n, header, text, &tag).is_ok(),
            Aead::ChaCha(a) => a.decrypt_in_place_detached(n.as_slice().into(), header, text, &tag).is_ok(),
        };
        ok.then_some(text.len())
    }
}

/// The TLS secrets of a key log (SSLKEYLOGFILE lines or a pcapng Decryption Secrets Block),
/// keyed by the ClientHello random.
#[derive(Default)]
pub struct Secrets {
    map: rustc_hash::FxHashMap<([u8; 32], Label), Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    ClientEarly,
    ClientHandshake,
    ServerHandshake,
    ClientTraffic,
    ServerTraffic,
}

impl Secrets {
    /// Add the lines of a key log ("LABEL <client random hex> <secret hex>"); others are skipped.
    pub fn add_keylog(&mut self, text: &[u8]) {
        for line in text.split(|&b| b == b'\n') {
            let line = std::str::from_utf8(line).unwrap_or("").trim();
            let mut parts = line.split_ascii_whitespace();
            let (Some(label), Some(random), Some(secret)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let label = match label {
                "CLIENT_EARLY_TRAFFIC_SECRET" => Label::ClientEarly,
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => Label::ClientHandshake,
                "SERVER_HANDSHAKE_TRAFFIC_SECRET" => Label::ServerHandshake,
                "CLIENT_TRAFFIC_SECRET_0" => Label::ClientTraffic,
                "SERVER_TRAFFIC_SECRET_0" => Label::ServerTraffic,
                _ => continue,
            };
            let (Some(r), Some(s)) = (unhex(random), unhex(secret)) else { continue };
            if r.len() != 32 || !(s.len() == 32 || s.len() == 48) {
                continue;
            }
            let mut key = [0u8; 32];
            key.copy_from_slice(&r);
            self.map.insert((key, label), s);
        }
    }

    pub fn get(&self, random: &[u8; 32], label: Label) -> Option<&[u8]> {
        self.map.get(&(*random, label)).map(|v| &v[..])
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}
