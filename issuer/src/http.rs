//! The issuer's HTTP interface: routes, handlers and the one place errors are rendered.
//!
//! Every OAuth response, success or error, is JSON with `Content-Type: application/json;charset=UTF-8`,
//! `Cache-Control: no-store` and `Pragma: no-cache`. Errors follow RFC 6749 section 5.2; client
//! mistakes are logged at debug level, internal failures at error level, and the client then sees
//! only `server_error`.

use crate::app::App;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use serde::Serialize;
use shared::basic::parse_basic;
use shared::error::{ErrorCode, RequestError};
use std::borrow::Cow;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warp::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
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

/// The peer address of a connection, set by the server on each request.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// An error answer. Rendered only by [`ApiError::into_response`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    description: Cow<'static, str>,
    retry_after: Option<u64>,
    basic_challenge: bool,
    allow: Option<&'static str>,
    /// Close the connection after the answer (the request was not read to its end).
    close: bool,
}

impl warp::reject::Reject for ApiError {}

impl ApiError {
    fn new(
        status: StatusCode,
        code: &'static str,
        description: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            status,
            code,
            description: description.into(),
            retry_after: None,
            basic_challenge: false,
            allow: None,
            close: false,
        }
    }

    /// 400 with an RFC 6749 code.
    pub fn oauth(code: ErrorCode, description: impl Into<Cow<'static, str>>) -> Self {
        let status = match code {
            ErrorCode::InvalidClient => StatusCode::UNAUTHORIZED,
            ErrorCode::SlowDown => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut e = Self::new(status, code.as_str(), description);
        e.basic_challenge = code == ErrorCode::InvalidClient;
        e
    }

    /// 400 `invalid_request`.
    pub fn invalid_request(description: impl Into<Cow<'static, str>>) -> Self {
        Self::oauth(ErrorCode::InvalidRequest, description)
    }

    /// 401 `invalid_client` with a Basic challenge.
    pub fn invalid_client() -> Self {
        Self::oauth(ErrorCode::InvalidClient, "client authentication failed")
    }

    /// 400 `invalid_grant`.
    pub fn invalid_grant(description: &'static str) -> Self {
        Self::oauth(ErrorCode::InvalidGrant, description)
    }

    /// 400 `unauthorized_client`.
    pub fn unauthorized_client(description: &'static str) -> Self {
        Self::oauth(ErrorCode::UnauthorizedClient, description)
    }

    /// 403 `access_denied`: the client is known but may not use this endpoint.
    pub fn forbidden(description: &'static str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "access_denied", description)
    }

    /// 429 `slow_down` with `Retry-After`.
    pub fn throttled(wait: u64) -> Self {
        Self::slow_down(wait, "too many failed attempts; retry later")
    }

    /// 429 `slow_down` with `Retry-After: wait` and this description.
    pub fn slow_down(wait: u64, description: &'static str) -> Self {
        let mut e = Self::oauth(ErrorCode::SlowDown, description);
        e.retry_after = Some(wait.max(1));
        e
    }

    /// A storage failure: 503 `temporarily_unavailable` with `Retry-After` when the database is
    /// unreachable or kept refusing for contention (the client may retry; nothing was
    /// acknowledged), else 500 `server_error`. The cause is logged here and never sent.
    pub fn store(cause: &crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match cause {
            StoreError::Unavailable(_) | StoreError::Contention | StoreError::Disk(_) => {
                tracing::warn!(error = cause.to_string(), "store unavailable");
                let mut e = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "the service is temporarily unavailable; retry later",
                );
                e.retry_after = Some(1);
                e
            }
            _ => Self::internal(cause),
        }
    }

    /// 500 `server_error`; the cause is logged here and never sent.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = cause.to_string(), "internal error");
        Self::oauth(ErrorCode::ServerError, "internal server error")
    }

    fn method_not_allowed(allow: &'static str) -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            format!("method not allowed; use {allow}"),
        );
        e.allow = Some(allow);
        e
    }

    fn too_large() -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request",
            format!("request body larger than {BODY_LIMIT} bytes"),
        );
        e.close = true;
        e
    }

    /// The RFC 6749 code (or the label used for non-OAuth answers), for metrics.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// Renders the answer.
    pub fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, "answered with a server error");
        } else {
            tracing::debug!(status = %self.status, error = self.code, description = %self.description, "request refused");
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
        if let Some(wait) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(wait));
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

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        Self::oauth(e.code, e.description)
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

