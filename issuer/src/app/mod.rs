//! The issuer's state and the logic of each endpoint, independent of sockets and of HTTP: an
//! endpoint takes a [`Call`] and returns a domain value or an [`ApiError`], which `crate::http`
//! renders. Each grant of the token endpoint is a value of its own module holding only what it
//! uses ([`flow_password::PasswordGrant`], [`flow_refresh::RefreshGrant`],
//! [`flow_client_credentials::ClientCredentialsGrant`]) and says what to mint ([`Issue`]); the
//! token endpoint mints it. Revocation and introspection are in [`revocation`], the edge feed in
//! [`edge`]. This module imports only the store below it.

mod admin_auth;
mod audit_events;
mod call;
pub mod client_auth_throttle;
mod client_cache;
mod directory_upkeep;
mod directory_users;
mod dpop;
mod edge;
pub mod edge_book;
mod error;
pub mod feed_wait;
mod flow_client_credentials;
mod flow_password;
mod flow_refresh;
mod flow_token_exchange;
mod grant_dispatch;
mod revocation;
mod revoke_budget;
mod vendor_clients;

use crate::metrics::Metrics;
use crate::passwords::PasswordChecker;
use crate::store::revocation::{Cursor, RevocationSet, FAMILY_TAG_LEN};
use crate::store::{ClientRecord, RefreshPolicy, RefreshRejection, Store, StoreError};
use crate::throttle::Throttle;
use serde_json::json;
use shared::grant::parse_token_request;
use shared::token::{self, Identity, TokenBody};
use shared::{Key, KeyRing};
use std::sync::{Arc, RwLock};
use zeroize::Zeroizing;

pub use admin_auth::AdminCaller;
pub use call::{client_credentials, Call, Peer};
pub use dpop::DpopSettings;
pub use error::ApiError;

/// Seconds since the Unix epoch: the issuer's clock. The app reads it here and passes the time
/// down; the layers below it (store, services) take the time as an argument.
pub fn now() -> u64 {
    shared::time::unix_seconds(std::time::SystemTime::now())
}

/// Milliseconds since the Unix epoch, by the same clock as [`now`].
fn now_ms() -> u64 {
    shared::time::unix_millis(std::time::SystemTime::now())
}

/// Settings of a running issuer.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Access token lifetime in seconds (`expires_in`).
    pub access_ttl: u64,
    /// Refresh token lifetimes and retry window.
    pub refresh: RefreshPolicy,
    /// Peers whose `X-Forwarded-For` is believed; empty: the header is ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The issuer identifier and base of the endpoint URLs in the metadata document.
    pub public_url: String,
    /// The issuer itself serves HTTPS (the edge feed is then served to any address).
    pub tls: bool,
    /// Revocations one client may record a minute, and as a burst (`--revocations-per-minute`).
    pub revocations_per_minute: u32,
    /// Seconds after which an edge that stopped polling is dropped from the list of edges.
    pub edge_forget_after: u64,
    /// The store is shared with other issuers and admin commands (PostgreSQL): a client record
    /// is read afresh before a token is minted for it.
    pub shared_store: bool,
    /// DPoP at the token endpoint.
    pub dpop: DpopSettings,
    /// Edge feed requests that wait for news.
    pub feed: feed_wait::FeedWaitSettings,
}

/// Days the audit trail keeps an event by default (`--audit-retention-days`).
pub const AUDIT_RETENTION_DAYS: u64 = 365;

/// The default of [`Settings::revocations_per_minute`].
pub const REVOCATIONS_PER_MINUTE: u32 = 60;

