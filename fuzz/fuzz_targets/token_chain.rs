//! Arbitrary bytes after a good body's claims, signed under the key: the chain section decodes
//! without a panic, only to a chain that meets every rule, and re-encodes to the same bytes; and
//! any chain that mints verifies to itself.
#![no_main]
use arbitrary::Arbitrary;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use shared::token::{self, Chain, Identity, SubjectKind, TokenBody, MAX_CHAIN_DEPTH};
use shared::{Key, KeyRing};

#[derive(Arbitrary, Debug)]
struct Input {
    /// Raw bytes appended after the claims of a minted body.
    tail: Vec<u8>,
    bound: bool,
    origin: String,
    actors: Vec<String>,
}

fn body(client: &str, act: Option<Chain>, bound: bool) -> TokenBody {
    TokenBody {
        kid: 1,
        jti: [5; 16],
        iat: 1_000,
        exp: 1_300,
        client: client.to_owned(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice".into(),
            roles: vec![],
            claims: vec![],
        },
        cnf: bound.then_some([9; 32]),
        act,
    }
}

fuzz_target!(|i: Input| {
    let key = Key::new(1, [7; 32]);
    let ring = KeyRing::new(vec![key.clone()], Some(1)).expect("one key");
    let limits = token::Limits {
        skew: 0,
        max_lifetime: u64::MAX,
    };
    // Raw tail: sign `plain body ‖ tail ‖ jkt?` under the real key.
    let plain = token::mint(&key, &body("a", None, false)).expect("a good body");
    let mut raw = URL_SAFE_NO_PAD
        .decode(plain.split('.').nth(1).expect("three parts"))
        .expect("own encoding");
    raw.extend_from_slice(&i.tail);
    let prefix = if i.bound {
        raw.extend_from_slice(&[9; 32]);
        token::BOUND_PREFIX
    } else {
        token::PREFIX
    };
    let signed = format!("{prefix}{}", URL_SAFE_NO_PAD.encode(&raw));
    let tag = {
        use hmac::{KeyInit, Mac};
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&[7; 32]).expect("any key length");
        mac.update(signed.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    };
    let text = format!("{signed}.{tag}");
    if let Ok(v) = token::verify_any_with(&ring, &text, 1_100, limits) {
        let b = v.body();
        if let Some(chain) = &b.act {
            assert!((1..=MAX_CHAIN_DEPTH).contains(&chain.depth()));
            assert_eq!(chain.actors[0], b.client);
        }
        let again = token::mint(&key, b).expect("decoded bodies are mintable");
        assert_eq!(again, text, "one encoding per chain");
    }
    // Structured: whatever chain mints verifies to itself.
    let chain = Chain {
        origin: i.origin,
        actors: i.actors,
    };
    let client = chain.actors.first().cloned().unwrap_or_default();
    let b = body(&client, Some(chain), i.bound);
    if let Ok(t) = token::mint(&key, &b) {
        let v = token::verify_any_with(&ring, &t, 1_100, limits).expect("own token verifies");
        assert_eq!(v.body(), &b);
    }
});
