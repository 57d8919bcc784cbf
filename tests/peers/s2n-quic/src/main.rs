//! Minimal HTTP/3 server and client on s2n-quic 1.91 (rustls) + h3 0.0.6 through
//! s2n-quic-h3-community, used by quicack as a real test peer.
//!
//! Server: `--addr IP:PORT --cert PEM --key PEM --www DIR` serves the files of `--www` over HTTP/3
//! (`/` is `index.html`) with UDP segmentation offload off (the tokio IO provider's
//! `with_gso_disabled`), so that captures on loopback see one QUIC datagram per frame. s2n-quic
//! writes no qlog. Prints `listening on ADDR` once the socket is bound; exits on SIGTERM/SIGINT.
//!
//! Client: `--get URL --ca PEM` fetches URL over HTTP/3, prints `STATUS N bytes` and exits; with
//! SSLKEYLOGFILE set it appends its TLS secrets there (rustls' KeyLogFile).

use std::{net::SocketAddr, path::{Path, PathBuf}, time::Duration};

use bytes::{Buf, Bytes};
use s2n_quic::provider::{io::tokio::Builder as IoBuilder, limits::Limits, tls::rustls};
use s2n_quic_h3_community as s2n_h3;
use s2n_h3::h3;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Default)]
struct Args {
    addr: Option<SocketAddr>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    www: Option<PathBuf>,
    get: Option<String>,
    ca: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => args.addr = Some(value.parse().map_err(|e| format!("--addr {value}: {e}"))?),
            "--cert" => args.cert = Some(PathBuf::from(value)),
            "--key" => args.key = Some(PathBuf::from(value)),
            "--www" => args.www = Some(PathBuf::from(value)),
            "--get" => args.get = Some(value),
            "--ca" => args.ca = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(args)
}

fn limits() -> Result<Limits, Error> {
    Ok(Limits::new().with_max_idle_timeout(Duration::from_secs(30))?)
}

async fn serve_request<S>(
    request: http::Request<()>,
    mut stream: h3::server::RequestStream<S, Bytes>,
    www: PathBuf,
) -> Result<(), Error>
where
    S: h3::quic::BidiStream<Bytes>,
{
    let mut path = request.uri().path().trim_start_matches('/').to_string();
    if path.is_empty() || path.ends_with('/') {
        path.push_str("index.html");
    }
    let body = if path.split('/').any(|part| part == "..") {
        None
    } else {
        tokio::fs::read(www.join(&path)).await.ok()
    };
    let status = if body.is_some() { 200 } else { 404 };
    let response = http::Response::builder().status(status).header("server", "s2n-quic-peer").body(())?;
    stream.send_response(response).await?;
    if let Some(body) = body {
        stream.send_data(Bytes::from(body)).await?;
    }
    stream.finish().await?;
    Ok(())
}

async fn serve_connection(conn: s2n_quic::Connection, www: PathBuf) {
    let Ok(mut h3_conn) = h3::server::Connection::<_, Bytes>::new(s2n_h3::Connection::new(conn)).await else {
        return;
    };
    while let Ok(Some((request, stream))) = h3_conn.accept().await {
        let www = www.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_request(request, stream, www).await {
                eprintln!("request failed: {e}");
            }
        });
    }
}

async fn server(addr: SocketAddr, cert: &Path, key: &Path, www: PathBuf) -> Result<(), Error> {
    let tls = rustls::Server::builder()
        .with_certificate(cert, key)?
        .with_application_protocols(["h3"].iter())?
        .build()?;
    let io = IoBuilder::default().with_receive_address(addr)?.with_gso_disabled()?.build()?;
    let mut server = s2n_quic::Server::builder().with_tls(tls)?.with_io(io)?.with_limits(limits()?)?.start()?;
    println!("listening on {}", server.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            conn = server.accept() => match conn {
                Some(conn) => { tokio::spawn(serve_connection(conn, www.clone())); }
                None => break,
            },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    Ok(())
}

/// GET `url` over HTTP/3 and print "STATUS N bytes".
async fn client(url: &str, ca: &Path) -> Result<(), Error> {
    let uri: http::Uri = url.parse()?;
    let host = uri.host().ok_or("URL without host")?.trim_matches(|c| c == '[' || c == ']').to_string();
    let port = uri.port_u16().unwrap_or(443);
    let addr: SocketAddr = tokio::net::lookup_host((host.as_str(), port)).await?.next().ok_or("no address")?;
    let mut tls = rustls::Client::builder().with_certificate(ca)?.with_application_protocols(["h3"].iter())?;
    if std::env::var_os("SSLKEYLOGFILE").is_some() {
        tls = tls.with_key_logging()?;
    }
    let bind = if addr.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" };
    let io = IoBuilder::default().with_receive_address(bind.parse()?)?.with_gso_disabled()?.build()?;
    let client = s2n_quic::Client::builder().with_tls(tls.build()?)?.with_io(io)?.with_limits(limits()?)?.start()?;
    let server_name = if host.parse::<std::net::IpAddr>().is_ok() { "localhost".to_string() } else { host };
    let connect = s2n_quic::client::Connect::new(addr).with_server_name(server_name);
    let mut conn = client.connect(connect).await?;
    conn.keep_alive(true)?;
    let (mut driver, mut send) = h3::client::new(s2n_h3::Connection::new(conn)).await?;
    let drive = tokio::spawn(async move { futures_poll_close(&mut driver).await });
    let request = http::Request::get(uri).body(())?;
    let mut stream = send.send_request(request).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    let mut size = 0;
    while let Some(chunk) = stream.recv_data().await? {
        size += chunk.remaining();
    }
    println!("{} {size} bytes", response.status());
    drop(send);
    drop(stream);
    drive.abort();
    Ok(())
}

async fn futures_poll_close<C, B>(driver: &mut h3::client::Connection<C, B>) -> Result<(), h3::Error>
where
    C: h3::quic::Connection<B>,
    B: Buf,
{
    std::future::poll_fn(|cx| driver.poll_close(cx)).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args = parse_args()?;
    if let Some(url) = &args.get {
        let ca = args.ca.as_ref().ok_or("usage: s2n-quic-peer --get URL --ca PEM")?;
        return client(url, ca).await;
    }
    let usage = "usage: s2n-quic-peer --addr IP:PORT --cert PEM --key PEM --www DIR";
    let (Some(addr), Some(cert), Some(key), Some(www)) = (args.addr, &args.cert, &args.key, args.www.clone()) else {
        return Err(usage.into());
    };
    server(addr, cert, key, www).await
}
