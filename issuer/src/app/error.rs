//! What an endpoint refuses with: [`ApiError`], an RFC 6749 error (or 403, 405, 408, 413, 429,
//! 5xx) as a value. The grants build it; `crate::http` renders it, in one place.

use crate::store::StoreError;
use shared::error::{ErrorCode, RequestError};
use std::borrow::Cow;
use warp::http::StatusCode;

/// A refusal, as the grants and endpoints return it: an HTTP status, the RFC 6749 code and
/// description, and what the answer must carry. The HTTP layer renders it, in one place
/// (`crate::http`).
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) description: Cow<'static, str>,
    pub(crate) retry_after: Option<u64>,
    pub(crate) basic_challenge: bool,
    pub(crate) allow: Option<&'static str>,
    /// Close the connection after the answer (the request was not read to its end).
    pub(crate) close: bool,
    /// Already logged where it was decided, with more than rendering knows (the path).
    pub(crate) logged: bool,
    /// A server nonce for the client's next DPoP proof (`DPoP-Nonce`).
    pub(crate) dpop_nonce: Option<String>,
    /// The `error` of a `WWW-Authenticate: DPoP` challenge (a refused admin token).
    pub(crate) dpop_challenge: Option<&'static str>,
}

/// What a 503 says when the cause is the issuer's own (its store, its audit trail).
const RETRY_LATER: &str = "the service is temporarily unavailable; retry later";

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        description: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            status,
            code,
            description: description.into(),
            retry_after: None,
            basic_challenge: false,
            allow: None,
            close: false,
            logged: false,
            dpop_nonce: None,
            dpop_challenge: None,
        }
    }

    /// 401 `invalid_token` with a `WWW-Authenticate: DPoP` challenge whose `error` is
    /// `challenge` (`invalid_token`, `invalid_dpop_proof`).
    pub fn unauthorized(challenge: &'static str, description: &'static str) -> Self {
        let mut e = Self::new(StatusCode::UNAUTHORIZED, "invalid_token", description);
        e.dpop_challenge = Some(challenge);
        e
    }

    /// 400 with an RFC 6749 code.
    pub fn oauth(code: ErrorCode, description: impl Into<Cow<'static, str>>) -> Self {
        let status = match code {
            ErrorCode::InvalidClient => StatusCode::UNAUTHORIZED,
            ErrorCode::SlowDown => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut e = Self::new(status, code.as_str(), description);
        e.basic_challenge = code == ErrorCode::InvalidClient;
        e
    }

    /// 400 `invalid_request`.
    pub fn invalid_request(description: impl Into<Cow<'static, str>>) -> Self {
        Self::oauth(ErrorCode::InvalidRequest, description)
    }

    /// 401 `invalid_client` with a Basic challenge.
    pub fn invalid_client() -> Self {
        Self::oauth(ErrorCode::InvalidClient, "client authentication failed")
    }

    /// 400 `invalid_grant`.
    pub fn invalid_grant(description: &'static str) -> Self {
        Self::oauth(ErrorCode::InvalidGrant, description)
    }

    /// 400 `unauthorized_client`.
    pub fn unauthorized_client(description: &'static str) -> Self {
        Self::oauth(ErrorCode::UnauthorizedClient, description)
    }

    /// 400 `invalid_dpop_proof` (RFC 9449 section 5).
    pub fn invalid_dpop_proof(description: &'static str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_dpop_proof", description)
    }

    /// 400 `use_dpop_nonce` with the nonce to use (RFC 9449 section 8).
    pub fn use_dpop_nonce(nonce: Option<String>) -> Self {
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            "use_dpop_nonce",
            "the DPoP proof must carry the server's nonce (DPoP-Nonce)",
        );
        e.dpop_nonce = nonce;
        e
    }

    /// 403 `access_denied`: the client is known but may not use this endpoint.
    pub fn forbidden(description: &'static str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "access_denied", description)
    }

    /// 429 `slow_down` with `Retry-After`.
    pub fn throttled(wait: u64) -> Self {
        Self::slow_down(wait, "too many failed attempts; retry later")
    }

    /// 429 `slow_down` with `Retry-After: wait` and this description.
    pub fn slow_down(wait: u64, description: &'static str) -> Self {
        let mut e = Self::oauth(ErrorCode::SlowDown, description);
        e.retry_after = Some(wait.max(1));
        e
    }

    /// A storage failure: 503 `temporarily_unavailable` with `Retry-After` when the database is
    /// unreachable or kept refusing for contention (the client may retry; nothing was
    /// acknowledged), else 500 `server_error`. The cause is logged here and never sent.
    pub fn store(cause: &StoreError) -> Self {
        match cause {
            cause if cause.is_transient() => {
                tracing::warn!(
                    error = crate::display::Causes(cause).to_string(),
                    "store unavailable"
                );
                Self::unavailable(RETRY_LATER, 1)
            }
            _ => Self::internal(&crate::display::Causes(cause)),
        }
    }

    /// 503 `temporarily_unavailable` with `Retry-After`: no directory server answered (each
    /// failure was logged where it happened). Never the user's fault: nothing is charged.
    pub fn directory_unavailable() -> Self {
        Self::unavailable("the directory is temporarily unavailable; retry later", 2)
    }

    /// 503 `temporarily_unavailable` with `Retry-After`: the token's record could not be queued
    /// for the audit trail in time (logged where it was found), so no token is issued.
    pub fn unrecorded() -> Self {
        Self::unavailable(RETRY_LATER, 1)
    }

    /// 503 `temporarily_unavailable` with this description and `Retry-After: wait`.
    fn unavailable(description: &'static str, wait: u64) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            description,
        );
        e.retry_after = Some(wait);
        e
    }

    /// 500 `server_error`; the cause is logged here and never sent.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = cause.to_string(), "internal error");
        Self::oauth(ErrorCode::ServerError, "internal server error")
    }

    /// The RFC 6749 code (or the label used for non-OAuth answers), for metrics.
    pub fn code(&self) -> &'static str {
        self.code
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        Self::oauth(e.code, e.description)
    }
}

impl From<StoreError> for ApiError {
    fn from(cause: StoreError) -> Self {
        Self::store(&cause)
    }
}
