//! The issuer's HTTP interface: the routes (what each endpoint does is in `crate::app`), reading
//! a request into a [`Call`] (a bounded body within a time limit, the peer), and the one place
//! answers and errors are rendered: [`answer`] is the one instrumented wrapper (metrics and
//! timing) of every endpoint, [`ApiError::into_response`] renders every refusal.
//!
//! Every OAuth response, success or error, is JSON with `Content-Type: application/json;charset=UTF-8`,
//! `Cache-Control: no-store` and `Pragma: no-cache`. Errors follow RFC 6749 section 5.2; client
//! mistakes are logged at debug level, internal failures at error level, and the client then sees
//! only `server_error`.

pub mod admin;
pub mod console;

use crate::app::{ApiError, App, Call, Peer, Readiness};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use serde::Serialize;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warp::http::{header, HeaderValue, Method, StatusCode};
use warp::reply::Response;
use warp::{Filter, Rejection};

/// Largest request body accepted, in bytes. Larger bodies get 413.
pub const BODY_LIMIT: usize = 16 * 1024;
/// Oversized bodies are read and discarded up to this size before the 413 (see [`read_body`]).
pub const DRAIN_LIMIT: usize = 1024 * 1024;
/// Time allowed to receive a body. Slower clients get 408.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The exact JSON content type of every response.
pub const JSON: &str = "application/json;charset=UTF-8";

/// The peer of a connection (a TCP address, or the Unix socket's peer), set by the server on
/// each request.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub Peer);

impl warp::reject::Reject for ApiError {}

impl ApiError {
    fn method_not_allowed(allow: &'static str) -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            format!("method not allowed; use {allow}"),
        );
        e.allow = Some(allow);
        e
    }

    fn too_large(limit: usize) -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request",
            format!("request body larger than {limit} bytes"),
        );
        e.close = true;
        e
    }

    /// Logs this refusal of a request to `path`: a server error at WARN (the issuer is ready:
    /// something it depends on failed), a client's mistake at DEBUG.
    fn log(&self, path: &str) {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, path, reason = %self.description, "answered with a server error");
        } else {
            tracing::debug!(status = %self.status, path, error = self.code, description = %self.description, "request refused");
        }
    }

    /// Renders the answer (logged here unless it was where it was decided).
    pub fn into_response(self) -> Response {
        if !self.logged {
            self.log("");
        }
        let body = serde_json::json!({"error": self.code, "error_description": self.description});
        let mut resp = json_response(self.status, &body);
        let h = resp.headers_mut();
        if self.basic_challenge {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"media\", charset=\"UTF-8\""),
            );
        }
        if let Some(error) = self.dpop_challenge {
            let challenge = format!("DPoP error=\"{error}\", algs=\"ES256 EdDSA\"");
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                h.insert(header::WWW_AUTHENTICATE, v);
            }
        }
        if let Some(wait) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(wait));
        }
        if let Some(nonce) = self.dpop_nonce.and_then(|n| HeaderValue::from_str(&n).ok()) {
            h.insert("dpop-nonce", nonce);
        }
        if self.close {
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(allow) = self.allow {
            h.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        resp
    }
}

/// A JSON response with the headers every OAuth answer carries.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).expect("JSON values serialize");
    let mut resp = Response::new(bytes.into());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    resp
}

fn only(
    method: Method,
    allow: &'static str,
) -> impl Filter<Extract = (), Error = Rejection> + Clone {
    warp::method()
        .and_then(move |m: Method| {
            let ok = m == method;
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(warp::reject::custom(ApiError::method_not_allowed(allow)))
                }
            }
        })
        .untuple_one()
}

/// Reads the body, at most `limit` bytes ([`BODY_LIMIT`] but on the admin listener), within [`BODY_TIMEOUT`]. An oversized body is
/// read on and discarded up to [`DRAIN_LIMIT`] before the 413, and the connection is then closed:
/// answering while the client still sends makes its TCP stack see a reset, which can destroy the
/// answer (a proxy in front then reports a 503 for a client mistake).
async fn read_body(
    limit: usize,
    length: Option<u64>,
    body: impl futures_util::Stream<Item = Result<impl Buf, warp::Error>>,
) -> Result<Bytes, Rejection> {
    let collect = async {
        let mut buf = BytesMut::new();
        let mut seen = 0usize;
        let mut body = std::pin::pin!(body);
        if length.is_some_and(|l| l > DRAIN_LIMIT as u64) {
            return Err(ApiError::too_large(limit));
        }
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|_| ApiError::invalid_request("could not read the request body"))?;
            seen += chunk.remaining();
            if seen > DRAIN_LIMIT {
                break;
            }
            if seen <= limit {
                buf.put(chunk);
            }
        }
        if seen > limit || length.is_some_and(|l| l > limit as u64) {
            return Err(ApiError::too_large(limit));
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout(BODY_TIMEOUT, collect).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) => Err(warp::reject::custom(e)),
        Err(_) => {
            let mut e = ApiError::invalid_request("request body not received in time");
            e.status = StatusCode::REQUEST_TIMEOUT;
            e.close = true;
            Err(warp::reject::custom(e))
        }
    }
}

