//! Minimal HTTP/3 server on quinn 0.11 + h3, used by quicack as a real test peer.
//!
//! Serves the files of `--www` over HTTP/3 (`/` is `index.html`), writes one qlog stream (JSON-SEQ,
//! all connections keyed by `group_id`) to `--qlog`, and sends without UDP segmentation offload
//! so that captures on loopback see one QUIC datagram per frame (quicack KNOWLEDGE §5).
//! Prints `listening on ADDR` once the socket is bound; exits on SIGTERM/SIGINT after closing
//! the endpoint and flushing the qlog.
//!
//! With `--ack-frequency N,MAX_DELAY_MS` it asks a client that advertises `min_ack_delay` for one
//! ACK per N ack-eliciting packets (quinn's `AckFrequencyConfig`: Ack-Eliciting Threshold N − 1,
//! draft-ietf-quic-ack-frequency), so that quicack can measure a client's response to a real sender.
//!
//! With `--get URL [--qlog FILE] [--timeout SECONDS]` it is a client instead (`client.rs`).

mod client;

use std::{fs::File, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use quinn::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
};

struct Args {
    addr: SocketAddr,
    cert: PathBuf,
    key: PathBuf,
    www: PathBuf,
    qlog: Option<PathBuf>,
    ack_frequency: Option<(u32, u64)>,
}

fn parse_ack_frequency(value: &str) -> Result<(u32, u64), String> {
    let bad = || format!("--ack-frequency {value}: expected N,MAX_DELAY_MS with N >= 1");
    let (n, delay) = value.split_once(',').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let delay: u64 = delay.trim().parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok((n, delay))
}

fn parse_args() -> Result<Args, String> {
    let mut addr = None;
    let (mut cert, mut key, mut www, mut qlog, mut ack_frequency) = (None, None, None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => addr = Some(value.parse().map_err(|e| format!("--addr {value}: {e}"))?),
            "--cert" => cert = Some(PathBuf::from(value)),
            "--key" => key = Some(PathBuf::from(value)),
            "--www" => www = Some(PathBuf::from(value)),
            "--qlog" => qlog = Some(PathBuf::from(value)),
            "--ack-frequency" => ack_frequency = Some(parse_ack_frequency(&value)?),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(Args {
        addr: addr.ok_or("--addr is required")?,
        cert: cert.ok_or("--cert is required")?,
        key: key.ok_or("--key is required")?,
        www: www.ok_or("--www is required")?,
        qlog,
        ack_frequency,
    })
}

fn server_config(args: &Args) -> Result<quinn::ServerConfig, Box<dyn std::error::Error>> {
    let certs = CertificateDer::pem_file_iter(&args.cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&args.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));

    let mut transport = quinn::TransportConfig::default();
    transport.enable_segmentation_offload(false);
    transport.max_idle_timeout(Some(Duration::from_secs(30).try_into()?));
    if let Some((n, delay_ms)) = args.ack_frequency {
        let mut frequency = quinn::AckFrequencyConfig::default();
        frequency
            .ack_eliciting_threshold(quinn::VarInt::from_u32(n - 1))
            .max_ack_delay(Some(Duration::from_millis(delay_ms)));
        transport.ack_frequency_config(Some(frequency));
    }
    if let Some(path) = &args.qlog {
        let mut qlog = quinn::QlogConfig::default();
        qlog.writer(Box::new(File::create(path)?))
            .title(Some("quinn 0.11.12 server (quicack peer)".into()))
            .description(Some("quinn-h3-server: quinn 0.11.12, h3 0.0.8, vantage server".into()));
        transport.qlog_stream(qlog.into_stream());
    }
    config.transport_config(Arc::new(transport));
    Ok(config)
}

async fn serve_request(
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    www: PathBuf,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (request, mut stream) = resolver.resolve_request().await?;
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
    let response = http::Response::builder()
        .status(status)
        .header("server", "quinn-h3-server")
        .body(())?;
    stream.send_response(response).await?;
    if let Some(body) = body {
        stream.send_data(Bytes::from(body)).await?;
    }
    stream.finish().await?;
    Ok(())
}

async fn serve_connection(incoming: quinn::Incoming, www: PathBuf) {
    let Ok(conn) = incoming.await else { return };
    let Ok(mut h3_conn) = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await else {
        return;
    };
    loop {
        match h3_conn.accept().await {
            Ok(Some(resolver)) => {
                let www = www.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve_request(resolver, www).await {
                        eprintln!("request failed: {e}");
                    }
                });
            }
            Ok(None) | Err(_) => break,
        }
    }
}

fn parse_get_args() -> Result<client::GetArgs, String> {
    let (mut url, mut qlog, mut timeout) = (None, None, Duration::from_secs(20));
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--get" => url = Some(value.parse().map_err(|e| format!("--get {value}: {e}"))?),
            "--qlog" => qlog = Some(PathBuf::from(value)),
            "--timeout" => {
                let seconds: f64 = value.parse().map_err(|e| format!("--timeout {value}: {e}"))?;
                timeout = Duration::try_from_secs_f64(seconds).map_err(|e| format!("--timeout {value}: {e}"))?;
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(client::GetArgs { url: url.ok_or("--get is required")?, qlog, timeout })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|a| a == "--get") {
        let args = parse_get_args().map_err(|e| {
            eprintln!("usage: quinn-h3-server --get URL [--qlog FILE] [--timeout SECONDS]");
            e
        })?;
        return client::get(args).await;
    }
    let args = parse_args().map_err(|e| {
        eprintln!("usage: quinn-h3-server --addr IP:PORT --cert PEM --key PEM --www DIR [--qlog FILE] \
                   [--ack-frequency N,MAX_DELAY_MS]");
        e
    })?;
    let endpoint = quinn::Endpoint::server(server_config(&args)?, args.addr)?;
    println!("listening on {}", endpoint.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => { tokio::spawn(serve_connection(incoming, args.www.clone())); }
                None => break,
            },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    endpoint.close(0u32.into(), b"server shutting down");
    // Let the close reach the peers and the qlog stream be written before exiting.
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    Ok(())
}
