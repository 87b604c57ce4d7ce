//! The connection settings of the pool: the URL, the password from a file, and what every
//! session starts with.

use crate::store::{OpenError, Redacted};
use zeroize::Zeroizing;

/// How to reach the database beyond its URL.
#[derive(Default)]
pub struct ConnectOptions<'a> {
    /// CA certificates (PEM) the server's certificate must chain to.
    pub ca_file: Option<&'a std::path::Path>,
    /// The password, when the URL holds none (`--store-password-file`).
    pub password: Option<Zeroizing<Vec<u8>>>,
    /// The URL the change listener connects to, if not the store's (`--store-listen-url`).
    pub listen_url: Option<&'a str>,
}

/// The connection settings of `url` with `password`, and the session settings every
/// connection of the pool starts with: statements outside an explicit transaction are
/// SERIALIZABLE too (CockroachDB's only level; PostgreSQL's default is READ COMMITTED), and the
/// server sends no notices (the migrations' `IF NOT EXISTS` would log one per start).
pub(super) fn pool_config(
    url: &str,
    password: Option<Zeroizing<Vec<u8>>>,
) -> Result<tokio_postgres::Config, OpenError> {
    let mut config: tokio_postgres::Config =
        url.parse().map_err(|e| OpenError::Url(Redacted::new(e)))?;
    if let Some(password) = password {
        if config.get_password().is_some() {
            return Err(OpenError::Config(
                "the PostgreSQL URL holds a password and --store-password-file is given: \
                 use one (the file keeps it out of `ps`)"
                    .into(),
            ));
        }
        config.password(password.as_slice());
    }
    let options = format!(
        "{} -c default_transaction_isolation=serializable -c client_min_messages=warning",
        config.get_options().unwrap_or_default()
    );
    config.options(options.trim_start());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_host_url_keeps_target_session_attrs() {
        use tokio_postgres::config::TargetSessionAttrs;
        let url = "postgres://app@127.0.0.1:5432,127.0.0.1:5433/postgres\
                   ?target_session_attrs=read-write";
        let config = pool_config(url, None).unwrap();
        assert_eq!(config.get_hosts().len(), 2);
        assert_eq!(config.get_ports(), [5432, 5433]);
        assert_eq!(
            config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        let options = config.get_options().unwrap();
        assert!(options.contains("client_min_messages=warning"), "{options}");
    }

    #[test]
    fn a_password_file_and_a_password_in_the_url_exclude_each_other() {
        let pw = || Some(Zeroizing::new(b"pw".to_vec()));
        let config = pool_config("postgres://app@127.0.0.1/postgres", pw()).unwrap();
        assert_eq!(config.get_password(), Some(&b"pw"[..]));
        let both = pool_config("postgres://app:other@127.0.0.1/postgres", pw()).unwrap_err();
        assert!(both.to_string().contains("use one"), "{both}");
        assert!(!both.to_string().contains("other"), "{both}");
    }

    #[test]
    fn a_url_that_does_not_parse_keeps_its_cause_but_never_shows_it() {
        use std::error::Error as _;
        let url = "postgres://app:s3cret@127.0.0.1:notaport/postgres";
        let e = pool_config(url, None).unwrap_err();
        let OpenError::Url(cause) = &e else {
            panic!("{e:?}");
        };
        assert!(
            cause.inner().to_string().contains("invalid"),
            "a typed cause"
        );
        let told = crate::display::Causes(&e).to_string();
        assert!(told.contains("does not parse"), "{told}");
        assert!(
            !told.contains("s3cret") && !format!("{e:?}").contains("s3cret"),
            "{told}"
        );
        assert!(e.source().is_some());
    }
}
