//! The admin HTTP API's input (`issuer/src/http/admin/bodies.rs`): arbitrary bytes as each
//! change's body and as a list's query never panic; a body accepted holds no field beyond its
//! own, and a query accepted keeps its `limit` within bounds and its cursor readable.
//!
//! The issuer's file is compiled here from its source: it is pure (serde only), and depending on
//! the whole issuer crate would bring its runtime and database drivers into every fuzz build.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "../../issuer/src/http/admin/bodies.rs"]
#[allow(dead_code)]
mod bodies;

use bodies::{parse_body, Activate, Empty, Import, ListQuery, Narrow, MAX_LIMIT};

/// Whether `data` is a JSON object with a key outside `known`.
fn has_other_key(data: &[u8], known: &[&str]) -> bool {
    serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .is_some_and(|o| o.keys().any(|k| !known.contains(&k.as_str())))
}

fuzz_target!(|data: &[u8]| {
    if parse_body::<Empty>(data).is_ok() {
        assert!(!has_other_key(data, &[]));
    }
    if parse_body::<Activate<Value>>(data).is_ok() {
        assert!(!has_other_key(data, &["grants", "no_impersonation"]));
    }
    if parse_body::<Narrow<Value>>(data).is_ok() {
        assert!(!has_other_key(data, &["grants", "no_impersonation"]));
    }
    if let Ok(i) = parse_body::<Import>(data) {
        assert!(!has_other_key(data, &["statement"]));
        let _ = i.statement.len();
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(q) = ListQuery::parse(text) {
            assert!(q.limit.is_none_or(|l| (1..=MAX_LIMIT).contains(&l)));
            assert_eq!(q.after.is_some(), q.after_key().is_some());
        }
    }
});
