//! Client-side TLS for the issuer's own connections (the PostgreSQL store, the directory):
//! rustls with ring, the server's certificate always verified, against a CA file or the system's
//! roots.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;

/// A client configuration trusting the certificates in `ca_file` (PEM), or the system's roots
/// without one; `what` names the peer in errors ("the database", "the directory").
pub fn client_config(ca_file: Option<&Path>, what: &str) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("reading the CA file {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("the CA file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("a CA certificate: {e}"))?;
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
        return Err(format!("no CA certificate to verify {what} with"));
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth())
}
