//! DPoP at the edge through the request seam: bound tokens minted here, proofs made by the
//! token crate's signing half, every refusal and the memory of used proofs.

use crate::config::Config;
use crate::decision::Outcome;
use crate::dpop::host::tests::StandIn;
use crate::dpop::host::HostEs256;
use crate::dpop::{Es256By, ShardedReplays};
use crate::edge::EdgeState;
use crate::request::{handle, Action, Handled};
use shared::dpop::sign::{ProofClaims, ProofKey};
use shared::token::{self, Identity, SubjectKind, TokenBody};
use shared::Key;

const SECRET: [u8; 32] = [7; 32];
const NOW: u64 = 1_700_000_000;
const URL: &str = "https://api.example.com/apiv2/MediaService/Find";

/// The origin of [`URL`], as the configurations here have it.
const ORIGIN: &str = r#""public_origin":"https://api.example.com""#;

/// A configuration whose `dpop` block holds these fields, and [`ORIGIN`] unless they name one.
fn cfg(dpop: &str) -> Config {
    use base64::Engine as _;
    let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
    let dpop = match dpop {
        "" => ORIGIN.to_owned(),
        _ if dpop.contains("public_origin") => dpop.to_owned(),
        _ => format!("{ORIGIN},{dpop}"),
    };
    let json = format!(r#"{{"keys":[{{"kid":3,"secret":"{s}"}}],"dpop":{{{dpop}}}}}"#);
    Config::parse(json.as_bytes()).unwrap()
}

fn token(cnf: Option<[u8; 32]>) -> String {
    let body = TokenBody {
        kid: 3,
        jti: [0xab; 16],
        iat: NOW,
        exp: NOW + 600,
        client: "app".into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice".into(),
            roles: vec![],
            claims: vec![],
        },
        cnf,
        act: None,
    };
    token::mint(&Key::new(3, SECRET), &body).unwrap()
}

fn es() -> ProofKey {
    ProofKey::es256([5; 32]).unwrap()
}

fn proof(key: &ProofKey, jti: &str, htu: &str, token: &str, nonce: Option<&str>) -> String {
    key.proof(&ProofClaims {
        htm: "POST",
        htu,
        jti,
        iat: NOW,
        access_token: Some(token),
        nonce,
    })
}

/// An edge twice over: its ES256 proofs verified by the module's own code, and by a host
/// (RustCrypto standing in for Envoy's BoringSSL through `verify_signature`'s protobuf and
/// DER forms). Every request goes to both, which must decide it alike.
struct Edge {
    cfg: Config,
    state: EdgeState,
    replays: ShardedReplays,
    host_state: EdgeState,
    host_replays: ShardedReplays,
}

static STAND_IN: HostEs256<StandIn> = HostEs256(StandIn);

impl Edge {
    fn new(dpop: &str) -> Self {
        let cfg = cfg(dpop);
        let state = EdgeState::new(&cfg, NOW);
        let mut host_state = EdgeState::new(&cfg, NOW);
        host_state.set_es256(Es256By::host(&STAND_IN));
        let replays = ShardedReplays::new(cfg.dpop.replay_entries, 0);
        let host_replays = ShardedReplays::new(cfg.dpop.replay_entries, 0);
        Self {
            cfg,
            state,
            replays,
            host_state,
            host_replays,
        }
    }

    /// Both memories of used proofs begun again, at `since`.
    fn replays_since(&mut self, since: u64) {
        self.replays = ShardedReplays::new(self.cfg.dpop.replay_entries, since);
        self.host_replays = ShardedReplays::new(self.cfg.dpop.replay_entries, since);
    }

    fn send(&self, extra: &[(&str, &str)]) -> Handled {
        self.send_as("https", "api.example.com", extra)
    }

    /// A request whose `:scheme` and `:authority` say this (what Envoy makes of `Host`,
    /// `X-Forwarded-Proto` or an HTTP/2 client's own `:scheme`).
    fn send_as(&self, scheme: &str, authority: &str, extra: &[(&str, &str)]) -> Handled {
        let mut h: Vec<(&str, &[u8])> = vec![
            (":method", b"POST"),
            (":scheme", scheme.as_bytes()),
            (":authority", authority.as_bytes()),
            (":path", b"/apiv2/MediaService/Find?x=1"),
        ];
        h.extend(extra.iter().map(|(n, v)| (*n, v.as_bytes())));
        let own = handle(&self.cfg, &self.state, &self.replays, &h, NOW);
        let host = handle(&self.cfg, &self.host_state, &self.host_replays, &h, NOW);
        assert_eq!(own, host, "the module and the host decide alike");
        own
    }
}

fn www(h: &Handled) -> String {
    match &h.action {
        Action::Answer { headers, .. } => headers
            .iter()
            .find(|(n, _)| *n == "www-authenticate")
            .map(|(_, v)| v.clone())
            .unwrap_or_default(),
        Action::Forward { .. } => String::new(),
    }
}

