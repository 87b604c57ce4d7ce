//! The console's sign-in on the admin listener: `POST /apiv2/oauth/token` for the public client
//! `admin-console` alone ([`crate::app::App::console_token`]), with a DPoP proof for this
//! listener's token URL and an `Origin` that is the listener's own (403 `forbidden_origin`).
//! Errors are the token endpoint's (RFC 6749).

use super::AdminHttp;
use crate::app::{ApiError, Call};
use warp::http::{Method, StatusCode};
use warp::reply::Response;

/// `POST /apiv2/oauth/token`.
pub(super) async fn token(state: &AdminHttp, method: Method, call: Call) -> Response {
    let result = async {
        if method != Method::POST {
            let mut e = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request",
                "method not allowed; use POST",
            );
            e.allow = Some("POST");
            return Err(e);
        }
        state.check_origin(&call)?;
        let origin = state
            .origin(&call)
            .ok_or_else(|| ApiError::invalid_request("a Host header is required"))?;
        let url = format!("{origin}/apiv2/oauth/token");
        state.app.console_token(&call, &url, &state.policy()).await
    }
    .await;
    match result {
        Ok(issued) => super::super::json_response(StatusCode::OK, &issued),
        Err(e) => e.into_response(),
    }
}
