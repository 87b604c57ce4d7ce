//! A software statement (RFC 7591 section 2.3): the JWS a vendor signs for one client, which an
//! installation imports or receives at registration. Its claims commit to the client id, the
//! Argon2id hash of the client's secret (never the secret), the name, the software id, the
//! grants and the impersonation the client may be given, its issue time and its expiry.

use super::jws::{self, STATEMENT_TYP};
use super::{Refusal, Trust};
use serde::{Deserialize, Serialize};
use shared::dpop::sign::ProofKey;

/// Seconds a statement's `iat` may be ahead of the installation's clock.
pub const CLOCK_SKEW: u64 = 300;
/// Longest `client_name` and `software_id`, in characters.
pub const MAX_NAME: usize = 200;
/// Most Argon2 memory a secret's hash may ask for, in KiB (the issuer's own hashes use 19 MiB):
/// a hash asking for more would make each client authentication a denial of service.
pub const MAX_HASH_MEMORY_KIB: u32 = 64 * 1024;
/// Most Argon2 passes a secret's hash may ask for.
pub const MAX_HASH_PASSES: u32 = 4;

/// A grant a statement may allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VendorGrant {
    /// Resource owner password credentials.
    Password,
    /// Refreshing what the password grant issued.
    RefreshToken,
    /// Client credentials.
    ClientCredentials,
}

impl VendorGrant {
    /// Parses a grant's wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "password" => Some(Self::Password),
            "refresh_token" => Some(Self::RefreshToken),
            "client_credentials" => Some(Self::ClientCredentials),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Password => "password",
            Self::RefreshToken => "refresh_token",
            Self::ClientCredentials => "client_credentials",
        }
    }
}

/// What impersonation a statement allows with the client credentials grant.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Impersonation {
    /// None.
    #[default]
    None,
    /// `impersonate_claims` only.
    Claims,
    /// `impersonate_claims`, and the obsolete `impersonate_as` and `roles`.
    Legacy,
}

impl Impersonation {
    /// Parses `none`, `claims` or `legacy`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "claims" => Some(Self::Claims),
            "legacy" => Some(Self::Legacy),
            _ => None,
        }
    }

    /// The word [`Impersonation::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Claims => "claims",
            Self::Legacy => "legacy",
        }
    }
}

/// The claims of a statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// The client id the statement is for.
    pub client_id: String,
    /// The application's name.
    pub client_name: String,
    /// The vendor's id of the software, the same for every client of it.
    pub software_id: String,
    /// The Argon2id PHC string of the client secret.
    pub client_secret_hash: String,
    /// The grants the client may be given.
    pub grant_types: Vec<VendorGrant>,
    /// The impersonation it may be given.
    pub impersonation: Impersonation,
    /// When it was issued, seconds since the epoch.
    pub iat: u64,
    /// When it expires, seconds since the epoch.
    pub exp: u64,
}

/// A statement checked: who signed it, with which key, and its claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The trusted vendor's name.
    pub vendor: String,
    /// The key's `kid`.
    pub kid: String,
    /// The claims.
    pub statement: Statement,
}

impl Statement {
    /// Signs the statement under the vendor's `key`.
    pub fn sign(&self, key: &ProofKey) -> String {
        let claims = serde_json::to_value(self).unwrap_or_default();
        jws::sign(key, STATEMENT_TYP, &claims)
    }

    /// Checks the claims at `now`.
    fn check(&self, now: u64) -> Result<(), Refusal> {
        if !shared::rules::client_id_ok(&self.client_id) {
            return Err(Refusal::Claim("client_id"));
        }
        let name_ok = |s: &str| {
            !s.trim().is_empty()
                && s.chars().count() <= MAX_NAME
                && !s.chars().any(char::is_control)
        };
        if !name_ok(&self.client_name) {
            return Err(Refusal::Claim("client_name"));
        }
        if !name_ok(&self.software_id) {
            return Err(Refusal::Claim("software_id"));
        }
        if self.grant_types.is_empty() {
            return Err(Refusal::Claim("grant_types"));
        }
        check_hash(&self.client_secret_hash)?;
        if self.exp <= self.iat || self.iat > now + CLOCK_SKEW {
            return Err(Refusal::Claim("iat"));
        }
        if self.exp <= now {
            return Err(Refusal::Expired);
        }
        Ok(())
    }
}

/// The secret's hash: an Argon2id PHC string whose cost is bounded.
fn check_hash(phc: &str) -> Result<(), Refusal> {
    use argon2::password_hash::PasswordHash;
    let bad = Refusal::Claim("client_secret_hash");
    let hash = PasswordHash::new(phc).map_err(|_| bad.clone())?;
    let params = argon2::Params::try_from(&hash).map_err(|_| bad.clone())?;
    let ok = hash.algorithm.as_str() == "argon2id"
        && hash.hash.is_some_and(|h| h.len() >= 16)
        && params.m_cost() <= MAX_HASH_MEMORY_KIB
        && params.t_cost() <= MAX_HASH_PASSES
        && params.p_cost() == 1;
    if ok {
        Ok(())
    } else {
        Err(bad)
    }
}

/// Checks a statement (`jws`) against the trusted vendors at `now`. An unknown grant is told
/// apart from other malformed claims.
pub fn verify(jws: &str, trust: &Trust, now: u64) -> Result<Verified, Refusal> {
    let signed = jws::verify(jws, STATEMENT_TYP, trust)?;
    if let Some(grants) = signed.claims.get("grant_types").and_then(|g| g.as_array()) {
        if let Some(bad) = grants
            .iter()
            .find(|g| g.as_str().and_then(VendorGrant::parse).is_none())
        {
            let name: String = bad.as_str().unwrap_or("?").chars().take(40).collect();
            return Err(Refusal::UnknownGrant(name));
        }
    }
    let statement: Statement =
        serde_json::from_value(signed.claims).map_err(|_| Refusal::Claim("the claims' set"))?;
    statement.check(now)?;
    Ok(Verified {
        vendor: signed.vendor,
        kid: signed.kid,
        statement,
    })
}
