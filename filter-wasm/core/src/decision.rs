//! What to do with one request: [`decide`], a pure function of its path and headers, the time,
//! the configuration and the state learnt from the edge feed (the token cache included, which it
//! reads and does not write). No host calls here; the Envoy adapter applies the result, and
//! remembers in the token cache what the result says to ([`Verdict::remember`]).

use crate::bearer::{parse_bearer, trim_ows, Bearer, Scheme};
use crate::cache::{Cached, IdentityHeaders, Remember};
use crate::config::{Config, IDENTITY_HEADERS};
use crate::dpop::{self, Accepted, ProofRequest, Refusal};
use crate::edge::EdgeState;
use crate::encode::{enc, enc_into};
use shared::token::{self, Limits, SubjectKind};
use shared::VerifyError;

/// How a request ended, one Envoy counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A valid token: identity headers set, request forwarded.
    Allowed,
    /// No bearer token: 401 without an error code.
    Missing,
    /// Not a usable `Bearer` header, two tokens, or not a token of our format: 400 or 401.
    Malformed,
    /// Forged, tampered, unknown key, not yet valid, or claiming a lifetime longer than the
    /// configured maximum: 401 `invalid_token`.
    Invalid,
    /// Expired beyond the clock skew: 401 `invalid_token`.
    Expired,
    /// An exempt path: forwarded without a token check (identity headers still removed).
    Exempt,
    /// A valid token that a revocation from the edge feed covers: 401 `invalid_token`.
    Revoked,
    /// Edge sync has no keys yet, or its state is older than `max_staleness_seconds`: 503.
    Unavailable,
    /// A token, while edge sync has had no good answer since the VM started (and the start-up
    /// grace is over): no revocation is known yet, so nothing is accepted. 503, `Retry-After: 1`.
    Unsynced,
    /// A DPoP-bound token with a valid proof by its key, not used before: forwarded.
    DpopAllowed,
    /// A DPoP-bound token whose proof is missing, several, or fails a check: 401
    /// `invalid_dpop_proof`.
    DpopInvalid,
    /// A proof without a current server nonce where one is required: 401 `use_dpop_nonce`
    /// with `DPoP-Nonce`.
    DpopNonce,
    /// A proof used before at this Envoy: 401 `invalid_dpop_proof`.
    DpopReplayed,
    /// A proof older than this Envoy's memory of proofs vouches for (made before it began, or
    /// no newer than one of its key it forgot): 401 `invalid_dpop_proof`; a new proof passes.
    DpopTooOld,
    /// The proof's key holds its whole share of the memory of proofs: 429, `Retry-After: 1`.
    DpopKeyBusy,
    /// The memory of used proofs could not be updated (Wasm shared data): 503, `Retry-After: 1`.
    DpopReplayBusy,
    /// A DPoP-bound token under the `Bearer` scheme: 401 `invalid_token`, never accepted.
    BoundAsBearer,
    /// A bearer token under the `DPoP` scheme: 401 `invalid_token`.
    UnboundAsDpop,
    /// A delegated token (with an actor chain) that a `delegation` rule refuses on the path:
    /// 403 `insufficient_scope`.
    Delegation,
}

impl Outcome {
    /// All outcomes, in counter order.
    pub const ALL: [Outcome; 19] = [
        Self::Allowed,
        Self::Missing,
        Self::Malformed,
        Self::Invalid,
        Self::Expired,
        Self::Exempt,
        Self::Revoked,
        Self::Unavailable,
        Self::Unsynced,
        Self::DpopAllowed,
        Self::DpopInvalid,
        Self::DpopNonce,
        Self::DpopReplayed,
        Self::DpopTooOld,
        Self::DpopKeyBusy,
        Self::DpopReplayBusy,
        Self::BoundAsBearer,
        Self::UnboundAsDpop,
        Self::Delegation,
    ];

    /// The outcome's place in [`Outcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Counter name suffix.
    pub fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Invalid => "invalid",
            Self::Expired => "expired",
            Self::Exempt => "exempt",
            Self::Revoked => "revoked",
            Self::Unavailable => "unavailable",
            Self::Unsynced => "unsynced",
            Self::DpopAllowed => "dpop_allowed",
            Self::DpopInvalid => "dpop_invalid",
            Self::DpopNonce => "dpop_nonce",
            Self::DpopReplayed => "dpop_replayed",
            Self::DpopTooOld => "dpop_too_old",
            Self::DpopKeyBusy => "dpop_key_busy",
            Self::DpopReplayBusy => "dpop_replay_busy",
            Self::BoundAsBearer => "bound_as_bearer",
            Self::UnboundAsDpop => "unbound_as_dpop",
            Self::Delegation => "delegation_refused",
        }
    }
}

