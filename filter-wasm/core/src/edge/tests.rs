use super::*;
use crate::config::{Config, TEST_DPOP};
use crate::decision::{decide, Decision, Outcome};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use shared::token::{self, Identity, SubjectKind, TokenBody};
use shared::Key;

const SYNC: &str =
    r#""edge_sync":{"cluster":"issuer","client_id":"edge","client_secret":"s3cret"}"#;

fn secret(byte: u8) -> String {
    URL_SAFE_NO_PAD.encode([byte; 32])
}

fn cfg(extra: &str) -> Config {
    Config::parse(format!("{{{SYNC},{TEST_DPOP}{extra}}}").as_bytes()).unwrap()
}

fn answer(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

/// A full snapshot with key `kid` (secret bytes all `kid`) and these revocations.
fn snapshot(kid: u32, cursor: u64, revoked: Value) -> Vec<u8> {
    answer(json!({
        "cursor": cursor, "keys_version": format!("v{kid}"), "full": true, "revoked": revoked,
        "keys": [{"kid": kid, "secret": secret(kid as u8)}], "max_token_lifetime_seconds": 3600,
    }))
}

fn token_for(kid: u32, user: &str, client: &str, jti: u8, iat: u64) -> String {
    let body = TokenBody {
        kid,
        jti: [jti; 16],
        iat,
        exp: iat + 600,
        client: client.into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: user.into(),
            roles: vec![],
            claims: vec![],
        },
        cnf: None,
        act: None,
    };
    token::mint(&Key::new(kid, [kid as u8; 32]), &body).unwrap()
}

/// Decides a request with `token` as the Envoy adapter does: a token that verified is
/// remembered in the state's token cache.
fn outcome(cfg: &Config, state: &EdgeState, token: &str, now: u64) -> (Decision, Outcome) {
    let header = format!("Bearer {token}");
    let v = decide(
        cfg,
        state,
        b"/apiv2/x",
        [("authorization", header.as_bytes())],
        now,
    );
    if let Some(verified) = v.remember {
        state.remember(verified);
    }
    (v.decision, v.outcome)
}

#[test]
fn the_configuration_takes_an_edge_sync_block_and_never_shows_the_secret() {
    let c = cfg("");
    let sync = c.edge_sync.as_ref().unwrap();
    assert_eq!(
        (sync.path.as_str(), sync.authority.as_str()),
        ("/apiv2/oauth/edge", "issuer")
    );
    assert_eq!((sync.poll_interval, sync.max_staleness), (1, None));
    assert_eq!(sync.authorization(), "Basic ZWRnZTpzM2NyZXQ=");
    assert!(!format!("{c:?}").contains("ZWRnZTpzM2NyZXQ"));
    assert!(c.ring.keys().is_empty(), "keys are optional with edge sync");
    for (bad, field) in [
        (
            r#""edge_sync":{"cluster":"","client_id":"e","client_secret":"s"}"#,
            "cluster",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"","client_secret":"s"}"#,
            "client_id",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"e","client_secret":"s","path":"x"}"#,
            "path",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"e","client_secret":"s","path":"/e?a=1"}"#,
            "path",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"e","client_secret":"s","poll_interval_seconds":0}"#,
            "poll",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"e","client_secret":"s","max_staleness_seconds":1}"#,
            "staleness",
        ),
        (
            r#""edge_sync":{"cluster":"i","client_id":"e","client_secret":"s","other":1}"#,
            "unknown",
        ),
    ] {
        let e = Config::parse(format!("{{{bad}}}").as_bytes()).unwrap_err();
        assert!(e.0.contains(field), "{bad}: {e}");
    }
    assert!(Config::parse(b"{}").unwrap_err().0.contains("edge_sync"));
}

#[test]
fn polls_ask_for_a_snapshot_first_then_for_what_changed() {
    let c = cfg("");
    let sync = c.edge_sync.as_ref().unwrap();
    let mut state = EdgeState::new(&c, 1_000);
    assert_eq!(state.request_path(sync, 0), "/apiv2/oauth/edge");
    let update = parse_answer(200, &snapshot(1, 7, json!([])), &state).unwrap();
    state.apply(update, 1_001);
    assert_eq!(
        state.request_path(sync, 0),
        "/apiv2/oauth/edge?since=7&keys=v1"
    );
    // A page with more to come asks again at once; one without progress waits for the next poll.
    let entry = json!({"kind": "user", "name": "eve", "seq": 8, "at": 1, "until": 2_000});
    let page = |revoked: Value| {
        answer(json!({"cursor": 8, "keys_version": "v1", "more": true, "revoked": revoked}))
    };
    assert!(
        parse_answer(200, &page(json!([entry])), &state)
            .unwrap()
            .more
    );
    assert!(!parse_answer(200, &page(json!([])), &state).unwrap().more);
}

