//! `issuer directory check` and `issuer directory test`: each server taken step by step (reached,
//! TLS and its certificate, the service bind, the search base), and one user's sign-in with the
//! step that failed named. Nothing here prints a password.

use super::{Directory, DirectoryUser, Step};
use crate::config::directory::LdapUrl;
use ldap3::Scope;
use serde::Serialize;

/// One step's outcome: `ok`, or what went wrong; `skipped` after a failed step.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StepReport {
    Ok,
    /// No TLS: `ldap://` to a loopback host without StartTLS.
    Plain,
    Failed(String),
    Skipped,
}

impl StepReport {
    fn is_ok(&self) -> bool {
        matches!(self, Self::Ok | Self::Plain)
    }
}

/// `directory check` of one server.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCheck {
    pub url: String,
    /// A TCP connection to the host and port.
    pub reachable: StepReport,
    /// The TLS handshake with the certificate verified (LDAPS or StartTLS).
    pub tls: StepReport,
    /// The service account's bind.
    pub service_bind: StepReport,
    /// A base-scope read of `base_dn`.
    pub search_base: StepReport,
}

impl ServerCheck {
    /// Every step passed.
    pub fn ok(&self) -> bool {
        [
            &self.reachable,
            &self.tls,
            &self.service_bind,
            &self.search_base,
        ]
        .iter()
        .all(|s| s.is_ok())
    }
}

/// `directory test`'s failure: the step, and each server's error when none answered.
#[derive(Debug, Clone, Serialize)]
pub struct TestFailure {
    /// `no such user`, `more than one entry matches the name`, `bind refused`, `disabled`,
    /// `empty password` or `server down`.
    pub error: String,
    /// Servers that failed, with why.
    pub servers: Vec<(String, String)>,
}

/// The `host:port` of a configured (so valid) LDAP URL.
fn host_port(url: &str) -> String {
    LdapUrl::parse(url).map_or_else(|| url.to_owned(), |u| u.host_port())
}

impl Directory {
    /// Checks every server, step by step.
    pub async fn check(&self) -> Vec<ServerCheck> {
        let mut out = Vec::new();
        for server in &self.servers {
            out.push(self.check_one(server).await);
        }
        out
    }

    async fn check_one(&self, server: &super::Server) -> ServerCheck {
        let mut report = ServerCheck {
            url: server.url.clone(),
            reachable: StepReport::Skipped,
            tls: StepReport::Skipped,
            service_bind: StepReport::Skipped,
            search_base: StepReport::Skipped,
        };
        let tcp = tokio::net::TcpStream::connect(host_port(&server.url));
        report.reachable = match tokio::time::timeout(self.timeout, tcp).await {
            Ok(Ok(_)) => StepReport::Ok,
            Ok(Err(e)) => StepReport::Failed(e.to_string()),
            Err(_) => StepReport::Failed(format!("no answer within {:?}", self.timeout)),
        };
        if !report.reachable.is_ok() {
            return report;
        }
        let tls = server.url.starts_with("ldaps://") || self.config.starttls;
        let mut ldap = match server.search.endpoint().connect().await {
            Ok(l) => l,
            Err(e) => {
                report.tls = StepReport::Failed(e.to_string());
                return report;
            }
        };
        report.tls = if tls {
            StepReport::Ok
        } else {
            StepReport::Plain
        };
        let bind = ldap
            .with_timeout(self.timeout)
            .simple_bind(&self.config.bind_dn, self.config.bind_password.expose())
            .await
            .and_then(|r| r.success());
        report.service_bind = match bind {
            Ok(_) => StepReport::Ok,
            Err(e) => {
                report.service_bind = StepReport::Failed(e.to_string());
                return report;
            }
        };
        let base = ldap
            .with_timeout(self.timeout)
            .search(
                &self.config.base_dn,
                Scope::Base,
                "(objectClass=*)",
                vec!["1.1"],
            )
            .await
            .and_then(|r| r.success());
        report.search_base = match base {
            Ok((entries, _)) if !entries.is_empty() => StepReport::Ok,
            Ok(_) => StepReport::Failed("the base DN was not found".into()),
            Err(e) => StepReport::Failed(e.to_string()),
        };
        let _ = ldap.unbind().await;
        report
    }

    /// Signs `username` in as `issuer serve` would, server by server, naming the failing step.
    pub async fn test(&self, username: &str, password: &str) -> Result<DirectoryUser, TestFailure> {
        if password.is_empty() {
            return Err(TestFailure {
                error: super::Refusal::EmptyPassword.to_string(),
                servers: vec![],
            });
        }
        let mut failed = Vec::new();
        let bind = super::Bind {
            password,
            guard: &super::Unguarded,
            sent: Default::default(),
        };
        for server in &self.servers {
            let step = match self.read_user(server, username, Some(&bind)).await {
                Ok(user) => return Ok(user),
                Err(step) => step,
            };
            match step {
                Step::Refused(why, _) => {
                    return Err(TestFailure {
                        error: why.to_string(),
                        servers: failed,
                    })
                }
                Step::Failed(why) => failed.push((server.url.clone(), why)),
            }
        }
        Err(TestFailure {
            error: "server down".into(),
            servers: failed,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_and_port_of_urls() {
        assert_eq!(
            super::host_port("ldaps://dc1.example.org"),
            "dc1.example.org:636"
        );
        assert_eq!(super::host_port("ldap://127.0.0.1:3890/"), "127.0.0.1:3890");
        assert_eq!(super::host_port("ldap://[::1]"), "[::1]:389");
        assert_eq!(super::host_port("ldaps://[::1]:6360"), "[::1]:6360");
    }
}
