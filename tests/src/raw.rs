//! Requests as an attacker writes them: bytes on a TLS or plain TCP connection, so no client
//! library normalises the path (`%2e%2e` stays as sent), plus clients bound to other loopback
//! source addresses (127.0.0.2, …) to act as different hosts, and the minimal Envoy configuration
//! beside a running stack.

use crate::{envoy, Proc, Stack};
use anyhow::{Context, Result};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;

/// An answer read off the wire: the status and everything after the status line.
#[derive(Debug)]
pub struct RawAnswer {
    /// The status code, 0 if the connection closed without one.
    pub status: u16,
    /// Headers and body as received.
    pub text: String,
}

impl RawAnswer {
    /// True if the media upstream produced this answer (it names itself in every body).
    pub fn from_media(&self) -> bool {
        self.text.contains("\"service\":\"media\"")
    }
}

/// Sends `request` (a whole HTTP/1.1 request; `Connection: close` is the caller's) and reads the
/// answer until the peer closes or 10 s pass.
pub async fn exchange(
    mut conn: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
) -> Result<RawAnswer> {
    conn.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(RawAnswer { status, text })
}

/// `GET path` over plain HTTP to 127.0.0.1:port, with extra header lines.
pub async fn http_get(port: u16, path: &str, headers: &[&str]) -> Result<RawAnswer> {
    let conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    exchange(conn, &get_request(path, headers)).await
}

fn get_request(path: &str, headers: &[&str]) -> String {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for h in headers {
        r += h;
        r += "\r\n";
    }
    r + "\r\n"
}

/// A TLS connection (no ALPN: HTTP/1.1) to 127.0.0.1:port as `localhost`, trusting only
/// `cert_pem`.
pub async fn tls_connect_to(port: u16, cert_pem: &str) -> Result<TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cert_pem.as_bytes())?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost")?;
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?)
}

impl Stack {
    /// A TLS connection to Envoy's listener that trusts the stack's certificate.
    pub async fn tls_connect(&self) -> Result<TlsStream<tokio::net::TcpStream>> {
        tls_connect_to(self.ports.listener, &self.cert_pem).await
    }

    /// `GET path` through Envoy over TLS and HTTP/1.1, the path sent exactly as given.
    pub async fn raw_get(&self, path: &str, headers: &[&str]) -> Result<RawAnswer> {
        exchange(self.tls_connect().await?, &get_request(path, headers)).await
    }

    /// An HTTP client like [`Stack::client`] whose connections come from `source` (another
    /// loopback address stands for another host).
    pub fn client_from(&self, source: IpAddr) -> reqwest::Client {
        self.client_builder()
            .local_address(source)
            .build()
            .expect("client")
    }

    /// Starts a second Envoy on the shipped minimal configuration of the tools' filter (plain HTTP,
    /// no issuer route, no admin interface) in front of this stack's media upstream, with this
    /// stack's key ring and its own origin, `http://127.0.0.1:PORT`. Returns it and its listener
    /// port.
    pub fn start_minimal_envoy(&self) -> Result<(Proc, u16)> {
        let dir = self.dir.join("minimal");
        std::fs::create_dir_all(&dir)?;
        self.tools.install_filter(&dir)?;
        let port = crate::free_port();
        let origin = format!("http://127.0.0.1:{port}");
        let filter_config =
            self.admin(&["keys", "filter-config", "--public-origin", &origin], None)?;
        let yaml = envoy::render_minimal(&self.tools, port, self.ports.media, &filter_config)?;
        let path = envoy::write_config(&dir, "envoy.yaml", &yaml)?;
        let proc = envoy::start_envoy(&self.tools, &dir, &path, port, 1, &dir.join("envoy.log"))
            .with_context(|| format!("starting envoy on {}", self.tools.minimal_config()))?;
        Ok((proc, port))
    }
}