#[test]
fn the_cursor_carries_the_stamp_the_feed_gave_for_it() {
    let c = cfg("");
    let sync = c.edge_sync.as_ref().unwrap();
    let mut state = EdgeState::new(&c, 1_000);
    let mut first: Value = serde_json::from_slice(&snapshot(1, 7, json!([]))).unwrap();
    first["cursor_stamp"] = json!("00000000000000ab");
    state.apply(parse_answer(200, &answer(first), &state).unwrap(), 1_001);
    assert_eq!(
        state.request_path(sync, 0),
        "/apiv2/oauth/edge?since=7.00000000000000ab&keys=v1"
    );
    let entry = json!({"kind": "user", "name": "eve", "seq": 8, "at": 1, "until": 2_000});
    let next = answer(json!({"cursor": 8, "cursor_stamp": "ffffffffffffffff",
        "keys_version": "v1", "revoked": [entry]}));
    state.apply(parse_answer(200, &next, &state).unwrap(), 1_002);
    assert_eq!(
        state.request_path(sync, 0),
        "/apiv2/oauth/edge?since=8.ffffffffffffffff&keys=v1"
    );
    // An issuer without stamps: the number alone, as before.
    let idle = answer(json!({"cursor": 8, "keys_version": "v1", "revoked": []}));
    state.apply(parse_answer(200, &idle, &state).unwrap(), 1_003);
    assert_eq!(
        state.request_path(sync, 0),
        "/apiv2/oauth/edge?since=8&keys=v1"
    );
    for bad in [
        "ab",
        "00000000000000AB",
        "+00000000000000a",
        "000000000000000ab",
    ] {
        let body = answer(
            json!({"cursor": 8, "cursor_stamp": bad, "keys_version": "v1",
            "revoked": []}),
        );
        let e = parse_answer(200, &body, &state).unwrap_err();
        assert!(e.to_string().contains("cursor_stamp"), "{bad}: {e}");
    }
}

#[test]
fn revocations_and_keys_from_the_feed_decide_requests() {
    let c = cfg("");
    let mut state = EdgeState::new(&c, 1_000);
    let alice = token_for(1, "alice", "app", 1, 1_000);
    assert_eq!(outcome(&c, &state, &alice, 1_000).1, Outcome::Unavailable);
    let revoked = json!([
        {"kind": "token", "jti": "02".repeat(16), "seq": 3, "at": 1_000, "until": 2_000},
        {"kind": "user", "name": "bob", "seq": 4, "at": 1_000, "until": 2_000},
        {"kind": "client", "id": "old-app", "seq": 5, "at": 1_000, "until": 2_000},
        {"kind": "family", "tag": "03".repeat(8), "seq": 6, "at": 1_000, "until": 2_000},
    ]);
    state.apply(
        parse_answer(200, &snapshot(1, 6, revoked), &state).unwrap(),
        1_001,
    );
    assert_eq!(outcome(&c, &state, &alice, 1_001).1, Outcome::Allowed);
    for refused in [
        token_for(1, "alice", "app", 2, 1_000),
        token_for(1, "bob", "app", 1, 1_000),
        token_for(1, "alice", "old-app", 1, 1_000),
        token_for(1, "alice", "app", 3, 1_000),
    ] {
        let (d, o) = outcome(&c, &state, &refused, 1_001);
        assert_eq!(o, Outcome::Revoked);
        let Decision::Deny(d) = d else { panic!() };
        assert_eq!(d.status, 401);
        assert!(d.www_authenticate.contains("error=\"invalid_token\""));
    }
    assert_eq!(
        outcome(&c, &state, &token_for(1, "bob", "app", 1, 1_001), 1_001).1,
        Outcome::Allowed,
        "issued after the revocation"
    );
    // A rotation: key 2 replaces key 1, whose tokens stop verifying.
    let rotated = answer(json!({
        "cursor": 6, "keys_version": "v2", "revoked": [],
        "keys": [{"kid": 2, "secret": secret(2)}], "max_token_lifetime_seconds": 3600,
    }));
    state.apply(parse_answer(200, &rotated, &state).unwrap(), 1_002);
    assert_eq!(outcome(&c, &state, &alice, 1_002).1, Outcome::Invalid);
    let fresh = token_for(2, "alice", "app", 1, 1_002);
    assert_eq!(outcome(&c, &state, &fresh, 1_002).1, Outcome::Allowed);
    assert_eq!(state.revoked.len(), 4, "revocations outlive a key change");
}

