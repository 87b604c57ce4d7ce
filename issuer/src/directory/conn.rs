//! Connections to one directory server: a few service-account connections shared by searches
//! (LDAP multiplexes operations on one connection), and a pool of connections used only to bind
//! as the users signing in, one bind at a time each. A connection that failed or closed is
//! dropped and made anew on next use, so a server restart costs nothing but that one attempt.

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
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

    /// A handle on a bound service-account connection (made and bound with `password` if the
    /// slot's was closed), and the slot to pass to [`SearchPool::discard`] if it fails.
    pub async fn get(&self, password: &str) -> Result<(Ldap, usize), LdapError> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut held = self.slots[slot].lock().await;
        if let Some(ldap) = held.as_mut() {
            if !ldap.is_closed() {
                return Ok((ldap.clone(), slot));
            }
        }
        *held = None;
        let mut ldap = self.endpoint.connect().await?;
        ldap.with_timeout(self.endpoint.timeout)
            .simple_bind(&self.bind_dn, password)
            .await?
            .success()?;
        *held = Some(ldap.clone());
        Ok((ldap, slot))
    }

    /// Drops the connection of `slot` after a failure: the next search makes a new one.
    pub async fn discard(&self, slot: usize) {
        if let Some(s) = self.slots.get(slot) {
            *s.lock().await = None;
        }
    }
}

/// Connections that bind as users: each used by one bind at a time, kept for the next bind.
pub struct BindPool {
    endpoint: Endpoint,
    idle: Mutex<Vec<Ldap>>,
    permits: Semaphore,
}

/// How a user's bind came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindOutcome {
    Accepted,
    /// Result code 49, invalidCredentials: wrong password, or an account the server refuses
    /// (AD: locked, expired, disabled).
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

    /// Binds as `dn` with `password` (not empty: the caller checks) on a connection of its own.
    pub async fn bind(&self, dn: &str, password: &str) -> Result<BindOutcome, LdapError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| LdapError::EndOfStream)?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut ldap = match idle {
            Some(mut l) => {
                if l.is_closed() {
                    self.endpoint.connect().await?
                } else {
                    l
                }
            }
            None => self.endpoint.connect().await?,
        };
        let result = ldap
            .with_timeout(self.endpoint.timeout)
            .simple_bind(dn, password)
            .await?;
        let outcome = match result.rc {
            0 => BindOutcome::Accepted,
            49 => BindOutcome::Refused,
            _ => return Err(LdapError::from(result)),
        };
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ldap);
        Ok(outcome)
    }
}
