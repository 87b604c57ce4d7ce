//! `GET /apiv2/admin/sessions` and `POST /apiv2/admin/sessions/{id}/revoke`: the live refresh
//! token families, paged by user and id in the store ([`crate::store::Families::live_families`]),
//! and
//! the revocation of one through the audited admin command
//! ([`crate::admin::Command::SessionRevoke`]).

use super::bodies::{paged, Empty, ListQuery, DEFAULT_LIMIT};
use super::ops::{body, change, done, precondition, Request};
use super::{items, refusal, AdminHttp};
use crate::admin::sessions::{session_id, SESSION_ID_RULE};
use crate::admin::Command;
use crate::app::{now, ApiError};
use crate::store::family::Family;
use crate::store::{FamilyFilter, FamilyKey, Owners};
use serde_json::{json, Value};
use warp::http::StatusCode;

/// The item of family `id`: `revoked_at` is `null` but after a revocation.
fn item(id: &[u8; 16], f: &Family) -> Value {
    items::tagged(json!({
        "id": hex::encode(id),
        "user": f.user,
        "client": f.client,
        "created": f.created_at,
        "last_used": f.last_used(),
        "revoked_at": f.revoked_at,
    }))
}

/// The live families of `user` if given, else of the users whose name starts with `q` (byte for
/// byte), else of every user, by user and id.
pub(super) async fn list(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let cursor = q.after_key();
    let after = match cursor.as_deref() {
        None => None,
        Some(key) => Some(cursor_at(key).ok_or_else(|| {
            refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "after is not a cursor of this list",
            )
        })?),
    };
    let owners = match (q.user.as_deref(), q.q.as_deref()) {
        (Some(user), Some(text)) if !user.starts_with(text) => {
            return Ok(json!({"items": [], "next": null}))
        }
        (Some(user), _) => Owners::Named(user),
        (None, Some(text)) => Owners::Prefixed(text),
        (None, None) => Owners::All,
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    let filter = FamilyFilter {
        owners,
        after,
        limit: limit.saturating_add(1),
    };
    let found = state.app.store.live_families(&filter, now()).await?;
    let key = |(id, f): &([u8; 16], Family)| format!("{}{}", hex::encode(id), f.user);
    Ok(paged(found, limit, None, key, |(id, f)| item(&id, &f)))
}

/// The place in the list a cursor names: the family's id in hex, then its user.
fn cursor_at(key: &str) -> Option<FamilyKey<'_>> {
    let (id, user) = (key.get(..32)?, key.get(32..)?);
    Some(FamilyKey {
        user,
        id: session_id(id)?,
    })
}

fn not_found() -> ApiError {
    refusal(StatusCode::NOT_FOUND, "not_found", "no such session")
}

/// Revokes one family: 400 for an id that is not one ([`session_id`]), 404 for an unknown id,
/// 412 unless `If-Match` names it as it is, 409 when it is revoked already.
pub(super) async fn revoke(
    state: &AdminHttp,
    req: &Request<'_>,
) -> Result<(StatusCode, Value), ApiError> {
    let raw = req.id.as_deref().ok_or_else(not_found)?;
    let id = session_id(raw)
        .ok_or_else(|| refusal(StatusCode::BAD_REQUEST, "invalid_request", SESSION_ID_RULE))?;
    let _: Empty = body(req.call)?;
    let _one = state.changes.lock().await;
    let store = &state.app.store;
    let before = store.family(&id).await?.ok_or_else(not_found)?;
    precondition(req.call, &item(&id, &before))?;
    if before.revoked_at.is_some() {
        return Err(refusal(
            StatusCode::CONFLICT,
            "conflict",
            "the session is revoked already",
        ));
    }
    let cmd = Command::SessionRevoke {
        id: hex::encode(id),
    };
    let reply = change(state, &cmd, req.caller).await?;
    let after = store.family(&id).await?.ok_or_else(not_found)?;
    done(item(&id, &after), reply)
}
