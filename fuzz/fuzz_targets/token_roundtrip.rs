//! Whatever mints verifies to the same body, and only under its own key.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use shared::token::{self, Claim, Identity, SubjectKind, TokenBody};
use shared::{Key, KeyRing};

#[derive(Arbitrary, Debug)]
struct Input {
    kid: u32,
    jti: [u8; 16],
    iat: u64,
    life: u32,
    kind: u8,
    client: String,
    subject: String,
    roles: Vec<String>,
    claims: Vec<(String, String)>,
    secret: [u8; 32],
}

fuzz_target!(|i: Input| {
    let kind = match i.kind % 3 {
        0 => SubjectKind::User,
        1 => SubjectKind::Client,
        _ => SubjectKind::Impersonation,
    };
    let body = TokenBody {
        kid: i.kid,
        jti: i.jti,
        iat: i.iat,
        exp: i.iat.saturating_add(u64::from(i.life)),
        client: i.client,
        identity: Identity {
            kind,
            subject: i.subject,
            roles: i.roles,
            claims: i
                .claims
                .into_iter()
                .map(|(typ, value)| Claim { typ, value })
                .collect(),
        },
        cnf: None,
        act: None,
    };
    let key = Key::new(i.kid, i.secret);
    let Ok(t) = token::mint(&key, &body) else {
        return;
    };
    let ring = KeyRing::new(vec![key], None).expect("one key");
    if body.exp > body.iat {
        assert_eq!(
            token::verify(&ring, &t, body.iat, 0)
                .expect("own token verifies")
                .body(),
            &body
        );
    }
    assert_eq!(token::inspect(&t).expect("own token inspects"), body);
    let mut other = i.secret;
    other[0] ^= 1;
    let wrong = KeyRing::new(vec![Key::new(i.kid, other)], None).expect("one key");
    assert!(token::verify(&wrong, &t, body.iat, u64::MAX).is_err());
});
