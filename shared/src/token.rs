//! Access tokens: mint, verify and inspect. The format is specified in `docs/token-format.md`.
//!
//! A token is `mmat1.<body>.<tag>`: the family `mmat` and version `1`, the body in unpadded
//! base64url, and an HMAC-SHA256 tag (unpadded base64url) over everything before the last dot.
//! The prefix is inside the MAC, so a body can never be replayed under another version or purpose.
//!
//! A bound (sender-constrained) token is `mmat2.<body>.<tag>`: the same body followed by the
//! 32-byte RFC 7638 thumbprint of the holder's key ([`TokenBody::cnf`]). A verifier that knows only
//! version 1 refuses it as an unknown version; one that knows both must refuse it as `Bearer` and
//! accept it only with a DPoP proof by that key ([`crate::dpop`]).

use crate::error::VerifyError;
use crate::key::{HmacSha256, Key, KeyRing};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::Mac;

mod body;
mod chain;

use body::{decode_body, encode_body, identity_ok};
pub use chain::Chain;

/// The token family: every access token starts with this.
pub const FAMILY: &str = "mmat";
/// The format version this code mints and verifies.
pub const VERSION: u8 = 1;
/// Everything before the body: family, version and the separating dot.
pub const PREFIX: &str = "mmat1.";
/// The version of a bound (sender-constrained) token: the body of version 1 followed by the
/// 32-byte confirmation. An edge that knows only version 1 refuses it as an unknown version.
pub const BOUND_VERSION: u8 = 2;
/// The prefix of a bound token.
pub const BOUND_PREFIX: &str = "mmat2.";
/// Length of a confirmation: the RFC 7638 SHA-256 thumbprint of the holder's public key.
pub const JKT_LEN: usize = 32;
/// Longest token accepted, in bytes. Longer input is rejected before any decoding.
pub const MAX_TOKEN_LEN: usize = 4096;
/// Longest string field (client, subject, role, claim type or value), in bytes.
pub const MAX_FIELD_LEN: usize = 255;
/// Most roles, and most claims, one token carries.
pub const MAX_ITEMS: usize = 64;
/// Length of the token id in bytes (128 bits).
pub const JTI_LEN: usize = 16;
/// The most clock skew any verifier may allow (the filter's `clock_skew_seconds` is at most this):
/// a token can be accepted somewhere until `exp + MAX_CLOCK_SKEW`, and from `iat - MAX_CLOCK_SKEW`,
/// so whatever revokes it must cover that much.
pub const MAX_CLOCK_SKEW: u64 = 600;
/// Most clients one actor chain holds ([`Chain::actors`]): the hard cap on a delegation's
/// depth, whatever an issuer's policy allows.
pub const MAX_CHAIN_DEPTH: usize = 8;
const TAG_LEN: usize = 32;
const TAG_B64_LEN: usize = 43;
/// Bodies up to this many bytes are decoded without an allocation (most are under 200).
const SMALL_BODY_LEN: usize = 384;

/// Whom a token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectKind {
    /// A user who signed in with the password grant (or a refresh of one).
    User,
    /// The client itself (client credentials without impersonation).
    Client,
    /// A user or claim set impersonated by the client, which is the actor.
    Impersonation,
}

impl SubjectKind {
    fn to_byte(self) -> u8 {
        match self {
            Self::User => 1,
            Self::Client => 2,
            Self::Impersonation => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::User),
            2 => Some(Self::Client),
            3 => Some(Self::Impersonation),
            _ => None,
        }
    }

    /// The lower-case name used in headers, JSON and docs: `user`, `client`, `impersonation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Client => "client",
            Self::Impersonation => "impersonation",
        }
    }
}

/// One `type=value` claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    /// Claim type, for example `email`. Never empty, never contains `,` or `=`.
    pub typ: String,
    /// Claim value. Never empty, never contains `,`.
    pub value: String,
}

/// The identity a token carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User, client itself, or impersonation.
    pub kind: SubjectKind,
    /// User name; empty for [`SubjectKind::Client`] and for claim-only impersonation.
    pub subject: String,
    /// Roles of the subject.
    pub roles: Vec<String>,
    /// Claims of the subject.
    pub claims: Vec<Claim>,
}

