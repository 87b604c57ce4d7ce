//! The `[admin_http]` table of the configuration file: the listener of the admin HTTP API and
//! console (`docs/admin-api.md`). `listen` is a TCP address (no table: no admin listener);
//! `tls_cert` and `tls_key` are PEM paths (relative to the configuration file's folder), required
//! unless `listen` is a loopback address; `clients` names the OAuth clients, besides the console
//! ([`CONSOLE_CLIENT`]), whose tokens the API accepts; `token_max_age` is how many seconds after
//! its `iat` a token is accepted ([`DEFAULT_TOKEN_MAX_AGE`], at most [`MAX_TOKEN_MAX_AGE`]).
//! `issuer serve` reads `clients` and `token_max_age` again on SIGHUP; the rest at a restart.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The reserved id of the console, a public client that exists only on the admin listener: no
/// stored client may take it.
pub const CONSOLE_CLIENT: &str = "admin-console";
/// Seconds a token is accepted after its `iat` when `token_max_age` is not given.
pub const DEFAULT_TOKEN_MAX_AGE: u64 = 300;
/// The largest `token_max_age`: admin tokens live minutes.
pub const MAX_TOKEN_MAX_AGE: u64 = 900;

/// The validated `[admin_http]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminHttpConfig {
    /// Where the admin listener listens.
    pub listen: SocketAddr,
    /// The certificate chain and key, PEM (both or neither; required off loopback).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Who may call the API, and for how long after sign-in.
    pub policy: AdminPolicy,
}

/// What the API accepts of a token: reloaded in place on SIGHUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminPolicy {
    /// The clients, besides [`CONSOLE_CLIENT`], whose users' tokens the API accepts.
    pub clients: Vec<String>,
    /// Seconds after its `iat` a token is accepted; also the console's token lifetime.
    pub token_max_age: u64,
}

impl AdminPolicy {
    /// Whether tokens issued to `client` are accepted.
    pub fn accepts_client(&self, client: &str) -> bool {
        client == CONSOLE_CLIENT || self.clients.iter().any(|c| c == client)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    listen: SocketAddr,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    clients: Vec<String>,
    #[serde(default = "default_max_age")]
    token_max_age: u64,
}

fn default_max_age() -> u64 {
    DEFAULT_TOKEN_MAX_AGE
}

/// The table `value`, relative paths taken from `folder`.
pub fn admin_http_of(value: toml::Value, folder: &Path) -> Result<AdminHttpConfig, String> {
    let t: Table = value
        .try_into()
        .map_err(|e: toml::de::Error| e.message().trim_end().to_owned())?;
    if t.token_max_age == 0 || t.token_max_age > MAX_TOKEN_MAX_AGE {
        return Err(format!(
            "`token_max_age` is 1 to {MAX_TOKEN_MAX_AGE} seconds"
        ));
    }
    if let Some(c) = t.clients.iter().find(|c| *c == CONSOLE_CLIENT) {
        return Err(format!(
            "`clients`: {c:?} is the console's own, accepted always"
        ));
    }
    let tls = match (t.tls_cert, t.tls_key) {
        (Some(c), Some(k)) => Some((folder.join(c), folder.join(k))),
        (None, None) if t.listen.ip().is_loopback() => None,
        (None, None) => {
            return Err("`tls_cert` and `tls_key` are required unless `listen` is loopback".into())
        }
        _ => return Err("`tls_cert` and `tls_key` go together".into()),
    };
    Ok(AdminHttpConfig {
        listen: t.listen,
        tls,
        policy: AdminPolicy {
            clients: t.clients,
            token_max_age: t.token_max_age,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AdminHttpConfig, String> {
        admin_http_of(toml::from_str(text).unwrap(), Path::new("/etc/issuer"))
    }

    #[test]
    fn loopback_needs_no_tls_and_defaults_apply() {
        let c = parse("listen = \"127.0.0.1:9443\"").unwrap();
        assert_eq!(c.tls, None);
        assert_eq!(c.policy.token_max_age, DEFAULT_TOKEN_MAX_AGE);
        assert!(c.policy.accepts_client(CONSOLE_CLIENT));
        assert!(!c.policy.accepts_client("other"));
    }

    #[test]
    fn refuses_what_it_must() {
        assert!(parse("listen = \"0.0.0.0:9443\"")
            .unwrap_err()
            .contains("required"));
        assert!(parse("listen = \"127.0.0.1:1\"\ntoken_max_age = 901").is_err());
        assert!(parse("listen = \"127.0.0.1:1\"\ntoken_max_age = 0").is_err());
        assert!(parse("listen = \"127.0.0.1:1\"\nclients = [\"admin-console\"]").is_err());
        assert!(parse("listen = \"127.0.0.1:1\"\nunknown = 1").is_err());
        assert!(parse("listen = \"127.0.0.1:1\"\ntls_cert = \"c.pem\"").is_err());
        let c = parse(
            "listen = \"[::]:1\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\nclients = [\"ops\"]",
        )
        .unwrap();
        assert_eq!(c.tls.unwrap().0, Path::new("/etc/issuer/c.pem"));
        assert!(c.policy.accepts_client("ops"));
    }
}
