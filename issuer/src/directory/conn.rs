//! Connections to one directory server: a few service-account connections shared by searches
//! (LDAP multiplexes operations on one connection), and a pool of connections used only to bind
//! as the users signing in, one bind at a time each. A connection that failed or closed is
//! dropped and made anew on next use, so a server restart costs nothing but that one attempt.

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_rustls::rustls::ClientConfig;

/// Service-account connections per server.
const SEARCH_CONNECTIONS: usize = 4;
/// Connections binding as users per server, at most (as many binds at once).
const BIND_CONNECTIONS: usize = 32;

/// How to reach one server.
#[derive(Clone)]
pub struct Endpoint {
    /// `ldaps://` or `ldap://` URL.
    pub url: String,
    pub tls: Arc<ClientConfig>,
    pub starttls: bool,
    pub timeout: Duration,
}

impl Endpoint {
    /// A new connection, TLS and certificate checked (the whole of it within the timeout).
    pub async fn connect(&self) -> Result<Ldap, LdapError> {
        let plain_ldap = self.url.starts_with("ldap://");
        let settings = LdapConnSettings::new()
            .set_conn_timeout(self.timeout)
            .set_config(self.tls.clone())
            .set_starttls(self.starttls && plain_ldap);
        let connecting = LdapConnAsync::with_settings(settings, &self.url);
        let (conn, ldap) = tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(LdapError::from)??;
        ldap3::drive!(conn);
        Ok(ldap)
    }
}

/// Service-account connections to one server, bound once and shared by concurrent searches.
pub struct SearchPool {
    endpoint: Endpoint,
    bind_dn: String,
    slots: Vec<tokio::sync::Mutex<Option<Ldap>>>,
    next: AtomicUsize,
}

impl SearchPool {
    pub fn new(endpoint: Endpoint, bind_dn: String) -> Self {
        Self {
            endpoint,
            bind_dn,
            slots: (0..SEARCH_CONNECTIONS)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Where the connections go.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A bound service-account connection (made and bound with `password` if the slot's was
    /// closed), handed out as a [`Pooled`] handle.
    pub async fn get(self: &Arc<Self>, password: &str) -> Result<Pooled, LdapError> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut held = self.slots[slot].lock().await;
        let open = held.as_mut().is_some_and(|l| !l.is_closed());
        let ldap = match held.as_ref() {
            Some(ldap) if open => ldap.clone(),
            _ => {
                *held = None;
                let mut ldap = self.endpoint.connect().await?;
                ldap.with_timeout(self.endpoint.timeout)
                    .simple_bind(&self.bind_dn, password)
                    .await?
                    .success()?;
                *held = Some(ldap.clone());
                ldap
            }
        };
        Ok(Pooled {
            ldap,
            pool: self.clone(),
            slot,
            answered: false,
        })
    }
}

/// A handle on a pooled service-account connection. Dropped before [`Pooled::release`] (an
/// operation failed or timed out, or the request went away mid-operation), it drops the slot's
/// connection: one that stalls without closing (a paused server, a firewall's silent drop) is
/// never used again.
pub struct Pooled {
    ldap: Ldap,
    pool: Arc<SearchPool>,
    slot: usize,
    answered: bool,
}

impl Pooled {
    /// The connection.
    pub fn ldap(&mut self) -> &mut Ldap {
        &mut self.ldap
    }

    /// Every operation answered: the connection stays in the pool. Returns `outcome`.
    pub fn release<T>(mut self, outcome: T) -> T {
        self.answered = true;
        outcome
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let (pool, slot) = (self.pool.clone(), self.slot);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Some(s) = pool.slots.get(slot) {
                    *s.lock().await = None;
                }
            });
        }
    }
}

/// Connections that bind as users: each used by one bind at a time, kept for the next bind for
/// at most [`BIND_IDLE`] (a connection idle longer may have been dropped silently on the way).
pub struct BindPool {
    endpoint: Endpoint,
    idle: Mutex<Vec<(Ldap, Instant)>>,
    permits: Semaphore,
}

/// How long a bind connection is kept idle.
const BIND_IDLE: Duration = Duration::from_secs(30);

/// How a user's bind came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindOutcome {
    Accepted,
    /// Any other answer: 49 (invalidCredentials: a wrong password, or an account AD refuses:
    /// locked, expired, disabled), 48, 53… Only busy (51) and unavailable (52) are the server's
    /// failure.
    Refused,
}

impl BindPool {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(BIND_CONNECTIONS),
        }
    }

    /// Binds as `dn` with `password` (not empty: the caller checks) on a connection of its own;
    /// sets `sent` as the bind goes out (after the wait for a connection).
    pub async fn bind(
        &self,
        dn: &str,
        password: &str,
        sent: &AtomicBool,
    ) -> Result<BindOutcome, LdapError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| LdapError::EndOfStream)?;
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|(_, since)| since.elapsed() < BIND_IDLE);
            idle.pop()
        };
        let mut ldap = match idle {
            Some((mut l, _)) => {
                if l.is_closed() {
                    self.endpoint.connect().await?
                } else {
                    l
                }
            }
            None => self.endpoint.connect().await?,
        };
        sent.store(true, Ordering::Relaxed);
        let result = ldap
            .with_timeout(self.endpoint.timeout)
            .simple_bind(dn, password)
            .await?;
        let outcome = match result.rc {
            0 => BindOutcome::Accepted,
            51 | 52 => return Err(LdapError::from(result)),
            _ => BindOutcome::Refused,
        };
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((ldap, Instant::now()));
        Ok(outcome)
    }
}