/// Everything a token states. Obtained untrusted from [`inspect`] or trusted inside a
/// [`VerifiedToken`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBody {
    /// Id of the key that signed the token.
    pub kid: u32,
    /// Random token id.
    pub jti: [u8; JTI_LEN],
    /// Issued at, seconds since the Unix epoch.
    pub iat: u64,
    /// Expires at, seconds since the Unix epoch.
    pub exp: u64,
    /// Id of the client the token was issued to (the actor for impersonation).
    pub client: String,
    /// Whom the token speaks for.
    pub identity: Identity,
    /// The confirmation of a bound token: the RFC 7638 SHA-256 thumbprint (`jkt`) of the key
    /// whose DPoP proof must accompany every use. `Some` is minted as `mmat2`, `None` as `mmat1`.
    /// A verifier must refuse a bound token presented as `Bearer`.
    pub cnf: Option<[u8; JKT_LEN]>,
    /// Who acts for the subject, for a token obtained by token exchange; `None` for every other
    /// token (minted exactly as before chains existed).
    pub act: Option<Chain>,
}

impl TokenBody {
    /// The token id as 32 lower-case hex digits.
    pub fn jti_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(2 * self.jti.len());
        for b in self.jti {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        out
    }
}

/// A token whose tag was checked under a key of the ring and whose lifetime covers the time of
/// verification (and, with [`verify_with`], whose claimed lifetime is within the limit). Only
/// [`verify`] and [`verify_with`] make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken(TokenBody);

impl VerifiedToken {
    /// The verified contents.
    pub fn body(&self) -> &TokenBody {
        &self.0
    }

    /// The verified contents, by value.
    pub fn into_body(self) -> TokenBody {
        self.0
    }

    /// The key thumbprint a bound token is confirmed with; `None` for a bearer token.
    pub fn confirmation(&self) -> Option<&[u8; JKT_LEN]> {
        self.0.cnf.as_ref()
    }
}

/// Why a body could not be minted into a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MintError {
    /// A string is empty where it must not be, too long, or holds a forbidden character.
    InvalidField(&'static str),
    /// More than [`MAX_ITEMS`] roles or claims.
    TooManyItems,
    /// The identity does not fit its kind (for example a client token with a subject).
    InconsistentIdentity,
    /// `exp` is before `iat`.
    ExpiresBeforeIssued,
    /// The body's `kid` is not the id of the key given.
    KeyMismatch,
    /// The finished token would exceed [`MAX_TOKEN_LEN`].
    TooLong,
    /// An actor chain with no actor or more than [`MAX_CHAIN_DEPTH`].
    ChainDepth,
    /// An actor chain naming one client twice (the origin included).
    ChainCycle,
}

impl core::fmt::Display for MintError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::InvalidField(name) => write!(f, "invalid {name}"),
            Self::TooManyItems => write!(f, "more than {MAX_ITEMS} roles or claims"),
            Self::InconsistentIdentity => f.write_str("identity does not fit its kind"),
            Self::ExpiresBeforeIssued => f.write_str("expiry before issue time"),
            Self::KeyMismatch => f.write_str("kid does not match the signing key"),
            Self::TooLong => write!(f, "token longer than {MAX_TOKEN_LEN} bytes"),
            Self::ChainDepth => write!(f, "actor chain of 0 or over {MAX_CHAIN_DEPTH} clients"),
            Self::ChainCycle => f.write_str("actor chain naming a client twice"),
        }
    }
}

impl std::error::Error for MintError {}

fn tag(key: &Key, signed: &[u8]) -> HmacSha256 {
    let mut mac = key.mac();
    mac.update(signed);
    mac
}