/// Everything the handlers share: the store, what of it is kept in memory, the settings, and
/// each grant's flow.
pub struct App {
    /// Where clients, users, keys, refresh token families, revocations, edges and the audit
    /// trail are kept: the embedded store or PostgreSQL, shared with the admin commands.
    pub store: Arc<dyn Store>,
    /// The signing and verification keys as last read from the store ([`App::reload_keys`]).
    keys: RwLock<Arc<KeyRing>>,
    /// How this issuer was started: lifetimes, trusted proxies, public URL, DPoP and edge feed
    /// bounds ([`Settings`]).
    pub settings: Settings,
    /// The password grant: the back-off, local and directory users.
    password: flow_password::PasswordGrant,
    /// The refresh grant: rotation of refresh token families.
    refresh: flow_refresh::RefreshGrant,
    /// The client credentials grant, with impersonation.
    client_credentials: flow_client_credentials::ClientCredentialsGrant,
    /// Client records read from the store, kept a second ([`client_cache::CLIENT_TTL`]).
    clients: client_cache::ClientCache,
    /// The trusted vendors and what their clients' secrets matched ([`vendor_clients`]).
    vendor: vendor_clients::VendorState,
    /// The back-off of failed client authentication, per source address.
    client_auth: client_auth_throttle::ClientAuthThrottle,
    /// Revocations of access tokens in force, read from the store every second.
    revoked: RwLock<RevocationSet>,
    /// The store's latest revocation as of the read `revoked` was last given (written while its
    /// lock is held): every revocation recorded up to it is in the set.
    revoked_through: std::sync::Mutex<Cursor>,
    /// What each client may still record in revocations.
    revoke_budget: revoke_budget::RevokeBudget,
    /// What the edges said of themselves in their polls, until written to the store.
    edges: edge_book::EdgeBook,
    /// The edge feed's change signal and its waiting requests.
    feed: feed_wait::FeedWaits,
    /// When the store last answered the periodic key ring read (seconds since the epoch).
    store_answered_at: std::sync::atomic::AtomicU64,
    /// When the store last took the readiness probe's write (seconds since the epoch; 0: never).
    store_written_at: std::sync::atomic::AtomicU64,
    /// The Prometheus counters and gauges `/metrics` serves.
    pub metrics: Metrics,
    /// The queue of security events to the audit trail.
    pub audit: crate::audit::AuditLog,
    /// How long the audit trail keeps an event (seconds; swept with the rest).
    pub audit_retention: u64,
    /// When this issuer started (seconds since the epoch).
    started_at: u64,
}

/// `/readyz` answers 200 while the store took the probe's write and answered the key ring read
/// within this many seconds (both run every second).
pub const HEALTHY_WITHIN: u64 = 3;

/// Whether an issuer should get traffic (`/readyz`), and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The store took a write and the key ring was read within [`HEALTHY_WITHIN`] seconds.
    Ready,
    /// The store is not open yet (the database unreachable or starting).
    Starting,
    /// The store took no write within [`HEALTHY_WITHIN`] seconds: unreachable, read-only, or
    /// its disk refusing.
    StoreNotWritable,
    /// The key ring was not read within [`HEALTHY_WITHIN`] seconds.
    KeyRingStale,
}

impl Readiness {
    /// The reason, for the body of a 503: a fixed phrase, never a cause's details.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Starting => "the store is not open yet",
            Self::StoreNotWritable => "the store took no write in the last seconds",
            Self::KeyRingStale => "the key ring was not read in the last seconds",
        }
    }
}

impl App {
    /// The handlers' shared state over an open store: its key ring and revocations read, the
    /// grants made of `settings`, `throttle` and `password_concurrency`.
    pub async fn new(
        store: Arc<dyn Store>,
        settings: Settings,
        throttle: Throttle,
        password_concurrency: usize,
    ) -> Result<Self, StoreError> {
        let ring = store.key_ring(now()).await?;
        let mut revoked = RevocationSet::default();
        let page = store.revocations(0, now(), usize::MAX).await?;
        revoked.apply(&page.entries, now());
        let read_through = Cursor {
            seq: page.latest,
            stamp: page.latest_stamp,
        };
        let revoke_budget = revoke_budget::RevokeBudget::new(settings.revocations_per_minute);
        let metrics = Metrics::default();
        let feed = feed_wait::FeedWaits::new(settings.feed, metrics.feed.waiting());
        let audit = crate::audit::AuditLog::spawn(store.clone(), metrics.audit_dropped());
        let password = flow_password::PasswordGrant {
            users: store.clone(),
            directory: None,
            families: store.clone(),
            hash: store.clone(),
            passwords: {
                let (done, typical) = metrics.password_checks();
                PasswordChecker::new(password_concurrency).counting(done, typical)
            },
            throttle,
            turns: flow_password::LoginTurns::default(),
            audit: audit.clone(),
        };
        let refresh = flow_refresh::RefreshGrant {
            families: store.clone(),
            hash: store.clone(),
            directory: None,
        };
        Ok(Self {
            store,
            keys: RwLock::new(Arc::new(ring)),
            settings,
            password,
            refresh,
            client_credentials: flow_client_credentials::ClientCredentialsGrant,
            clients: Default::default(),
            vendor: Default::default(),
            client_auth: Default::default(),
            revoked: RwLock::new(revoked),
            revoked_through: std::sync::Mutex::new(read_through),
            revoke_budget,
            edges: edge_book::EdgeBook::default(),
            feed,
            store_answered_at: now().into(),
            store_written_at: 0.into(),
            metrics,
            audit,
            audit_retention: AUDIT_RETENTION_DAYS * 86_400,
            started_at: now(),
        })
    }

