//! Directory sign-in: users of an Active Directory or another LDAP directory sign in with the
//! password grant (`docs/directory.md`).
//!
//! [`Directory::sign_in`] finds the user as the service account, binds as the user over a
//! connection of its own ([`conn`]), and reads the roles (nested groups included) and claims
//! ([`query`]); [`Directory::lookup`] re-reads a user without a password (refresh, recheck).
//! Servers are tried in the configured order; one that fails cools down ([`servers`]), so a dead
//! server costs a request at most one timeout, and when none answers the caller gets
//! [`DirectoryError::Unavailable`], never the user's fault. A server's timeout is spent on the
//! operations asked of it ([`Budget`]), not on the bind guard's work between them, so a slow
//! guard never makes a server that answered look dead. Nothing here knows HTTP or the store.

mod budget;
mod conn;
pub mod diagnose;
mod query;
pub mod servers;

use crate::config::DirectoryConfig;
use crate::tls_client::TlsClientError;
use budget::Budget;
use conn::{BindOutcome, BindPool, Endpoint, SearchPool};
use ldap3::LdapError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use query::Found;
pub use query::{normal_dn, user_filter};
use servers::{Change, Health};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A user the directory vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryUser {
    /// The entry's DN.
    pub dn: String,
    /// The user's one name in the issuer: the entry's `name_attribute`, never the spelling that
    /// signed in.
    pub name: String,
    /// What identifies the entry for good ([`EntryRef::key`]).
    pub key: String,
    /// Roles from `[directory.roles]`, sorted.
    pub roles: Vec<String>,
    /// Claims from `[directory.claims]`, as (type, value).
    pub claims: Vec<(String, String)>,
    /// The URL of the server that answered.
    pub server: String,
}

/// Why the directory refused a user; every one is `invalid_grant` to the client, alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no such user")]
    NoSuchUser,
    #[error("more than one entry matches the name")]
    Ambiguous,
    #[error("the account is disabled or locked")]
    Disabled,
    #[error("the password was refused (bind refused)")]
    WrongPassword,
    #[error("an empty password (never sent to the directory)")]
    EmptyPassword,
    /// The entry met the lock-out bound: no bind was sent.
    #[error("held back: too many refused sign-ins of this entry")]
    Held,
}

impl Refusal {
    /// Label for logs and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NoSuchUser => "no_such_user",
            Self::Ambiguous => "ambiguous",
            Self::Disabled => "disabled",
            Self::WrongPassword => "bind_refused",
            Self::EmptyPassword => "empty_password",
            Self::Held => "held",
        }
    }
}

/// The entry a name found, when the directory refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// What identifies the entry for good: `id:` and its `id_attribute` (`entryUUID`,
    /// `objectGUID` in hex), or `dn:` and its normalised DN where that is unreadable. Every
    /// spelling of a name that finds the entry finds this key.
    pub key: String,
    /// The user's name in the issuer, if the entry has a usable one.
    pub name: Option<String>,
}

/// What a directory operation came to, when not a user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// The directory answered: this user does not sign in; `entry` is the entry the name
    /// found, if it found one.
    #[error("{why}")]
    Refused {
        why: Refusal,
        entry: Option<EntryRef>,
    },
    /// No server answered within its timeout.
    #[error("no directory server answered")]
    Unavailable,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpLabels {
    server: String,
}

/// The directory's metrics, registered by the caller with its registry.
#[derive(Clone, Debug, Default)]
pub struct DirectoryMetrics {
    operations: Family<ServerLabels, Counter>,
    up: Family<UpLabels, Gauge>,
}

impl DirectoryMetrics {
    /// Adds the metrics to `registry`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "directory_operations",
            "Directory sign-ins and lookups by server and outcome (answered or failed)",
            self.operations.clone(),
        );
        registry.register(
            "directory_server_up",
            "1 while a directory server answers, 0 while it cools down after a failure",
            self.up.clone(),
        );
    }
}

/// One server: its URL and connections.
struct Server {
    url: String,
    search: Arc<SearchPool>,
    binds: BindPool,
}

