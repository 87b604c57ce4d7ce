//! TLS to the database: [`crate::tls_client`], the server's certificate verified against a CA
//! file or the system's roots.

use crate::store::OpenError;
use std::path::Path;

/// The connector for tokio-postgres.
pub(super) fn connector(
    ca_file: Option<&Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, OpenError> {
    let config =
        crate::tls_client::client_config(ca_file, "the database").map_err(OpenError::Tls)?;
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
