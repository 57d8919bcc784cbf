//! Minimal HTTP/3 server and client on quiche 0.30 (sans-I/O, BoringSSL), used by quicack as a
//! real test peer.
//!
//! Server: `--addr IP:PORT --cert PEM --key PEM --www DIR` serves the files of `--www` over HTTP/3
//! (`/` is `index.html`) from one blocking UDP socket, one `send_to` per QUIC datagram (quiche does
//! no I/O of its own, so no UDP GSO). With QLOGDIR set it writes quiche's qlog (JSON-SEQ) per
//! connection as `<odcid>_server.sqlog`. Prints `listening on ADDR` once bound; on SIGTERM/SIGINT it
//! closes every connection (H3_NO_ERROR) and exits.
//!
//! Client: `--get URL --ca PEM` fetches URL over HTTP/3, prints `STATUS N bytes` and exits; it
//! writes `<odcid>_client.sqlog` under QLOGDIR and its TLS secrets to SSLKEYLOGFILE when set.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::Read,
    net::{SocketAddr, ToSocketAddrs, UdpSocket},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use quiche::h3::NameValue;

type Error = Box<dyn std::error::Error>;

/// UDP payload quiche may send and receive (below a 1500-byte MTU's 1472).
const MAX_DATAGRAM: usize = 1350;
const H3_NO_ERROR: u64 = 0x100;
/// Length of the connection IDs we issue: short headers carry no length, so a packet's
/// destination connection ID is read with this one.
const CID_LEN: usize = 16;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn random_cid() -> Result<Vec<u8>, Error> {
    let mut id = vec![0u8; CID_LEN];
    File::open("/dev/urandom")?.read_exact(&mut id)?;
    Ok(id)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn config() -> Result<quiche::Config, Error> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)?;
    c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)?;
    c.set_max_idle_timeout(30_000);
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_max_send_udp_payload_size(MAX_DATAGRAM);
    c.set_initial_max_data(10_000_000);
    c.set_initial_max_stream_data_bidi_local(1_000_000);
    c.set_initial_max_stream_data_bidi_remote(1_000_000);
    c.set_initial_max_stream_data_uni(1_000_000);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(100);
    c.set_disable_active_migration(true);
    Ok(c)
}

/// quiche's qlog of `conn` into `$QLOGDIR/<odcid>_<vantage>.sqlog`, if QLOGDIR is set.
fn start_qlog(conn: &mut quiche::Connection, odcid: &[u8], vantage: &str) -> Result<(), Error> {
    let Some(dir) = std::env::var_os("QLOGDIR") else { return Ok(()) };
    std::fs::create_dir_all(&dir)?;
    let file = File::create(PathBuf::from(dir).join(format!("{}_{vantage}.sqlog", hex(odcid))))?;
    conn.set_qlog(Box::new(file), format!("quiche 0.30.0 {vantage} (quicack peer)"),
                  format!("quiche-peer: quiche 0.30.0, vantage {vantage}"));
    Ok(())
}

/// Sends every datagram quiche has for `conn`, one `send_to` each.
fn flush(socket: &UdpSocket, conn: &mut quiche::Connection, out: &mut [u8]) {
    loop {
        match conn.send(out) {
            Ok((len, info)) => {
                let _ = socket.send_to(&out[..len], info.to);
            }
            Err(_) => break, // Done (or an error that closed the connection)
        }
    }
}

/// Wait for a datagram until the earliest timer of `timers` (at most 100 ms, to see signals).
fn receive(socket: &UdpSocket, buf: &mut [u8], next: Option<Instant>) -> Option<(usize, SocketAddr)> {
    let wait = next.map(|at| at.saturating_duration_since(Instant::now())).unwrap_or(Duration::MAX);
    let wait = wait.clamp(Duration::from_micros(50), Duration::from_millis(100));
    socket.set_read_timeout(Some(wait)).ok()?;
    socket.recv_from(buf).ok()
}

struct Served {
    conn: quiche::Connection,
    odcid: Vec<u8>,
    h3: Option<quiche::h3::Connection>,
    /// response bodies not yet written: stream → (body, bytes written)
    pending: HashMap<u64, (Vec<u8>, usize)>,
}

