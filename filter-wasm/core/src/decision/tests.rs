use super::*;
use crate::config::TEST_DPOP;
use proptest::prelude::*;
use shared::token::{Claim, Identity, TokenBody};
use shared::Key;

const SECRET: [u8; 32] = [7; 32];

fn cfg() -> Config {
    cfg_with(r#","exempt_prefixes":["/apiv2/oauth/"]"#)
}

fn cfg_with(extra: &str) -> Config {
    use base64::Engine as _;
    let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
    Config::parse(
        format!(r#"{{"keys":[{{"kid":3,"secret":"{s}"}}],{TEST_DPOP}{extra}}}"#).as_bytes(),
    )
    .unwrap()
}

fn mint(kind: SubjectKind, subject: &str, exp: u64) -> String {
    let body = TokenBody {
        kid: 3,
        jti: [0xab; 16],
        iat: 1_000,
        exp,
        client: "app".into(),
        identity: Identity {
            kind,
            subject: subject.into(),
            roles: if kind == SubjectKind::Client {
                vec![]
            } else {
                vec!["editor".into(), "viewer".into()]
            },
            claims: if kind == SubjectKind::Client {
                vec![]
            } else {
                vec![Claim {
                    typ: "email".into(),
                    value: "z@x.y".into(),
                }]
            },
        },
        cnf: None,
        act: None,
    };
    token::mint(&Key::new(3, SECRET), &body).unwrap()
}

fn run(path: &str, headers: &[(&str, &str)], now: u64) -> (Decision, Outcome) {
    let cfg = cfg();
    let v = decide(
        &cfg,
        &EdgeState::new(&cfg, now),
        path.as_bytes(),
        headers.iter().map(|(n, v)| (*n, v.as_bytes())),
        now,
    );
    (v.decision, v.outcome)
}

fn denial(d: Decision) -> Denial {
    match d {
        Decision::Deny(x) => x,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn valid_tokens_set_identity_headers() {
    let t = mint(SubjectKind::User, "Zoë Doe", 2_000);
    for (name, scheme) in [
        ("authorization", "Bearer"),
        ("authorization", "bearer"),
        ("serviceauthorization", "BEARER"),
    ] {
        let v = format!("{scheme}   {t}");
        let (d, o) = run("/apiv2/MediaService/Find", &[(name, &v)], 1_500);
        assert_eq!(o, Outcome::Allowed);
        let Decision::Allow(h) = d else { panic!() };
        let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("x-auth-client"), Some("app"));
        assert_eq!(get("x-auth-subject-kind"), Some("user"));
        assert_eq!(get("x-auth-subject"), Some("Zo%C3%AB%20Doe"));
        assert_eq!(get("x-auth-roles"), Some("editor,viewer"));
        assert_eq!(get("x-auth-claims"), Some("email=z@x.y"));
        assert_eq!(
            get("x-auth-token-id"),
            Some("abababababababababababababababab")
        );
        assert_eq!(get("x-auth-expires"), Some("2000"));
    }
    let c = mint(SubjectKind::Client, "", 2_000);
    let Decision::Allow(h) = run(
        "/apiv2/x",
        &[("authorization", &format!("Bearer {c}"))],
        1_500,
    )
    .0
    else {
        panic!()
    };
    assert!(
        h.contains(&("x-auth-subject", "app".into()))
            && h.contains(&("x-auth-subject-kind", "client".into()))
    );
    assert!(!h.iter().any(|(n, _)| *n == "x-auth-roles"));
}

#[test]
fn missing_token_is_401_without_error_code() {
    for headers in [
        vec![],
        vec![("authorization", "Basic YTpi")],
        vec![("authorization", "Bearerx abc")],
    ] {
        let (d, o) = run("/apiv2/MediaService/Find", &headers, 1_500);
        assert_eq!(o, Outcome::Missing);
        let d = denial(d);
        assert_eq!(
            (d.status, d.www_authenticate.as_str()),
            (401, "Bearer realm=\"media\"")
        );
    }
}

#[test]
fn bad_tokens_are_401_invalid_token() {
    let t = mint(SubjectKind::User, "u", 2_000);
    let forged = format!("{}A", &t[..t.len() - 1]);
    let other_key = {
        let body = token::inspect(&t).unwrap();
        token::mint(&Key::new(3, [9; 32]), &body).unwrap()
    };
    let cases = [
        ("garbage", Outcome::Malformed),
        ("mmat9.AAAA.AAAA", Outcome::Malformed),
        (forged.as_str(), Outcome::Invalid),
        (other_key.as_str(), Outcome::Invalid),
    ];
    for (token, outcome) in cases {
        let (d, o) = run(
            "/apiv2/a",
            &[("authorization", &format!("Bearer {token}"))],
            1_500,
        );
        assert_eq!(o, outcome, "{token}");
        let d = denial(d);
        assert_eq!(d.status, 401);
        assert!(
            d.www_authenticate.contains("error=\"invalid_token\""),
            "{}",
            d.www_authenticate
        );
        assert!(d.body.contains("\"error\":\"invalid_token\""));
    }
    let (d, o) = run(
        "/apiv2/a",
        &[("authorization", &format!("Bearer {t}"))],
        2_030,
    );
    assert_eq!(o, Outcome::Expired);
    assert!(denial(d).www_authenticate.contains("expired"));
    assert_eq!(
        run(
            "/apiv2/a",
            &[("authorization", &format!("Bearer {t}"))],
            2_029
        )
        .1,
        Outcome::Allowed,
        "30 s skew"
    );
}

#[test]
fn two_tokens_or_malformed_bearer_are_400() {
    let a = format!("Bearer {}", mint(SubjectKind::User, "a", 2_000));
    let b = format!("Bearer {}", mint(SubjectKind::User, "b", 2_000));
    for headers in [
        vec![("authorization", a.as_str()), ("authorization", a.as_str())],
        vec![
            ("authorization", a.as_str()),
            ("serviceauthorization", b.as_str()),
        ],
        vec![
            ("serviceauthorization", a.as_str()),
            ("serviceauthorization", b.as_str()),
        ],
        vec![("authorization", "Bearer")],
        vec![("authorization", "Bearer ")],
        vec![("authorization", "Bearer a b")],
        vec![("authorization", "Bearer x/y z")],
    ] {
        let (d, o) = run("/apiv2/a", &headers, 1_500);
        assert_eq!(o, Outcome::Malformed, "{headers:?}");
        let d = denial(d);
        assert_eq!(d.status, 400);
        assert!(d.www_authenticate.contains("error=\"invalid_request\""));
    }
    // Repeated headers joined by a proxy are still two tokens.
    let joined = format!("{a}, {b}");
    let d = denial(run("/apiv2/a", &[("authorization", &joined)], 1_500).0);
    assert!(
        d.www_authenticate.contains("more than one access token"),
        "{}",
        d.www_authenticate
    );
    // The same token in both headers is one token.
    assert_eq!(
        run(
            "/apiv2/a",
            &[("authorization", &a), ("serviceauthorization", &a)],
            1_500
        )
        .1,
        Outcome::Allowed
    );
    // A non-bearer Authorization does not hide the alternative header.
    assert_eq!(
        run(
            "/apiv2/a",
            &[
                ("authorization", "Basic YTpi"),
                ("serviceauthorization", &a)
            ],
            1_500
        )
        .1,
        Outcome::Allowed
    );
}

#[test]
fn exemptions_are_strict() {
    for p in ["/apiv2/oauth/token", "/apiv2/oauth/token?x=1"] {
        assert_eq!(run(p, &[], 0).1, Outcome::Exempt, "{p}");
    }
    for p in [
        "/apiv2/oauth",
        "/apiv2/oauth/../MediaService/Find",
        "/apiv2/oauth/%2e%2e/x",
        "/apiv2//oauth/x",
        "/apiv2/oauth/./x",
        "/APIV2/oauth/token",
        "/apiv2/oauth\\x",
        "/apiv2/oauth/..;/MediaService/Find",
        "/apiv2/oauth/.;x/MediaService/Find",
        "/apiv2/oauth/token;jsessionid=1",
        "",
        "*",
    ] {
        assert_eq!(
            run(p, &[], 0).1,
            Outcome::Missing,
            "{p} must stay protected"
        );
    }
}

#[test]
fn nothing_is_exempt_by_default() {
    let cfg = cfg_with("");
    for p in ["/apiv2/oauth/token", "/apiv2/oauth/anything", "/"] {
        let o = decide(&cfg, &EdgeState::new(&cfg, 0), p.as_bytes(), [], 0).outcome;
        assert_eq!(o, Outcome::Missing, "{p}");
    }
}

#[test]
fn tokens_claiming_more_than_the_maximum_lifetime_are_refused() {
    let cfg = cfg_with(r#","max_token_lifetime_seconds":600"#);
    let check = |exp: u64| {
        let t = format!("Bearer {}", mint(SubjectKind::User, "u", exp));
        let v = decide(
            &cfg,
            &EdgeState::new(&cfg, 0),
            b"/apiv2/a",
            [("authorization", t.as_bytes())],
            1_200,
        );
        (v.decision, v.outcome, v.reason)
    };
    // iat is 1,000: a lifetime of exactly 600 s passes, one second more does not.
    assert_eq!(check(1_600).1, Outcome::Allowed);
    let (d, o, reason) = check(1_601);
    assert_eq!(o, Outcome::Invalid);
    assert_eq!(reason, Some(VerifyError::LifetimeTooLong));
    assert!(denial(d).www_authenticate.contains("invalid_token"));
    // Ten years.
    assert_eq!(check(1_000 + 10 * 365 * 86_400).1, Outcome::Invalid);
}

proptest! {
    #[test]
    fn never_panics_and_never_allows_without_a_valid_token(
        path in "\\PC{0,40}",
        headers in proptest::collection::vec(("authorization|serviceauthorization|x-auth-subject|other", proptest::collection::vec(any::<u8>(), 0..80)), 0..6),
    ) {
        let cfg = cfg();
        let v = decide(&cfg, &EdgeState::new(&cfg, 0), path.as_bytes(), headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())), 1_500);
        let (d, o) = (v.decision, v.outcome);
        prop_assert!(!matches!(d, Decision::Allow(_)));
        prop_assert!(o != Outcome::Allowed);
    }
}

#[test]
fn each_outcome_indexes_its_place_among_all() {
    for (i, o) in Outcome::ALL.iter().enumerate() {
        assert_eq!(o.index(), i, "{o:?}");
    }
}

#[test]
fn deciding_changes_nothing_and_says_what_to_remember() {
    let cfg = cfg();
    let state = EdgeState::new(&cfg, 1_500);
    let t = mint(SubjectKind::User, "u", 2_000);
    let header = format!("Bearer {t}");
    let ask = |now: u64| {
        decide(
            &cfg,
            &state,
            b"/apiv2/a",
            [("authorization", header.as_bytes())],
            now,
        )
    };
    let first = ask(1_500);
    assert_eq!(first.outcome, Outcome::Allowed);
    assert!(state.cache.borrow().is_empty(), "decide writes nothing");
    let remember = first.remember.clone().unwrap();
    assert_eq!(
        (remember.token, remember.iat, remember.exp),
        (t.as_str(), 1_000, 2_000)
    );
    let Decision::Allow(headers) = &first.decision else {
        panic!("{first:?}")
    };
    assert_eq!(&remember.headers, headers);
    state.remember(remember);
    let again = ask(1_501);
    assert_eq!(again.decision, first.decision);
    assert_eq!(again.remember, None, "served from the cache");
    // A refused token has nothing to remember.
    let expired = ask(2_030);
    assert_eq!(
        (expired.outcome, expired.remember),
        (Outcome::Expired, None)
    );
    assert_eq!(expired.reason, Some(VerifyError::Expired));
}

/// A token from token exchange: `alice` acted for by `actors` (outermost first), `app` the origin.
fn chained(actors: &[&str]) -> String {
    let body = TokenBody {
        kid: 3,
        jti: [0xcd; 16],
        iat: 1_000,
        exp: 2_000,
        client: actors[0].into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice".into(),
            roles: vec![],
            claims: vec![],
        },
        cnf: None,
        act: Some(shared::token::Chain {
            origin: "app".into(),
            actors: actors.iter().map(|a| (*a).to_owned()).collect(),
        }),
    };
    format!(
        "Bearer {}",
        token::mint(&Key::new(3, SECRET), &body).unwrap()
    )
}

fn decide_with<'a>(cfg: &Config, state: &EdgeState, path: &'a str, auth: &'a str) -> Verdict<'a> {
    decide(
        cfg,
        state,
        path.as_bytes(),
        [("authorization", auth.as_bytes())],
        1_500,
    )
}

#[test]
fn a_delegated_token_passes_its_chain_on() {
    let t = chained(&["media", "trans,coder", "uploader"]);
    let Decision::Allow(h) = run("/apiv2/MediaService/Find", &[("authorization", &t)], 1_500).0
    else {
        panic!()
    };
    let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("x-auth-client"), Some("media"));
    assert_eq!(get("x-auth-subject"), Some("alice"));
    assert_eq!(get("x-auth-actors"), Some("media,trans%2Ccoder,uploader"));
    assert_eq!(get("x-auth-actor-origin"), Some("app"));
    let plain = mint(SubjectKind::User, "alice", 2_000);
    let Decision::Allow(h) = run(
        "/apiv2/x",
        &[("authorization", &format!("Bearer {plain}"))],
        1_500,
    )
    .0
    else {
        panic!()
    };
    assert!(!h.iter().any(|(n, _)| n.starts_with("x-auth-actor")));
}