/// What a form endpoint receives: headers, peer and the whole (bounded) body.
pub struct Call {
    /// Request headers.
    pub headers: HeaderMap,
    /// Source address as seen by the server.
    pub peer: Option<SocketAddr>,
    /// The body.
    pub body: Bytes,
}

impl Call {
    /// The client address for throttling. The peer, unless the peer is one of the `trusted`
    /// proxies: then `X-Forwarded-For` is read from the right (each proxy appends the address it
    /// saw) and the first entry that is not a trusted proxy is the client. An entry that is not an
    /// address ends the walk at the last address known good, so a client can never choose its
    /// own address by sending the header itself.
    pub fn client_ip(&self, trusted: &[ipnet::IpNet]) -> Option<IpAddr> {
        let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
        let mut addr = self.peer?.ip().to_canonical();
        if !is_trusted(&addr) {
            return Some(addr);
        }
        let entries: Vec<&[u8]> = self
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|v| v.as_bytes().split(|&c| c == b','))
            .collect();
        for entry in entries.into_iter().rev() {
            let Some(ip) = std::str::from_utf8(entry)
                .ok()
                .and_then(|s| s.trim().parse::<IpAddr>().ok())
            else {
                break;
            };
            addr = ip.to_canonical();
            if !is_trusted(&addr) {
                break;
            }
        }
        Some(addr)
    }

    /// The one `Authorization` header, if exactly one was sent.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        let mut all = self.headers.get_all(header::AUTHORIZATION).iter();
        let first = all.next()?;
        all.next().is_none().then_some(first)
    }

    /// Refuses bodies that are not `application/x-www-form-urlencoded`.
    pub fn require_form(&self) -> Result<(), ApiError> {
        let ok = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if ok && self.headers.get_all(header::CONTENT_TYPE).iter().count() == 1 {
            Ok(())
        } else {
            Err(ApiError::invalid_request(
                "content type must be application/x-www-form-urlencoded",
            ))
        }
    }
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

/// Reads the body, at most [`BODY_LIMIT`] bytes, within [`BODY_TIMEOUT`]. An oversized body is
/// read on and discarded up to [`DRAIN_LIMIT`] before the 413, and the connection is then closed:
/// answering while the client still sends makes its TCP stack see a reset, which can destroy the
/// answer (a proxy in front then reports a 503 for a client mistake).
async fn read_body(
    length: Option<u64>,
    body: impl futures_util::Stream<Item = Result<impl Buf, warp::Error>>,
) -> Result<Bytes, Rejection> {
    let collect = async {
        let mut buf = BytesMut::new();
        let mut seen = 0usize;
        let mut body = std::pin::pin!(body);
        if length.is_some_and(|l| l > DRAIN_LIMIT as u64) {
            return Err(ApiError::too_large());
        }
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|_| ApiError::invalid_request("could not read the request body"))?;
            seen += chunk.remaining();
            if seen > DRAIN_LIMIT {
                break;
            }
            if seen <= BODY_LIMIT {
                buf.put(chunk);
            }
        }
        if seen > BODY_LIMIT || length.is_some_and(|l| l > BODY_LIMIT as u64) {
            return Err(ApiError::too_large());
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
    let peer = warp::ext::optional::<PeerAddr>()
        .and(warp::addr::remote())
        .map(|ours: Option<PeerAddr>, warps: Option<SocketAddr>| ours.map(|p| p.0).or(warps));
    warp::header::headers_cloned()
        .and(peer)
        .and(warp::header::optional::<u64>("content-length"))
        .and(warp::body::stream())
        .and_then(|headers, peer, length, body| async move {
            let body = read_body(length, body).await?;
            Ok::<_, Rejection>(Call {
                headers,
                peer,
                body,
            })
        })
}