fn respond(s: &mut Served, stream: u64, headers: &[quiche::h3::Header], www: &Path) {
    let h3 = s.h3.as_mut().expect("h3 set up");
    let path = headers.iter().find(|h| h.name() == b":path").map(|h| String::from_utf8_lossy(h.value()).to_string());
    let mut path = path.unwrap_or_default().split('?').next().unwrap_or("").trim_start_matches('/').to_string();
    if path.is_empty() || path.ends_with('/') {
        path.push_str("index.html");
    }
    let body = if path.split('/').any(|p| p == "..") { None } else { std::fs::read(www.join(&path)).ok() };
    let status = if body.is_some() { "200" } else { "404" };
    let length = body.as_ref().map_or(0, |b| b.len()).to_string();
    let reply = [
        quiche::h3::Header::new(b":status", status.as_bytes()),
        quiche::h3::Header::new(b"server", b"quiche-peer"),
        quiche::h3::Header::new(b"content-length", length.as_bytes()),
    ];
    if h3.send_response(&mut s.conn, stream, &reply, body.is_none()).is_err() {
        return;
    }
    if let Some(body) = body {
        s.pending.insert(stream, (body, 0));
        write_pending(s, stream);
    }
}

fn write_pending(s: &mut Served, stream: u64) {
    let (Some(h3), Some((body, written))) = (s.h3.as_mut(), s.pending.get_mut(&stream)) else { return };
    if let Ok(n) = h3.send_body(&mut s.conn, stream, &body[*written..], true) {
        *written += n;
    }
    if *written == body.len() {
        s.pending.remove(&stream);
    }
}

/// HTTP/3 on an established connection: answer requests, continue bodies.
fn serve_h3(s: &mut Served, h3_config: &quiche::h3::Config, www: &Path) {
    if s.h3.is_none() && (s.conn.is_established() || s.conn.is_in_early_data()) {
        match quiche::h3::Connection::with_transport(&mut s.conn, h3_config) {
            Ok(h3) => s.h3 = Some(h3),
            Err(_) => return,
        }
    }
    let Some(h3) = s.h3.as_mut() else { return };
    let mut requests = Vec::new();
    while let Ok((stream, event)) = h3.poll(&mut s.conn) {
        if let quiche::h3::Event::Headers { list, .. } = event {
            requests.push((stream, list));
        }
    }
    for (stream, headers) in requests {
        respond(s, stream, &headers, www);
    }
    let writable: Vec<u64> = s.conn.writable().collect();
    for stream in writable {
        write_pending(s, stream);
    }
}

fn accept(socket: &UdpSocket, buf: &mut [u8], from: SocketAddr, cfg: &mut quiche::Config, out: &mut [u8]) -> Result<Option<Served>, Error> {
    let hdr = quiche::Header::from_slice(buf, CID_LEN)?;
    if !quiche::version_is_supported(hdr.version) {
        let len = quiche::negotiate_version(&hdr.scid, &hdr.dcid, out)?;
        socket.send_to(&out[..len], from)?;
        return Ok(None);
    }
    if hdr.ty != quiche::Type::Initial {
        return Ok(None);
    }
    let scid = random_cid()?;
    let odcid = hdr.dcid.to_vec();
    let mut conn = quiche::accept(&quiche::ConnectionId::from_vec(scid), None, socket.local_addr()?, from, cfg)?;
    start_qlog(&mut conn, &odcid, "server")?;
    Ok(Some(Served { conn, odcid, h3: None, pending: HashMap::new() }))
}

fn server(addr: SocketAddr, cert: &str, key: &str, www: &Path) -> Result<(), Error> {
    let mut cfg = config()?;
    cfg.load_cert_chain_from_pem_file(cert)?;
    cfg.load_priv_key_from_pem_file(key)?;
    let h3_config = quiche::h3::Config::new()?;
    let socket = UdpSocket::bind(addr)?;
    let local = socket.local_addr()?;
    println!("listening on {local}");
    let (mut buf, mut out) = (vec![0u8; 65535], vec![0u8; MAX_DATAGRAM]);
    let mut conns: Vec<Served> = Vec::new();
    while !STOP.load(Ordering::SeqCst) {
        let next = conns.iter().filter_map(|s| s.conn.timeout_instant()).min();
        if let Some((len, from)) = receive(&socket, &mut buf, next) {
            let dcid = match quiche::Header::from_slice(&mut buf[..len], CID_LEN) {
                Ok(hdr) => hdr.dcid.to_vec(),
                Err(_) => continue,
            };
            let known = conns.iter().position(|s| s.odcid == dcid || s.conn.source_ids().any(|id| id.as_ref() == dcid.as_slice()));
            let index = match known {
                Some(i) => Some(i),
                None => accept(&socket, &mut buf[..len], from, &mut cfg, &mut out)?.map(|s| {
                    conns.push(s);
                    conns.len() - 1
                }),
            };
            if let Some(i) = index {
                let _ = conns[i].conn.recv(&mut buf[..len], quiche::RecvInfo { from, to: local });
            }
        }
        for s in conns.iter_mut() {
            if s.conn.timeout_instant().is_some_and(|at| at <= Instant::now()) {
                s.conn.on_timeout();
            }
            serve_h3(s, &h3_config, www);
            flush(&socket, &mut s.conn, &mut out);
        }
        conns.retain(|s| !s.conn.is_closed());
    }
    for s in conns.iter_mut() {
        let _ = s.conn.close(true, H3_NO_ERROR, b"server shutting down");
        flush(&socket, &mut s.conn, &mut out);
    }
    Ok(())
}

