//! The admin listener's routes (`docs/admin-api.md`): the admin HTTP API under `/apiv2/admin/`
//! (its routes in one table, [`table::ROUTES`]), and the console's sign-in
//! (`POST /apiv2/oauth/token`, [`signin`]). [`admin_routes`] is the one place the listener's
//! routes are put together; every answer carries [`SECURITY_HEADERS`] ([`secured`]).
//!
//! A request to the API is checked in this order: its `Origin` (when sent, it must be the
//! listener's own: 403 `forbidden_origin`), its route (404, 405), its caller
//! ([`crate::app::App::admin_caller`]: 401), the caller's roles (403 `insufficient_scope`), its
//! body (JSON of at most [`ADMIN_BODY_LIMIT`] bytes, unknown fields refused: 415, 413, 400); then
//! [`ops`] does it.

pub mod audit;
pub mod bodies;
mod items;
mod lists;
pub mod ops;
mod sessions;
mod signin;
pub mod table;

pub use bodies::{DEFAULT_LIMIT, MAX_LIMIT};

use super::call_within;
use crate::app::{AdminCaller, ApiError, App, Call};
use crate::config::admin_http::AdminPolicy;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use table::{Route, ROUTES};
use warp::http::{header, HeaderValue, Method, StatusCode};
use warp::reply::Response;
use warp::{Filter, Rejection};

/// Largest request body of the admin listener, in bytes.
pub const ADMIN_BODY_LIMIT: usize = 64 * 1024;

/// The headers every answer of the admin listener carries.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; \
         img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
    ),
    ("cache-control", "no-store"),
];

/// What the admin listener's routes share: the app, the policy (replaced on SIGHUP), whether
/// the listener speaks TLS (its origin's scheme), and the lock that runs changes one at a time.
pub struct AdminHttp {
    /// The issuer.
    pub app: Arc<App>,
    policy: RwLock<Arc<AdminPolicy>>,
    tls: bool,
    changes: tokio::sync::Mutex<()>,
}

impl AdminHttp {
    /// The state of an admin listener over `app`, TLS or not.
    pub fn new(app: Arc<App>, policy: AdminPolicy, tls: bool) -> Arc<Self> {
        Arc::new(Self {
            app,
            policy: RwLock::new(Arc::new(policy)),
            tls,
            changes: tokio::sync::Mutex::new(()),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<AdminPolicy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts `policy` in force (a reload).
    pub fn set_policy(&self, policy: AdminPolicy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }

    /// `<scheme>://<Host>` of a request: the listener's own origin as the client named it.
    fn origin(&self, call: &Call) -> Option<String> {
        let host = call.headers.get(header::HOST)?.to_str().ok()?;
        let scheme = if self.tls { "https" } else { "http" };
        Some(format!("{scheme}://{host}"))
    }

    /// 403 `forbidden_origin` unless the request's `Origin`, when it sends one, is ours.
    fn check_origin(&self, call: &Call) -> Result<(), ApiError> {
        let sent: Vec<&HeaderValue> = call.headers.get_all(header::ORIGIN).iter().collect();
        match sent.as_slice() {
            [] => Ok(()),
            [one] if one.to_str().ok().map(str::to_owned) == self.origin(call) => Ok(()),
            _ => Err(refusal(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "the Origin is not this listener's own",
            )),
        }
    }
}

/// An admin API refusal with its contract's code.
pub(crate) fn refusal(status: StatusCode, code: &'static str, description: &str) -> ApiError {
    ApiError::new(status, code, description.to_owned())
}

/// The admin listener's routes, every answer with [`SECURITY_HEADERS`].
pub fn admin_routes(
    state: Arc<AdminHttp>,
) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let with_state = {
        let state = state.clone();
        warp::any().map(move || state.clone())
    };
    let api = warp::path("apiv2")
        .and(warp::path("admin"))
        .and(warp::path::full())
        .and(warp::method())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(with_state.clone())
        .and(admin_call(ADMIN_BODY_LIMIT))
        .then(
            |path: warp::path::FullPath, method: Method, query: String, state, call| {
                Box::pin(async move { api(state, (method, path.as_str(), &query), call).await })
            },
        );
    let token = warp::path!("apiv2" / "oauth" / "token")
        .and(with_state)
        .and(warp::method())
        .and(admin_call(super::BODY_LIMIT))
        .then(
            |state: Arc<AdminHttp>, method: Method, call: Call| async move {
                signin::token(&state, method, call).await
            },
        );
    api.or(token)
        .unify()
        .or(super::console::route())
        .unify()
        .recover(recover)
        .unify()
        .map(secured)
}

/// A rejection rendered as the admin API's error (an oversized body is 413 `too_large`).
async fn recover(rejection: Rejection) -> Result<Response, Infallible> {
    if let Some(e) = rejection.find::<ApiError>() {
        if e.status == StatusCode::PAYLOAD_TOO_LARGE {
            let mut out = refusal(e.status, "too_large", &e.description);
            out.close = e.close;
            return Ok(out.into_response());
        }
    }
    super::recover(rejection).await
}

/// The request as a [`Call`] whose body is at most `limit` bytes, with a `Host` header even over
/// HTTP/2 (which names the host in `:authority`): the origin and every proof's `htu` are made
/// of it.
fn admin_call(limit: usize) -> impl Filter<Extract = (Call,), Error = Rejection> + Clone {
    call_within(limit).and(warp::host::optional()).map(
        |mut call: Call, authority: Option<warp::host::Authority>| {
            if !call.headers.contains_key(header::HOST) {
                if let Some(v) = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
                    call.headers.insert(header::HOST, v);
                }
            }
            call
        },
    )
}

/// `resp` with [`SECURITY_HEADERS`], and never a cookie.
pub fn secured(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    h.remove(header::SET_COOKIE);
    resp
}

/// The route of `method` and `path`, with its `{id}`: 404 for no such path, 405 for a path of
/// another method.
fn route_of(method: &Method, path: &str) -> Result<(&'static Route, Option<String>), ApiError> {
    let mut path_known = false;
    for r in ROUTES {
        if let Some(id) = r.matches(path) {
            path_known = true;
            if r.method == method.as_str() {
                let id = id.map(percent_decoded).transpose().map_err(|()| {
                    refusal(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        "malformed id in the path",
                    )
                })?;
                return Ok((r, id));
            }
        }
    }
    if path_known {
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "method not allowed on this route",
        );
        e.allow = Some(if method == Method::GET { "POST" } else { "GET" });
        return Err(e);
    }
    Err(refusal(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such admin route",
    ))
}

