//! `GET /apiv2/admin/audit`: the audit trail, newest first, searchable (`q` over the actor,
//! client, address, action, target and values, as the event is stored) from a time on
//! (`since`), paged in the store ([`crate::store::Audit::audit_page`]). The cursor is the key of
//! the last event given, so events recorded meanwhile do not shift a page. A request reads at
//! most [`AUDIT_SCAN`] events: a search that found too few by then answers what it found and a
//! cursor to go on from (a page may be short, even empty, with a `next`).

use super::bodies::{paged, ListQuery, DEFAULT_LIMIT};
use super::{refusal, AdminHttp};
use crate::app::ApiError;
use crate::store::{AuditKey, AuditPage};
use serde_json::Value;
use warp::http::StatusCode;

/// Events one request reads at most, matching or not.
pub const AUDIT_SCAN: usize = 20_000;

/// A page of the audit trail.
pub(super) async fn list(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let before = match q.after_key() {
        None => None,
        Some(k) => Some(key_of(&k).ok_or_else(|| {
            refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "after is not a cursor of this list",
            )
        })?),
    };
    let text = q.q.as_deref().map(str::to_lowercase);
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    let page = AuditPage {
        before,
        since: q.since.unwrap_or(0),
        text: text.as_deref(),
        limit: limit.saturating_add(1),
        scan: AUDIT_SCAN,
    };
    let read = state.app.store.audit_page(&page).await?;
    let cursor = |k: &AuditKey| format!("{}:{}", k.at, k.n);
    Ok(paged(
        read.events,
        limit,
        read.stopped_at.as_ref().map(cursor),
        |(k, _)| cursor(k),
        |(_, e)| serde_json::to_value(e).unwrap_or(Value::Null),
    ))
}

/// The key a cursor names: `AT:N`.
fn key_of(cursor: &str) -> Option<AuditKey> {
    let (at, n) = cursor.split_once(':')?;
    Some(AuditKey {
        at: at.parse().ok()?,
        n: n.parse().ok()?,
    })
}