/// (host, port, path) of an https:// URL.
fn split_url(url: &str) -> Result<(String, u16, String), Error> {
    let rest = url.strip_prefix("https://").ok_or("the URL must start with https://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, p.parse()?),
        _ => (authority, 443),
    };
    let path = if path.is_empty() { "/" } else { path };
    Ok((host.trim_matches(|c| c == '[' || c == ']').to_string(), port, path.to_string()))
}

/// GET `url` over HTTP/3 and print "STATUS N bytes".
fn client(url: &str, ca: &str) -> Result<(), Error> {
    let (host, port, path) = split_url(url)?;
    let peer = (host.as_str(), port).to_socket_addrs()?.next().ok_or("no address")?;
    let socket = UdpSocket::bind(if peer.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
    let local = socket.local_addr()?;
    let mut cfg = config()?;
    cfg.verify_peer(true);
    cfg.load_verify_locations_from_file(ca)?;
    let keylog = std::env::var_os("SSLKEYLOGFILE");
    if keylog.is_some() {
        cfg.log_keys();
    }
    let server_name = if host.parse::<std::net::IpAddr>().is_ok() { "localhost" } else { host.as_str() };
    let mut conn = quiche::connect(Some(server_name), &quiche::ConnectionId::from_vec(random_cid()?), local, peer, &mut cfg)?;
    if let Some(path) = keylog {
        conn.set_keylog(Box::new(OpenOptions::new().create(true).append(true).open(path)?));
    }
    let odcid = conn.destination_id().to_vec();
    start_qlog(&mut conn, &odcid, "client")?;
    let h3_config = quiche::h3::Config::new()?;
    let (mut buf, mut out) = (vec![0u8; 65535], vec![0u8; MAX_DATAGRAM]);
    let (mut h3, mut status, mut size, mut done) = (None::<quiche::h3::Connection>, String::new(), 0usize, false);
    let deadline = Instant::now() + Duration::from_secs(20);
    flush(&socket, &mut conn, &mut out);
    while !conn.is_closed() && Instant::now() < deadline {
        if let Some((len, from)) = receive(&socket, &mut buf, conn.timeout_instant()) {
            let _ = conn.recv(&mut buf[..len], quiche::RecvInfo { from, to: local });
        }
        if conn.timeout_instant().is_some_and(|at| at <= Instant::now()) {
            conn.on_timeout();
        }
        if h3.is_none() && conn.is_established() {
            let mut c = quiche::h3::Connection::with_transport(&mut conn, &h3_config)?;
            let authority = format!("{host}:{port}");
            let request = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", authority.as_bytes()),
                quiche::h3::Header::new(b":path", path.as_bytes()),
                quiche::h3::Header::new(b"user-agent", b"quiche-peer"),
            ];
            c.send_request(&mut conn, &request, true)?;
            h3 = Some(c);
        }
        if let Some(c) = h3.as_mut() {
            while let Ok((stream, event)) = c.poll(&mut conn) {
                match event {
                    quiche::h3::Event::Headers { list, .. } => {
                        let found = list.iter().find(|h| h.name() == b":status");
                        status = found.map(|h| String::from_utf8_lossy(h.value()).to_string()).unwrap_or_default();
                    }
                    quiche::h3::Event::Data => {
                        while let Ok(n) = c.recv_body(&mut conn, stream, &mut buf) {
                            size += n;
                        }
                    }
                    quiche::h3::Event::Finished if !done => {
                        done = true;
                        let _ = conn.close(true, H3_NO_ERROR, b"");
                    }
                    _ => {}
                }
            }
        }
        flush(&socket, &mut conn, &mut out);
    }
    if !done {
        return Err(format!("no complete response from {url}").into());
    }
    println!("{status} {size} bytes");
    Ok(())
}

fn main() -> Result<(), Error> {
    let mut flags: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        flags.insert(flag, value);
    }
    if let Some(url) = flags.get("--get") {
        return client(url, flags.get("--ca").ok_or("usage: quiche-peer --get URL --ca PEM")?);
    }
    let usage = "usage: quiche-peer --addr IP:PORT --cert PEM --key PEM --www DIR";
    let (Some(addr), Some(cert), Some(key), Some(www)) =
        (flags.get("--addr"), flags.get("--cert"), flags.get("--key"), flags.get("--www")) else {
        return Err(usage.into());
    };
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    server(addr.parse()?, cert, key, Path::new(www))
}
