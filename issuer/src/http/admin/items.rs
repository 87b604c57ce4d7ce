//! The admin API's items as JSON (one shape each, from the admin commands' typed replies), each
//! with its `etag`, and the page of a list read whole (the signing keys, a few; the clients,
//! users and sessions are paged in the store: `lists.rs`, `sessions.rs`).
//!
//! A list is sorted by the item's key; its cursor (`after`, `next`) is the base64url of the last
//! key given, so a page never repeats or skips an item that stayed. The `etag` is the SHA-256 of
//! the item's JSON without it: any change of what a reader sees changes it.

use super::bodies::{paged, ListQuery, DEFAULT_LIMIT};
use crate::admin::{ClientView, UserView};
use crate::store::GrantKind;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// One page of `items`, each `(key, searchable text, item)`, sorted by key here:
/// `{"items": [...], "next": cursor | null}`.
pub fn page(mut items: Vec<(String, String, Value)>, query: &ListQuery) -> Value {
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let after = query.after_key();
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let found: Vec<(String, String, Value)> = items
        .into_iter()
        .filter(|(key, _, _)| after.as_ref().is_none_or(|a| key > a))
        .filter(|(_, text, _)| query.wanted(text))
        .take(limit.saturating_add(1))
        .collect();
    paged(
        found,
        limit,
        None,
        |(key, _, _)| key.clone(),
        |(_, _, item)| item,
    )
}

/// `item` with its `etag`.
pub fn tagged(mut item: Value) -> Value {
    let tag = etag(&item);
    item["etag"] = Value::String(tag);
    item
}

/// The ETag of `item` (without its own `etag`): a quoted hash of its JSON.
pub fn etag(item: &Value) -> String {
    let mut plain = item.clone();
    if let Some(o) = plain.as_object_mut() {
        o.remove("etag");
    }
    let digest = Sha256::digest(plain.to_string().as_bytes());
    format!("\"{}\"", hex::encode(&digest[..16]))
}

/// Whether `if_match` (the header as sent) names `current`: `*`, or one of its list.
pub fn matches(if_match: &str, current: &str) -> bool {
    if_match.trim() == "*"
        || if_match
            .split(',')
            .any(|t| t.trim().trim_start_matches("W/") == current)
}

fn grant_names(grants: &[GrantKind]) -> Vec<Value> {
    grants.iter().map(|g| json!(g)).collect()
}

/// A client as the API shows it.
pub fn client_item(c: &ClientView) -> Value {
    let v = c.vendor.as_ref();
    let state = match (v.is_some_and(|v| v.pending), c.active) {
        (true, _) => "pending",
        (false, true) => "active",
        (false, false) => "inactive",
    };
    let impersonation = match (c.impersonate, c.impersonate_claim_types.is_empty()) {
        (false, _) => "none",
        (true, false) => "claims",
        (true, true) => "legacy",
    };
    tagged(json!({
        "id": c.id,
        "state": state,
        "vendor": v.map(|v| &v.vendor),
        "name": v.map(|v| &v.client_name),
        "software_id": v.map(|v| &v.software_id),
        "grants": grant_names(&c.grants),
        "impersonation": impersonation,
        "requested_grants": v.map(|v| json!(v.grants)),
        "requested_impersonation": v.map(|v| json!(v.impersonation)),
        "statement_expires": v.map(|v| v.expires_at),
        "revoked_by_vendor": v.is_some_and(|v| v.revoked),
        "edge": c.edge,
        "dpop": c.dpop,
    }))
}

/// A user as the API shows it.
pub fn user_item(u: &UserView) -> Value {
    tagged(json!({
        "name": u.name,
        "source": if u.directory { "directory" } else { "local" },
        "enabled": u.enabled,
        "roles": u.roles,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<(String, String, Value)> {
        (0..n)
            .map(|i| (format!("k{i:03}"), format!("Name{i}"), json!(i)))
            .collect()
    }

    #[test]
    fn pages_follow_their_cursor_to_the_end() {
        let mut query = ListQuery::parse("limit=4").unwrap();
        let mut seen = Vec::new();
        loop {
            let p = page(items(10), &query);
            seen.extend(p["items"].as_array().unwrap().iter().cloned());
            match p["next"].as_str() {
                Some(next) => query = ListQuery::parse(&format!("limit=4&after={next}")).unwrap(),
                None => break,
            }
        }
        assert_eq!(seen, (0..10).map(|i| json!(i)).collect::<Vec<_>>());
        let p = page(items(10), &ListQuery::parse("q=NAME1").unwrap());
        assert_eq!(p["items"], json!([1]));
    }

    #[test]
    fn bad_queries_are_refused() {
        assert!(ListQuery::parse("limit=0").is_err());
        assert!(ListQuery::parse("limit=501").is_err());
        assert!(ListQuery::parse("bogus=1").is_err());
        assert!(ListQuery::parse("after=%%%").is_err());
    }

    #[test]
    fn etags_follow_the_item() {
        let a = tagged(json!({"id": "x", "state": "active"}));
        let b = tagged(json!({"id": "x", "state": "inactive"}));
        assert_ne!(a["etag"], b["etag"]);
        assert_eq!(etag(&a), a["etag"].as_str().unwrap());
        assert!(matches(a["etag"].as_str().unwrap(), &etag(&a)));
        assert!(!matches(b["etag"].as_str().unwrap(), &etag(&a)));
    }
}
