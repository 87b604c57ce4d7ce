//! A small media upstream: answers every request with what it received, so tests can see which
//! identity headers reached it (in any spelling). `POST /apiv2/MediaService/Find` is the interface's example call.
//!
//! It reads every request body before it answers, as a real service does. A hyper server that
//! answers without reading the body closes the connection once it has answered if the body has not
//! fully arrived, without saying so in the answer; Envoy may send the next request on that pooled
//! connection in the meantime, and that request fails with a 503 (the soak found this).

use serde_json::{json, Map, Value};
use warp::http::HeaderMap;
use warp::Filter;

/// Routes of the upstream.
pub fn routes(
) -> impl Filter<Extract = (warp::reply::Json,), Error = warp::Rejection> + Clone + Send + Sync + 'static
{
    warp::method()
        .and(warp::path::full())
        .and(warp::header::headers_cloned())
        .and(warp::body::bytes())
        .map(
            |method: warp::http::Method,
             path: warp::path::FullPath,
             headers: HeaderMap,
             body: warp::hyper::body::Bytes| {
                let mut identity = Map::new();
                for (name, value) in &headers {
                    // What a CGI, WSGI or PHP service would read as an identity header: any
                    // spelling of the x-auth namespace, `_` and `-` alike.
                    if name.as_str().replace('_', "-").starts_with("x-auth") {
                        identity.insert(
                            name.as_str().to_owned(),
                            Value::from(String::from_utf8_lossy(value.as_bytes()).into_owned()),
                        );
                    }
                }
                warp::reply::json(&json!({
                    "service": "media",
                    "method": method.as_str(),
                    "path": path.as_str(),
                    "identity": identity,
                    "authorization_forwarded": headers.contains_key("authorization"),
                    "dpop_forwarded": headers.contains_key("dpop"),
                    "body_bytes": body.len(),
                }))
            },
        )
}
