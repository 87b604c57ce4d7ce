//! The filter's plugin configuration: JSON, validated completely before the filter serves a
//! request, its `edge_sync` block ([`EdgeSync`]) included. `issuer keys filter-config
//! --public-origin URL` prints a valid one. Reference: `docs/filter.md`.
//!
//! Every other module reads the configuration; this one uses none of them (but the token cache's
//! default size, and the `dpop` and `delegation` blocks' own validation), so the configuration is the root of the crate's module graph.

use serde::Deserialize;
use shared::edge_feed::{BadSecret, FeedKey};
use shared::KeyRing;
use std::fmt;
use zeroize::Zeroizing;

/// The identity headers the filter sets from a verified token. Every header of the identity
/// namespace ([`is_identity_header`]) is removed from each request first.
pub const IDENTITY_HEADERS: [&str; 11] = [
    "x-auth-client",
    "x-auth-subject-kind",
    "x-auth-subject",
    "x-auth-roles",
    "x-auth-claims",
    "x-auth-token-id",
    "x-auth-expires",
    "x-auth-binding",
    "x-auth-jkt",
    "x-auth-actors",
    "x-auth-actor-origin",
];

/// True for a header name in the filter's identity namespace: `x-auth` and everything under
/// `x-auth-`, in any case, with `_` read as `-` (CGI, WSGI and PHP upstreams map `X_Auth_Roles` and
/// `X-Auth-Roles` to one variable, so both spellings belong to the filter).
pub fn is_identity_header(name: &str) -> bool {
    const PREFIX: &[u8] = b"x-auth";
    let name = name.as_bytes();
    let same = |a: u8, b: u8| a.eq_ignore_ascii_case(&b) || (a == b'_' && b == b'-');
    name.len() >= PREFIX.len()
        && name.iter().zip(PREFIX).all(|(&a, &b)| same(a, b))
        && name
            .get(PREFIX.len())
            .is_none_or(|&c| c == b'-' || c == b'_')
}

/// The `dpop` block the unit tests' configurations hold (`public_origin` is required).
#[cfg(test)]
pub(crate) const TEST_DPOP: &str = r#""dpop":{"public_origin":"https://api.example.com"}"#;

/// Most keys a configuration may hold.
pub const MAX_KEYS: usize = 64;

/// A key ring from its keys as the configuration and the edge feed write them ([`FeedKey`]);
/// the message names the field `what` and never a secret.
pub(crate) fn key_ring(raw: &[FeedKey], what: &str) -> Result<KeyRing, ConfigError> {
    if raw.len() > MAX_KEYS {
        return err(format!("{what}: at most {MAX_KEYS} keys"));
    }
    let mut keys = Vec::with_capacity(raw.len());
    for k in raw {
        match k.key() {
            Ok(key) => keys.push(key),
            Err(BadSecret::Encoding) => {
                return err(format!(
                    "{what}: the secret of kid {} is not unpadded base64url",
                    k.kid
                ))
            }
            Err(BadSecret::Length) => {
                return err(format!(
                    "{what}: the secret of kid {} is not 32 bytes",
                    k.kid
                ))
            }
        }
    }
    KeyRing::new(keys, None).ok_or_else(|| ConfigError(format!("{what}: two keys share a kid")))
}

fn default_alternative_header() -> String {
    "ServiceAuthorization".into()
}
fn default_skew() -> u64 {
    30
}
fn default_max_lifetime() -> u64 {
    3600
}
fn default_realm() -> String {
    "media".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    keys: Vec<FeedKey>,
    #[serde(default = "default_alternative_header")]
    alternative_header: String,
    #[serde(default = "default_skew")]
    clock_skew_seconds: u64,
    #[serde(default = "default_max_lifetime")]
    max_token_lifetime_seconds: u64,
    #[serde(default)]
    exempt_prefixes: Vec<String>,
    #[serde(default = "default_realm")]
    realm: String,
    #[serde(default)]
    edge_sync: Option<RawEdgeSync>,
    #[serde(default = "default_cache")]
    token_cache_entries: usize,
    #[serde(default)]
    dpop: crate::dpop::RawDpop,
    #[serde(default)]
    delegation: Vec<String>,
}