/// Mints a token for `body` under `key`. `body.kid` must be `key.id()`.
pub fn mint(key: &Key, body: &TokenBody) -> Result<String, MintError> {
    if body.kid != key.id() {
        return Err(MintError::KeyMismatch);
    }
    if body.exp < body.iat {
        return Err(MintError::ExpiresBeforeIssued);
    }
    if !crate::rules::name_ok(&body.client) {
        return Err(MintError::InvalidField("client"));
    }
    identity_ok(&body.identity)?;
    if let Some(chain) = &body.act {
        chain::chain_ok(chain, &body.client)?;
    }
    let raw = encode_body(body);
    let prefix = if body.cnf.is_some() {
        BOUND_PREFIX
    } else {
        PREFIX
    };
    let mut token = String::with_capacity(prefix.len() + raw.len() * 4 / 3 + 2 + TAG_B64_LEN);
    token.push_str(prefix);
    URL_SAFE_NO_PAD.encode_string(&raw, &mut token);
    let mac = tag(key, token.as_bytes()).finalize().into_bytes();
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(mac, &mut token);
    if token.len() > MAX_TOKEN_LEN {
        return Err(MintError::TooLong);
    }
    Ok(token)
}

/// A token split into its parts, nothing checked but the shape and the tag's encoding.
struct Parts<'a> {
    /// Everything the tag covers: the prefix and the body as sent.
    signed: &'a str,
    body_b64: &'a str,
    tag: [u8; TAG_LEN],
    /// Whether the prefix is [`BOUND_PREFIX`]: the body must end with a confirmation.
    bound: bool,
}

fn split(token: &str) -> Result<Parts<'_>, VerifyError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(VerifyError::Malformed);
    }
    let (prefix, bound) = if token.starts_with(BOUND_PREFIX) {
        (BOUND_PREFIX, true)
    } else {
        (PREFIX, false)
    };
    let Some(rest) = token.strip_prefix(prefix) else {
        let family_dot = token.find('.').map(|i| &token[..i]);
        let other_version = family_dot.and_then(|head| head.strip_prefix(FAMILY));
        return match other_version {
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                Err(VerifyError::UnknownVersion)
            }
            _ => Err(VerifyError::Malformed),
        };
    };
    let (body_b64, tag_b64) = rest.split_once('.').ok_or(VerifyError::Malformed)?;
    if tag_b64.len() != TAG_B64_LEN {
        return Err(VerifyError::Malformed);
    }
    let mut tag = [0u8; TAG_LEN];
    let n = URL_SAFE_NO_PAD
        .decode_slice(tag_b64, &mut tag)
        .map_err(|_| VerifyError::Malformed)?;
    if n != TAG_LEN {
        return Err(VerifyError::Malformed);
    }
    let signed = &token[..prefix.len() + body_b64.len()];
    Ok(Parts {
        signed,
        body_b64,
        tag,
        bound,
    })
}

/// The body's bytes: on the stack when they fit `small` (most bodies are under 200 bytes),
/// otherwise in `large`.
fn decode_raw<'b>(
    body_b64: &str,
    small: &'b mut [u8; SMALL_BODY_LEN],
    large: &'b mut Vec<u8>,
) -> Result<&'b [u8], VerifyError> {
    // The default engine config rejects padding and non-zero trailing bits: one encoding per value.
    if body_b64.len() <= SMALL_BODY_LEN / 3 * 4 {
        let n = URL_SAFE_NO_PAD.decode_slice(body_b64, small);
        Ok(&small[..n.map_err(|_| VerifyError::Malformed)?])
    } else {
        *large = URL_SAFE_NO_PAD
            .decode(body_b64)
            .map_err(|_| VerifyError::Malformed)?;
        Ok(large)
    }
}

/// What a verifier tolerates once a token's tag is good: the clock difference on its expiry and
/// issue time, and the longest lifetime it may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Seconds of clock difference allowed either way: expired when `now >= exp + skew`, not yet
    /// valid when `iat > now + skew`.
    pub skew: u64,
    /// Longest lifetime (`exp - iat`) a token may claim, in seconds: the issuer's access token
    /// lifetime. The issuer never mints a longer one, so a token claiming more was made with a
    /// leaked key, and is refused ([`VerifyError::LifetimeTooLong`]) although its tag verifies:
    /// it cannot outlive that key's rotation. `u64::MAX`: no limit.
    pub max_lifetime: u64,
}