#[test]
fn a_bound_token_with_its_proof_passes_once_and_the_proof_stays_here() {
    for key in [es(), ProofKey::ed25519([6; 32])] {
        let edge = Edge::new("");
        let t = token(Some(key.jkt()));
        let p = proof(&key, "one", URL, &t, None);
        let auth = format!("DPoP {t}");
        let h = edge.send(&[("authorization", &auth), ("DPoP", &p)]);
        assert_eq!(h.outcome, Outcome::DpopAllowed, "{h:?}");
        let Action::Forward { remove, set } = &h.action else {
            panic!("{h:?}");
        };
        assert_eq!(remove, &["DPoP"]);
        let set = set.as_ref().unwrap();
        assert!(set.contains(&("x-auth-binding", "dpop".into())));
        assert!(set.contains(&("x-auth-jkt", key.jkt_b64())));
        let again = edge.send(&[("authorization", &auth), ("dpop", &p)]);
        assert_eq!(again.outcome, Outcome::DpopReplayed);
        assert!(www(&again).starts_with("DPoP realm=\"media\", error=\"invalid_dpop_proof\""));
        let alt = format!("DPoP {t}");
        let other = proof(&key, "two", URL, &t, None);
        let h = edge.send(&[("serviceauthorization", &alt), ("dpop", &other)]);
        assert_eq!(h.outcome, Outcome::DpopAllowed, "the alternative header");
    }
}

#[test]
fn no_downgrade_and_no_upgrade() {
    let edge = Edge::new("");
    let key = es();
    let bound = token(Some(key.jkt()));
    let p = proof(&key, "a", URL, &bound, None);
    for header in ["authorization", "serviceauthorization"] {
        let h = edge.send(&[(header, &format!("Bearer {bound}")), ("dpop", &p)]);
        assert_eq!(h.outcome, Outcome::BoundAsBearer);
        assert!(www(&h).contains("error=\"invalid_token\""), "{}", www(&h));
    }
    let plain = token(None);
    let p = proof(&key, "b", URL, &plain, None);
    let h = edge.send(&[("authorization", &format!("DPoP {plain}")), ("dpop", &p)]);
    assert_eq!(h.outcome, Outcome::UnboundAsDpop);
    assert!(www(&h).starts_with("DPoP "));
    let h = edge.send(&[("authorization", &format!("Bearer {plain}"))]);
    assert_eq!(h.outcome, Outcome::Allowed, "bearer tokens as before");
}

#[test]
fn a_remembered_bound_token_still_needs_a_fresh_proof_by_its_key() {
    let edge = Edge::new("");
    let key = es();
    let t = token(Some(key.jkt()));
    let auth = format!("DPoP {t}");
    let first = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "1", URL, &t, None)),
    ]);
    assert_eq!(first.outcome, Outcome::DpopAllowed);
    assert_eq!(
        edge.state.cache.borrow().len(),
        1,
        "the token is remembered"
    );
    let other = ProofKey::es256([8; 32]).unwrap();
    let refusals = [
        (proof(&other, "2", URL, &t, None), "another key"),
        (proof(&key, "1", URL, &t, None), "a replay"),
        (
            proof(&key, "3", URL, "another token", None),
            "another token's ath",
        ),
    ];
    for (p, what) in refusals {
        let h = edge.send(&[("authorization", &auth), ("dpop", &p)]);
        assert_ne!(h.outcome, Outcome::DpopAllowed, "{what}");
        assert!(
            www(&h).contains("invalid_dpop_proof"),
            "{what}: {}",
            www(&h)
        );
    }
    let h = edge.send(&[("authorization", &auth)]);
    assert_eq!(h.outcome, Outcome::DpopInvalid, "no proof");
    let h = edge.send(&[("authorization", &format!("Bearer {t}"))]);
    assert_eq!(
        h.outcome,
        Outcome::BoundAsBearer,
        "no downgrade from the cache"
    );
    let h = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "4", URL, &t, None)),
    ]);
    assert_eq!(h.outcome, Outcome::DpopAllowed);
    assert_eq!(
        h.action, first.action,
        "the same identity, binding included"
    );
    assert_eq!(edge.state.cache.borrow().len(), 1);
}

