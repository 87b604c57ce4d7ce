//! TLS to the database: rustls (ring), the server's certificate verified against a CA file or the
//! system's roots.

use crate::store::OpenError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;

/// The connector for tokio-postgres.
pub(super) fn connector(
    ca_file: Option<&Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, OpenError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
                OpenError::Config(format!("reading the CA file {}: {e}", path.display()))
            })?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    OpenError::Config(format!("the CA file {}: {e}", path.display()))
                })?;
                roots
                    .add(cert)
                    .map_err(|e| OpenError::Config(format!("a CA certificate: {e}")))?;
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
        return Err(OpenError::Config(
            "no CA certificate to verify the database with (--store-ca-file)".into(),
        ));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| OpenError::Config(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