    /// Re-reads the key ring (after a rotation, and periodically so retired keys drop out). A
    /// success also records that the store answered, for `/readyz`.
    pub async fn reload_keys(&self) -> Result<(), StoreError> {
        let ring = Arc::new(self.store.key_ring(now()).await?);
        let old = std::mem::replace(
            &mut *self.keys.write().unwrap_or_else(|p| p.into_inner()),
            ring.clone(),
        );
        if !edge::same_keys(&old, &ring) {
            self.feed.changed();
        }
        self.store_answered_at
            .store(now(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The issuer stops: edge feed requests waiting for news are answered now.
    pub fn close_feed(&self) {
        self.feed.close();
    }

    /// Forgets cached clients: an admin change through this issuer takes effect at once.
    pub fn clients_changed(&self) {
        self.clients.clear();
        self.wake_expiry_timer();
    }

    pub(crate) fn ring(&self) -> Arc<KeyRing> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The client a call authenticates as (HTTP Basic), active. Failures are counted per source
    /// address, and an address that failed too often waits (429 `slow_down`, `Retry-After`)
    /// before any client authentication from it is tried again ([`client_auth_throttle`]).
    pub(crate) async fn authenticate(
        &self,
        call: &Call,
    ) -> Result<(String, ClientRecord), ApiError> {
        let creds = client_credentials(call)?;
        let ip = call.client_ip(&self.settings.trusted_proxies);
        if let Err(wait) = self.client_auth.check(ip, now_ms()) {
            return Err(Self::throttled_client(&creds.id, wait));
        }
        let client = self.clients.get(self.store.as_ref(), &creds.id).await?;
        let hash_key = self.store.hash_key();
        let stored = client
            .as_ref()
            .and_then(ClientRecord::secret_hash_bytes)
            .unwrap_or([0; 32]);
        let active = vendor_clients::may_have_tokens(client.as_ref(), now());
        let vendor_ok =
            (self.vendor_secret_ok(&creds.id, client.as_ref(), &creds.secret, now())).await;
        let mut secret_ok = false;
        // An inactive client counts like a wrong secret: the back-off tells nothing.
        let authenticated = self.client_auth.attempt(ip, now_ms(), || {
            secret_ok = vendor_ok.unwrap_or_else(|| {
                hash_key.client_secret_matches(&creds.id, &creds.secret, &stored)
            });
            secret_ok && active
        });
        match (authenticated, client) {
            (Err(wait), _) => Err(Self::throttled_client(&creds.id, wait)),
            (Ok(true), Some(c)) => Ok((creds.id, c)),
            (_, c) if secret_ok && vendor_clients::pending(c.as_ref()) => {
                Err(vendor_clients::awaits_activation())
            }
            _ if secret_ok => {
                tracing::info!(client = creds.id.as_str(), "inactive client refused");
                Err(ApiError::invalid_client())
            }
            _ => {
                tracing::info!(client = creds.id.as_str(), "client authentication failed");
                Err(ApiError::invalid_client())
            }
        }
    }

    fn throttled_client(client: &str, wait: u64) -> ApiError {
        tracing::info!(client, "client authentication throttled");
        ApiError::throttled(wait)
    }

    /// The body of an access token issued at `iat`: the moment the request arrived, before its
    /// client and user were checked, so that a revocation recorded while the request was under
    /// way covers the token (`iat` at or before the revocation); or, for a client or user whose
    /// revocation was lifted (activated or enabled again, a new password), the first second that
    /// revocation does not cover, so the token lives. A token minted with a refresh token family
    /// has an id that begins with the family's tag (`family`), so revoking the family revokes it.
    fn body(
        &self,
        key: &Key,
        client: &str,
        identity: Identity,
        iat: u64,
        family: Option<[u8; FAMILY_TAG_LEN]>,
        cnf: Option<[u8; 32]>,
    ) -> TokenBody {
        let mut jti = crate::secrets::random16();
        if let Some(tag) = family {
            jti[..FAMILY_TAG_LEN].copy_from_slice(&tag);
        }
        TokenBody {
            kid: key.id(),
            jti,
            iat,
            exp: iat + self.settings.access_ttl,
            client: client.to_owned(),
            identity,
            cnf,
            act: None,
        }
    }

    /// `client`'s record as the store holds it now (with the embedded store the cache is never
    /// behind: every change goes through this issuer). Deactivated meanwhile: `invalid_client`.
    async fn current_client(
        &self,
        id: &str,
        cached: ClientRecord,
    ) -> Result<ClientRecord, ApiError> {
        if !self.settings.shared_store {
            return Ok(cached);
        }
        match self.store.client(id).await? {
            Some(c) if c.active => Ok(c),
            _ => {
                tracing::info!(
                    client = id,
                    "client deactivated while the request was under way"
                );
                Err(ApiError::invalid_client())
            }
        }
    }

    /// `body` if no revocation this issuer knows covers it: a token answered with 200 is
    /// accepted until it expires or something revokes it later. A token still covered was
    /// revoked while the request was under way, and is refused, not issued.
    fn not_revoked(&self, body: TokenBody) -> Result<TokenBody, ApiError> {
        if self.revoked().covers(&body) {
            tracing::info!(
                client = body.client.as_str(),
                "grant revoked while under way"
            );
            return Err(ApiError::invalid_grant(
                "the grant was revoked while the request was under way",
            ));
        }
        Ok(body)
    }

    /// Signs `body` with `key`, the signing key its `kid` names.
    fn sign(&self, key: &Key, body: &TokenBody) -> Result<String, ApiError> {
        token::mint(key, body).map_err(|e| match e {
            // Identities come from validated requests and admin input; a value that still does not
            // fit the token (for example a role with a comma stored by an older version) is a
            // request we cannot serve, not a server fault.
            token::MintError::InvalidField(_)
            | token::MintError::TooManyItems
            | token::MintError::TooLong
            | token::MintError::ChainDepth
            | token::MintError::ChainCycle => {
                ApiError::invalid_request("the identity does not fit into a token")
            }
            other => ApiError::internal(&other),
        })
    }

    fn token_response(
        &self,
        access: String,
        refresh: Option<Zeroizing<String>>,
        bound: bool,
        expires_in: u64,
    ) -> TokenIssued {
        TokenIssued {
            access_token: access,
            token_type: if bound { "DPoP" } else { "Bearer" },
            expires_in,
            issued_token_type: None,
            refresh_token: refresh,
        }
    }

    /// `POST /apiv2/oauth/token`: the grant's name (`unknown` until the request names one, for
    /// the metrics) and the tokens, or the refusal.
    pub async fn token(&self, call: &Call) -> (&'static str, Result<TokenIssued, ApiError>) {
        let mut grant_label = "unknown";
        let result = self.token_of(call, &mut grant_label).await;
        (grant_label, result)
    }

    async fn token_of(
        &self,
        call: &Call,
        grant_label: &mut &'static str,
    ) -> Result<TokenIssued, ApiError> {
        let issued_at = now();
        let (client_id, client) = self.authenticate(call).await?;
        call.require_form()?;
        let req = parse_token_request(&call.body)?;
        *grant_label = req.grant.grant_type();
        if req.client_id.as_ref().is_some_and(|id| *id != client_id) {
            return Err(ApiError::invalid_request(
                "client_id does not match the authenticated client",
            ));
        }
        // Before the grant: a refused proof spends no password check and rotates no refresh token.
        let proof = self.token_proof(call, &client).await?;
        let issue = self
            .issue_of(call, req.grant, &client_id, &client, proof.as_ref())
            .await?;
        // The client as the store holds it now: the cache may be a second behind a deactivation
        // and activation made through another issuer or the database.
        let client = self.current_client(&client_id, client).await?;
        let iat = issued_at.max(client.tokens_after()).max(issue.not_before);
        let ring = self.ring();
        let key = ring
            .signing_key()
            .ok_or_else(|| ApiError::internal(&"no signing key"))?;
        let cnf = proof.map(|p| p.jkt);
        let mut body = self.body(key, &client_id, issue.identity, iat, issue.family, cnf);
        if let Some(act) = issue.act {
            body = self.exchanged(body, act, issue.expires_by)?;
        }
        let body = self.not_revoked(body)?;
        let access = self.sign(key, &body)?;
        if body.act.is_some() {
            self.audit_exchange(&body).await?;
        } else if body.identity.kind == shared::token::SubjectKind::Impersonation {
            self.audit_impersonation(&client_id, &body.identity).await?;
        }
        let expires_in = body.exp - body.iat;
        let mut issued = self.token_response(access, issue.refresh, cnf.is_some(), expires_in);
        if body.act.is_some() {
            issued.issued_token_type = Some(shared::grant::ACCESS_TOKEN_TYPE);
        }
        Ok(issued)
    }

    /// The refusal of a refresh, counted; reuse revoked the family and its access tokens (in the
    /// store's transaction), which this issuer reads at once.
    async fn refresh_refused(
        &self,
        client_id: &str,
        why: RefreshRejection,
        family: Option<[u8; FAMILY_TAG_LEN]>,
    ) -> ApiError {
        self.metrics.refresh(why.reason());
        if why == RefreshRejection::DpopKey {
            return ApiError::invalid_dpop_proof(
                "this refresh token is bound to a DPoP key: send a proof made with it",
            );
        }
        if why == RefreshRejection::ReuseDetected {
            self.audit_reuse(client_id, family);
            tracing::warn!(target: "audit", client = client_id, "refresh token reuse: family revoked");
            self.reload_revocations().await;
        }
        ApiError::invalid_grant("invalid refresh token")
    }

    /// The RFC 8414 metadata document.
    pub fn metadata(&self) -> serde_json::Value {
        let base = self.settings.public_url.trim_end_matches('/');
        let auth = ["client_secret_basic"];
        self.with_registration(json!({
            "issuer": base,
            "token_endpoint": self.token_endpoint(),
            "revocation_endpoint": format!("{base}/apiv2/oauth/revoke"),
            "introspection_endpoint": format!("{base}/apiv2/oauth/introspect"),
            "grant_types_supported": [
                "password",
                "refresh_token",
                "client_credentials",
                shared::grant::TOKEN_EXCHANGE,
            ],
            "response_types_supported": [],
            "token_endpoint_auth_methods_supported": auth,
            "revocation_endpoint_auth_methods_supported": auth,
            "introspection_endpoint_auth_methods_supported": auth,
            "dpop_signing_alg_values_supported": dpop::ALGORITHMS,
        }))
    }

    /// Whether to send traffic here (`GET /readyz`, `/healthz`): the store took the probe's
    /// write ([`App::probe_store`]) and answered the key ring read within [`HEALTHY_WITHIN`]
    /// seconds. It costs the store nothing: load balancers may probe as often as they like.
    pub fn readiness(&self) -> Readiness {
        use std::sync::atomic::Ordering::Relaxed;
        let at = now();
        if at.saturating_sub(self.store_written_at.load(Relaxed)) > HEALTHY_WITHIN {
            Readiness::StoreNotWritable
        } else if at.saturating_sub(self.store_answered_at.load(Relaxed)) > HEALTHY_WITHIN {
            Readiness::KeyRingStale
        } else {
            Readiness::Ready
        }
    }

    /// The readiness probe: one small durable write to the store (see
    /// [`crate::store::Liveness`]); a success is what [`App::readiness`] looks for.
    pub async fn probe_store(&self) -> Result<(), StoreError> {
        self.store.probe_write(now()).await?;
        self.store_written_at
            .store(now(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// What a grant asks the token endpoint to mint: the access token's identity and refresh token
/// family (its tag), and the refresh token to hand out with it.
pub(crate) struct Issue {
    identity: Identity,
    family: Option<[u8; FAMILY_TAG_LEN]>,
    refresh: Option<Zeroizing<String>>,
    /// The earliest `iat` the user's revocations do not cover (`UserRecord::tokens_after`).
    not_before: u64,
    /// The actor chain of a token from token exchange.
    act: Option<shared::token::Chain>,
    /// The latest `exp` the token may have (token exchange: its subject token's).
    expires_by: Option<u64>,
}

/// The token endpoint's answer (RFC 6749 section 5.1).
#[derive(serde::Serialize)]
pub struct TokenIssued {
    /// The access token.
    pub access_token: String,
    /// `DPoP` for a token bound to the key of the request's proof, else `Bearer`.
    pub token_type: &'static str,
    /// Seconds until the access token expires.
    pub expires_in: u64,
    /// Token exchange only (RFC 8693 section 2.2.1): the type of the token issued, always an
    /// access token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_token_type: Option<&'static str>,
    /// The refresh token, with the password and refresh grants.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "expose")]
    pub refresh_token: Option<Zeroizing<String>>,
}

fn expose<S: serde::Serializer>(
    token: &Option<Zeroizing<String>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match token {
        Some(t) => s.serialize_str(t),
        None => s.serialize_none(),
    }
}