#[test]
fn every_proof_refusal_is_invalid_dpop_proof() {
    let edge = Edge::new("");
    let key = es();
    let t = token(Some(key.jkt()));
    let auth = format!("DPoP {t}");
    let good = proof(&key, "g", URL, &t, None);
    let other_key = proof(&ProofKey::ed25519([1; 32]), "k", URL, &t, None);
    let wrong_ath = proof(&key, "w", URL, "mmat2.other", None);
    let trailing_slash = proof(&key, "q", &format!("{URL}/"), &t, None);
    let other_host = proof(
        &key,
        "h",
        "https://evil.example.com/apiv2/MediaService/Find",
        &t,
        None,
    );
    let joined = format!("{good}, {good}");
    let cases: [&[(&str, &str)]; 7] = [
        &[("authorization", &auth)],
        &[("authorization", &auth), ("dpop", &good), ("dpop", &good)],
        &[("authorization", &auth), ("dpop", &joined)],
        &[("authorization", &auth), ("dpop", &other_key)],
        &[("authorization", &auth), ("dpop", &wrong_ath)],
        &[("authorization", &auth), ("dpop", &trailing_slash)],
        &[("authorization", &auth), ("dpop", &other_host)],
    ];
    for case in cases {
        let h = edge.send(case);
        assert_eq!(h.outcome, Outcome::DpopInvalid, "{case:?}");
        assert!(
            www(&h).contains("error=\"invalid_dpop_proof\""),
            "{}",
            www(&h)
        );
        assert!(www(&h).ends_with("algs=\"ES256 EdDSA\""));
    }
    let h = edge.send(&[("authorization", &auth), ("dpop", &good)]);
    assert_eq!(
        h.outcome,
        Outcome::DpopAllowed,
        "none of the refusals used the proof"
    );
    // RFC 9449 section 4.3: the query and fragment are ignored, on both sides.
    let with_query = proof(&key, "q2", &format!("{URL}?y=2#f"), &t, None);
    let h = edge.send(&[("authorization", &auth), ("dpop", &with_query)]);
    assert_eq!(h.outcome, Outcome::DpopAllowed);
}

#[test]
fn a_required_nonce_is_asked_for_then_accepted() {
    let edge = Edge::new(r#""require_nonce":true"#);
    let key = es();
    let t = token(Some(key.jkt()));
    let auth = format!("DPoP {t}");
    let h = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "n1", URL, &t, None)),
    ]);
    assert_eq!(h.outcome, Outcome::DpopNonce);
    let Action::Answer {
        status, headers, ..
    } = &h.action
    else {
        panic!("{h:?}");
    };
    assert_eq!(*status, 401);
    let nonce = &headers.iter().find(|(n, _)| *n == "dpop-nonce").unwrap().1;
    let h = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "n2", URL, &t, Some(nonce))),
    ]);
    assert_eq!(h.outcome, Outcome::DpopAllowed);
    let stale = shared::dpop::nonce_for(&Key::new(3, SECRET), NOW - 300, 60);
    let p = proof(&key, "n3", URL, &t, Some(&stale));
    assert_eq!(
        edge.send(&[("authorization", &auth), ("dpop", &p)]).outcome,
        Outcome::DpopNonce
    );
}

#[test]
fn a_key_over_its_share_waits_with_429_and_another_key_still_passes() {
    let edge = Edge::new(r#""replay_entries":1000"#);
    let key = es();
    let t = token(Some(key.jkt()));
    let auth = format!("DPoP {t}");
    let mut busy = 0;
    for i in 0..1_200 {
        let h = edge.send(&[
            ("authorization", &auth),
            ("dpop", &proof(&key, &format!("f{i}"), URL, &t, None)),
        ]);
        match h.outcome {
            Outcome::DpopAllowed => {}
            Outcome::DpopKeyBusy => {
                busy += 1;
                let Action::Answer {
                    status, headers, ..
                } = &h.action
                else {
                    panic!()
                };
                assert_eq!(*status, 429);
                assert!(headers.contains(&("retry-after", "1".into())));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        busy >= 1_200 - 16 * 15,
        "{busy}: one key holds at most 15 of each shard's 63"
    );
    let other = ProofKey::es256([9; 32]).unwrap();
    let t = token(Some(other.jkt()));
    let h = edge.send(&[
        ("authorization", &format!("DPoP {t}")),
        ("dpop", &proof(&other, "o", URL, &t, None)),
    ]);
    assert_eq!(h.outcome, Outcome::DpopAllowed);
}

#[test]
fn a_proof_made_before_the_memory_began_is_refused_and_a_later_one_passes() {
    let mut edge = Edge::new("");
    edge.replays_since(NOW);
    let key = es();
    let t = token(Some(key.jkt()));
    let auth = format!("DPoP {t}");
    let h = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "b", URL, &t, None)),
    ]);
    assert_eq!(h.outcome, Outcome::DpopTooOld);
    let Action::Answer { status, .. } = &h.action else {
        panic!()
    };
    assert_eq!(*status, 401);
    edge.replays_since(NOW - 10);
    let h = edge.send(&[
        ("authorization", &auth),
        ("dpop", &proof(&key, "b", URL, &t, None)),
    ]);
    assert_eq!(h.outcome, Outcome::DpopAllowed);
}

mod origin;
