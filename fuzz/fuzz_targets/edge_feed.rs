//! The filter's reading of edge feed answers, which come over the network: never a panic (which
//! would trap the VM in Envoy), and an accepted answer never moves the cursor backwards unless it
//! is a full snapshot, nor drops a revocation held.
#![no_main]
use filter_core::config::Config;
use filter_core::edge::{parse_answer, EdgeState};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let cfg = Config::parse(
        br#"{"edge_sync":{"cluster":"issuer","client_id":"edge","client_secret":"s"},"dpop":{"public_origin":"https://media.example.com"}}"#,
    )
    .expect("valid configuration");
    let mut state = EdgeState::new(&cfg, 1_000);
    let seed = br#"{"cursor":5,"keys_version":"v1","full":true,"revoked":[{"kind":"user","name":"bob","seq":5,"at":1000,"until":5000}],"keys":[{"kid":1,"secret":"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc"}],"max_token_lifetime_seconds":3600}"#;
    let update = parse_answer(200, seed, &state).expect("the seed answer is valid");
    state.apply(update, 1_000);
    let (cursor, held) = (state.revoked().cursor(), state.revoked().len());
    if let Ok(update) = parse_answer(200, body, &state) {
        let full = update.is_full();
        state.apply(update, 1_001);
        assert!(
            full || state.revoked().cursor() >= cursor,
            "cursor moved back"
        );
        assert!(state.revoked().len() >= held, "a revocation was dropped");
    }
});
