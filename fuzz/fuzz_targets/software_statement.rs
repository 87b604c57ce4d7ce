//! Vendors' software statements and revocation lists (`issuer/src/vendor/`): arbitrary text never
//! verifies and never panics; a document signed here with a trusted key around an arbitrary
//! header tail and arbitrary claims never panics, and passes only with claims inside their bounds.
//!
//! The issuer's module is compiled here from its source file: it is pure (no I/O, no clock), and
//! depending on the whole issuer crate would bring its runtime and database drivers into every
//! fuzz build.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shared::dpop::sign::ProofKey;
use std::sync::OnceLock;

#[path = "../../issuer/src/vendor/mod.rs"]
#[allow(dead_code, unused_imports)]
mod vendor;

const NOW: u64 = 1_800_000_000;

fuzz_target!(|input: (u8, &str, &str)| {
    let (mode, a, b) = input;
    static KEYS: OnceLock<(ProofKey, vendor::Trust)> = OnceLock::new();
    let (key, trust) = KEYS.get_or_init(|| {
        let key = ProofKey::ed25519([7; 32]);
        let mut trust = vendor::Trust::default();
        let set = vendor::keys::public_key_set(&key);
        trust.add("acme", vendor::parse_key_set(&set).expect("our own set"));
        (key, trust)
    });
    let _ = vendor::parse_key_set(a);
    if mode % 2 == 0 {
        assert!(
            vendor::statement::verify(a, trust, NOW).is_err(),
            "forged: {a:?}"
        );
        assert!(
            vendor::revocations::verify(a, trust, NOW).is_err(),
            "forged: {a:?}"
        );
        return;
    }
    let typ = if mode % 4 == 1 {
        vendor::jws::STATEMENT_TYP
    } else {
        vendor::jws::REVOCATIONS_TYP
    };
    // `a` ends the header (more members, or junk), `b` is the whole claims part.
    let header = format!(
        r#"{{"alg":"EdDSA","typ":"{typ}","kid":"{}"{a}}}"#,
        vendor::keys::kid_of(key)
    );
    let jws = key.sign_parts(&header, b);
    if let Ok(v) = vendor::statement::verify(&jws, trust, NOW) {
        let s = v.statement;
        assert!(s.exp > NOW && s.iat < s.exp && !s.grant_types.is_empty());
        assert!(shared::rules::client_id_ok(&s.client_id));
    }
    if let Ok(v) = vendor::revocations::verify(&jws, trust, NOW) {
        let ids = v.list.revoked_client_ids;
        assert!(!ids.is_empty() && ids.len() <= vendor::revocations::MAX_CLIENTS);
    }
});