/// Verifies `token` with the key its id names and checks its lifetime against `now` (seconds
/// since the Unix epoch), allowing `skew` seconds either way, with no limit on the lifetime it
/// claims. Verifiers that know the issuer's access token lifetime (the filter, the issuer) use
/// [`verify_with`].
///
/// The tag is checked before the body is read beyond its key id, so a forged token costs no
/// allocation. Every failure displays the same; [`VerifyError`]'s variant says why, for logs and
/// counters.
pub fn verify(
    ring: &KeyRing,
    token: &str,
    now: u64,
    skew: u64,
) -> Result<VerifiedToken, VerifyError> {
    verify_with(
        ring,
        token,
        now,
        Limits {
            skew,
            max_lifetime: u64::MAX,
        },
    )
}

/// Verifies `token` as [`verify`] does, with `limits.skew`, then refuses it if it claims a
/// lifetime (`exp - iat`) longer than `limits.max_lifetime` ([`VerifyError::LifetimeTooLong`]).
/// The lifetime is checked last: a token that is expired and claims too long a lifetime is
/// [`VerifyError::Expired`].
///
/// Bearer tokens only: a bound token (`mmat2`) is refused as [`VerifyError::UnknownVersion`],
/// exactly as before bound tokens existed, so a caller that knows nothing of DPoP can never
/// accept one as `Bearer`. A caller that checks DPoP proofs uses [`verify_any_with`].
pub fn verify_with(
    ring: &KeyRing,
    token: &str,
    now: u64,
    limits: Limits,
) -> Result<VerifiedToken, VerifyError> {
    verify_parts(ring, token, now, limits, false)
}

/// Verifies a bearer (`mmat1`) or a bound (`mmat2`) token as [`verify_with`] does. The caller
/// must then hold a bound token ([`VerifiedToken::confirmation`] is `Some`) to a DPoP proof by
/// that key ([`crate::dpop::Proof::confirms`]); a token presented as `Bearer` goes through
/// [`verify_with`] instead.
pub fn verify_any_with(
    ring: &KeyRing,
    token: &str,
    now: u64,
    limits: Limits,
) -> Result<VerifiedToken, VerifyError> {
    verify_parts(ring, token, now, limits, true)
}

/// Whether `token` has the prefix of a bound token: lets a verifier of `Bearer` tokens tell
/// "bound, present it with a DPoP proof" apart from other unknown versions. Says nothing of
/// whether the token is authentic.
pub fn is_bound(token: &str) -> bool {
    token.starts_with(BOUND_PREFIX)
}

fn verify_parts(
    ring: &KeyRing,
    token: &str,
    now: u64,
    limits: Limits,
    allow_bound: bool,
) -> Result<VerifiedToken, VerifyError> {
    let skew = limits.skew;
    let parts = split(token)?;
    if parts.bound && !allow_bound {
        return Err(VerifyError::UnknownVersion);
    }
    let (mut small, mut large) = ([0u8; SMALL_BODY_LEN], Vec::new());
    let raw = decode_raw(parts.body_b64, &mut small, &mut large)?;
    let kid = raw.first_chunk().map(|b| u32::from_be_bytes(*b));
    let key = ring
        .get(kid.ok_or(VerifyError::Malformed)?)
        .ok_or(VerifyError::UnknownKey)?;
    tag(key, parts.signed.as_bytes())
        .verify_slice(&parts.tag)
        .map_err(|_| VerifyError::BadSignature)?;
    let body = decode_body(raw, parts.bound).ok_or(VerifyError::Malformed)?;
    if body.exp.saturating_add(skew) <= now {
        return Err(VerifyError::Expired);
    }
    if body.iat > now.saturating_add(skew) {
        return Err(VerifyError::NotYetValid);
    }
    if body.exp.saturating_sub(body.iat) > limits.max_lifetime {
        return Err(VerifyError::LifetimeTooLong);
    }
    Ok(VerifiedToken(body))
}

/// Decodes a token without any key. The result is **not** authentic: anyone can make a token
/// that inspects well. Use it only to show a holder its own token (expiry, identity).
pub fn inspect(token: &str) -> Result<TokenBody, VerifyError> {
    let parts = split(token)?;
    let (mut small, mut large) = ([0u8; SMALL_BODY_LEN], Vec::new());
    let raw = decode_raw(parts.body_b64, &mut small, &mut large)?;
    decode_body(raw, parts.bound).ok_or(VerifyError::Malformed)
}

#[cfg(test)]
mod bound_tests;

#[cfg(test)]
mod chain_tests;

#[cfg(test)]
mod tests;
