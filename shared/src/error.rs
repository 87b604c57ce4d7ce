//! Error types shared by every consumer of the crate.

use core::fmt;

/// The RFC 6749 section 5.2 error codes the token endpoint answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Missing or repeated parameter, malformed value, wrong content type.
    InvalidRequest,
    /// Client authentication failed.
    InvalidClient,
    /// Wrong user credentials, or an unknown, expired, revoked or foreign refresh token.
    InvalidGrant,
    /// The client may not use this grant or may not impersonate.
    UnauthorizedClient,
    /// The `grant_type` is not one the server knows.
    UnsupportedGrantType,
    /// Token exchange: the `audience` or `resource` is not one the client may name (RFC 8693
    /// section 2.2.2, RFC 8707).
    InvalidTarget,
    /// Too many failed attempts; the client must wait (`Retry-After`).
    SlowDown,
    /// Something unexpected on the server.
    ServerError,
}

impl ErrorCode {
    /// The wire value of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidTarget => "invalid_target",
            Self::SlowDown => "slow_down",
            Self::ServerError => "server_error",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token endpoint request that cannot be served, with the code and a description safe to send
/// to the client (it never contains a submitted value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The RFC 6749 error code.
    pub code: ErrorCode,
    /// Human-readable explanation, fixed text.
    pub description: &'static str,
}

impl RequestError {
    pub(crate) const fn invalid_request(description: &'static str) -> Self {
        Self {
            code: ErrorCode::InvalidRequest,
            description,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

/// Why a token failed verification. Callers outside the crate see only that it failed
/// ([`fmt::Display`] is the same for every variant); the variant is for logs and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// Not a token of this format: wrong prefix, shape, encoding, length or layout.
    Malformed,
    /// A token of this family with a version this code does not know.
    UnknownVersion,
    /// The key id names no key of the ring.
    UnknownKey,
    /// The tag does not match.
    BadSignature,
    /// Authentic, but past its expiry (plus the allowed clock skew).
    Expired,
    /// Authentic, but issued in the future beyond the allowed clock skew.
    NotYetValid,
    /// Authentic, but claims a lifetime (`exp - iat`) longer than the verifier allows: minted with
    /// a leaked key rather than by the issuer.
    LifetimeTooLong,
}

impl VerifyError {
    /// A short, stable label of the reason, for counters and logs.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::UnknownVersion => "unknown_version",
            Self::UnknownKey => "unknown_key",
            Self::BadSignature => "bad_signature",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::LifetimeTooLong => "lifetime_too_long",
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid token")
    }
}

impl std::error::Error for VerifyError {}
impl std::error::Error for RequestError {}
