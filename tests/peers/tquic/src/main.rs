//! Minimal HTTP/3 server and client on TQUIC 1.6 (Tencent; sans-I/O endpoint with callbacks,
//! BoringSSL), used by quicack as a real test peer.
//!
//! Server: `--addr IP:PORT --cert PEM --key PEM --www DIR` serves the files of `--www` over HTTP/3
//! (`/` is `index.html`) from one blocking UDP socket, one `send_to` per QUIC datagram (TQUIC does
//! no I/O of its own: no UDP GSO). With QLOGDIR set it writes TQUIC's qlog (JSON-SEQ) per
//! connection. Prints `listening on ADDR` once bound; on SIGTERM/SIGINT it closes the endpoint and
//! exits.
//!
//! Client: `--get URL --ca PEM` fetches URL over HTTP/3, prints `STATUS N bytes` and exits
//! (qlog under QLOGDIR, TLS secrets to SSLKEYLOGFILE when set).

use std::{
    cell::RefCell,
    collections::HashMap,
    fs::{File, OpenOptions},
    net::{SocketAddr, ToSocketAddrs, UdpSocket},
    path::{Path, PathBuf},
    rc::Rc,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use bytes::Bytes;
use tquic::h3::{connection::Http3Connection, Header, Http3Config, Http3Event, NameValue};
use tquic::{Config, Connection, Endpoint, PacketInfo, PacketSendHandler, TlsConfig, TransportHandler};

type Error = Box<dyn std::error::Error>;

/// UDP payload TQUIC may send (below a 1500-byte MTU's 1472).
const MAX_DATAGRAM: usize = 1350;
const H3_NO_ERROR: u64 = 0x100;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn config(tls: TlsConfig) -> Result<Config, Error> {
    let mut c = Config::new()?;
    c.set_max_idle_timeout(30_000);
    c.set_recv_udp_payload_size(MAX_DATAGRAM as u16);
    c.set_send_udp_payload_size(MAX_DATAGRAM);
    c.set_initial_max_data(10_000_000);
    c.set_initial_max_stream_data_bidi_local(1_000_000);
    c.set_initial_max_stream_data_bidi_remote(1_000_000);
    c.set_initial_max_stream_data_uni(1_000_000);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(100);
    c.set_tls_config(tls);
    Ok(c)
}

/// TQUIC's qlog of `conn` into `$QLOGDIR/tquic-<pid>-<n>_<vantage>.sqlog`, if QLOGDIR is set.
fn start_qlog(conn: &mut Connection, vantage: &str, n: usize) {
    let Some(dir) = std::env::var_os("QLOGDIR") else { return };
    let _ = std::fs::create_dir_all(&dir);
    let name = format!("tquic-{}-{n}_{vantage}.sqlog", std::process::id());
    if let Ok(file) = File::create(PathBuf::from(dir).join(name)) {
        conn.set_qlog(Box::new(file), format!("tquic 1.6.0 {vantage} (quicack peer)"),
                      format!("tquic-peer: tquic 1.6.0, vantage {vantage}"));
    }
}

/// Sends TQUIC's packets, one `send_to` each.
struct Sender(Rc<UdpSocket>);

impl PacketSendHandler for Sender {
    fn on_packets_send(&self, pkts: &[(Vec<u8>, PacketInfo)]) -> tquic::Result<usize> {
        for (data, info) in pkts {
            let _ = self.0.send_to(data, info.dst);
        }
        Ok(pkts.len())
    }
}

/// The server's HTTP/3: one connection per QUIC connection index, response bodies not yet sent.
struct Server {
    www: PathBuf,
    h3_config: Http3Config,
    h3: HashMap<u64, Http3Connection>,
    pending: HashMap<(u64, u64), Bytes>,
    created: usize,
}

impl Server {
    fn poll(&mut self, conn: &mut Connection) {
        let Some(index) = conn.index() else { return };
        let Some(h3) = self.h3.get_mut(&index) else { return };
        let mut requests = Vec::new();
        while let Ok((stream, event)) = h3.poll(conn) {
            if let Http3Event::Headers { headers, .. } = event {
                requests.push((stream, headers));
            }
        }
        for (stream, headers) in requests {
            self.respond(conn, index, stream, &headers);
        }
    }

    fn respond(&mut self, conn: &mut Connection, index: u64, stream: u64, headers: &[Header]) {
        let path = headers.iter().find(|h| h.name() == b":path").map(|h| String::from_utf8_lossy(h.value()).to_string());
        let mut path = path.unwrap_or_default().split('?').next().unwrap_or("").trim_start_matches('/').to_string();
        if path.is_empty() || path.ends_with('/') {
            path.push_str("index.html");
        }
        let body = if path.split('/').any(|p| p == "..") { None } else { std::fs::read(self.www.join(&path)).ok() };
        let status = if body.is_some() { "200" } else { "404" };
        let length = body.as_ref().map_or(0, |b| b.len()).to_string();
        let reply = [
            Header::new(b":status", status.as_bytes()),
            Header::new(b"server", b"tquic-peer"),
            Header::new(b"content-length", length.as_bytes()),
        ];
        let Some(h3) = self.h3.get_mut(&index) else { return };
        if h3.send_headers(conn, stream, &reply, body.is_none()).is_err() {
            return;
        }
        if let Some(body) = body {
            self.pending.insert((index, stream), Bytes::from(body));
            self.write_pending(conn, index, stream);
        }
    }

    fn write_pending(&mut self, conn: &mut Connection, index: u64, stream: u64) {
        let (Some(h3), Some(body)) = (self.h3.get_mut(&index), self.pending.get_mut(&(index, stream))) else { return };
        if let Ok(n) = h3.send_body(conn, stream, body.clone(), true) {
            let _ = body.split_to(n.min(body.len()));
        }
        if body.is_empty() {
            self.pending.remove(&(index, stream));
        }
    }
}

impl TransportHandler for Server {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        self.created += 1;
        start_qlog(conn, "server", self.created);
    }

    fn on_conn_established(&mut self, conn: &mut Connection) {
        if let (Some(index), Ok(h3)) = (conn.index(), Http3Connection::new_with_quic_conn(conn, &self.h3_config)) {
            self.h3.insert(index, h3);
        }
    }

    fn on_conn_closed(&mut self, conn: &mut Connection) {
        if let Some(index) = conn.index() {
            self.h3.remove(&index);
            self.pending.retain(|(i, _), _| *i != index);
        }
    }

    fn on_stream_created(&mut self, conn: &mut Connection, _stream_id: u64) {
        self.poll(conn);
    }

    fn on_stream_readable(&mut self, conn: &mut Connection, _stream_id: u64) {
        self.poll(conn);
    }

    fn on_stream_writable(&mut self, conn: &mut Connection, stream_id: u64) {
        if let Some(index) = conn.index() {
            self.write_pending(conn, index, stream_id);
        }
    }

    fn on_stream_closed(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
}

/// Runs `endpoint` on `socket` until `done()` or a signal: receive (up to the next timer, at most
/// 100 ms to see signals), fire timers, let TQUIC process and send.
fn drive(endpoint: &mut Endpoint, socket: &UdpSocket, done: &dyn Fn() -> bool, deadline: Option<Instant>) -> Result<(), Error> {
    let local = socket.local_addr()?;
    let mut buf = vec![0u8; 65535];
    while !STOP.load(Ordering::SeqCst) && !done() && deadline.map_or(true, |d| Instant::now() < d) {
        let wait = endpoint.timeout().unwrap_or(Duration::MAX).clamp(Duration::from_micros(50), Duration::from_millis(100));
        socket.set_read_timeout(Some(wait))?;
        if let Ok((len, from)) = socket.recv_from(&mut buf) {
            let info = PacketInfo { src: from, dst: local, time: Instant::now() };
            let _ = endpoint.recv(&mut buf[..len], &info);
        }
        endpoint.on_timeout(Instant::now());
        let _ = endpoint.process_connections();
    }
    Ok(())
}

fn server(addr: SocketAddr, cert: &str, key: &str, www: &Path) -> Result<(), Error> {
    let tls = TlsConfig::new_server_config(cert, key, vec![b"h3".to_vec()], false)?;
    let socket = Rc::new(UdpSocket::bind(addr)?);
    let handler = Server { www: www.to_path_buf(), h3_config: Http3Config::new()?, h3: HashMap::new(),
                           pending: HashMap::new(), created: 0 };
    let mut endpoint = Endpoint::new(Box::new(config(tls)?), true, Box::new(handler), Rc::new(Sender(socket.clone())));
    println!("listening on {}", socket.local_addr()?);
    drive(&mut endpoint, &socket, &|| false, None)?;
    endpoint.close(false);
    let _ = endpoint.process_connections();
    Ok(())
}

/// What the client has seen: its request stream's status and body size, and whether it ended.
#[derive(Default)]
struct Fetch {
    status: String,
    size: usize,
    done: bool,
}

struct Client {
    h3_config: Http3Config,
    h3: Option<Http3Connection>,
    path: String,
    authority: String,
    keylog: Option<std::ffi::OsString>,
    fetch: Rc<RefCell<Fetch>>,
}

impl Client {
    fn poll(&mut self, conn: &mut Connection) {
        let Some(h3) = self.h3.as_mut() else { return };
        let mut buf = vec![0u8; 65535];
        while let Ok((stream, event)) = h3.poll(conn) {
            let mut fetch = self.fetch.borrow_mut();
            match event {
                Http3Event::Headers { headers, .. } => {
                    let found = headers.iter().find(|h| h.name() == b":status");
                    fetch.status = found.map(|h| String::from_utf8_lossy(h.value()).to_string()).unwrap_or_default();
                }
                Http3Event::Data => {
                    while let Ok(n) = h3.recv_body(conn, stream, &mut buf) {
                        if n == 0 {
                            break;
                        }
                        fetch.size += n;
                    }
                }
                Http3Event::Finished if !fetch.done => {
                    fetch.done = true;
                    let _ = conn.close(true, H3_NO_ERROR, b"");
                }
                _ => {}
            }
        }
    }
}

impl TransportHandler for Client {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        start_qlog(conn, "client", 1);
        if let Some(path) = &self.keylog {
            if let Ok(file) = OpenOptions::new().create(true).append(true).open(path) {
                conn.set_keylog(Box::new(file));
            }
        }
    }

    fn on_conn_established(&mut self, conn: &mut Connection) {
        let Ok(mut h3) = Http3Connection::new_with_quic_conn(conn, &self.h3_config) else { return };
        let request = [
            Header::new(b":method", b"GET"),
            Header::new(b":scheme", b"https"),
            Header::new(b":authority", self.authority.as_bytes()),
            Header::new(b":path", self.path.as_bytes()),
            Header::new(b"user-agent", b"tquic-peer"),
        ];
        if let Ok(stream) = h3.stream_new(conn) {
            let _ = h3.send_headers(conn, stream, &request, true);
        }
        self.h3 = Some(h3);
    }

    fn on_conn_closed(&mut self, _conn: &mut Connection) {}

    fn on_stream_created(&mut self, conn: &mut Connection, _stream_id: u64) {
        self.poll(conn);
    }

    fn on_stream_readable(&mut self, conn: &mut Connection, _stream_id: u64) {
        self.poll(conn);
    }

    fn on_stream_writable(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_stream_closed(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
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
    let socket = Rc::new(UdpSocket::bind(if peer.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?);
    let mut tls = TlsConfig::new_client_config(vec![b"h3".to_vec()], false)?;
    tls.set_verify(true);
    tls.set_ca_certs(ca)?;
    let fetch = Rc::new(RefCell::new(Fetch::default()));
    let handler = Client { h3_config: Http3Config::new()?, h3: None, path, authority: format!("{host}:{port}"),
                           keylog: std::env::var_os("SSLKEYLOGFILE"), fetch: fetch.clone() };
    let mut endpoint = Endpoint::new(Box::new(config(tls)?), false, Box::new(handler), Rc::new(Sender(socket.clone())));
    let server_name = if host.parse::<std::net::IpAddr>().is_ok() { "localhost" } else { host.as_str() };
    endpoint.connect(socket.local_addr()?, peer, Some(server_name), None, None, None)?;
    let _ = endpoint.process_connections();
    let done = fetch.clone();
    drive(&mut endpoint, &socket, &move || done.borrow().done, Some(Instant::now() + Duration::from_secs(20)))?;
    // let the CONNECTION_CLOSE out
    let _ = endpoint.process_connections();
    let fetch = fetch.borrow();
    if !fetch.done {
        return Err(format!("no complete response from {url}").into());
    }
    println!("{} {} bytes", fetch.status, fetch.size);
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
        return client(url, flags.get("--ca").ok_or("usage: tquic-peer --get URL --ca PEM")?);
    }
    let usage = "usage: tquic-peer --addr IP:PORT --cert PEM --key PEM --www DIR";
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
