//! The token exchange grant (RFC 8693): a client trades an access token of this issuer (the
//! subject token) for one that speaks for the same subject with the client acting, its actor
//! chain recorded in the token (delegation, `docs/issuer.md`). What the client may exchange is
//! its [`ExchangePolicy`]; a client without one cannot. The new token never outlives the subject
//! token (nor the actor token), carries the subject token's family tag so that revoking the
//! family revokes it, and comes with no refresh token. Every refusal is audited.

use super::{now, ApiError, App, Issue};
use crate::store::revocation::FAMILY_TAG_LEN;
use crate::store::{AuditAction, AuditEvent, ClientRecord, ExchangePolicy};
use serde_json::json;
use shared::dpop::Proof;
use shared::token::{Chain, SubjectKind, TokenBody};
use shared::ErrorCode;
use zeroize::Zeroizing;

/// What the request asks to exchange, as parsed.
pub(super) struct Exchange {
    /// `subject_token`.
    pub subject_token: Zeroizing<String>,
    /// `actor_token`, if sent.
    pub actor_token: Option<Zeroizing<String>>,
    /// `audience` or `resource`, if sent.
    pub audience: Option<String>,
}

/// Why an exchange is refused: the answer, and the reason the audit trail records.
struct Refusal {
    error: Box<ApiError>,
    reason: &'static str,
}

fn refuse(code: ErrorCode, reason: &'static str, description: &'static str) -> Refusal {
    Refusal {
        error: Box::new(ApiError::oauth(code, description)),
        reason,
    }
}

/// A subject or actor token that is not an active access token of this issuer (malformed,
/// foreign, expired or revoked): RFC 8693 section 2.2.2 answers `invalid_request`.
fn inactive(which: &'static str) -> Refusal {
    let description = if which == "subject" {
        "the subject_token is not an active access token of this issuer"
    } else {
        "the actor_token is not an active access token of this issuer"
    };
    refuse(ErrorCode::InvalidRequest, which, description)
}

impl App {
    /// What to mint for `client_id` (its `client` record) exchanging `ex`, with the request's
    /// DPoP `proof` if it had one; each refusal audited.
    pub(super) fn token_exchange(
        &self,
        client_id: &str,
        client: &ClientRecord,
        ex: Exchange,
        proof: Option<&Proof>,
    ) -> Result<Issue, ApiError> {
        self.exchange_of(client_id, client, &ex, proof).map_err(|r| {
            tracing::info!(target: "audit", client = client_id, reason = r.reason, "token exchange refused");
            self.audit.record(AuditEvent::new(
                now(),
                client_id,
                AuditAction::ExchangeRefused,
                client_id,
                serde_json::Value::Null,
                json!({ "refused": r.reason, "error": r.error.code() }),
            ));
            *r.error
        })
    }

    fn exchange_of(
        &self,
        client_id: &str,
        client: &ClientRecord,
        ex: &Exchange,
        proof: Option<&Proof>,
    ) -> Result<Issue, Refusal> {
        let Some(policy) = client.exchange.as_ref() else {
            return Err(refuse(
                ErrorCode::UnauthorizedClient,
                "no_policy",
                "the token exchange grant is not enabled for this client",
            ));
        };
        let subject = self.live_token(&ex.subject_token, proof, "subject")?;
        let mut expires_by = subject.exp;
        if let Some(actor_token) = &ex.actor_token {
            let actor = self.live_token(actor_token, proof, "actor")?;
            if actor.client != client_id
                || actor.identity.kind != SubjectKind::Client
                || actor.act.is_some()
            {
                return Err(refuse(
                    ErrorCode::InvalidRequest,
                    "actor_foreign",
                    "the actor_token must be the authenticated client's own token",
                ));
            }
            expires_by = expires_by.min(actor.exp);
        }
        check_target(policy, ex.audience.as_deref())?;
        let act = chain(policy, client_id, &subject)?;
        let mut family = [0; FAMILY_TAG_LEN];
        family.copy_from_slice(&subject.jti[..FAMILY_TAG_LEN]);
        Ok(Issue {
            identity: subject.identity,
            family: Some(family),
            refresh: None,
            not_before: 0,
            act: Some(act),
            expires_by: Some(expires_by),
        })
    }

    /// `body` with the actor chain `act`, expiring at `expires_by` at the latest; refused if that
    /// is before its issue time (a subject token about to expire as the client's revocation
    /// lifted).
    pub(super) fn exchanged(
        &self,
        mut body: TokenBody,
        act: shared::token::Chain,
        expires_by: Option<u64>,
    ) -> Result<TokenBody, ApiError> {
        body.act = Some(act);
        body.exp = body.exp.min(expires_by.unwrap_or(u64::MAX));
        if body.exp <= body.iat {
            return Err(ApiError::invalid_request(
                "the subject_token expires before a token could be issued",
            ));
        }
        Ok(body)
    }

    /// `token` as an active access token of this issuer: verified now, no revocation covering
    /// it, and, if bound, presented with a proof by its key (a holder without the key cannot
    /// pass it on: RFC 9449 gives a subject token no proof of its own, so the request's must be
    /// by that key).
    fn live_token(
        &self,
        token: &str,
        proof: Option<&Proof>,
        which: &'static str,
    ) -> Result<TokenBody, Refusal> {
        let v = self
            .verified_access_token(token)
            .ok_or_else(|| inactive(which))?;
        if self.revoked().covers(v.body()) {
            return Err(inactive(which));
        }
        if let Some(cnf) = v.confirmation() {
            if !proof.is_some_and(|p| p.confirms(cnf)) {
                return Err(Refusal {
                    error: Box::new(ApiError::invalid_dpop_proof(
                        "the token presented is bound to a DPoP key: send the request with a \
                         DPoP proof made with that key",
                    )),
                    reason: "bound_without_proof",
                });
            }
        }
        Ok(v.into_body())
    }
}

/// The audience asked for, if any, must be one the client's policy names.
fn check_target(policy: &ExchangePolicy, audience: Option<&str>) -> Result<(), Refusal> {
    match audience {
        Some(a) if !policy.allows_audience(a) => Err(refuse(
            ErrorCode::InvalidTarget,
            "audience",
            "this client may not ask for that audience",
        )),
        _ => Ok(()),
    }
}

/// The new token's chain: `client_id` acting, in front of whoever acted in the subject token.
/// The subject token must be one the policy lets it exchange (its client, and its subject's roles
/// or claims where the policy names any); the client must not be in the
/// chain already (a cycle); the chain no deeper than the policy allows.
fn chain(policy: &ExchangePolicy, client_id: &str, subject: &TokenBody) -> Result<Chain, Refusal> {
    if !policy.from_client(&subject.client) {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            "subject_client",
            "this client may not exchange tokens issued to the subject token's client",
        ));
    }
    if !policy.for_subject(&subject.identity) {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            "subject_not_allowed",
            "this client may not act for the subject token's subject (its roles or claims)",
        ));
    }
    let (origin, mut actors) = match &subject.act {
        Some(c) => (c.origin.clone(), c.actors.clone()),
        None => (subject.client.clone(), Vec::new()),
    };
    if origin == client_id || actors.iter().any(|a| a == client_id) {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            "cycle",
            "this client is already in the subject token's actor chain",
        ));
    }
    actors.insert(0, client_id.to_owned());
    if actors.len() > policy.depth() {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            "depth",
            "the actor chain would be deeper than this client may make it",
        ));
    }
    Ok(Chain { origin, actors })
}
