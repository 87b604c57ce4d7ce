//! The filter's decision over arbitrary paths and header sets: never a panic (which would trap the
//! VM in Envoy), and never an allow unless one of the token headers carries a token that verifies,
//! from the token cache or not.
#![no_main]
use arbitrary::Arbitrary;
use filter_common::{a_token_verifies, config, STATE};
use filter_core::decision::{decide, Decision};
use filter_core::edge::EdgeState;
use libfuzzer_sys::fuzz_target;

mod filter_common;

#[derive(Arbitrary, Debug)]
struct Input {
    path: Vec<u8>,
    headers: Vec<(u8, Vec<u8>)>,
    now: u64,
}

const NAMES: [&str; 5] = [
    "authorization",
    "serviceauthorization",
    "x-auth-subject",
    ":path",
    "other",
];

fuzz_target!(|i: Input| {
    let cfg = config();
    let headers: Vec<(&str, &[u8])> = i
        .headers
        .iter()
        .map(|(n, v)| (NAMES[usize::from(*n) % NAMES.len()], v.as_slice()))
        .collect();
    // One state for the whole run: its token cache fills with the tokens that verified (as the
    // Envoy adapter remembers them), and an allow served from it must still be one that
    // verification gives at this input's time.
    let decision = STATE.with(|state| {
        let verdict = decide(cfg, state, &i.path, headers.iter().copied(), i.now);
        if let Some(verified) = verdict.remember {
            state.remember(verified);
        }
        verdict.decision
    });
    // The cache never changes a decision: the same as with a state that has seen nothing.
    let fresh = EdgeState::new(cfg, 0);
    let uncached = decide(cfg, &fresh, &i.path, headers.iter().copied(), i.now).decision;
    assert_eq!(decision, uncached, "the token cache changed a decision");
    if let Decision::Exempt = decision {
        let end = i.path.iter().position(|&c| c == b'?' || c == b'#');
        let path = &i.path[..end.unwrap_or(i.path.len())];
        assert!(
            path.starts_with(b"/apiv2/oauth/"),
            "exempt outside the prefix"
        );
        assert!(
            !path.iter().any(|c| b";%\\".contains(c))
                && !path.split(|&c| c == b'/').any(|s| s == b"." || s == b".."),
            "exempt with a path a server could read as another"
        );
    }
    if let Decision::Allow(_) = decision {
        assert!(
            a_token_verifies(cfg, &headers, i.now),
            "allowed without a valid token"
        );
    }
});
