//! The listeners `issuer serve` opens before it serves (part of the `issuer` binary): the TLS
//! acceptor from the operator's PEM files (read again on a reload; the key file through the
//! check of secret files, `issuer::secret_file`), the HTTP listener of `--listen` (TCP, or the
//! Unix socket, `issuer::server::listener`), and the admin socket in the data dir.

use anyhow::Context as _;
use issuer::admin;
use issuer::http::AppSlot;
use issuer::server::listener::bind_unix;
use issuer::server::{serve_http, ListenAddr};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// The server's certificate and key, read from their PEM files at start and again on a reload
/// (SIGHUP): connections after the reload get the new certificate, those open keep theirs.
#[derive(Debug)]
pub struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificates {
    /// Reads the files again; on any error (the key file failing its check too) the certificate
    /// and key in use stay.
    pub fn reload(&self) -> anyhow::Result<()> {
        let fresh = Arc::new(certified_key(&self.cert, &self.key)?);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// The certificate chain and key of PEM files, checked to be a pair; the key file must pass the
/// check of secret files (0600 or stricter, the issuer's user's or root's, in a folder only they
/// may write).
fn certified_key(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificate {}", cert.display()))?;
    let pem = issuer::secret_file::read("TLS key", key)?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .with_context(|| format!("parsing private key {}", key.display()))?;
    CertifiedKey::from_der(certs, key, &provider())
        .context("certificate and key do not form a usable pair")
}

/// A TLS acceptor from PEM files (certificate chain, private key), and its certificates to
/// reload.
pub fn tls_acceptor(cert: &Path, key: &Path) -> anyhow::Result<(TlsAcceptor, Arc<Certificates>)> {
    let certificates = Arc::new(Certificates {
        current: RwLock::new(Arc::new(certified_key(cert, key)?)),
        cert: cert.to_owned(),
        key: key.to_owned(),
    });
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(certificates.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), certificates))
}

/// Binds the admin socket in the data dir (0600), replacing a stale one.
pub fn bind_admin_socket(dir: &Path) -> anyhow::Result<UnixListener> {
    let path = dir.join(admin::SOCKET_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing stale {}", path.display())),
    }
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Binds `--listen` (a TCP address, or the Unix socket with its folder checked) and serves HTTP
/// on it until `shutdown`: the server's task, and the address as bound (port 0 resolved).
pub async fn serve_http_on(
    listen: &ListenAddr,
    slot: AppSlot,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(JoinHandle<()>, ListenAddr)> {
    match listen {
        ListenAddr::Tcp(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            let bound = ListenAddr::Tcp(listener.local_addr()?);
            let server = serve_http(slot, listener, tls, shutdown);
            Ok((tokio::spawn(server), bound))
        }
        ListenAddr::Unix(path) => {
            let socket = bind_unix(path).with_context(|| format!("binding {listen}"))?;
            let server = serve_http(slot, socket, tls, shutdown);
            Ok((tokio::spawn(server), listen.clone()))
        }
    }
}
