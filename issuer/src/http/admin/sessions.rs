//! `GET /apiv2/admin/sessions` and `POST /apiv2/admin/sessions/{id}/revoke`: the live refresh
//! token families. The store's traits have no listing of families by user yet, so both routes
//! answer 501 `not_implemented` for now, after the caller and role checks of every route.

use super::bodies::ListQuery;
use super::ops::Request;
use super::{refusal, AdminHttp};
use crate::app::ApiError;
use serde_json::Value;
use warp::http::StatusCode;

fn not_yet() -> ApiError {
    refusal(
        StatusCode::NOT_IMPLEMENTED,
        "not_implemented",
        "listing and revoking sessions is not available yet",
    )
}

/// The live families, of `user` if given.
pub(super) async fn list(_state: &AdminHttp, _q: &ListQuery) -> Result<Value, ApiError> {
    Err(not_yet())
}

/// Revokes one family.
pub(super) async fn revoke(
    _state: &AdminHttp,
    _req: &Request<'_>,
) -> Result<(StatusCode, Value), ApiError> {
    Err(not_yet())
}