#[test]
fn delegation_rules_refuse_by_path() {
    let cfg = cfg_with(
        r#","delegation":["/apiv2/Admin/ refuse",
            "/apiv2/Media/ actors=media,transcoder max_depth=2"]"#,
    );
    let state = EdgeState::new(&cfg, 1_500);
    let two = chained(&["media", "transcoder"]);
    let three = chained(&["media", "transcoder", "uploader"]);
    let plain = format!("Bearer {}", mint(SubjectKind::User, "alice", 2_000));
    let outcome = |path: &str, t: &str| decide_with(&cfg, &state, path, t).outcome;
    assert_eq!(outcome("/apiv2/Admin/Users", &two), Outcome::Delegation);
    assert_eq!(outcome("/apiv2//Admin/Users", &two), Outcome::Delegation);
    assert_eq!(outcome("/apiv2/Admin/Users", &plain), Outcome::Allowed);
    assert_eq!(outcome("/apiv2/Media/Find", &two), Outcome::Allowed);
    assert_eq!(outcome("/apiv2/Media/Find", &three), Outcome::Delegation);
    assert_eq!(outcome("/apiv2/Other/Find", &three), Outcome::Allowed);
    let d = denial(decide_with(&cfg, &state, "/apiv2/Admin/x", &two).decision);
    assert_eq!(d.status, 403);
    assert!(d.body.contains("insufficient_scope"), "{}", d.body);
}

#[test]
fn revoking_any_client_of_a_chain_refuses_the_token_at_the_edge() {
    use shared::revocation::{Revocation, Revoked};
    let cfg = cfg();
    let t = chained(&["media", "transcoder", "uploader"]);
    for client in ["media", "transcoder", "uploader", "app"] {
        let mut state = EdgeState::new(&cfg, 1_500);
        assert_eq!(
            decide_with(&cfg, &state, "/apiv2/x", &t).outcome,
            Outcome::Allowed
        );
        let entry = Revocation {
            seq: 1,
            what: Revoked::Client { id: client.into() },
            at: 1_200,
            until: 5_000,
            stamp: None,
        };
        state.revoked.apply(&[entry], 1_500);
        assert_eq!(
            decide_with(&cfg, &state, "/apiv2/x", &t).outcome,
            Outcome::Revoked,
            "{client} revoked"
        );
    }
}