/// The directory of `[directory]`: its servers, their health, and the settings.
pub struct Directory {
    config: Arc<DirectoryConfig>,
    servers: Vec<Server>,
    health: Health,
    timeout: Duration,
    metrics: DirectoryMetrics,
    /// Parents of nested groups, read lately.
    parents: query::GroupParents,
}

/// Asked before a user's bind with the entry's key ([`EntryRef::key`]): the bind is counted
/// against the entry before it is sent, in one step with the check, so that binds of one entry
/// under any spelling, however many at once, never exceed the bound; `false` holds it back
/// (the issuer's bound on what reaches the directory's lock-out count).
#[async_trait::async_trait]
pub trait BindGuard: Send + Sync {
    async fn take_bind(&self, entry: &str) -> bool;
}

/// A guard that lets every bind go (`issuer directory test`, which an operator runs by hand).
pub struct Unguarded;

#[async_trait::async_trait]
impl BindGuard for Unguarded {
    async fn take_bind(&self, _entry: &str) -> bool {
        true
    }
}

/// Where one server's attempt ended, when not with an answer.
enum Step {
    /// Refused, with the entry the name found, if any.
    Refused(Refusal, Option<EntryRef>),
    /// The server failed (down, timed out, or an error that is not about the user).
    Failed(String),
}

impl From<LdapError> for Step {
    fn from(e: LdapError) -> Self {
        Step::Failed(e.to_string())
    }
}

impl Directory {
    /// The directory of a validated `[directory]` table; no connection is made yet.
    pub fn new(config: DirectoryConfig) -> Result<Self, TlsClientError> {
        Self::with_metrics(config, DirectoryMetrics::default())
    }

    /// The directory of a new `[directory]` table in place of `old` (a reload): the same metrics,
    /// without the servers no longer named.
    pub fn replacing(config: DirectoryConfig, old: &Directory) -> Result<Self, TlsClientError> {
        let new = Self::with_metrics(config, old.metrics.clone())?;
        for s in &old.servers {
            if !new.config.urls.contains(&s.url) {
                let labels = UpLabels {
                    server: s.url.clone(),
                };
                new.metrics.up.remove(&labels);
            }
        }
        Ok(new)
    }

    fn with_metrics(
        config: DirectoryConfig,
        metrics: DirectoryMetrics,
    ) -> Result<Self, TlsClientError> {
        let tls = crate::tls_client::client_config(config.ca_file.as_deref(), "the directory")?;
        let tls = Arc::new(tls);
        let timeout = Duration::from_millis(config.timeout_ms);
        let servers = config
            .urls
            .iter()
            .map(|url| {
                let endpoint = Endpoint {
                    url: url.clone(),
                    tls: tls.clone(),
                    starttls: config.starttls,
                    timeout,
                };
                Server {
                    url: url.clone(),
                    search: Arc::new(SearchPool::new(endpoint.clone(), config.bind_dn.clone())),
                    binds: BindPool::new(endpoint),
                }
            })
            .collect::<Vec<_>>();
        let directory = Self {
            health: Health::new(servers.len(), timeout),
            config: Arc::new(config),
            servers,
            timeout,
            metrics,
            parents: Default::default(),
        };
        for s in &directory.servers {
            directory.set_up(&s.url, 1);
        }
        Ok(directory)
    }

    /// The metrics, for the caller's registry.
    pub fn metrics(&self) -> &DirectoryMetrics {
        &self.metrics
    }

    /// Seconds between rechecks of signed-in users (`recheck_seconds`).
    pub fn recheck_every(&self) -> Duration {
        Duration::from_secs(self.config.recheck_seconds.max(1))
    }

    /// Seconds between probes of every server (`probe_seconds`).
    pub fn probe_every(&self) -> Duration {
        Duration::from_secs(self.config.probe_seconds.max(1))
    }

