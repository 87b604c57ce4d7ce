//! DPoP at the edge (RFC 9449 section 7): the filter's `dpop` settings, the proof a request with
//! a bound token must carry, checked against the request's method and its path under the
//! configured public origin (never an origin the request names), and the memory that accepts
//! each proof once per Envoy ([`Replays`]). Pure: the adapters give the memory
//! (the native filter one per process, the Wasm filter Envoy's shared data), and the time.
//! Reference: `docs/filter.md` ("DPoP") and `docs/dpop.md`.

use serde::Deserialize;
use shared::dpop::{check_proof_with, DpopError, Expect, NonceCheck, NONCE_SLOT_SECONDS};
use shared::KeyRing;

pub use shared::dpop::replay::{
    self, Accepted, FlatBucket, Replay, ReplayCache, Replays, ShardedReplays,
};

pub mod host;
pub use host::Es256By;

/// The algorithms proofs may use, as `WWW-Authenticate`'s `algs` names them.
pub const ALGS: &str = "ES256 EdDSA";

/// The `dpop` block of the plugin configuration, as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDpop {
    #[serde(default)]
    proof_window_seconds: Option<u64>,
    #[serde(default)]
    require_nonce: bool,
    #[serde(default)]
    replay_entries: Option<usize>,
    #[serde(default)]
    public_origin: Option<String>,
    #[serde(default)]
    es256_verifier: Option<String>,
}

/// The filter's DPoP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpopConfig {
    /// Seconds a proof's `iat` may be before now (ahead, at most
    /// [`shared::dpop::MAX_AHEAD_SECONDS`]); its id is kept until `iat` plus this.
    pub window: u64,
    /// Proofs must carry a current server nonce.
    pub require_nonce: bool,
    /// Proof ids one Envoy remembers at most.
    pub replay_entries: usize,
    /// `scheme://host[:port]` clients call, without a trailing slash: the origin of the URL every
    /// `htu` is compared with. Always the configuration's: the request's `:scheme` and
    /// `:authority` (`Host`, `X-Forwarded-Proto`) are the client's to choose.
    pub public_origin: String,
    /// Whether ES256 proofs may be verified by the host's crypto library when it offers one and
    /// answers the known answer rightly ([`host`]); `false` (`"es256_verifier": "module"`) keeps
    /// them in the module's own code, for tests that run the DPoP cases on both paths.
    pub host_es256: bool,
}

/// The proof window by default, in seconds.
pub const DEFAULT_WINDOW: u64 = 60;

/// Proof ids remembered by default: a minute of about 1,600 bound requests a second.
pub const DEFAULT_REPLAY_ENTRIES: usize = 100_000;

/// How `public_origin` is written, for the errors that ask for it.
const ORIGIN_EXAMPLE: &str = r#"e.g. "dpop": {"public_origin": "https://media.example.com"}"#;

impl DpopConfig {
    /// The settings of a `dpop` block, or what is wrong with it (the configuration names it).
    pub(crate) fn new(raw: RawDpop) -> Result<Self, String> {
        let bad = |m: &str| Err(format!("dpop.{m}"));
        let window = raw.proof_window_seconds.unwrap_or(DEFAULT_WINDOW);
        if !(1..=shared::dpop::MAX_WINDOW).contains(&window) {
            return bad("proof_window_seconds: 1 to 600");
        }
        let replay_entries = raw.replay_entries.unwrap_or(DEFAULT_REPLAY_ENTRIES);
        if !(1_000..=1_000_000).contains(&replay_entries) {
            return bad("replay_entries: 1000 to 1000000");
        }
        Ok(Self {
            window,
            require_nonce: raw.require_nonce,
            replay_entries,
            public_origin: public_origin(raw.public_origin)?,
            host_es256: match raw.es256_verifier.as_deref() {
                None | Some("auto") => true,
                Some("module") => false,
                Some(_) => return bad("es256_verifier: \"auto\" or \"module\""),
            },
        })
    }
}

/// The configured origin without a trailing slash, or why it is refused: required, since a
/// DPoP-bound token may come at any time and the request's own origin is the client's word.
fn public_origin(raw: Option<String>) -> Result<String, String> {
    let Some(origin) = raw else {
        return Err(format!(
            "dpop.public_origin is required: the scheme, host and port clients call, which \
             every DPoP proof's htu must name ({ORIGIN_EXAMPLE})"
        ));
    };
    let origin = origin.strip_suffix('/').unwrap_or(&origin);
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    if !rest.is_some_and(is_host_and_port) {
        return Err(format!(
            "dpop.public_origin: http(s)://host[:port], without path, query or userinfo \
             ({ORIGIN_EXAMPLE})"
        ));
    }
    Ok(origin.to_owned())
}