/// What [`decide`] concluded about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict<'t> {
    /// What to do with the request.
    pub decision: Decision,
    /// The counter it goes to.
    pub outcome: Outcome,
    /// For a token that failed verification, the detailed reason (for logs).
    pub reason: Option<VerifyError>,
    /// A token that verified and is not revoked, not served from the token cache: for the
    /// caller to remember there ([`EdgeState::remember`]), so its repeats skip verification.
    pub remember: Option<Remember<'t>>,
    /// A DPoP proof that passed: allowed only once the caller's memory of used proofs accepts
    /// it ([`crate::request::handle`]).
    pub proof: Option<Accepted>,
}

/// A verdict with nothing to remember and no verification failure.
fn verdict(decision: Decision, outcome: Outcome) -> Verdict<'static> {
    Verdict {
        decision,
        outcome,
        reason: None,
        remember: None,
        proof: None,
    }
}

/// A local answer instead of forwarding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// 400, 401, or 503 when the filter cannot verify at all.
    pub status: u32,
    /// The `WWW-Authenticate` value (RFC 6750 section 3).
    pub www_authenticate: String,
    /// A small JSON body: `{"error": ..., "error_description": ...}`.
    pub body: String,
    /// Seconds for `Retry-After`, on a 503 that the next poll of edge sync may end.
    pub retry_after: Option<u32>,
    /// A server nonce for the client's next proof (`DPoP-Nonce`).
    pub dpop_nonce: Option<String>,
}

/// The filter's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forward; remove the identity headers.
    Exempt,
    /// Forward; remove the identity headers, then set these.
    Allow(IdentityHeaders),
    /// Answer locally.
    Deny(Denial),
}

/// True if the path (query removed) starts with an exempt prefix and has nothing a proxy or an
/// upstream could normalise into another path. Anything doubtful stays protected: `%`, `\`, `//`,
/// dot segments, and `;` anywhere (path parameters: Tomcat, Jetty and Spring read `..;` as `..`).
///
/// The shipped configurations exempt nothing here: Envoy's route table keeps the filter off the
/// issuer's route, so the exemption follows the route Envoy matched, not a second path parser.
pub fn is_exempt(cfg: &Config, path: &[u8]) -> bool {
    if cfg.exempt_prefixes.is_empty() {
        return false;
    }
    let path = &path[..path
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(path.len())];
    crate::delegation::is_clean(path)
        && cfg
            .exempt_prefixes
            .iter()
            .any(|p| path.starts_with(p.as_bytes()))
}

fn denial(cfg: &Config, status: u32, error: Option<&str>, description: &str) -> Denial {
    let www_authenticate = match error {
        None => format!("Bearer realm=\"{}\"", cfg.realm),
        Some(e) => format!(
            "Bearer realm=\"{}\", error=\"{e}\", error_description=\"{description}\"",
            cfg.realm
        ),
    };
    let body = format!(
        "{{\"error\":\"{}\",\"error_description\":\"{description}\"}}",
        error.unwrap_or("unauthorized")
    );
    Denial {
        status,
        www_authenticate,
        body,
        retry_after: None,
        dpop_nonce: None,
    }
}

/// A refusal under the DPoP challenge (RFC 9449 section 7.1), with the algorithms proofs may use.
pub(crate) fn dpop_denial(cfg: &Config, status: u32, error: &str, description: &str) -> Denial {
    Denial {
        www_authenticate: format!(
            "DPoP realm=\"{}\", error=\"{error}\", error_description=\"{description}\", algs=\"{}\"",
            cfg.realm,
            dpop::ALGS
        ),
        ..denial(cfg, status, Some(error), description)
    }
}

fn deny(cfg: &Config, status: u32, error: Option<&str>, description: &str) -> Decision {
    Decision::Deny(denial(cfg, status, error, description))
}