fn default_cache() -> usize {
    crate::cache::DEFAULT_CAPACITY
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Keys that verify tokens until the first edge sync (with edge sync), or always.
    pub ring: KeyRing,
    /// The alternative token header, lower case.
    pub alternative_header: String,
    /// Seconds of clock difference tolerated on expiry and issue time.
    pub clock_skew: u64,
    /// Longest lifetime (`exp - iat`) a token may claim: the issuer's access token lifetime. A
    /// token that claims more is refused even if its tag verifies (a leaked key cannot mint
    /// tokens that outlive its rotation).
    pub max_lifetime: u64,
    /// Path prefixes that pass without a token (identity headers are still removed). Empty by
    /// default: the shipped configurations exempt the issuer's route in Envoy's route table
    /// instead, so the filter never sees it (`docs/filter.md`).
    pub exempt_prefixes: Vec<String>,
    /// Realm in `WWW-Authenticate`.
    pub realm: String,
    /// Where and how to pull keys and revocations from the issuer, if at all.
    pub edge_sync: Option<EdgeSync>,
    /// Most verified tokens each VM remembers ([`crate::cache`]); 0 turns the cache off.
    pub token_cache_entries: usize,
    /// DPoP-bound tokens and their proofs ([`crate::dpop`]).
    pub dpop: crate::dpop::DpopConfig,
    /// Rules for delegated tokens by path ([`crate::delegation`]).
    pub delegation: Vec<crate::delegation::Rule>,
}

/// Why a configuration was refused. The message names the field and never includes a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid filter configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

impl Config {
    /// Parses and validates a JSON configuration.
    pub fn parse(json: &[u8]) -> Result<Self, ConfigError> {
        let raw: Raw = match serde_json::from_slice(json) {
            Ok(r) => r,
            // serde's message names the field or position; it cannot contain a secret, because a
            // secret is only ever a string value that parsed.
            Err(e) => return err(format!("{e}")),
        };
        if raw.keys.is_empty() && raw.edge_sync.is_none() {
            return err("keys: at least one key is required (or edge_sync)");
        }
        let ring = key_ring(&raw.keys, "keys")?;
        let edge_sync = raw.edge_sync.map(EdgeSync::new).transpose()?;
        let alt = raw.alternative_header.to_ascii_lowercase();
        if alt.is_empty() || !alt.chars().all(is_token_char) {
            return err("alternative_header: must be an HTTP header name");
        }
        if alt == "authorization" || is_identity_header(&alt) {
            return err("alternative_header: must not be authorization or an identity header");
        }
        if raw.clock_skew_seconds > shared::token::MAX_CLOCK_SKEW {
            return err("clock_skew_seconds: at most 600");
        }
        if !(1..=86_400).contains(&raw.max_token_lifetime_seconds) {
            return err("max_token_lifetime_seconds: 1 to 86400");
        }
        for p in &raw.exempt_prefixes {
            if !p.starts_with('/')
                || p.contains(['?', '#', '%', ';', '\\'])
                || p.split('/').any(|s| s == "." || s == "..")
            {
                return err(format!(
                    "exempt_prefixes: {p:?} must be a plain absolute path prefix"
                ));
            }
            if p == "/" {
                return err("exempt_prefixes: \"/\" would exempt everything");
            }
        }
        if raw.token_cache_entries > 100_000 {
            return err("token_cache_entries: at most 100000");
        }
        if raw.realm.is_empty()
            || raw.realm.len() > 64
            || !raw
                .realm
                .chars()
                .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        {
            return err("realm: 1 to 64 visible ASCII characters without quotes or backslashes");
        }
        Ok(Self {
            ring,
            alternative_header: alt,
            clock_skew: raw.clock_skew_seconds,
            max_lifetime: raw.max_token_lifetime_seconds,
            exempt_prefixes: raw.exempt_prefixes,
            realm: raw.realm,
            edge_sync,
            token_cache_entries: raw.token_cache_entries,
            dpop: crate::dpop::DpopConfig::new(raw.dpop).map_err(ConfigError)?,
            delegation: crate::delegation::rules(&raw.delegation)
                .map_err(|e| ConfigError(e.to_owned()))?,
        })
    }
}

/// The `edge_sync` block of the plugin configuration, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdgeSync {
    cluster: String,
    #[serde(default = "default_path")]
    path: String,
    #[serde(default)]
    authority: Option<String>,
    client_id: String,
    client_secret: Zeroizing<String>,
    #[serde(default = "default_poll")]
    poll_interval_seconds: u64,
    #[serde(default = "default_timeout")]
    timeout_ms: u64,
    #[serde(default)]
    max_staleness_seconds: Option<u64>,
    #[serde(default)]
    startup_grace_seconds: u64,
    #[serde(default)]
    node: Option<String>,
    #[serde(default = "default_wait")]
    wait_seconds: u64,
}

