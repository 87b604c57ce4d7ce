//! The security events the endpoints decide, as audit trail entries queued on the
//! [`crate::audit::AuditLog`] (`docs/operate.md`, "Audit trail"). The actor is the client of
//! the request; the target the user where there is one. No token is recorded, only ids: an
//! access token's `jti`, a refresh token family's tag (the prefix of its access tokens' ids).

use super::{now, ApiError, App};
use crate::audit::AuditLog;
use crate::store::revocation::FAMILY_TAG_LEN;
use crate::store::{AuditAction, AuditEvent, EncodedEvent};
use crate::throttle::Blocked;
use serde_json::json;
use shared::token::{Identity, TokenBody};

impl App {
    /// A rotated refresh token presented again: its family (`family`, its tag) is revoked.
    pub(super) fn audit_reuse(&self, client: &str, family: Option<[u8; FAMILY_TAG_LEN]>) {
        let tag = family.map(hex::encode);
        let target = tag
            .as_deref()
            .map_or_else(String::new, |t| format!("family:{t}"));
        self.audit.record(AuditEvent::new(
            now(),
            client,
            AuditAction::RefreshReuse,
            &target,
            json!({ "family": tag, "revoked": false }),
            json!({ "family": tag, "revoked": true }),
        ));
    }

    /// A token minted for `client` impersonating `identity`: queued before the token is given
    /// ([`AuditLog::record_issue`]); Err: it is not.
    pub(super) async fn audit_impersonation(
        &self,
        client: &str,
        identity: &Identity,
    ) -> Result<(), ApiError> {
        let claims: Vec<(&str, &str)> = identity
            .claims
            .iter()
            .map(|c| (c.typ.as_str(), c.value.as_str()))
            .collect();
        #[derive(serde::Serialize)]
        struct Impersonated<'a> {
            subject: &'a str,
            roles: &'a [String],
            claims: &'a [(&'a str, &'a str)],
        }
        let target = if identity.subject.is_empty() {
            claims
                .iter()
                .map(|(t, v)| format!("{t}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            identity.subject.clone()
        };
        let after = Impersonated {
            subject: &identity.subject,
            roles: &identity.roles,
            claims: &claims,
        };
        let event = EncodedEvent::issued(now(), client, AuditAction::Impersonate, &target, &after);
        self.audit
            .record_issue(event)
            .await
            .map_err(|_| ApiError::unrecorded())
    }

    /// A token minted by token exchange: its subject, and who acts for it; queued before the
    /// token is given ([`AuditLog::record_issue`]); Err: it is not.
    pub(super) async fn audit_exchange(&self, body: &TokenBody) -> Result<(), ApiError> {
        let Some(chain) = &body.act else {
            return Ok(());
        };
        let target = if body.identity.subject.is_empty() {
            &chain.origin
        } else {
            &body.identity.subject
        };
        #[derive(serde::Serialize)]
        struct Exchanged<'a> {
            subject: &'a str,
            subject_kind: &'a str,
            origin: &'a str,
            actors: &'a [String],
            jti: String,
            exp: u64,
        }
        let after = Exchanged {
            subject: &body.identity.subject,
            subject_kind: body.identity.kind.as_str(),
            origin: &chain.origin,
            actors: &chain.actors,
            jti: body.jti_hex(),
            exp: body.exp,
        };
        let event =
            EncodedEvent::issued(now(), &body.client, AuditAction::Exchange, target, &after);
        self.audit
            .record_issue(event)
            .await
            .map_err(|_| ApiError::unrecorded())
    }

    /// An access token revoked by its client (RFC 7009).
    pub(super) fn audit_revoked_access(&self, client: &str, body: &TokenBody) {
        let target = if body.identity.subject.is_empty() {
            client
        } else {
            &body.identity.subject
        };
        self.audit.record(AuditEvent::new(
            now(),
            client,
            AuditAction::Revoke,
            target,
            json!({ "token": "access", "jti": body.jti_hex(), "revoked": false }),
            json!({ "token": "access", "jti": body.jti_hex(), "revoked": true }),
        ));
    }

    /// A refresh token family (of `user`, if it was still usable) revoked by its client.
    pub(super) fn audit_revoked_family(
        &self,
        client: &str,
        user: Option<&str>,
        family: Option<[u8; FAMILY_TAG_LEN]>,
    ) {
        let tag = family.map(hex::encode);
        let target = user.map_or_else(
            || format!("family:{}", tag.as_deref().unwrap_or_default()),
            str::to_owned,
        );
        self.audit.record(AuditEvent::new(
            now(),
            client,
            AuditAction::Revoke,
            &target,
            json!({ "token": "refresh", "family": tag, "revoked": false }),
            json!({ "token": "refresh", "family": tag, "revoked": true }),
        ));
    }
}

/// The back-offs a failed sign-in of `user` at `client` engaged.
pub(super) fn audit_blocked(log: &AuditLog, client: &str, user: &str, blocked: Vec<Blocked>) {
    for b in blocked {
        log.record(AuditEvent::new(
            now(),
            client,
            AuditAction::BackOff,
            user,
            json!({ "subject": b.subject, "blocked": false }),
            json!({
                "subject": b.subject,
                "blocked": true,
                "failures": b.failures,
                "until": b.until,
            }),
        ));
    }
}
