//! Micro-benchmarks of the hot paths: mint, verify, inspect and token request parsing.
//! Run by `cargo xtask bench`, which reports them in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use shared::grant::parse_token_request;
use shared::token::{self, Claim, Identity, SubjectKind, TokenBody};
use shared::{Key, KeyRing};

fn body() -> TokenBody {
    TokenBody {
        kid: 1,
        jti: [7; 16],
        iat: 1_700_000_000,
        exp: 1_700_003_600,
        client: "media-app".into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice@example.com".into(),
            roles: vec!["editor".into(), "viewer".into()],
            claims: vec![Claim {
                typ: "email".into(),
                value: "alice@example.com".into(),
            }],
        },
        cnf: None,
        act: None,
    }
}

fn benches(c: &mut Criterion) {
    let key = Key::new(1, [42; 32]);
    let ring = KeyRing::new(vec![key.clone(), Key::new(2, [43; 32])], Some(1)).unwrap();
    let b = body();
    let t = token::mint(&key, &b).unwrap();
    c.bench_function("mint", |bench| {
        bench.iter(|| token::mint(black_box(&key), black_box(&b)).unwrap())
    });
    c.bench_function("verify", |bench| {
        bench.iter(|| token::verify(black_box(&ring), black_box(&t), 1_700_000_100, 30).unwrap())
    });
    c.bench_function("inspect", |bench| {
        bench.iter(|| token::inspect(black_box(&t)).unwrap())
    });
    let form = b"grant_type=client_credentials&impersonate_claims=upn%3Dcarol%40corp%2C%20group%3Dops&scope=media";
    c.bench_function("parse_token_request", |bench| {
        bench.iter(|| parse_token_request(black_box(form)).unwrap())
    });
}

criterion_group!(token_benches, benches);
criterion_main!(token_benches);