/// 400 `invalid_request`: the credentials are not one well-formed bearer token.
fn bad_request(cfg: &Config, description: &str) -> Verdict<'static> {
    verdict(
        deny(cfg, 400, Some("invalid_request"), description),
        Outcome::Malformed,
    )
}

/// `items`, each as an identity header writes it, joined by commas.
fn enc_list(items: &[String]) -> String {
    let mut out = String::with_capacity(items.iter().map(|i| i.len() + 1).sum());
    for i in items {
        if !out.is_empty() {
            out.push(',');
        }
        enc_into(&mut out, i);
    }
    out
}

fn identity_headers(t: &token::TokenBody) -> Vec<(&'static str, String)> {
    let id = &t.identity;
    let mut h = Vec::with_capacity(IDENTITY_HEADERS.len());
    h.push(("x-auth-client", enc(&t.client)));
    h.push(("x-auth-subject-kind", id.kind.as_str().to_owned()));
    if !id.subject.is_empty() {
        h.push(("x-auth-subject", enc(&id.subject)));
    } else if id.kind == SubjectKind::Client {
        // A client's own token: the client it speaks for, the chain's origin once exchanged.
        let client = t.act.as_ref().map_or(&t.client, |c| &c.origin);
        h.push(("x-auth-subject", enc(client)));
    }
    if let Some(chain) = &t.act {
        h.push((crate::delegation::ACTORS_HEADER, enc_list(&chain.actors)));
        h.push(("x-auth-actor-origin", enc(&chain.origin)));
    }
    if !id.roles.is_empty() {
        h.push(("x-auth-roles", enc_list(&id.roles)));
    }
    if !id.claims.is_empty() {
        let mut claims = String::new();
        for c in &id.claims {
            if !claims.is_empty() {
                claims.push(',');
            }
            enc_into(&mut claims, &c.typ);
            claims.push('=');
            enc_into(&mut claims, &c.value);
        }
        h.push(("x-auth-claims", claims));
    }
    h.push(("x-auth-token-id", t.jti_hex()));
    h.push(("x-auth-expires", t.exp.to_string()));
    h
}

/// Decides a request from its `:path`, its headers (names lower case, as Envoy gives them;
/// values as raw bytes), the verification state and the time in seconds since the Unix epoch.
///
/// Pure: it changes nothing, the token cache included. A token found in the cache is allowed
/// with the headers remembered for it; a token that verifies is allowed, and the verdict says to
/// remember it ([`Verdict::remember`]), which the caller does with [`EdgeState::remember`].
pub fn decide<'a>(
    cfg: &Config,
    state: &EdgeState,
    path: &[u8],
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    now: u64,
) -> Verdict<'a> {
    if is_exempt(cfg, path) {
        return verdict(Decision::Exempt, Outcome::Exempt);
    }
    if state.unusable(cfg.edge_sync.as_ref(), now) {
        let d = deny(
            cfg,
            503,
            Some("temporarily_unavailable"),
            "tokens cannot be verified at the moment",
        );
        return verdict(d, Outcome::Unavailable);
    }
    let (scheme, token, proof) = match find_token(cfg, headers) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    // Before edge sync's first good answer the filter knows no revocation: a token is neither
    // accepted nor refused on what it cannot know (a missing or malformed one is refused above).
    if state.awaiting_first_answer(cfg.edge_sync.as_ref(), now) {
        let d = Denial {
            retry_after: Some(1),
            ..denial(
                cfg,
                503,
                Some("temporarily_unavailable"),
                "the revocations are not known yet",
            )
        };
        return verdict(Decision::Deny(d), Outcome::Unsynced);
    }
    let proof = ProofRequest { path, ..proof };
    check_token(cfg, state, (scheme, token), &proof, now)
}

/// What a request's headers say of a proof: the method and the `DPoP` headers (never the
/// origin: `:scheme` and `:authority` are the client's word, `dpop.public_origin` is the edge's).
fn note_proof_header<'a>(proof: &mut ProofRequest<'a>, name: &str, value: &'a [u8]) {
    match name {
        ":method" => proof.method = value,
        _ if name.eq_ignore_ascii_case("dpop") => {
            proof.proofs += 1;
            proof.proof.get_or_insert(value);
        }
        _ => {}
    }
}