/// `host[:port]`: a name or IPv4 address of letters, digits, dots and dashes, or an IPv6
/// address in brackets; a port of 1 to 65535.
fn is_host_and_port(authority: &str) -> bool {
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !authority.ends_with(']') => (host, Some(port)),
        _ => (authority, None),
    };
    let port_ok = port.is_none_or(|p| {
        p.bytes().all(|c| c.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65_535).contains(&n))
    });
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            v6.contains(':')
                && v6
                    .bytes()
                    .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        }
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-')
        }
    };
    port_ok && host_ok
}

/// What a request brings for a proof check: its method, its path and its `DPoP` headers. Not
/// its `:scheme` or `:authority`: the origin is the configuration's ([`DpopConfig::public_origin`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProofRequest<'a> {
    /// `:method`.
    pub method: &'a [u8],
    /// `:path`.
    pub path: &'a [u8],
    /// The first `DPoP` header.
    pub proof: Option<&'a [u8]>,
    /// How many `DPoP` headers came.
    pub proofs: usize,
}

/// Why a bound request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `DPoP` header.
    Missing,
    /// More than one, or a comma-joined list.
    Several,
    /// Bytes a proof never has (not visible ASCII), or a request without its method or an
    /// absolute path.
    Unreadable,
    /// The proof's key is not the one the token is bound to.
    OtherKey,
    /// A check of the proof failed.
    Proof(DpopError),
}

impl Refusal {
    /// The RFC 9449 error code to answer with.
    pub fn error_code(self) -> &'static str {
        match self {
            Self::Proof(e) => e.error_code(),
            _ => "invalid_dpop_proof",
        }
    }

    /// What the client is told.
    pub fn description(self) -> &'static str {
        match self {
            Self::Missing => "a DPoP-bound token needs a DPoP proof",
            Self::Several => "exactly one DPoP proof is required",
            Self::Unreadable => "the DPoP header is not a proof",
            Self::OtherKey => "the proof's key is not the token's",
            Self::Proof(e) => e.description(),
        }
    }
}

fn text(bytes: &[u8]) -> Option<&str> {
    core::str::from_utf8(bytes).ok()
}

/// The URL the client called, as `htu` must name it: the configured public origin and the
/// request's path without query or fragment (none for a path that is not absolute).
fn request_url(cfg: &DpopConfig, req: &ProofRequest<'_>) -> Option<String> {
    let path = text(req.path).filter(|p| p.starts_with('/'))?;
    let path = path.split(['?', '#']).next().unwrap_or_default();
    Some(format!("{}{path}", cfg.public_origin))
}

/// Checks the proof of a request presenting `token`, bound to `cnf`, with the key `ring`
/// (nonces) at `now`, an ES256 signature by `es256`: the proof's id to remember, or why it is
/// refused.
pub fn check(
    cfg: &DpopConfig,
    ring: &KeyRing,
    es256: Es256By,
    req: &ProofRequest<'_>,
    token: &str,
    cnf: &[u8; 32],
    now: u64,
) -> Result<Accepted, Refusal> {
    let raw = match (req.proofs, req.proof) {
        (0, _) | (_, None) => return Err(Refusal::Missing),
        (1, Some(raw)) => raw,
        _ => return Err(Refusal::Several),
    };
    if raw.contains(&b',') {
        return Err(Refusal::Several);
    }
    let proof = text(raw)
        .filter(|p| p.bytes().all(|c| c.is_ascii_graphic()))
        .ok_or(Refusal::Unreadable)?;
    let url = request_url(cfg, req).ok_or(Refusal::Unreadable)?;
    let method = text(req.method).ok_or(Refusal::Unreadable)?;
    let expect = Expect {
        method,
        url: &url,
        access_token: Some(token),
        now,
        window_seconds: cfg.window,
        nonce_check: if cfg.require_nonce {
            NonceCheck::Required {
                ring,
                window: NONCE_SLOT_SECONDS,
            }
        } else {
            NonceCheck::Off
        },
    };
    let proof = check_proof_with(proof, &expect, es256.verifier()).map_err(Refusal::Proof)?;
    if !proof.confirms(cnf) {
        return Err(Refusal::OtherKey);
    }
    Ok(proof.accepted(cfg.window, now))
}

/// A nonce for a `DPoP-Nonce` header, made with the key of the largest id in `ring`.
pub fn nonce(ring: &KeyRing, now: u64) -> Option<String> {
    let key = ring.keys().iter().max_by_key(|k| k.id())?;
    Some(shared::dpop::nonce_for(key, now, NONCE_SLOT_SECONDS))
}

#[cfg(test)]
mod tests;
