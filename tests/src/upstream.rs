//! A small media upstream: answers every request with what it received, so tests can see which
//! identity headers reached it. `POST /apiv2/MediaService/Find` is the interface's example call.

use serde_json::{json, Map, Value};
use warp::http::HeaderMap;
use warp::Filter;

/// Routes of the upstream.
pub fn routes() -> impl Filter<Extract = (warp::reply::Json,), Error = std::convert::Infallible>
       + Clone
       + Send
       + Sync
       + 'static {
    warp::method()
        .and(warp::path::full())
        .and(warp::header::headers_cloned())
        .map(
            |method: warp::http::Method, path: warp::path::FullPath, headers: HeaderMap| {
                let mut identity = Map::new();
                for (name, value) in &headers {
                    if name.as_str().starts_with("x-auth-") {
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
                }))
            },
        )
}
