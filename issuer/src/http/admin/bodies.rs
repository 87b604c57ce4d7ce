//! The admin API's input as it is parsed, pure (serde only, no state): the bodies of the
//! changes, unknown fields refused, and the query of the lists. The fuzz target `admin_body`
//! compiles this file from its source. A grant is a type parameter: the issuer reads
//! `GrantKind`, the fuzz target any JSON value.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// `bytes` as the body `T`, or why not (the fuzz target's entry).
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("malformed body: {e}"))
}

/// The body of a change that takes nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// The body of `activate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Activate<G> {
    /// A vendor's client: the grants it gets, within its statement's.
    pub grants: Option<Vec<G>>,
    /// A vendor's client: no impersonation.
    #[serde(default)]
    pub no_impersonation: bool,
}

/// The body of `narrow`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Narrow<G> {
    /// The grants it keeps.
    pub grants: Vec<G>,
    /// Stop impersonation.
    #[serde(default)]
    pub no_impersonation: bool,
}

/// The body of `import`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Import {
    /// The vendor's JWS: a software statement or a revocation list.
    pub statement: String,
}

/// Items of a page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest `limit`.
pub const MAX_LIMIT: usize = 500;

/// The query of a list: `q`, `after`, `limit`, and the filters some lists have.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Case-insensitive substring of the item's ids, names and text; for `sessions`, the start
    /// of the user's name, byte for byte.
    pub q: Option<String>,
    /// The cursor of the previous page (`next`).
    pub after: Option<String>,
    /// Items at most, 1 to [`MAX_LIMIT`].
    pub limit: Option<usize>,
    /// `clients`: `pending`, `active`, `inactive` or `all`.
    pub state: Option<String>,
    /// `sessions`: the user's.
    pub user: Option<String>,
    /// `audit`: from this time (seconds since the epoch).
    pub since: Option<u64>,
}

impl ListQuery {
    /// The query string `raw`, checked; `Err` says what is wrong.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let q: Self = serde_urlencoded::from_str(raw).map_err(|e| format!("bad query: {e}"))?;
        if q.limit.is_some_and(|l| l == 0 || l > MAX_LIMIT) {
            return Err(format!("limit is 1 to {MAX_LIMIT}"));
        }
        let cursor = q.after.as_deref().map(cursor_key);
        if cursor.as_ref().is_some_and(Option::is_none) {
            return Err("after is not a cursor of this list".into());
        }
        // No name, id or text holds NUL (PostgreSQL's text cannot): refused alike on both stores.
        let cursor = cursor.flatten();
        let texts = [q.q.as_deref(), q.user.as_deref(), cursor.as_deref()];
        if texts.into_iter().flatten().any(|t| t.contains('\0')) {
            return Err("a query parameter holds a NUL character".into());
        }
        Ok(q)
    }

    /// The key after which the page starts.
    pub fn after_key(&self) -> Option<String> {
        self.after.as_deref().and_then(cursor_key)
    }

    /// Whether `text` holds `q` (any case), or there is no `q`.
    pub fn wanted(&self, text: &str) -> bool {
        self.q
            .as_deref()
            .is_none_or(|q| text.to_lowercase().contains(&q.to_lowercase()))
    }
}

/// The cursor of `key`.
fn cursor_of(key: &str) -> String {
    B64.encode(key)
}

/// `{"items": [...], "next": cursor | null}` of the first `limit` of `found`, which a store read
/// one item past the page: the cursor of the last item given if the store found more, else
/// `go_on` (the key where a bounded read stopped), else none.
pub fn paged<T>(
    mut found: Vec<T>,
    limit: usize,
    go_on: Option<String>,
    key: impl Fn(&T) -> String,
    item: impl Fn(T) -> serde_json::Value,
) -> serde_json::Value {
    let more = found.len() > limit;
    found.truncate(limit);
    let next = match found.last() {
        Some(last) if more => Some(key(last)),
        _ => go_on,
    };
    let items: Vec<serde_json::Value> = found.into_iter().map(item).collect();
    serde_json::json!({"items": items, "next": next.as_deref().map(cursor_of)})
}

fn cursor_key(cursor: &str) -> Option<String> {
    String::from_utf8(B64.decode(cursor).ok()?).ok()
}
