//! `--get URL`: a minimal HTTP/3 client on quinn 0.11 + h3, quicack's testbed client of this stack.
//!
//! One connection, one `GET`, then it closes the connection and prints one line:
//! `STATUS N bytes C certificates handshake_ms=H ttfb_ms=T` — C certificates as received (not
//! checked: any chain is accepted, as quicack's own testbed client does; the server's TLS 1.3
//! signature is still verified), H and T in ms from the `connect` call (the client's first
//! Initial leaves within it) to the handshake's completion and to the response's HEADERS.  These
//! two are measured here because quinn 0.11's qlog logs packets without their frames.  The qlog
//! (`--qlog FILE`, JSON-SEQ, keyed by `group_id` = the original destination connection ID) and
//! the sending without UDP segmentation offload are as in the server.

use std::{
    error::Error,
    fs::File,
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Buf;
use quinn::rustls::{
    self,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{CertificateDer, ServerName, UnixTime},
    DigitallySignedStruct, SignatureScheme,
};

/// Certificates in the server's Certificate message, counted by the verifier.
static CERTIFICATES: AtomicUsize = AtomicUsize::new(0);

/// Accepts any certificate chain (counting it); checks the handshake signature with the provider.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        CERTIFICATES.store(1 + intermediates.len(), Ordering::Relaxed);
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

pub struct GetArgs {
    pub url: http::Uri,
    pub qlog: Option<PathBuf>,
    pub timeout: Duration,
}

fn client_config(args: &GetArgs) -> Result<quinn::ClientConfig, Box<dyn Error>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.enable_segmentation_offload(false);
    transport.max_idle_timeout(Some(Duration::from_secs(30).try_into()?));
    if let Some(path) = &args.qlog {
        let mut qlog = quinn::QlogConfig::default();
        qlog.writer(Box::new(File::create(path)?))
            .title(Some("quinn 0.11.12 client (quicack peer)".into()))
            .description(Some("quinn-h3-server --get: quinn 0.11.12, h3 0.0.8, vantage client".into()));
        transport.qlog_stream(qlog.into_stream());
    }
    config.transport_config(Arc::new(transport));
    Ok(config)
}

fn server_address(url: &http::Uri) -> Result<SocketAddr, Box<dyn Error>> {
    let authority = url.authority().ok_or("the URL names no host")?;
    let host: IpAddr = authority.host().trim_start_matches('[').trim_end_matches(']').parse()?;
    Ok(SocketAddr::new(host, authority.port_u16().unwrap_or(443)))
}

async fn fetch(args: &GetArgs, endpoint: &quinn::Endpoint) -> Result<String, Box<dyn Error>> {
    let started = Instant::now();
    let conn = endpoint.connect(server_address(&args.url)?, "localhost")?.await?;
    let handshake = started.elapsed();
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await?;
    let drive = tokio::spawn(async move { driver.wait_idle().await });
    let mut stream = send.send_request(http::Request::get(args.url.clone()).body(())?).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    let ttfb = started.elapsed();
    let mut bytes = 0;
    while let Some(chunk) = stream.recv_data().await? {
        bytes += chunk.remaining();
    }
    conn.close(0u32.into(), b"done");
    drive.abort();
    Ok(format!(
        "{} {bytes} bytes {} certificates handshake_ms={:.3} ttfb_ms={:.3}",
        response.status(),
        CERTIFICATES.load(Ordering::Relaxed),
        handshake.as_secs_f64() * 1e3,
        ttfb.as_secs_f64() * 1e3
    ))
}

/// Fetch the URL within the timeout, print the line, close; the endpoint waits (at most 1 s) for
/// the CONNECTION_CLOSE to leave so that the qlog has it.
pub async fn get(args: GetArgs) -> Result<(), Box<dyn Error>> {
    let bind: SocketAddr = match server_address(&args.url)? {
        SocketAddr::V4(_) => "127.0.0.1:0".parse()?,
        SocketAddr::V6(_) => "[::1]:0".parse()?,
    };
    let mut endpoint = quinn::Endpoint::client(bind)?;
    endpoint.set_default_client_config(client_config(&args)?);
    let done = tokio::time::timeout(args.timeout, fetch(&args, &endpoint)).await;
    endpoint.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    match done {
        Ok(Ok(line)) => {
            println!("{line}");
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("timeout after {:?}", args.timeout).into()),
    }
}