/// The one token of the request's credentials headers with its scheme, and what the request
/// says for a proof; or the refusal: 400 for malformed or several tokens, 401 without one.
fn find_token<'a>(
    cfg: &Config,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<(Scheme, &'a str, ProofRequest<'a>), Box<Verdict<'a>>> {
    let mut primary: Option<(Scheme, &str)> = None;
    let mut alternative: Option<(Scheme, &str)> = None;
    let mut proof = ProofRequest::default();
    for (name, value) in headers {
        note_proof_header(&mut proof, name, value);
        let slot = if name.eq_ignore_ascii_case("authorization") {
            &mut primary
        } else if name.eq_ignore_ascii_case(&cfg.alternative_header) {
            &mut alternative
        } else {
            continue;
        };
        // Proxies join repeated headers with commas (Envoy does for HTTP/2), and a b64token never
        // holds one, so each comma-separated element counts as a header value of its own.
        for element in value
            .split(|&c| c == b',')
            .map(trim_ows)
            .filter(|e| !e.is_empty())
        {
            match parse_bearer(element) {
                Bearer::OtherScheme => {}
                Bearer::Bad => {
                    return Err(Box::new(bad_request(cfg, "malformed Bearer credentials")));
                }
                Bearer::Token(scheme, t) => {
                    if slot.is_some() {
                        return Err(Box::new(bad_request(cfg, "more than one access token")));
                    }
                    *slot = Some((scheme, t));
                }
            }
        }
    }
    match (primary, alternative) {
        (Some(a), Some(b)) if a != b => {
            Err(Box::new(bad_request(cfg, "more than one access token")))
        }
        (Some((scheme, t)), _) | (None, Some((scheme, t))) => Ok((scheme, t, proof)),
        (None, None) => Err(Box::new(verdict(
            deny(cfg, 401, None, "a bearer token is required"),
            Outcome::Missing,
        ))),
    }
}

/// The verdict on `token`: from the cache of verified tokens, else verified against the ring,
/// the lifetime rule and the revocations; then by its scheme and binding, and a bound token by
/// its proof, which no cache spares.
fn check_token<'a>(
    cfg: &Config,
    state: &EdgeState,
    (scheme, token): (Scheme, &'a str),
    proof: &ProofRequest<'_>,
    now: u64,
) -> Verdict<'a> {
    let cached = state.cache.borrow().get(token, now, cfg.clock_skew);
    let (known, remember) = match cached {
        Some(known) => (known, None),
        None => match verify_token(cfg, state, token, now) {
            Ok(remember) => {
                let known = Cached {
                    headers: remember.headers.clone(),
                    cnf: remember.cnf,
                };
                (known, Some(remember))
            }
            Err(refused) => return *refused,
        },
    };
    if let Some(refused) = delegation_refused(cfg, &known, proof.path) {
        return Verdict {
            remember,
            ..refused
        };
    }
    let v = match (scheme, known.cnf) {
        (Scheme::Bearer, None) => verdict(Decision::Allow(known.headers), Outcome::Allowed),
        (Scheme::Bearer, Some(_)) => verdict(
            deny(
                cfg,
                401,
                Some("invalid_token"),
                "a DPoP-bound token needs the DPoP scheme and a proof",
            ),
            Outcome::BoundAsBearer,
        ),
        (Scheme::Dpop, None) => {
            let d = dpop_denial(
                cfg,
                401,
                "invalid_token",
                "the access token is not DPoP-bound",
            );
            verdict(Decision::Deny(d), Outcome::UnboundAsDpop)
        }
        (Scheme::Dpop, Some(cnf)) => {
            match dpop::check(&cfg.dpop, &state.ring, state.es256, proof, token, &cnf, now) {
                Ok(accepted) => Verdict {
                    proof: Some(accepted),
                    ..verdict(Decision::Allow(known.headers), Outcome::DpopAllowed)
                },
                Err(refusal) => refused_proof(cfg, state, refusal, now),
            }
        }
    };
    Verdict { remember, ..v }
}

/// The verdict refusing a delegated token on this path by the `delegation` rules, if they do:
/// 403 `insufficient_scope` (RFC 6750 section 3.1), whatever the scheme.
fn delegation_refused(cfg: &Config, known: &Cached, path: &[u8]) -> Option<Verdict<'static>> {
    let actors = known
        .headers
        .iter()
        .find(|(name, _)| *name == crate::delegation::ACTORS_HEADER)?;
    let why = crate::delegation::refusal(&cfg.delegation, path, &actors.1)?;
    let d = deny(cfg, 403, Some("insufficient_scope"), why);
    Some(verdict(d, Outcome::Delegation))
}

