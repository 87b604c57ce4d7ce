//! The filter's cost for a token carrying an actor chain (token exchange) beside a plain one:
//! [`filter_core::request::handle`], the whole decision both Envoy adapters run, for the same
//! user's token without a chain and with a chain of four actors (the identity headers the
//! upstream gets, `x-auth-actors` among them, included). Once with the token cache off (every
//! request verifies its token) and once with it on (one token repeated). Run by `cargo xtask
//! bench --exchange`, which reports the ratios in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use filter_core::config::Config;
use filter_core::dpop::ShardedReplays;
use filter_core::edge::EdgeState;
use filter_core::request::handle;
use shared::token::{self, Chain, Claim, Identity, SubjectKind, TokenBody};
use shared::Key;

const SECRET: [u8; 32] = [7; 32];
const NOW: u64 = 1_700_000_000;

fn config(cache_entries: usize) -> Config {
    use base64::Engine as _;
    let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
    let json = format!(
        r#"{{"keys":[{{"kid":3,"secret":"{s}"}}],"token_cache_entries":{cache_entries},"dpop":{{"public_origin":"https://api.example.com"}}}}"#
    );
    Config::parse(json.as_bytes()).expect("the bench's configuration")
}

/// A user's token as the password grant gives it, with `act` if given.
fn header(act: Option<Chain>) -> String {
    let body = TokenBody {
        kid: 3,
        jti: [0xab; 16],
        iat: NOW,
        exp: NOW + 300,
        client: act
            .as_ref()
            .map_or("media-app".into(), |c| c.actors[0].clone()),
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
        act,
    };
    let t = token::mint(&Key::new(3, SECRET), &body).expect("a token");
    format!("Bearer {t}")
}

fn chain_of_four() -> Chain {
    Chain {
        origin: "media-app".into(),
        actors: ["media-service", "transcoder", "uploader", "ingest-gateway"]
            .map(String::from)
            .to_vec(),
    }
}

fn benches(c: &mut Criterion) {
    let replays = ShardedReplays::new(1_000, 0);
    let tokens = [
        ("plain", header(None)),
        ("chain4", header(Some(chain_of_four()))),
    ];
    for (cache, entries) in [("uncached", 0), ("cached", 1_000)] {
        let cfg = config(entries);
        for (name, value) in &tokens {
            let state = EdgeState::new(&cfg, NOW);
            let headers: [(&str, &[u8]); 3] = [
                (":path", b"/apiv2/MediaService/Find"),
                (":method", b"GET"),
                ("authorization", value.as_bytes()),
            ];
            let first = handle(&cfg, &state, &replays, &headers, NOW);
            assert!(
                matches!(
                    first.action,
                    filter_core::request::Action::Forward { set: Some(_), .. }
                ),
                "{first:?}"
            );
            c.bench_function(&format!("filter_{name}_{cache}"), |b| {
                b.iter(|| handle(black_box(&cfg), &state, &replays, black_box(&headers), NOW))
            });
        }
    }
}

criterion_group!(chain_benches, benches);
criterion_main!(chain_benches);
