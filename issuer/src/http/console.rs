//! The web console's static files, built into the binary from `issuer/console/` and served on
//! the admin listener at `GET /admin/` (the page) and `GET /admin/<file>`: a fixed table, so no
//! request ever reaches the file system and no name outside it exists. Every answer carries
//! [`SECURITY_HEADERS`]; what the console does is in `docs/console.md`.

use warp::http::{header, HeaderValue, StatusCode};
use warp::reply::Response;
use warp::Filter;

/// The path prefix of the console on the admin listener.
pub const PREFIX: &str = "/admin/";

/// The Content-Security-Policy of every answer of the admin listener: only this origin's own
/// scripts (the wasm module compiled by them), styles, images and calls; no inline script or
/// style, no form posts, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The headers of every answer of the admin listener.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("content-security-policy", CSP),
];

const HTML: &str = "text/html;charset=UTF-8";
const JS: &str = "text/javascript;charset=UTF-8";
const CSS: &str = "text/css;charset=UTF-8";
const WASM: &str = "application/wasm";
const SVG: &str = "image/svg+xml";

/// Each file of the console: its name under [`PREFIX`] (`""` is the page), its bytes, its type.
pub const FILES: &[(&str, &[u8], &str)] = &[
    ("", include_bytes!("../../console/index.html"), HTML),
    (
        "console.css",
        include_bytes!("../../console/console.css"),
        CSS,
    ),
    ("icon.svg", include_bytes!("../../console/icon.svg"), SVG),
    ("app.js", include_bytes!("../../console/app.js"), JS),
    ("api.js", include_bytes!("../../console/api.js"), JS),
    ("ui.js", include_bytes!("../../console/ui.js"), JS),
    ("pages.js", include_bytes!("../../console/pages.js"), JS),
    (
        "pages_more.js",
        include_bytes!("../../console/pages_more.js"),
        JS,
    ),
    (
        "pkg/mms_token.js",
        include_bytes!("../../console/pkg/mms_token.js"),
        JS,
    ),
    (
        "pkg/mms_token_bg.wasm",
        include_bytes!("../../console/pkg/mms_token_bg.wasm"),
        WASM,
    ),
];

/// The answer to `GET /admin/<name>` (`name` is the path after [`PREFIX`], still
/// percent-encoded): the file with its type, or a JSON `404 not_found`.
pub fn answer(name: &str) -> Response {
    let Some((_, bytes, kind)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        let body = serde_json::json!({
            "error": "not_found",
            "error_description": "the console has no such file",
        });
        let mut r = Response::new(body.to_string().into());
        *r.status_mut() = StatusCode::NOT_FOUND;
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(super::JSON));
        return with_security_headers(r);
    };
    let mut r = Response::new(bytes.to_vec().into());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    with_security_headers(r)
}

/// `r` with [`SECURITY_HEADERS`] set (replacing any of the same names).
pub fn with_security_headers(mut r: Response) -> Response {
    for (name, value) in SECURITY_HEADERS {
        r.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    r
}

/// `GET /admin/…` (and `HEAD`): the console's files; `GET /admin` is sent to `/admin/`.
pub fn route() -> warp::filters::BoxedFilter<(Response,)> {
    warp::path("admin")
        .and(warp::get().or(warp::head()).unify())
        .and(warp::path::full())
        .map(|full: warp::path::FullPath| {
            let path = full.as_str();
            match path.strip_prefix(PREFIX) {
                Some(name) => answer(name),
                None => {
                    let mut r = Response::new(Vec::new().into());
                    *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
                    r.headers_mut()
                        .insert(header::LOCATION, HeaderValue::from_static(PREFIX));
                    with_security_headers(r)
                }
            }
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_has_its_type_and_the_headers() {
        for (name, bytes, kind) in FILES {
            let r = answer(name);
            assert_eq!(r.status(), StatusCode::OK, "{name}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], *kind, "{name}");
            assert!(!bytes.is_empty(), "{name}");
            for (h, v) in SECURITY_HEADERS {
                assert_eq!(r.headers()[h], v, "{name}: {h}");
            }
        }
        assert_eq!(answer("").headers()[header::CONTENT_TYPE], HTML);
    }

    #[test]
    fn anything_else_is_a_json_404_with_the_headers() {
        for name in [
            "nope.js",
            "../Cargo.toml",
            "pkg/",
            "pkg/../app.js",
            "APP.JS",
            "app.js/",
        ] {
            let r = answer(name);
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{name}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], super::super::JSON);
            assert_eq!(r.headers()["content-security-policy"], CSP);
        }
    }

    #[test]
    fn the_page_loads_nothing_inline_and_only_files_of_the_table() {
        let page = std::str::from_utf8(FILES[0].1).unwrap();
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "{page}"
        );
        assert!(!page.contains("<style"), "{page}");
        for part in page.split(['"', '\'']) {
            if let Some(name) = part.strip_prefix("./") {
                assert!(FILES.iter().any(|(n, _, _)| *n == name), "{name}");
            }
        }
    }
}