/// A token not in the cache, verified and checked against the revocations: what to remember of
/// it (its identity headers, with its binding's for a bound token), or the verdict refusing it.
fn verify_token<'a>(
    cfg: &Config,
    state: &EdgeState,
    token: &'a str,
    now: u64,
) -> Result<Remember<'a>, Box<Verdict<'static>>> {
    let limits = Limits {
        skew: cfg.clock_skew,
        max_lifetime: state.max_lifetime,
    };
    let v = token::verify_any_with(&state.ring, token, now, limits)
        .map_err(|e| Box::new(refused_token(cfg, e)))?;
    if state.revoked.covers(v.body()) {
        let d = deny(
            cfg,
            401,
            Some("invalid_token"),
            "the access token was revoked",
        );
        return Err(Box::new(verdict(d, Outcome::Revoked)));
    }
    let cnf = v.confirmation().copied();
    let mut headers = identity_headers(v.body());
    if let Some(cnf) = &cnf {
        headers.push(("x-auth-binding", "dpop".to_owned()));
        headers.push(("x-auth-jkt", shared::dpop::jkt_b64(cnf)));
    }
    Ok(Remember {
        token,
        iat: v.body().iat,
        exp: v.body().exp,
        headers: headers.into(),
        cnf,
    })
}

/// The verdict on a proof that passed every check but the memory of used proofs: 401 for one
/// used before or too old to vouch for, 429 for a key over its share, 503 when the memory could
/// not be updated (each with `Retry-After: 1` where waiting helps).
pub fn replay_refused(cfg: &Config, replay: dpop::Replay) -> Verdict<'static> {
    match replay {
        dpop::Replay::Replayed => {
            let d = dpop_denial(cfg, 401, "invalid_dpop_proof", "the proof was used before");
            verdict(Decision::Deny(d), Outcome::DpopReplayed)
        }
        dpop::Replay::TooOld => {
            let d = dpop_denial(
                cfg,
                401,
                "invalid_dpop_proof",
                "the proof is older than this server can vouch for; make a new one",
            );
            verdict(Decision::Deny(d), Outcome::DpopTooOld)
        }
        dpop::Replay::KeyBusy => {
            let d = Denial {
                retry_after: Some(1),
                ..dpop_denial(
                    cfg,
                    429,
                    "invalid_dpop_proof",
                    "too many live proofs of this key; retry shortly",
                )
            };
            verdict(Decision::Deny(d), Outcome::DpopKeyBusy)
        }
        dpop::Replay::Busy => {
            let d = Denial {
                retry_after: Some(1),
                ..denial(
                    cfg,
                    503,
                    Some("temporarily_unavailable"),
                    "too many DPoP proofs at the moment",
                )
            };
            verdict(Decision::Deny(d), Outcome::DpopReplayBusy)
        }
    }
}

/// 401 for a token that failed verification.
fn refused_token(cfg: &Config, e: VerifyError) -> Verdict<'static> {
    let (outcome, description) = match e {
        VerifyError::Expired => (Outcome::Expired, "the access token expired"),
        VerifyError::Malformed | VerifyError::UnknownVersion => {
            (Outcome::Malformed, "the access token is invalid")
        }
        _ => (Outcome::Invalid, "the access token is invalid"),
    };
    Verdict {
        reason: Some(e),
        ..verdict(deny(cfg, 401, Some("invalid_token"), description), outcome)
    }
}

/// 401 under the DPoP challenge for a proof refused; a nonce to use where one is missing.
fn refused_proof(cfg: &Config, state: &EdgeState, refusal: Refusal, now: u64) -> Verdict<'static> {
    let code = refusal.error_code();
    let mut d = dpop_denial(cfg, 401, code, refusal.description());
    let outcome = if code == "use_dpop_nonce" {
        d.dpop_nonce = dpop::nonce(&state.ring, now);
        Outcome::DpopNonce
    } else {
        Outcome::DpopInvalid
    };
    verdict(Decision::Deny(d), outcome)
}

#[cfg(test)]
mod tests;
