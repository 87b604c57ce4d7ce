//! `impersonate_claims` and `roles` parsers: no panic, and accepted items are always clean.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(claims) = shared::claims::parse_impersonate_claims(text) {
        assert!(!claims.is_empty() && claims.len() <= shared::token::MAX_ITEMS);
        for c in claims {
            assert!(!c.typ.is_empty() && !c.value.is_empty());
            assert!(!c.typ.contains([',', '=']) && !c.value.contains([',', '=']));
            assert!(c.typ.trim() == c.typ && c.value.trim() == c.value);
        }
    }
    if let Ok(roles) = shared::claims::parse_roles(text) {
        assert!(roles
            .iter()
            .all(|r| !r.is_empty() && !r.contains(',') && r.trim() == r));
    }
});
