//! `GET /apiv2/admin/audit`: the audit trail, newest first, searchable (`q` over the actor,
//! client, address, action, target and values) from a time on (`since`). The cursor is the
//! position of the last event given among those read from `since`, oldest first, so events
//! recorded meanwhile do not shift a page.

use super::bodies::{ListQuery, DEFAULT_LIMIT};
use super::ops::read;
use super::{refusal, AdminHttp};
use crate::admin::{Command, Reply};
use crate::app::ApiError;
use serde_json::{json, Value};
use warp::http::StatusCode;

/// A page of the audit trail.
pub(super) async fn list(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let since = q.since.unwrap_or(0);
    let Reply::Audit(events) = read(state, &Command::AuditRead { since }).await? else {
        return Err(ApiError::internal(
            &"an admin command answered with another reply",
        ));
    };
    let before = match q.after_key() {
        None => events.len(),
        Some(k) => k.parse::<usize>().map_err(|_| {
            refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "after is not a cursor of this list",
            )
        })?,
    };
    let needle = q.q.as_deref().map(str::to_lowercase);
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    let mut chosen = events
        .iter()
        .enumerate()
        .take(before.min(events.len()))
        .rev()
        .map(|(i, e)| (i, serde_json::to_value(e).unwrap_or(Value::Null)))
        .filter(|(_, v)| {
            needle
                .as_deref()
                .is_none_or(|n| v.to_string().to_lowercase().contains(n))
        });
    let page: Vec<(usize, Value)> = chosen.by_ref().take(limit).collect();
    let next = match (page.last(), chosen.next()) {
        (Some((i, _)), Some(_)) => json!(super::bodies::cursor_of(&i.to_string())),
        _ => Value::Null,
    };
    let items: Vec<Value> = page.into_iter().map(|(_, v)| v).collect();
    Ok(json!({"items": items, "next": next}))
}
