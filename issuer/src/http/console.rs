//! The web console's static files, built into the binary from `issuer/console/` and served on
//! the admin listener (`super::admin::admin_routes`, which adds the listener's security headers
//! to every answer) at `GET /admin/` (the page) and `GET /admin/<file>`: a fixed table, so no
//! request ever reaches the file system and no name outside it exists. What the console does is
//! in `docs/console.md`.

use warp::http::{header, HeaderValue, StatusCode};
use warp::reply::Response;
use warp::Filter;

/// The path prefix of the console on the admin listener.
pub const PREFIX: &str = "/admin/";

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
/// percent-encoded): the file with its type, or the admin API's JSON `404 not_found`.
pub fn answer(name: &str) -> Response {
    let Some((_, bytes, kind)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return super::admin::refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            "the console has no such file",
        )
        .into_response();
    };
    let mut r = Response::new(bytes.to_vec().into());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

/// `GET /admin/…` (and `HEAD`): the console's files; `GET /admin` is sent to `/admin/`.
pub fn route() -> warp::filters::BoxedFilter<(Response,)> {
    warp::path("admin")
        .and(warp::get().or(warp::head()).unify())
        .and(warp::path::full())
        .map(
            |full: warp::path::FullPath| match full.as_str().strip_prefix(PREFIX) {
                Some(name) => answer(name),
                None => {
                    let mut r = Response::new(Vec::new().into());
                    *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
                    r.headers_mut()
                        .insert(header::LOCATION, HeaderValue::from_static(PREFIX));
                    r
                }
            },
        )
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_has_its_type() {
        for (name, bytes, kind) in FILES {
            let r = answer(name);
            assert_eq!(r.status(), StatusCode::OK, "{name}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], *kind, "{name}");
            assert!(!bytes.is_empty(), "{name}");
        }
        assert_eq!(answer("").headers()[header::CONTENT_TYPE], HTML);
    }

    #[test]
    fn anything_else_is_a_json_404() {
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
        }
    }

    #[tokio::test]
    async fn get_and_head_of_admin_only() {
        let r = warp::test::request().path("/admin").reply(&route()).await;
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(r.headers()[header::LOCATION], PREFIX);
        let r = warp::test::request()
            .path("/admin/app.js")
            .reply(&route())
            .await;
        assert_eq!(r.body().as_ref(), FILES[3].1);
        let r = warp::test::request()
            .method("POST")
            .path("/admin/app.js")
            .filter(&route())
            .await;
        assert!(r.is_err(), "a POST is not the console's");
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
