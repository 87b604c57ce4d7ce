//! `GET /apiv2/admin/clients` and `GET /apiv2/admin/users`: pages read in the store
//! ([`crate::store::Clients::clients_page`], [`crate::store::Users::users_page`]) from the
//! cursor on, one item more than the page so as to know whether another follows. `q` searches
//! the ids and names (a vendor's client's vendor and application name too); `state` keeps the
//! clients in one state.

use super::bodies::{paged, ListQuery, DEFAULT_LIMIT};
use super::{items, refusal, AdminHttp};
use crate::admin::{ClientView, UserView};
use crate::app::ApiError;
use crate::store::{ClientRecord, RecordFilter};
use serde_json::Value;
use warp::http::StatusCode;

fn pending(c: &ClientRecord) -> bool {
    c.vendor.as_ref().is_some_and(|v| v.pending)
}

/// Which clients `state` keeps, as the item's `state` says it ([`items::client_item`]).
fn keep_state(state: &str) -> Option<fn(&ClientRecord) -> bool> {
    Some(match state {
        "all" => |_| true,
        "pending" => pending,
        "active" => |c| !pending(c) && c.active,
        "inactive" => |c| !pending(c) && !c.active,
        _ => return None,
    })
}

/// A page of the clients.
pub(super) async fn clients(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let keep = keep_state(q.state.as_deref().unwrap_or("all")).ok_or_else(|| {
        refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "state is pending, active, inactive or all",
        )
    })?;
    let (after, text, limit) = bounds(q);
    let filter = RecordFilter {
        after: after.as_deref(),
        text: text.as_deref(),
        keep,
        limit: limit.saturating_add(1),
    };
    let found = state.app.store.clients_page(&filter).await?;
    Ok(paged(found, limit, None, key, |(id, rec)| {
        items::client_item(&ClientView::of(id, rec))
    }))
}

/// A page of the users.
pub(super) async fn users(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let (after, text, limit) = bounds(q);
    let filter = RecordFilter {
        after: after.as_deref(),
        text: text.as_deref(),
        limit: limit.saturating_add(1),
        ..RecordFilter::first(0)
    };
    let found = state.app.store.users_page(&filter).await?;
    Ok(paged(found, limit, None, key, |(name, rec)| {
        items::user_item(&UserView::of(name, rec))
    }))
}

/// The key of a record of a page: its id or name.
fn key<T>((key, _): &(String, T)) -> String {
    key.clone()
}

/// The key the page starts after, the search in lowercase, and the page's size.
fn bounds(q: &ListQuery) -> (Option<String>, Option<String>, usize) {
    (
        q.after_key(),
        q.q.as_deref().map(str::to_lowercase),
        q.limit.unwrap_or(DEFAULT_LIMIT),
    )
}