fn default_wait() -> u64 {
    20
}

fn default_path() -> String {
    "/apiv2/oauth/edge".into()
}
fn default_poll() -> u64 {
    1
}
fn default_timeout() -> u64 {
    2_000
}

/// Where and how the filter pulls the edge feed (what it does with it: [`crate::edge`]).
#[derive(Clone)]
pub struct EdgeSync {
    /// The Envoy cluster of the issuer.
    pub cluster: String,
    /// The feed's path, without a query.
    pub path: String,
    /// The `:authority` of the feed requests (the cluster's name by default).
    pub authority: String,
    authorization: Zeroizing<String>,
    /// Seconds between polls (1 to 60).
    pub poll_interval: u64,
    /// Milliseconds a poll may take before it counts as failed.
    pub timeout_ms: u64,
    /// If set: once the last good sync is older than this many seconds, every request is
    /// refused (503) rather than verified with old state. Unset: keep verifying with the last
    /// state, and say so in the counters and the log.
    pub max_staleness: Option<u64>,
    /// Seconds after the VM starts during which a request arriving before the first good answer
    /// is still decided with the configuration's static keys and no revocation. 0 (the default):
    /// none; until the first good answer every request with a token gets 503.
    pub startup_grace: u64,
    /// The node name this edge reports to the issuer, if configured: the native filter's only
    /// source of it (Envoy gives dynamic modules no node id). The Wasm filter reports Envoy's
    /// node id and uses this only when Envoy has none.
    pub node: Option<String>,
    /// The longest wait asked of an issuer that offers to hold a poll until there is news
    /// (`wait=S`), in seconds; 0: poll every `poll_interval` whatever the issuer offers.
    pub wait_seconds: u64,
}

/// The largest `wait_seconds`: the feed's bound, [`shared::edge_feed::MAX_WAIT_SECONDS`].
pub const MAX_WAIT_SECONDS: u64 = shared::edge_feed::MAX_WAIT_SECONDS;

impl fmt::Debug for EdgeSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EdgeSync")
            .field("cluster", &self.cluster)
            .field("path", &self.path)
            .field("authorization", &"[redacted]")
            .field("poll_interval", &self.poll_interval)
            .field("max_staleness", &self.max_staleness)
            .field("startup_grace", &self.startup_grace)
            .field("node", &self.node)
            .field("wait_seconds", &self.wait_seconds)
            .finish()
    }
}

fn bad<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(format!("edge_sync: {}", msg.into())))
}

impl EdgeSync {
    fn new(raw: RawEdgeSync) -> Result<Self, ConfigError> {
        if raw.cluster.is_empty() || raw.cluster.len() > 255 {
            return bad("cluster: the name of the issuer's Envoy cluster");
        }
        let plain = |s: &str| {
            s.bytes()
                .all(|c| c.is_ascii_graphic() && c != b'?' && c != b'#')
        };
        if !raw.path.starts_with('/') || !plain(&raw.path) || raw.path.len() > 255 {
            return bad("path: an absolute path without a query");
        }
        let authority = raw.authority.unwrap_or_else(|| raw.cluster.clone());
        if authority.is_empty() || !plain(&authority) || authority.len() > 255 {
            return bad("authority: a host name");
        }
        if raw.client_id.is_empty() || raw.client_secret.is_empty() {
            return bad("client_id and client_secret: the edge client's credentials");
        }
        if !(1..=60).contains(&raw.poll_interval_seconds) {
            return bad("poll_interval_seconds: 1 to 60");
        }
        if !(100..=60_000).contains(&raw.timeout_ms) {
            return bad("timeout_ms: 100 to 60000");
        }
        if raw
            .max_staleness_seconds
            .is_some_and(|s| s < 2 * raw.poll_interval_seconds || s > 86_400)
        {
            return bad("max_staleness_seconds: two poll intervals to 86400");
        }
        if raw.wait_seconds > MAX_WAIT_SECONDS {
            return bad("wait_seconds: 0 to 300");
        }
        if raw.startup_grace_seconds > 86_400 {
            return bad("startup_grace_seconds: 0 to 86400");
        }
        if raw
            .node
            .as_deref()
            .is_some_and(|n| !shared::edge_feed::is_edge_name(n))
        {
            return bad("node: 1 to 128 printable ASCII characters");
        }
        Ok(Self {
            authorization: shared::basic::encode_basic(&raw.client_id, &raw.client_secret),
            cluster: raw.cluster,
            path: raw.path,
            authority,
            poll_interval: raw.poll_interval_seconds,
            timeout_ms: raw.timeout_ms,
            max_staleness: raw.max_staleness_seconds,
            startup_grace: raw.startup_grace_seconds,
            node: raw.node,
            wait_seconds: raw.wait_seconds,
        })
    }

