//! Who calls the admin HTTP API (`docs/admin-api.md`), and the console's sign-in.
//!
//! [`App::admin_caller`] accepts only this issuer's own DPoP-bound access tokens of users: the
//! token verified with the key ring, bound (`mmat2`) to the key of the request's proof (checked
//! and remembered as used like a proof at the token endpoint), issued to a client the
//! [`AdminPolicy`] accepts, no older than its `token_max_age`, not revoked (the store's latest
//! revocation number read first, and the revocations after the held ones when there are any,
//! so a revocation by any issuer of the store counts at once; `App::revoked_now`), and its
//! user in the store now and enabled. The roles are the user's record's as they are now.
//!
//! [`App::console_token`] is the console's password grant: the password checked exactly as the
//! token endpoint's (local or directory, the same back-off), a DPoP proof required, no refresh
//! token, a lifetime of `token_max_age`.

use super::{now, ApiError, App, Call, TokenIssued};
use crate::config::admin_http::{AdminPolicy, CONSOLE_CLIENT};
use shared::grant::{parse_token_request, Grant};
use shared::token::{self, Identity, Limits, SubjectKind, VerifiedToken};

/// The user behind an accepted admin request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCaller {
    /// The user's name.
    pub user: String,
    /// The client the token was issued to.
    pub client: String,
    /// The user's roles, as the store holds them now.
    pub roles: Vec<String>,
    /// The request's source address (the peer, or the trusted proxy's word), for the audit.
    pub address: String,
}

/// 401 for a refused token.
fn bad_token(description: &'static str) -> ApiError {
    ApiError::unauthorized("invalid_token", description)
}

impl App {
    /// The caller of an admin request by `method` to `url` (the `htu` its proof must name), or
    /// 401 (`WWW-Authenticate: DPoP`).
    pub async fn admin_caller(
        &self,
        call: &Call,
        (method, url): (&str, &str),
        policy: &AdminPolicy,
    ) -> Result<AdminCaller, ApiError> {
        let token = dpop_token(call)?;
        let Some(proof_text) = super::dpop::proof_header(call)
            .map_err(|_| ApiError::unauthorized("invalid_dpop_proof", "malformed DPoP header"))?
        else {
            return Err(ApiError::unauthorized(
                "invalid_dpop_proof",
                "a DPoP proof is required",
            ));
        };
        let verified = self.admin_token(token, policy)?;
        let body = verified.body();
        let Some(cnf) = body.cnf else {
            return Err(bad_token("the token is not bound to a DPoP key"));
        };
        let proof = self
            .accept_proof(proof_text, method, url, Some(token))
            .await
            .map_err(|e| match e.status.as_u16() {
                400 => ApiError::unauthorized("invalid_dpop_proof", "the DPoP proof is refused"),
                _ => e,
            })?;
        if !proof.confirms(&cnf) {
            return Err(ApiError::unauthorized(
                "invalid_dpop_proof",
                "the proof's key is not the token's",
            ));
        }
        if body.identity.kind != SubjectKind::User || body.identity.subject.is_empty() {
            return Err(bad_token("the token is not a user's"));
        }
        if !policy.accepts_client(&body.client) {
            return Err(bad_token("tokens of this client are not accepted here"));
        }
        if now().saturating_sub(body.iat) > policy.token_max_age {
            return Err(bad_token("the token is too old for administration"));
        }
        if self.revoked_now(body).await? {
            return Err(bad_token("the token is revoked"));
        }
        let user = self.store.user(&body.identity.subject).await?;
        let Some(user) = user.filter(|u| !u.disabled) else {
            return Err(bad_token("the token's user is unknown or disabled"));
        };
        let address = call
            .client_ip(&self.settings.trusted_proxies)
            .map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        Ok(AdminCaller {
            user: body.identity.subject.clone(),
            client: body.client.clone(),
            roles: user.roles,
            address,
        })
    }

    /// `token` verified by the key ring, within the lifetime this issuer mints.
    fn admin_token(&self, token: &str, policy: &AdminPolicy) -> Result<VerifiedToken, ApiError> {
        let limits = Limits {
            skew: 0,
            max_lifetime: self.settings.access_ttl.max(policy.token_max_age),
        };
        token::verify_any_with(&self.ring(), token, now(), limits)
            .map_err(|_| bad_token("the token is invalid or expired"))
    }

    /// `POST /apiv2/oauth/token` on the admin listener, for [`CONSOLE_CLIENT`] alone: the
    /// password grant with a DPoP proof for `url`, an access token of `token_max_age` seconds
    /// and no refresh token.
    pub async fn console_token(
        &self,
        call: &Call,
        url: &str,
        policy: &AdminPolicy,
    ) -> Result<TokenIssued, ApiError> {
        let issued_at = now();
        call.require_form()?;
        let req = parse_token_request(&call.body)?;
        if req.client_id.as_deref() != Some(CONSOLE_CLIENT) {
            return Err(ApiError::invalid_client());
        }
        let Grant::Password { username, password } = req.grant else {
            return Err(ApiError::oauth(
                shared::error::ErrorCode::UnsupportedGrantType,
                "the console signs in with the password grant",
            ));
        };
        let Some(text) = super::dpop::proof_header(call)? else {
            return Err(ApiError::invalid_dpop_proof("a DPoP proof is required"));
        };
        let proof = self.accept_proof(text, "POST", url, None).await?;
        let ip = call.client_ip(&self.settings.trusted_proxies);
        let (user, name) = self
            .password
            .sign_in(ip, CONSOLE_CLIENT, (username, password))
            .await?;
        let ring = self.ring();
        let key = ring
            .signing_key()
            .ok_or_else(|| ApiError::internal(&"no signing key"))?;
        let identity = Identity {
            kind: SubjectKind::User,
            subject: name,
            roles: user.roles.clone(),
            claims: user.token_claims(),
        };
        let iat = issued_at.max(user.tokens_after());
        let mut body = self.body(key, CONSOLE_CLIENT, identity, iat, None, Some(proof.jkt));
        body.exp = iat + policy.token_max_age;
        let body = self.not_revoked(body)?;
        let access = self.sign(key, &body)?;
        Ok(TokenIssued {
            access_token: access,
            token_type: "DPoP",
            expires_in: policy.token_max_age,
            refresh_token: None,
            issued_token_type: None,
        })
    }
}

/// The token of `Authorization: DPoP <token>`; any other scheme, or none, is refused.
fn dpop_token(call: &Call) -> Result<&str, ApiError> {
    let value = call
        .authorization()
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| bad_token("an Authorization: DPoP header is required"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| bad_token("malformed Authorization header"))?;
    if !scheme.eq_ignore_ascii_case("dpop") {
        return Err(bad_token("only DPoP-bound tokens are accepted here"));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(bad_token("malformed Authorization header"));
    }
    Ok(token)
}