/// Only a checked answer can be applied ([`FeedUpdate`] comes from [`parse_answer`] alone, which
/// borrows the state), so a refused answer changes nothing by construction; what is tested is
/// that each hostile answer is refused, for the right reason.
#[test]
fn hostile_answers_change_nothing() {
    let c = cfg("");
    let mut state = EdgeState::new(&c, 1_000);
    let revoked = json!([{"kind": "user", "name": "bob", "seq": 9, "at": 1_000, "until": 2_000}]);
    state.apply(
        parse_answer(200, &snapshot(1, 9, revoked), &state).unwrap(),
        1_001,
    );
    let entry =
        |seq: u64| json!({"kind": "user", "name": "eve", "seq": seq, "at": 1_000, "until": 2_000});
    let same = |cursor: u64, revoked: Value| {
        answer(json!({"cursor": cursor, "keys_version": "v1", "revoked": revoked}))
    };
    let cases: Vec<(u32, Vec<u8>, &str)> = vec![
        (500, same(10, json!([entry(10)])), "answered 500"),
        (401, same(10, json!([entry(10)])), "answered 401"),
        (200, b"<html>not json</html>".to_vec(), "not a feed answer"),
        (200, vec![b' '; MAX_ANSWER_BYTES + 1], "bytes, over"),
        (200, same(3, json!([])), "older than the state held"),
        (
            200,
            same(10, json!([entry(8), entry(10)])),
            "older than the state held",
        ),
        (200, same(10, json!([entry(10), entry(10)])), "out of order"),
        (200, same(10, json!([entry(11)])), "beyond the cursor"),
        (
            200,
            same(
                10,
                json!([{"kind": "token", "jti": "zz", "seq": 10, "at": 1, "until": 2}]),
            ),
            "names no token",
        ),
        (
            200,
            same(
                10,
                json!([{"kind": "user", "name": "", "seq": 10, "at": 1, "until": 2}]),
            ),
            "names no token",
        ),
        (
            200,
            same(
                10,
                json!([{"kind": "family", "tag": "0a", "seq": 10, "at": 1, "until": 2}]),
            ),
            "names no token",
        ),
        (
            200,
            same(
                10,
                json!([{"kind": "user", "name": "e", "jti": "0a", "seq": 10, "at": 1, "until": 2}]),
            ),
            "names no token",
        ),
        (
            200,
            answer(json!({"cursor": 10, "keys_version": "v9", "revoked": []})),
            "without its keys",
        ),
        (
            200,
            answer(json!({"cursor": 10, "keys_version": "v9", "revoked": [], "keys": []})),
            "come together",
        ),
        (
            200,
            answer(
                json!({"cursor": 10, "keys_version": "v9", "revoked": [], "keys": [], "max_token_lifetime_seconds": 60}),
            ),
            "1 to 64 keys",
        ),
        (
            200,
            answer(
                json!({"cursor": 10, "keys_version": "v9", "revoked": [], "keys": [{"kid": 1, "secret": "c2hvcnQ"}], "max_token_lifetime_seconds": 60}),
            ),
            "32 bytes",
        ),
        (
            200,
            answer(json!({"cursor": 10, "keys_version": "../x", "revoked": []})),
            "keys_version",
        ),
    ];
    for (status, body, why) in cases {
        let e = parse_answer(status, &body, &state).unwrap_err();
        assert!(e.to_string().contains(why), "{why}: {e}");
    }
    // A snapshot from a store restored from a backup restarts the cursor but keeps bob revoked.
    state.apply(
        parse_answer(200, &snapshot(1, 2, json!([])), &state).unwrap(),
        1_002,
    );
    assert_eq!((state.revoked.cursor(), state.revoked.len()), (2, 1));
}

