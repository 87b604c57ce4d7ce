//! Revocation (RFC 7009) and introspection (RFC 7662). Access tokens are verified offline, so a
//! revoked one is refused through the revocations the store records
//! ([`crate::store::revocation`]): the token itself, or every token of a user or client issued at
//! or before a change that took their tokens away. Each issuer reads them every second.

use super::{now, App};
use super::{ApiError, Call};
use crate::store::revocation::{Cursor, RevocationSet, Revoked, REVOCATION_MARGIN};
use crate::store::{FamilyRevocation, StoreError};
use serde_json::json;
use shared::grant::parse_token_param;
use shared::token::{self, Claim, Limits, SubjectKind, VerifiedToken};
use std::sync::PoisonError;

impl App {
    /// The revocations in force, as last read.
    pub(super) fn revoked(&self) -> std::sync::RwLockReadGuard<'_, RevocationSet> {
        self.revoked.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the revocations recorded since the last read. A failure is logged; the next read
    /// catches up.
    pub async fn reload_revocations(&self) {
        if let Err(e) = self.read_revocations().await {
            tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "reading revocations failed"
            );
        }
    }

    /// Whether a revocation in force covers `body`, every revocation any issuer of the store
    /// recorded before this call counted: the store's latest number is read (a point read), and
    /// the revocations after those held only when it is not the one held through.
    pub(super) async fn revoked_now(&self, body: &token::TokenBody) -> Result<bool, StoreError> {
        let latest = self.store.latest_revocation().await?;
        if latest != self.revoked_through() {
            self.read_revocations().await?;
        }
        Ok(self.revoked().covers(body))
    }

    /// The store's latest revocation as of the last read: every one up to it is held.
    fn revoked_through(&self) -> Cursor {
        *self
            .revoked_through
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the revocations recorded since the last read into the set, or all of them when the
    /// store's history is not the one read before.
    async fn read_revocations(&self) -> Result<(), StoreError> {
        let since = self.revoked().position();
        let read = match self.store.revocations(since.seq, now(), usize::MAX).await {
            // The entry read last is not in the store as it was (a store restored from a backup
            // numbers again from the backup's last entry), or was swept: read it whole.
            Ok(page) if !page.continues(since.seq, since.stamp) => self
                .store
                .revocations(0, now(), usize::MAX)
                .await
                .map(|p| (p, true)),
            other => other.map(|p| (p, false)),
        };
        let (page, whole) = read?;
        if whole || !page.entries.is_empty() {
            // Edges waiting for news read the store again.
            self.feed.changed();
        }
        let mut set = self.revoked.write().unwrap_or_else(PoisonError::into_inner);
        if whole {
            set.apply_snapshot(&page.entries, page.latest, now());
            set.stamp_cursor(page.latest, page.latest_stamp);
        } else {
            set.apply(&page.entries, now());
        }
        *self
            .revoked_through
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Cursor {
            seq: page.latest,
            stamp: page.latest_stamp,
        };
        Ok(())
    }

    /// `token` as an access token of this issuer, verified now. The issuer never mints a longer
    /// lifetime than its own: a token claiming more was made with a stolen key and is refused
    /// ([`token::Limits::max_lifetime`]; the filter refuses it too, `max_token_lifetime_seconds`).
    pub(super) fn verified_access_token(&self, token: &str) -> Option<VerifiedToken> {
        self.access_token_within(token, 0)
    }

    /// [`App::verified_access_token`] with `skew` seconds of tolerance on its lifetime.
    fn access_token_within(&self, token: &str, skew: u64) -> Option<VerifiedToken> {
        let limits = Limits {
            skew,
            max_lifetime: self.settings.access_ttl,
        };
        token::verify_any_with(&self.ring(), token, now(), limits).ok()
    }

    /// `POST /apiv2/oauth/revoke` (RFC 7009). Revoking an access token records its revocation
    /// (until it expires); revoking a refresh token revokes its family. Unknown tokens are no
    /// error.
    pub async fn revoke(&self, call: &Call) -> Result<(), ApiError> {
        let (client_id, _) = self.authenticate(call).await?;
        call.require_form()?;
        let token = parse_token_param(&call.body)?;
        // Any token an edge may still accept: up to the most skew an edge may allow either way.
        if let Some(access) = self.access_token_within(&token, REVOCATION_MARGIN) {
            let b = access.body();
            if b.client != client_id {
                return Err(ApiError::unauthorized_client(
                    "the token was not issued to this client",
                ));
            }
            // Already revoked: nothing to record (a repeated request adds no entry).
            if self.revoked().has_token(&b.jti) {
                return Ok(());
            }
            self.spend_revocation(&client_id)?;
            let what = Revoked::Token { jti: b.jti_hex() };
            self.store
                .revoke(what, now(), Some(b.exp + REVOCATION_MARGIN))
                .await?;
            self.reload_revocations().await;
            self.audit_revoked_access(&client_id, b);
            tracing::info!(target: "audit", client = client_id.as_str(), jti = b.jti_hex().as_str(), "access token revoked");
            return Ok(());
        }
        // The user of a family still in use, for the audit trail (a revoked or unknown one adds
        // no entry).
        let mut live_user = None;
        if self.store.hash_key().verify_refresh(&token).is_some() {
            self.spend_revocation(&client_id)?;
            // Best effort: the audit entry's target never stands in the way of the revocation.
            live_user = (self.store.family_info(&token, now()).await)
                .ok()
                .flatten()
                .filter(|i| i.client == client_id)
                .map(|i| i.user);
        }
        let revoked = self.store.revoke_family(&token, &client_id, now()).await?;
        match revoked {
            FamilyRevocation::OtherClient => Err(ApiError::unauthorized_client(
                "the token was not issued to this client",
            )),
            FamilyRevocation::Revoked => {
                if let Some(user) = &live_user {
                    let family = self.store.hash_key().family_tag_of(&token);
                    self.audit_revoked_family(&client_id, Some(user), family);
                }
                tracing::info!(target: "audit", client = client_id.as_str(), "refresh token family revoked");
                // The store revoked the family's access tokens in the same transaction.
                self.reload_revocations().await;
                Ok(())
            }
            FamilyRevocation::Unknown => Ok(()),
        }
    }

    /// Takes one of the revocations `client` may record, or answers 429: the set every
    /// edge holds is bounded by what each client may add to it.
    fn spend_revocation(&self, client: &str) -> Result<(), ApiError> {
        self.revoke_budget
            .take(client, super::now_ms())
            .map_err(|wait| {
                tracing::info!(
                    client,
                    wait,
                    "revocation refused: the client's rate is spent"
                );
                ApiError::slow_down(wait, "too many revocations from this client; retry later")
            })
    }

    /// `POST /apiv2/oauth/introspect` (RFC 7662), for any active, authenticated client: the
    /// introspection document. Refresh tokens are described only to the client they were issued
    /// to.
    pub async fn introspect(&self, call: &Call) -> Result<serde_json::Value, ApiError> {
        let (client_id, _) = self.authenticate(call).await?;
        call.require_form()?;
        let token = parse_token_param(&call.body)?;
        let t = now();
        if let Some(v) = self.verified_access_token(&token) {
            if self.revoked().covers(v.body()) {
                return Ok(json!({"active": false}));
            }
            let b = v.body();
            let claims: Vec<_> = b
                .identity
                .claims
                .iter()
                .map(|Claim { typ, value }| json!({"type": typ, "value": value}))
                .collect();
            let sub = if !b.identity.subject.is_empty() {
                &b.identity.subject
            } else if let Some(chain) = &b.act {
                // A client's own token exchanged: the client acted for is the chain's origin.
                &chain.origin
            } else {
                &b.client
            };
            let mut out = json!({
                "active": true,
                "token_type": if b.cnf.is_some() { "DPoP" } else { "Bearer" },
                "client_id": b.client,
                "sub": sub,
                "subject_kind": b.identity.kind.as_str(),
                "roles": b.identity.roles,
                "claims": claims,
                "iat": b.iat,
                "exp": b.exp,
                "jti": b.jti_hex(),
                "iss": self.settings.public_url,
            });
            if b.identity.kind != SubjectKind::Client && !b.identity.subject.is_empty() {
                out["username"] = json!(b.identity.subject);
            }
            if let Some(jkt) = &b.cnf {
                out["cnf"] = json!({"jkt": shared::dpop::jkt_b64(jkt)});
            }
            if let Some(chain) = &b.act {
                out["act"] = act_claim(&chain.actors);
            }
            return Ok(out);
        }
        let info = self.store.family_info(&token, t).await?;
        let out = match info {
            Some(i) if i.client == client_id => json!({
                "active": true,
                "token_type": "refresh_token",
                "client_id": i.client,
                "username": i.user,
                "sub": i.user,
                "exp": i.expires_at,
                "iss": self.settings.public_url,
            }),
            _ => json!({"active": false}),
        };
        Ok(out)
    }
}

/// RFC 8693 section 4.1's `act` of an actor chain, outermost first: `{"sub": actors[0], "act":
/// {"sub": actors[1], …}}`.
pub(crate) fn act_claim(actors: &[String]) -> serde_json::Value {
    actors
        .iter()
        .rev()
        .fold(serde_json::Value::Null, |inner, actor| {
            let mut act = json!({ "sub": actor });
            if !inner.is_null() {
                act["act"] = inner;
            }
            act
        })
}