    /// The `Authorization` header of a poll (HTTP Basic, the edge client's credentials).
    pub fn authorization(&self) -> &str {
        &self.authorization
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

    fn cfg(extra: &str) -> Result<Config, ConfigError> {
        Config::parse(
            format!(r#"{{"keys":[{{"kid":1,"secret":"{KEY}"}}],{TEST_DPOP}{extra}}}"#).as_bytes(),
        )
    }

    #[test]
    fn defaults() {
        let c = cfg("").unwrap();
        assert_eq!(c.alternative_header, "serviceauthorization");
        assert_eq!(c.clock_skew, 30);
        assert_eq!(c.max_lifetime, 3600);
        assert!(c.exempt_prefixes.is_empty());
        assert_eq!(c.realm, "media");
        assert!(c.ring.get(1).is_some());
    }

    #[test]
    fn refuses_bad_configurations() {
        for (extra, needle) in [
            (
                r#","alternative_header":"Bad Header""#,
                "alternative_header",
            ),
            (
                r#","alternative_header":"authorization""#,
                "alternative_header",
            ),
            (r#","clock_skew_seconds":601"#, "clock_skew"),
            (r#","exempt_prefixes":["/"]"#, "exempt"),
            (r#","exempt_prefixes":["apiv2"]"#, "exempt"),
            (r#","exempt_prefixes":["/a/../b"]"#, "exempt"),
            (r#","exempt_prefixes":["/a/..;/b"]"#, "exempt"),
            (
                r#","alternative_header":"X_Auth_Subject""#,
                "alternative_header",
            ),
            (r#","max_token_lifetime_seconds":0"#, "max_token_lifetime"),
            (
                r#","max_token_lifetime_seconds":86401"#,
                "max_token_lifetime",
            ),
            (r#","realm":"a\"b""#, "realm"),
            (r#","unknown":1"#, "unknown"),
        ] {
            let e = cfg(extra).unwrap_err();
            assert!(e.0.contains(needle), "{extra}: {e}");
        }
        for bad in [
            "",
            "{}",
            r#"{"keys":[]}"#,
            r#"{"keys":[{"kid":1,"secret":"short"}]}"#,
            r#"{"keys":[{"kid":1,"secret":"!!"}]}"#,
        ] {
            assert!(Config::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        let dup =
            format!(r#"{{"keys":[{{"kid":1,"secret":"{KEY}"}},{{"kid":1,"secret":"{KEY}"}}]}}"#);
        assert!(Config::parse(dup.as_bytes())
            .unwrap_err()
            .0
            .contains("share"));
    }

    #[test]
    fn the_identity_namespace_covers_every_spelling() {
        for name in [
            "x-auth",
            "x-auth-subject",
            "X-Auth-Roles",
            "x_auth_subject",
            "X_Auth_Roles",
            "x-auth_subject",
            "x-auth-admin",
            "x-auth-user",
            "x-auth-subject-",
            "x-auth-",
            "x_auth",
        ] {
            assert!(is_identity_header(name), "{name}");
        }
        for name in [
            "x-authorization",
            "x-auth2",
            "x-aut",
            "authorization",
            "serviceauthorization",
            "x--auth-subject",
            "y-auth-subject",
            "",
        ] {
            assert!(!is_identity_header(name), "{name}");
        }
        assert!(IDENTITY_HEADERS.iter().all(|h| is_identity_header(h)));
    }

    #[test]
    fn errors_never_show_a_secret() {
        let bad = format!(r#"{{"keys":[{{"kid":1,"secret":"{KEY}x"}}]}}"#);
        let e = Config::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(!e.contains(KEY), "{e}");
    }
}
