//! A worker's copy of the state (the native filter's): [`EdgeState::follow`] and
//! [`EdgeState::generation`]; and the node name an edge reports ([`EdgeIdentity::node_or`],
//! `edge_sync.node`).

use super::*;
use crate::config::{Config, TEST_DPOP};
use crate::decision::{decide, Outcome};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::json;
use shared::token::{self, Identity, SubjectKind, TokenBody};
use shared::Key;

const SYNC: &str =
    r#""edge_sync":{"cluster":"issuer","client_id":"edge","client_secret":"s3cret"}"#;

fn cfg() -> Config {
    Config::parse(format!("{{{SYNC},{TEST_DPOP}}}").as_bytes()).unwrap()
}

fn snapshot(kid: u32, cursor: u64, revoked: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cursor": cursor, "keys_version": format!("v{kid}"), "full": true, "revoked": revoked,
        "keys": [{"kid": kid, "secret": URL_SAFE_NO_PAD.encode([kid as u8; 32])}],
        "max_token_lifetime_seconds": 3600,
    }))
    .unwrap()
}

fn token_for(kid: u32, user: &str, iat: u64) -> String {
    let body = TokenBody {
        kid,
        jti: [1; 16],
        iat,
        exp: iat + 600,
        client: "app".into(),
        identity: Identity {
            subject: user.into(),
            kind: SubjectKind::User,
            roles: vec![],
            claims: vec![],
        },
        cnf: None,
        act: None,
    };
    token::mint(&Key::new(kid, [kid as u8; 32]), &body).unwrap()
}

fn outcome(c: &Config, state: &EdgeState, t: &str, now: u64) -> Outcome {
    let auth = format!("Bearer {t}");
    let headers = [("authorization", auth.as_bytes())];
    let v = decide(c, state, b"/apiv2/x", headers, now);
    if let Some(r) = v.remember {
        state.remember(r);
    }
    v.outcome
}

#[test]
fn a_copy_that_follows_decides_as_its_source_and_never_from_a_stale_cache() {
    let c = cfg();
    let mut source = EdgeState::new(&c, 1_000);
    let mut copy = EdgeState::new(&c, 1_000);
    let alice = token_for(1, "alice", 1_000);
    source.apply(
        parse_answer(200, &snapshot(1, 1, json!([])), &source).unwrap(),
        1_001,
    );
    assert_eq!(source.generation(), 1);
    assert_eq!(outcome(&c, &copy, &alice, 1_001), Outcome::Unavailable);
    copy.follow(&source);
    assert_eq!(copy.generation(), 1);
    assert!(copy.caught_up());
    assert_eq!(outcome(&c, &copy, &alice, 1_001), Outcome::Allowed);
    // Alice is revoked at the source: the copy, which cached her token, refuses it once it follows.
    let revoked = json!([{"kind": "user", "name": "alice", "seq": 2, "at": 1_002, "until": 2_000}]);
    source.apply(
        parse_answer(200, &snapshot(1, 2, revoked), &source).unwrap(),
        1_002,
    );
    assert_eq!(source.generation(), 2);
    assert_eq!(
        outcome(&c, &copy, &alice, 1_002),
        Outcome::Allowed,
        "not followed yet"
    );
    copy.follow(&source);
    assert_eq!(outcome(&c, &copy, &alice, 1_002), Outcome::Revoked);
    assert_eq!(outcome(&c, &source, &alice, 1_002), Outcome::Revoked);
    // An answer that changes nothing moves only the time of the last sync.
    let quiet =
        serde_json::to_vec(&json!({"cursor": 2, "keys_version": "v1", "revoked": []})).unwrap();
    source.apply(parse_answer(200, &quiet, &source).unwrap(), 1_010);
    assert_eq!(source.generation(), 2);
    copy.follow(&source);
    assert_eq!(copy.age(1_010), 0);
}

#[test]
fn the_node_an_edge_reports() {
    let envoy = EdgeIdentity::new(Some(b"envoy-1"), 7, 0);
    assert_eq!(
        envoy.node_or(Some("configured")),
        "envoy-1",
        "Envoy's node id wins"
    );
    let none = EdgeIdentity::new(None, 7, 0);
    assert_eq!(none.node_or(Some("configured")), "configured");
    assert_eq!(none.node_or(None), UNKNOWN_NODE);
    let with = |node: &str| {
        let sync = format!(
            r#"{{"edge_sync":{{"cluster":"issuer","client_id":"e","client_secret":"s","node":{node}}},{TEST_DPOP}}}"#
        );
        Config::parse(sync.as_bytes()).map(|c| c.edge_sync.and_then(|s| s.node))
    };
    assert_eq!(with("\"edge-1\"").unwrap().as_deref(), Some("edge-1"));
    for bad in ["\"\"", "\"a\\nb\"", &format!("\"{}\"", "n".repeat(129))] {
        assert!(with(bad).is_err(), "{bad}");
    }
}