#[test]
fn errors_never_quote_the_answer() {
    let c = cfg("");
    let state = EdgeState::new(&c, 0);
    let leaked = secret(9);
    let body =
        format!(r#"{{"cursor":1,"keys_version":"v","revoked":[],"keys":[{{"kid":"{leaked}"}}]}}"#);
    let e = parse_answer(200, body.as_bytes(), &state)
        .unwrap_err()
        .to_string();
    assert!(!e.contains(&leaked), "{e}");
}

/// A configuration with the static key 1, these fields (`,"name":value` each) and these of the
/// `edge_sync` block beyond the credentials; without edge sync if `sync` is `None`.
fn static_key(top: &str, sync: Option<&str>) -> Config {
    let sync = sync.map_or(String::new(), |s| {
        format!(r#","edge_sync":{{"cluster":"i","client_id":"e","client_secret":"s"{s}}}"#)
    });
    let key = secret(1);
    Config::parse(
        format!(r#"{{"keys":[{{"kid":1,"secret":"{key}"}}],{TEST_DPOP}{top}{sync}}}"#).as_bytes(),
    )
    .unwrap()
}

fn with_static_key(sync: &str) -> Config {
    static_key("", Some(sync))
}

#[test]
fn before_its_first_answer_the_filter_accepts_no_token_unless_within_the_grace() {
    let alice = token_for(1, "alice", "app", 1, 1_000);
    let expired = token_for(1, "alice", "app", 2, 100);
    // By default no grace: with static keys that verify alice, she still gets 503 until the
    // first good answer, and so does any token; no token is 401, a malformed header 400.
    let strict = with_static_key("");
    assert_eq!(strict.edge_sync.as_ref().unwrap().startup_grace, 0);
    let mut state = EdgeState::new(&strict, 1_000);
    for (token, now) in [(&alice, 1_000), (&alice, 1_500), (&expired, 1_000)] {
        let (d, o) = outcome(&strict, &state, token, now);
        assert_eq!(o, Outcome::Unsynced);
        let Decision::Deny(d) = d else { panic!() };
        assert_eq!((d.status, d.retry_after), (503, Some(1)));
        assert!(d
            .www_authenticate
            .contains("error=\"temporarily_unavailable\""));
        assert!(d.body.starts_with(r#"{"error":"temporarily_unavailable","#));
    }
    // A clock read before the start is no grace either.
    assert_eq!(outcome(&strict, &state, &alice, 999).1, Outcome::Unsynced);
    let no_token = decide(&strict, &state, b"/apiv2/x", [], 1_000);
    assert_eq!(no_token.outcome, Outcome::Missing);
    let bad = decide(
        &strict,
        &state,
        b"/apiv2/x",
        [("authorization", &b"Bearer a b"[..])],
        1_000,
    );
    assert_eq!(bad.outcome, Outcome::Malformed);
    // The first good answer ends it once it has arrived whole, and its revocations count: a
    // snapshot's first page (more to come) is not yet all that is revoked.
    let bob_revoked = json!({"kind": "user", "name": "bob", "seq": 2, "at": 1_000, "until": 2_000});
    let first_page = answer(json!({
        "cursor": 1, "keys_version": "v1", "full": true, "more": true,
        "revoked": [{"kind": "user", "name": "eve", "seq": 1, "at": 1_000, "until": 2_000}],
        "keys": [{"kid": 1, "secret": secret(1)}], "max_token_lifetime_seconds": 3600,
    }));
    state.apply(parse_answer(200, &first_page, &state).unwrap(), 1_001);
    assert!(!state.caught_up());
    assert_eq!(outcome(&strict, &state, &alice, 1_001).1, Outcome::Unsynced);
    let last_page = answer(json!({"cursor": 2, "keys_version": "v1", "revoked": [bob_revoked]}));
    state.apply(parse_answer(200, &last_page, &state).unwrap(), 1_002);
    assert!(state.caught_up());
    assert_eq!(outcome(&strict, &state, &alice, 1_002).1, Outcome::Allowed);
    let bob = token_for(1, "bob", "app", 3, 1_000);
    assert_eq!(outcome(&strict, &state, &bob, 1_002).1, Outcome::Revoked);
    // Later failures keep the last state (unless `max_staleness_seconds` says otherwise).
    assert_eq!(outcome(&strict, &state, &alice, 1_400).1, Outcome::Allowed);

    // With a grace: decided with the static configuration until it ends, 503 afterwards.
    let lenient = with_static_key(r#","startup_grace_seconds":30"#);
    let state = EdgeState::new(&lenient, 1_000);
    assert_eq!(outcome(&lenient, &state, &alice, 1_000).1, Outcome::Allowed);
    assert_eq!(outcome(&lenient, &state, &alice, 1_029).1, Outcome::Allowed);
    assert_eq!(
        outcome(&lenient, &state, &expired, 1_029).1,
        Outcome::Expired
    );
    assert_eq!(
        outcome(&lenient, &state, &alice, 1_030).1,
        Outcome::Unsynced
    );
    assert_eq!(
        outcome(&lenient, &state, &alice, 9_000).1,
        Outcome::Unsynced
    );
    // An exempt path stays exempt.
    let exempt = static_key(r#","exempt_prefixes":["/public/"]"#, Some(""));
    let state = EdgeState::new(&exempt, 1_000);
    let header = format!("Bearer {alice}");
    let headers = [("authorization", header.as_bytes())];
    let o = decide(&exempt, &state, b"/public/x", headers, 1_000).outcome;
    assert_eq!(o, Outcome::Exempt);
    // Without edge sync there is nothing to wait for.
    let plain = static_key("", None);
    let state = EdgeState::new(&plain, 1_000);
    assert_eq!(outcome(&plain, &state, &alice, 1_000).1, Outcome::Allowed);
    for bad in [
        r#","startup_grace_seconds":86401"#,
        r#","startup_grace_seconds":-1"#,
    ] {
        let raw = format!(
            r#"{{"edge_sync":{{"cluster":"i","client_id":"e","client_secret":"s"{bad}}}}}"#
        );
        assert!(Config::parse(raw.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn old_state_refuses_everything_only_when_the_operator_chose_so() {
    let lenient = cfg("");
    // Static keys serve before the first sync only within the start-up grace.
    let strict = with_static_key(r#","startup_grace_seconds":60"#);
    let strict_sync = with_static_key(r#","max_staleness_seconds":30,"startup_grace_seconds":60"#);
    let alice = token_for(1, "alice", "app", 1, 1_000);
    let state = EdgeState::new(&strict, 1_000);
    assert_eq!(outcome(&strict, &state, &alice, 1_010).1, Outcome::Allowed);
    let mut state = EdgeState::new(&lenient, 1_000);
    state.apply(
        parse_answer(200, &snapshot(1, 0, json!([])), &state).unwrap(),
        1_000,
    );
    assert_eq!(state.age(1_500), 500);
    assert_eq!(outcome(&lenient, &state, &alice, 1_500).1, Outcome::Allowed);
    let mut state = EdgeState::new(&strict_sync, 1_000);
    assert_eq!(
        outcome(&strict_sync, &state, &alice, 1_030).1,
        Outcome::Allowed
    );
    assert_eq!(
        outcome(&strict_sync, &state, &alice, 1_031).1,
        Outcome::Unavailable
    );
    state.apply(
        parse_answer(200, &snapshot(1, 0, json!([])), &state).unwrap(),
        1_031,
    );
    assert_eq!(
        outcome(&strict_sync, &state, &alice, 1_040).1,
        Outcome::Allowed
    );
    let (d, o) = outcome(&strict_sync, &state, &alice, 1_062);
    assert_eq!(o, Outcome::Unavailable);
    let Decision::Deny(d) = d else { panic!() };
    assert_eq!(d.status, 503);
}

#[test]
fn the_cache_serves_only_verified_tokens_and_never_a_revoked_expired_or_retired_one() {
    let c = cfg("");
    let mut state = EdgeState::new(&c, 1_000);
    state.apply(
        parse_answer(200, &snapshot(1, 0, json!([])), &state).unwrap(),
        1_000,
    );
    let cached = |state: &EdgeState| state.cache.borrow().len();
    let alice = token_for(1, "alice", "app", 1, 1_000);
    assert_eq!(outcome(&c, &state, &alice, 1_000).1, Outcome::Allowed);
    assert_eq!(cached(&state), 1);
    // Served from the cache: allowed without its key in the ring (a state `apply` never makes
    // without emptying the cache; set by hand here to show the hit).
    let other = shared::KeyRing::new(vec![Key::new(9, [9; 32])], None).unwrap();
    let ring = std::mem::replace(&mut state.ring, other);
    assert_eq!(outcome(&c, &state, &alice, 1_001).1, Outcome::Allowed);
    state.ring = ring;
    // A forged token (one character of its tag changed) never enters.
    let mut forged = alice.clone().into_bytes();
    let at = forged.len() - 10;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_ne!(outcome(&c, &state, &forged, 1_001).1, Outcome::Allowed);
    assert_eq!(cached(&state), 1, "a forged token never enters");
    // Expired (600 s of life, 30 s of skew): refused although it was cached.
    assert_eq!(outcome(&c, &state, &alice, 1_630).1, Outcome::Expired);
    // Revoked after it was cached.
    let bob = token_for(1, "bob", "app", 2, 1_000);
    assert_eq!(outcome(&c, &state, &bob, 1_001).1, Outcome::Allowed);
    let revoke = answer(json!({"cursor": 1, "keys_version": "v1", "revoked": [
        {"kind": "token", "jti": "02".repeat(16), "seq": 1, "at": 1_001, "until": 2_000}]}));
    state.apply(parse_answer(200, &revoke, &state).unwrap(), 1_002);
    assert_eq!(outcome(&c, &state, &bob, 1_002).1, Outcome::Revoked);
    // A user revocation covers a cached token issued before it.
    let dave = token_for(1, "dave", "app", 4, 1_000);
    assert_eq!(outcome(&c, &state, &dave, 1_002).1, Outcome::Allowed);
    let user = answer(json!({"cursor": 2, "keys_version": "v1", "revoked": [
        {"kind": "user", "name": "dave", "seq": 2, "at": 1_002, "until": 2_000}]}));
    state.apply(parse_answer(200, &user, &state).unwrap(), 1_002);
    assert_eq!(outcome(&c, &state, &dave, 1_002).1, Outcome::Revoked);
    // An idle poll keeps the cache; a new key ring empties it, and the old key's tokens fail.
    let carol = token_for(1, "carol", "app", 3, 1_000);
    assert_eq!(outcome(&c, &state, &carol, 1_002).1, Outcome::Allowed);
    let idle = answer(json!({"cursor": 2, "keys_version": "v1", "revoked": []}));
    state.apply(parse_answer(200, &idle, &state).unwrap(), 1_003);
    assert_eq!(cached(&state), 1);
    let rotated = answer(json!({
        "cursor": 2, "keys_version": "v2", "revoked": [],
        "keys": [{"kid": 2, "secret": secret(2)}], "max_token_lifetime_seconds": 3600,
    }));
    state.apply(parse_answer(200, &rotated, &state).unwrap(), 1_004);
    assert_eq!(cached(&state), 0);
    assert_eq!(outcome(&c, &state, &carol, 1_004).1, Outcome::Invalid);
}

#[test]
fn the_cache_can_be_turned_off() {
    let c = cfg(r#","token_cache_entries":0"#);
    let mut state = EdgeState::new(&c, 1_000);
    state.apply(
        parse_answer(200, &snapshot(1, 0, json!([])), &state).unwrap(),
        1_000,
    );
    let alice = token_for(1, "alice", "app", 1, 1_000);
    assert_eq!(outcome(&c, &state, &alice, 1_000).1, Outcome::Allowed);
    assert_eq!(state.cache.borrow().len(), 0);
    assert!(
        Config::parse(format!("{{{SYNC},\"token_cache_entries\":100001}}").as_bytes()).is_err()
    );
}

#[test]
fn an_edge_names_its_node_and_vm() {
    let id = EdgeIdentity::new(Some(b"envoy-a.example"), 0x1234_5678_9abc_def0_1234, 2);
    assert_eq!(id.node, "envoy-a.example");
    assert_eq!(id.vm, "bcdef0123402");
    assert_eq!(EdgeIdentity::new(None, 7, 0).vm, "000000000700");
    // Two workers' VMs configured in the same tick of the clock still differ.
    assert_ne!(
        EdgeIdentity::new(None, 7, 1).vm,
        EdgeIdentity::new(None, 7, 2).vm
    );
    for bad in [&b""[..], b"bad\nnode", b"\xff", &[b'a'; 129]] {
        assert_eq!(EdgeIdentity::new(Some(bad), 1, 0).node, "unknown");
    }
    assert_eq!(EdgeIdentity::new(Some(&[b'a'; 128]), 1, 0).node.len(), 128);
}