/// All routes of the issuer, with every rejection rendered as JSON.
pub fn routes(app: Arc<App>) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let app = warp::any().map(move || app.clone());
    let post_form = |endpoint: &'static str| {
        warp::path("apiv2")
            .and(warp::path("oauth"))
            .and(warp::path(endpoint))
            .and(warp::path::end())
            .and(only(Method::POST, "POST"))
    };
    let token = post_form("token")
        .and(app.clone())
        .and(call())
        .then(|app: Arc<App>, call: Call| async move { app.token_endpoint(call).await });
    let revoke = post_form("revoke")
        .and(app.clone())
        .and(call())
        .then(|app: Arc<App>, call: Call| async move { app.revoke_endpoint(call).await });
    let introspect = post_form("introspect")
        .and(app.clone())
        .and(call())
        .then(|app: Arc<App>, call: Call| async move { app.introspect_endpoint(call).await });
    let edge = warp::path!("apiv2" / "oauth" / "edge")
        .and(only(Method::GET, "GET"))
        .and(app.clone())
        .and(call())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .then(|app: Arc<App>, call: Call, query: String| async move {
            app.edge_endpoint(call, &query).await
        });
    let metadata = warp::path!(".well-known" / "oauth-authorization-server")
        .and(only(Method::GET, "GET"))
        .and(app.clone())
        .map(|app: Arc<App>| json_response(StatusCode::OK, &app.metadata()));
    let health = warp::path!("healthz")
        .and(only(Method::GET, "GET"))
        .and(app.clone())
        .map(|app: Arc<App>| app.health());
    let metrics = warp::path!("metrics")
        .and(only(Method::GET, "GET"))
        .and(app)
        .map(|app: Arc<App>| {
            let mut resp = Response::new(app.metrics.render().into());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            resp
        });
    token
        .or(revoke)
        .unify()
        .or(introspect)
        .unify()
        .or(edge)
        .unify()
        .or(metadata)
        .unify()
        .or(health)
        .unify()
        .or(metrics)
        .unify()
        .recover(recover)
        .unify()
}

async fn recover(rejection: Rejection) -> Result<Response, Infallible> {
    let err = if let Some(e) = rejection.find::<ApiError>() {
        ApiError {
            description: e.description.clone(),
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

/// Parses the `Authorization` header of a call into client credentials.
pub fn client_credentials(call: &Call) -> Result<shared::basic::ClientCredentials, ApiError> {
    let value = call.authorization().ok_or_else(ApiError::invalid_client)?;
    parse_basic(value.as_bytes()).map_err(|_| ApiError::invalid_client())
}

/// Measures a handler for the metrics.
pub struct Timer(Instant);

impl Timer {
    /// Starts timing.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Seconds since start.
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let trusted: Vec<ipnet::IpNet> = vec![
            "127.0.0.1/32".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ];
        let call = |peer: &str, xff: &[&[u8]]| {
            let mut headers = HeaderMap::new();
            for v in xff {
                headers.append("x-forwarded-for", HeaderValue::from_bytes(v).unwrap());
            }
            Call {
                headers,
                peer: Some(peer.parse().unwrap()),
                body: Bytes::new(),
            }
            .client_ip(&trusted)
            .map(|ip| ip.to_string())
        };
        let ip = |s: &str| Some(s.to_owned());
        // Through one trusted proxy: the address it appended.
        assert_eq!(call("127.0.0.1:1", &[b"192.0.2.1"]), ip("192.0.2.1"));
        // A client's own entries left of it are not believed.
        assert_eq!(
            call("127.0.0.1:1", &[b"198.51.100.1, 192.0.2.1"]),
            ip("192.0.2.1")
        );
        // Through a chain of trusted proxies, from the right.
        assert_eq!(
            call("127.0.0.1:1", &[b"192.0.2.1", b"10.1.2.3"]),
            ip("192.0.2.1")
        );
        // From a peer that is not a trusted proxy the header is ignored.
        assert_eq!(call("192.0.2.9:1", &[b"198.51.100.1"]), ip("192.0.2.9"));
        // Garbage ends the walk at the last address known good.
        assert_eq!(
            call("127.0.0.1:1", &[b"\xff\xfe, 10.1.2.3"]),
            ip("10.1.2.3")
        );
        assert_eq!(call("127.0.0.1:1", &[b"unknown"]), ip("127.0.0.1"));
        assert_eq!(call("127.0.0.1:1", &[]), ip("127.0.0.1"));
        // IPv4-mapped peers count as their IPv4 address.
        assert_eq!(
            call("[::ffff:127.0.0.1]:1", &[b"192.0.2.1"]),
            ip("192.0.2.1")
        );
        assert_eq!(
            Call {
                headers: HeaderMap::new(),
                peer: None,
                body: Bytes::new()
            }
            .client_ip(&trusted),
            None
        );
    }

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