fn call() -> impl Filter<Extract = (Call,), Error = Rejection> + Clone {
    call_within(BODY_LIMIT)
}

/// The request as a [`Call`], its body at most `limit` bytes.
fn call_within(limit: usize) -> impl Filter<Extract = (Call,), Error = Rejection> + Clone {
    let peer = warp::ext::optional::<PeerAddr>()
        .and(warp::addr::remote())
        .map(|ours: Option<PeerAddr>, warps: Option<SocketAddr>| {
            ours.map(|p| p.0).or(warps.map(Peer::Tcp))
        });
    warp::header::headers_cloned()
        .and(peer)
        .and(warp::header::optional::<u64>("content-length"))
        .and(warp::body::stream())
        .and_then(move |headers, peer, length, body| async move {
            let body = read_body(limit, length, body).await?;
            Ok::<_, Rejection>(Call {
                headers,
                peer,
                body,
            })
        })
}

/// The app the routes serve, once there is one: `issuer serve` listens before its store opens
/// (a database still starting), answering `/livez` with 200 and everything else with 503 until
/// then.
#[derive(Clone, Default)]
pub struct AppSlot(Arc<std::sync::OnceLock<Arc<App>>>);

impl AppSlot {
    /// A slot already serving `app`.
    pub fn ready(app: Arc<App>) -> Self {
        let slot = Self::default();
        slot.set(app);
        slot
    }

    /// Serves `app` from now on; false (and `app` unused) if the slot was set before.
    pub fn set(&self, app: Arc<App>) -> bool {
        self.0.set(app).is_ok()
    }

    /// The app, once set.
    pub fn get(&self) -> Option<Arc<App>> {
        self.0.get().cloned()
    }
}

/// 503 `temporarily_unavailable` with `Retry-After`: the store is not open yet. Logged with the
/// path and the reason at INFO, not WARN: a load balancer or a client trying before the issuer is
/// ready is expected while it starts (`/readyz` says when it is).
fn starting(path: &str) -> ApiError {
    let reason = Readiness::Starting.reason();
    tracing::info!(
        status = 503,
        path,
        reason,
        "answered 503: the issuer is starting"
    );
    let mut e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "temporarily_unavailable",
        "the service is starting; retry later",
    );
    e.retry_after = Some(1);
    e.logged = true;
    e
}

/// All routes of the issuer serving `app`, with every rejection rendered as JSON.
pub fn routes(app: Arc<App>) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    routes_in(AppSlot::ready(app))
}

/// All routes of the issuer serving the app in `slot` once it is there (503 until then, but for
/// `/livez`), with every rejection rendered as JSON.
pub fn routes_in(slot: AppSlot) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let probes = health_routes(slot.clone());
    let app = warp::path::full().and_then(move |path: warp::path::FullPath| {
        let app = slot.get();
        async move { app.ok_or_else(|| warp::reject::custom(starting(path.as_str()))) }
    });
    let post_form = |endpoint: &'static str| {
        warp::path("apiv2")
            .and(warp::path("oauth"))
            .and(warp::path(endpoint))
            .and(warp::path::end())
            .and(only(Method::POST, "POST"))
    };
    let token =
        post_form("token")
            .and(app.clone())
            .and(call())
            .then(|app: Arc<App>, call: Call| {
                Box::pin(async move {
                    let timer = Timer::start();
                    let (grant, result) = app.token(&call).await;
                    answer(&app, ("token", grant), timer, result)
                })
            });
    let revoke = post_form("revoke").and(app.clone()).and(call()).then(
        |app: Arc<App>, call: Call| async move {
            let timer = Timer::start();
            let result = app.revoke(&call).await.map(|()| serde_json::json!({}));
            answer(&app, ("revoke", "none"), timer, result)
        },
    );
    let introspect = post_form("introspect").and(app.clone()).and(call()).then(
        |app: Arc<App>, call: Call| async move {
            let timer = Timer::start();
            let result = app.introspect(&call).await;
            answer(&app, ("introspect", "none"), timer, result)
        },
    );
    let edge = warp::path!("apiv2" / "oauth" / "edge")
        .and(only(Method::GET, "GET"))
        .and(app.clone())
        .and(call())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        // Boxed: a request held for news then costs its own state, not the size of the largest
        // endpoint's (every route's future is a variant of one enum).
        .then(|app: Arc<App>, call: Call, query: String| {
            Box::pin(async move {
                let timer = Timer::start();
                let result = app.edge(&call, &query).await;
                answer(&app, ("edge", "none"), timer, result)
            })
        });
    let metadata = warp::path!(".well-known" / "oauth-authorization-server")
        .and(only(Method::GET, "GET"))
        .and(app.clone())
        .map(|app: Arc<App>| json_response(StatusCode::OK, &app.metadata()));
    let register = register(app.clone());
    let metrics = warp::path!("metrics")
        .and(only(Method::GET, "GET"))
        .and(app)
        .map(|app: Arc<App>| metrics(&app));
    token
        .or(register)
        .unify()
        .or(revoke)
        .unify()
        .or(introspect)
        .unify()
        .or(edge)
        .unify()
        .or(metadata)
        .unify()
        .or(probes)
        .unify()
        .or(metrics)
        .unify()
        .recover(recover)
        .unify()
}

