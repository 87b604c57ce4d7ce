//! Client-side TLS for the issuer's own connections (the PostgreSQL store, the directory):
//! rustls with ring, the server's certificate always verified, against a CA file or the system's
//! roots.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;

/// Why no client configuration could be made; each variant keeps its cause.
#[derive(Debug, thiserror::Error)]
pub enum TlsClientError {
    /// The CA file cannot be opened or read.
    #[error("reading the CA file {path}")]
    Read {
        path: String,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// An entry of the CA file is no PEM certificate.
    #[error("the CA file {path}")]
    Pem {
        path: String,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// rustls refuses a certificate of the CA file.
    #[error("a CA certificate")]
    Certificate(#[source] rustls::Error),
    /// Neither the CA file nor the system holds a certificate to verify the peer with.
    #[error("no CA certificate to verify {0} with")]
    NoRoots(String),
    /// The crypto provider offers no protocol version rustls accepts.
    #[error("TLS protocol versions")]
    Versions(#[source] rustls::Error),
}

/// A client configuration trusting the certificates in `ca_file` (PEM), or the system's roots
/// without one; `what` names the peer in errors ("the database", "the directory").
pub fn client_config(
    ca_file: Option<&Path>,
    what: &str,
) -> Result<rustls::ClientConfig, TlsClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let name = || path.display().to_string();
            let certs =
                CertificateDer::pem_file_iter(path).map_err(|source| TlsClientError::Read {
                    path: name(),
                    source,
                })?;
            for cert in certs {
                let cert = cert.map_err(|source| TlsClientError::Pem {
                    path: name(),
                    source,
                })?;
                roots.add(cert).map_err(TlsClientError::Certificate)?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system certificate rustls cannot use is skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err(TlsClientError::NoRoots(what.to_owned()));
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsClientError::Versions)?
    .with_root_certificates(roots)
    .with_no_client_auth())
}