    /// Asks every server at once whether it answers (the service account's connection and a read
    /// of the root DSE, within the timeout) and records each outcome as a sign-in's would: a
    /// server that answers is used again at once, one that fails cools down. Every issuer so
    /// reports the same `directory_server_up`, with sign-ins or without.
    pub async fn probe(&self) {
        let probes = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, server)| async move {
                let ms = self.timeout.as_millis();
                let outcome = tokio::time::timeout(self.timeout, self.probe_one(server))
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {ms} ms")));
                (i, outcome)
            });
        for (i, outcome) in futures_util::future::join_all(probes).await {
            match outcome {
                Ok(()) => self.mark_answered(i),
                Err(why) => self.mark_failed(i, &why),
            }
        }
    }

    async fn probe_one(&self, server: &Server) -> Result<(), String> {
        let password = self.config.bind_password.expose();
        let mut conn = server
            .search
            .get(password)
            .await
            .map_err(|e| e.to_string())?;
        let root_dse = conn
            .ldap()
            .with_timeout(self.timeout)
            .search("", ldap3::Scope::Base, "(objectClass=*)", vec!["1.1"])
            .await
            .and_then(|r| r.success());
        root_dse.map_err(|e| e.to_string())?;
        conn.release(Ok(()))
    }

    /// Signs `username` in with `password`: found by the service account, bound as over a
    /// connection of its own. An empty password is refused here and never sent.
    ///
    /// `guard` is asked before the bind. A bind that got no answer within the timeout is not
    /// retried on the next server (503 instead): the first may have counted the password, and
    /// a wrong password would count twice against the user. Any other failure is retried.
    pub async fn sign_in(
        &self,
        username: &str,
        password: &str,
        guard: &dyn BindGuard,
    ) -> Result<DirectoryUser, DirectoryError> {
        if password.is_empty() {
            return Err(DirectoryError::Refused {
                why: Refusal::EmptyPassword,
                entry: None,
            });
        }
        let bind = Bind {
            password,
            guard,
            sent: AtomicBool::new(false),
        };
        self.on_servers(Some(&bind.sent), |s| {
            self.read_user(s, username, Some(&bind))
        })
        .await
    }

    /// Re-reads `username` without a password: still there, enabled, and with which roles.
    pub async fn lookup(&self, username: &str) -> Result<DirectoryUser, DirectoryError> {
        self.on_servers(None, |s| self.read_user(s, username, None))
            .await
    }

    /// Runs `attempt` on each server in turn until one answers (a user or a refusal), each
    /// within its [`Budget`]; records each server's health.
    async fn on_servers<'a, F, Fut>(
        &'a self,
        bind_sent: Option<&AtomicBool>,
        attempt: F,
    ) -> Result<DirectoryUser, DirectoryError>
    where
        F: Fn(&'a Server) -> Fut,
        Fut: std::future::Future<Output = Result<DirectoryUser, Step>> + 'a,
    {
        for i in self.health.order(Instant::now()) {
            let server = &self.servers[i];
            match attempt(server).await {
                Ok(user) => {
                    self.answered(i);
                    return Ok(user);
                }
                Err(Step::Refused(why, entry)) => {
                    self.answered(i);
                    return Err(DirectoryError::Refused { why, entry });
                }
                Err(Step::Failed(why)) => {
                    self.failed(i, &why);
                    if bind_sent.is_some_and(|b| b.load(Ordering::Relaxed)) {
                        break;
                    }
                }
            }
        }
        Err(DirectoryError::Unavailable)
    }

    fn answered(&self, i: usize) {
        self.count(&self.servers[i].url, "answered");
        self.mark_answered(i);
    }

    fn failed(&self, i: usize, why: &str) {
        self.count(&self.servers[i].url, "failed");
        self.mark_failed(i, why);
    }

    /// Server `i` answered (an operation or a probe): used again at once.
    fn mark_answered(&self, i: usize) {
        let url = &self.servers[i].url;
        if self.health.answered(i) == Change::CameBack {
            tracing::info!(
                server = url.as_str(),
                "directory server answers again (failback)"
            );
            self.set_up(url, 1);
        }
    }

    /// Server `i` failed (an operation or a probe): it cools down.
    fn mark_failed(&self, i: usize, why: &str) {
        let url = &self.servers[i].url;
        match self.health.failed(i, Instant::now()) {
            Change::FellOver => {
                tracing::warn!(
                    server = url.as_str(),
                    error = why,
                    "directory server failed; trying the next one, this one after a cool-down"
                );
                self.set_up(url, 0);
            }
            _ => tracing::debug!(
                server = url.as_str(),
                error = why,
                "directory server failed again"
            ),
        }
    }

    fn set_up(&self, url: &str, up: i64) {
        let labels = UpLabels {
            server: url.to_owned(),
        };
        self.metrics.up.get_or_create(&labels).set(up);
    }

    fn count(&self, server: &str, outcome: &'static str) {
        self.metrics
            .operations
            .get_or_create(&ServerLabels {
                server: server.to_owned(),
                outcome,
            })
            .inc();
    }

    /// On one server, within a [`Budget`] of [`Directory::timeout`]: the user's entry, the bind
    /// when a password is given, groups and claims. The service-account connection is dropped
    /// unless every operation on it answered.
    async fn read_user(
        &self,
        server: &Server,
        username: &str,
        bind: Option<&Bind<'_>>,
    ) -> Result<DirectoryUser, Step> {
        let config = &self.config;
        let mut budget = Budget::new(self.timeout);
        let mut conn = budget
            .spend(server.search.get(config.bind_password.expose()))
            .await?;
        let found = budget
            .spend(query::find_user(
                conn.ldap(),
                config,
                self.timeout,
                username,
            ))
            .await?;
        let entry = match found {
            Found::One(entry) => entry,
            Found::None => return Err(conn.release(Step::Refused(Refusal::NoSuchUser, None))),
            Found::Many => return Err(conn.release(Step::Refused(Refusal::Ambiguous, None))),
        };
        let found = EntryRef {
            key: entry.key(config),
            name: entry.name(config).map(str::to_owned),
        };
        if entry.disabled(config.kind) {
            return Err(conn.release(Step::Refused(Refusal::Disabled, Some(found))));
        }
        let Some(name) = found.name.clone() else {
            tracing::warn!(
                dn = entry.dn.as_str(),
                attribute = config.name_attribute.as_str(),
                "directory entry refused: no value of its name attribute the issuer can use"
            );
            return Err(conn.release(Step::Refused(Refusal::NoSuchUser, Some(found))));
        };
        if let Some(bind) = bind {
            // The guard's own work (a write to the issuer's store) is not the server's time.
            if !bind.guard.take_bind(&found.key).await {
                return Err(conn.release(Step::Refused(Refusal::Held, Some(found))));
            }
            // `sent` is set once the bind is on its way, and left set only if it got no answer
            // (by either timer), when the server may have counted a wrong password: then the
            // next server is not asked. An answer, or an error back (the server busy, the
            // connection broken), lets it be asked.
            let outcome = budget
                .within(server.binds.bind(&entry.dn, bind.password, &bind.sent))
                .await?;
            if !matches!(outcome, Err(LdapError::Timeout { .. })) {
                bind.sent.store(false, Ordering::Relaxed);
            }
            if outcome? == BindOutcome::Refused {
                return Err(conn.release(Step::Refused(Refusal::WrongPassword, Some(found))));
            }
        }
        let groups = budget
            .spend(query::groups(
                conn.ldap(),
                config,
                self.timeout,
                &entry,
                &self.parents,
            ))
            .await?;
        conn.release(());
        Ok(DirectoryUser {
            roles: query::roles(config, &groups),
            claims: entry.claims(config),
            name,
            key: found.key,
            dn: entry.dn,
            server: server.url.clone(),
        })
    }
}

/// A user's password and what goes with its bind.
struct Bind<'a> {
    password: &'a str,
    guard: &'a dyn BindGuard,
    /// Set once the bind is sent ([`BindPool::bind`]).
    sent: AtomicBool,
}