/// `POST /apiv2/oauth/register` (RFC 7591, `docs/clients.md`): 201 with the client's metadata.
fn register(
    app: impl Filter<Extract = (Arc<App>,), Error = Rejection> + Clone + Send + Sync + 'static,
) -> impl Filter<Extract = (Response,), Error = Rejection> + Clone {
    warp::path!("apiv2" / "oauth" / "register")
        .and(only(Method::POST, "POST"))
        .and(app)
        .and(call())
        .then(|app: Arc<App>, call: Call| async move {
            let timer = Timer::start();
            let result = app.register(&call).await;
            let mut resp = answer(&app, ("register", "none"), timer, result);
            if resp.status() == StatusCode::OK {
                *resp.status_mut() = StatusCode::CREATED;
            }
            resp
        })
}

/// `GET /livez`: 200 while the process serves HTTP, whatever the store does. `GET /readyz` and
/// its older name `/healthz`: 200 while the store takes writes and the key ring is loaded
/// ([`App::readiness`]), else 503 with `Retry-After` and the reason.
fn health_routes(slot: AppSlot) -> impl Filter<Extract = (Response,), Error = Rejection> + Clone {
    let live = warp::path!("livez")
        .and(only(Method::GET, "GET"))
        .map(|| json_response(StatusCode::OK, &serde_json::json!({"status": "ok"})));
    let ready = warp::path!("readyz")
        .or(warp::path!("healthz"))
        .unify()
        .and(only(Method::GET, "GET"))
        .map(move || readiness(slot.get().map_or(Readiness::Starting, |a| a.readiness())));
    live.or(ready).unify()
}

fn readiness(state: Readiness) -> Response {
    if state == Readiness::Ready {
        return json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}));
    }
    let body = serde_json::json!({"status": "unavailable", "reason": state.reason()});
    let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1u32));
    resp
}

/// `GET /metrics`, in the OpenMetrics text format.
fn metrics(app: &App) -> Response {
    app.metrics.set_ready(app.readiness() == Readiness::Ready);
    let mut resp = Response::new(app.metrics.render().into());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

/// Renders an endpoint's `result` (200 with its JSON, or the refusal) and records it in the
/// metrics under `(endpoint, grant)` with the time since `timer` started: every endpoint goes
/// through here.
fn answer<T: Serialize>(
    app: &App,
    (endpoint, grant): (&'static str, &'static str),
    timer: Timer,
    result: Result<T, ApiError>,
) -> Response {
    let outcome = result.as_ref().map_or_else(ApiError::code, |_| "ok");
    app.metrics
        .request(endpoint, grant, outcome, timer.seconds());
    match result {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(mut e) => {
            e.log(&format!("/apiv2/oauth/{endpoint}"));
            e.logged = true;
            e.into_response()
        }
    }
}

async fn recover(rejection: Rejection) -> Result<Response, Infallible> {
    let err = if let Some(e) = rejection.find::<ApiError>() {
        ApiError {
            description: e.description.clone(),
            dpop_nonce: e.dpop_nonce.clone(),
            ..*e
        }
    } else if rejection.is_not_found() {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
    } else if rejection.find::<warp::reject::MethodNotAllowed>().is_some() {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "method not allowed",
        )
    } else if rejection.find::<warp::reject::InvalidHeader>().is_some()
        || rejection.find::<warp::reject::MissingHeader>().is_some()
    {
        ApiError::invalid_request("malformed request header")
    } else {
        ApiError::internal(&format_args!("unhandled rejection: {rejection:?}"))
    };
    Ok(err.into_response())
}

/// Measures an endpoint for the metrics.
struct Timer(Instant);

impl Timer {
    /// Starts timing.
    fn start() -> Self {
        Self(Instant::now())
    }

    /// Seconds since start.
    fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn internal_errors_reveal_nothing() {
        let resp = ApiError::internal(&"disk /var/lib/secret-path failed").into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], JSON);
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-store");
        let body = http_body_util::BodyExt::collect(resp.into_body()).await;
        let json: serde_json::Value = serde_json::from_slice(&body.unwrap().to_bytes()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": "server_error", "error_description": "internal server error"})
        );
    }
}