fn percent_decoded(s: &str) -> Result<String, ()> {
    let bytes: Vec<u8> = form_urlencoded_path(s).ok_or(())?;
    String::from_utf8(bytes).map_err(|_| ())
}

/// `%XX` escapes of a path segment decoded (`+` stays `+`).
fn form_urlencoded_path(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// One request to `/apiv2/admin/…`.
async fn api(
    state: Arc<AdminHttp>,
    (method, path, query): (Method, &str, &str),
    call: Call,
) -> Response {
    let result = async {
        state.check_origin(&call)?;
        let (route, id) = route_of(&method, path)?;
        let origin = state.origin(&call).ok_or_else(|| {
            refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "a Host header is required",
            )
        })?;
        let url = format!("{origin}{path}");
        let policy = state.policy();
        let caller = state
            .app
            .admin_caller(&call, (method.as_str(), &url), &policy)
            .await?;
        if !route.allows(&table::roles_of(&caller.roles)) {
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                "your roles do not allow this route",
            ));
        }
        ops::run(
            &state,
            route,
            ops::Request {
                id,
                query,
                call: &call,
                caller: &caller,
            },
        )
        .await
    }
    .await;
    match result {
        Ok((status, body)) => super::json_response(status, &body),
        Err(e) => admin_error(e).into_response(),
    }
}

/// `e` with the admin API's codes: 413 is `too_large`, 401 `invalid_token`.
fn admin_error(e: ApiError) -> ApiError {
    match e.status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            let mut out = refusal(e.status, "too_large", &e.description);
            out.close = e.close;
            out
        }
        _ => e,
    }
}

/// What `GET /apiv2/admin/me` answers for `caller`.
pub(crate) fn me(caller: &AdminCaller) -> serde_json::Value {
    let roles = table::roles_of(&caller.roles);
    let routes: Vec<String> = ROUTES
        .iter()
        .filter(|r| r.allows(&roles))
        .map(Route::label)
        .collect();
    serde_json::json!({
        "user": caller.user,
        "client": caller.client,
        "roles": caller.roles,
        "routes": routes,
    })
}
