//! What both Envoy adapters do with a request ([`filter_core::request::handle`], over headers
//! read as the native adapter reads Envoy's, names of any bytes): never a panic (which in the
//! native filter would take Envoy down), an answer only with headers Envoy can send, and a
//! forwarded request that keeps no identity header it came with and carries one only when a
//! token verifies.
#![no_main]
use arbitrary::Arbitrary;
use filter_common::{a_token_verifies, config, STATE};
use filter_core::config::is_identity_header;
use filter_core::decision::Outcome;
use filter_core::edge::EdgeState;
use filter_core::request::{handle, name, Action};
use libfuzzer_sys::fuzz_target;

mod filter_common;

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    headers: Vec<(Name, Vec<u8>)>,
    now: u64,
}

const NAMES: [&str; 13] = [
    ":path",
    ":method",
    ":scheme",
    ":authority",
    "dpop",
    "authorization",
    "serviceauthorization",
    "x-auth-subject",
    "X-Auth_Roles",
    "x-auth",
    "x-authz",
    "x_auth-claims",
    "other",
];

/// A value Envoy accepts in a header it sends or forwards: no CR, LF or NUL.
fn sendable(v: &[u8]) -> bool {
    !v.iter().any(|c| b"\r\n\0".contains(c))
}

fuzz_target!(|i: Input| {
    let cfg = config();
    let headers: Vec<(&str, &[u8])> = i
        .headers
        .iter()
        .map(|(n, v)| match n {
            Name::Known(k) => (NAMES[usize::from(*k) % NAMES.len()], v.as_slice()),
            Name::Raw(raw) => (name(raw), v.as_slice()),
        })
        .collect();
    let replays = filter_core::dpop::ShardedReplays::new(1_000, 0);
    let handled = STATE.with(|state| handle(cfg, state, &replays, &headers, i.now));
    // The token cache never changes what is done: the same as with a state that has seen nothing.
    let fresh = EdgeState::new(cfg, 0);
    let replays = filter_core::dpop::ShardedReplays::new(1_000, 0);
    assert_eq!(handle(cfg, &fresh, &replays, &headers, i.now), handled);
    match &handled.action {
        Action::Answer {
            status,
            headers: answer,
            body,
        } => {
            assert!([400, 401, 503].contains(status), "{status}");
            assert!(
                answer.iter().all(|(_, v)| sendable(v.as_bytes())),
                "{answer:?}"
            );
            assert!(body.starts_with('{') && sendable(body.as_bytes()), "{body}");
        }
        Action::Forward { remove, set } => {
            let identity: Vec<&str> = headers
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| is_identity_header(n))
                .collect();
            assert_eq!(remove, &identity, "not every identity header is removed");
            match set {
                Some(set) => {
                    assert_eq!(handled.outcome, Outcome::Allowed);
                    assert!(set
                        .iter()
                        .all(|(n, v)| { is_identity_header(n) && sendable(v.as_bytes()) }));
                    assert!(
                        a_token_verifies(cfg, &headers, i.now),
                        "an identity set without a valid token"
                    );
                }
                None => assert_eq!(handled.outcome, Outcome::Exempt),
            }
        }
    }
});
