//! Arbitrary input never verifies, never panics, and whatever inspects re-encodes to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shared::token;
use shared::{Key, KeyRing};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let key = Key::new(1, [7; 32]);
    let ring = KeyRing::new(vec![key.clone()], Some(1)).expect("one key");
    assert!(
        token::verify(&ring, text, 1_700_000_000, u64::MAX).is_err(),
        "forged: {text:?}"
    );
    if let Ok(body) = token::inspect(text) {
        // A body that decodes is canonical: signing it again yields the same text up to the tag.
        let body_kid = body.kid;
        let again =
            token::mint(&Key::new(body_kid, [7; 32]), &body).expect("decoded bodies are mintable");
        let signed_part = |t: &str| t.rsplit_once('.').map(|(a, _)| a.to_owned());
        assert_eq!(signed_part(&again), signed_part(text));
    }
});
