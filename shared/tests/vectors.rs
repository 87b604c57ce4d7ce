//! Runs every JSON test vector of `test_vectors/tokens.json`: valid tokens must mint byte for byte
//! and verify; must-fail tokens must fail for the stated reason. JWK thumbprints and DPoP proofs
//! made by the generator's own Ed25519 signer must give its thumbprints and its verdicts.

use serde::Deserialize;
use shared::token::{self, Chain, Claim, Identity, SubjectKind, TokenBody};
use shared::{dpop, Key, KeyRing};

#[derive(Deserialize)]
struct Vectors {
    keys: Vec<VKey>,
    valid: Vec<Valid>,
    invalid: Vec<Invalid>,
    thumbprints: Vec<Thumbprint>,
    dpop: Dpop,
}

#[derive(Deserialize)]
struct Dpop {
    now: u64,
    method: String,
    url: String,
    access_token: String,
    window: u64,
    jkt: String,
    proofs: Vec<DpopCase>,
}

#[derive(Deserialize)]
struct DpopCase {
    name: String,
    proof: String,
    /// The `DpopError` variant the proof must fail with; `null` for a good proof.
    error: Option<String>,
}

#[derive(Deserialize)]
struct Thumbprint {
    jwk: serde_json::Value,
    jkt: String,
}

#[derive(Deserialize)]
struct VKey {
    kid: u32,
    secret: String,
}

#[derive(Deserialize)]
struct VClaim {
    #[serde(rename = "type")]
    typ: String,
    value: String,
}

#[derive(Deserialize)]
struct Valid {
    name: String,
    kid: u32,
    jti: String,
    iat: u64,
    exp: u64,
    kind: String,
    client: String,
    subject: String,
    roles: Vec<String>,
    claims: Vec<VClaim>,
    /// The confirmation of a bound (`mmat2`) token, hex; `null` for `mmat1`.
    cnf: Option<String>,
    /// The actor chain of a token from token exchange; absent for every other token.
    #[serde(default)]
    act: Option<VChain>,
    verify_at: u64,
    token: String,
}

#[derive(Deserialize)]
struct VChain {
    origin: String,
    actors: Vec<String>,
}

#[derive(Deserialize)]
struct Invalid {
    name: String,
    token: String,
    now: u64,
    skew: u64,
    reason: String,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn load() -> (Vectors, KeyRing) {
    let text = include_str!("../test_vectors/tokens.json");
    let v: Vectors = serde_json::from_str(text).unwrap();
    let keys = v
        .keys
        .iter()
        .map(|k| Key::from_slice(k.kid, &hex(&k.secret)).unwrap())
        .collect();
    let ring = KeyRing::new(keys, Some(1)).unwrap();
    (v, ring)
}

#[test]
fn all_vectors() {
    let (v, ring) = load();
    assert!(v.valid.len() >= 4 && v.invalid.len() >= 25);
    assert!(v.valid.iter().any(|c| c.cnf.is_some()));
    assert!(v.valid.iter().any(|c| c.act.is_some() && c.cnf.is_some()));
    assert!(v.valid.iter().any(|c| c.act.is_some() && c.cnf.is_none()));
    for case in &v.valid {
        let kind = match case.kind.as_str() {
            "user" => SubjectKind::User,
            "client" => SubjectKind::Client,
            "impersonation" => SubjectKind::Impersonation,
            other => panic!("{}: unknown kind {other}", case.name),
        };
        let body = TokenBody {
            kid: case.kid,
            jti: hex(&case.jti).try_into().unwrap(),
            iat: case.iat,
            exp: case.exp,
            client: case.client.clone(),
            identity: Identity {
                kind,
                subject: case.subject.clone(),
                roles: case.roles.clone(),
                claims: case
                    .claims
                    .iter()
                    .map(|c| Claim {
                        typ: c.typ.clone(),
                        value: c.value.clone(),
                    })
                    .collect(),
            },
            cnf: case.cnf.as_deref().map(|c| hex(c).try_into().unwrap()),
            act: case.act.as_ref().map(|c| Chain {
                origin: c.origin.clone(),
                actors: c.actors.clone(),
            }),
        };
        let key = ring.get(case.kid).unwrap();
        assert_eq!(
            token::mint(key, &body).unwrap(),
            case.token,
            "{}: mint",
            case.name
        );
        let limits = token::Limits {
            skew: 0,
            max_lifetime: u64::MAX,
        };
        let verified = token::verify_any_with(&ring, &case.token, case.verify_at, limits)
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
        if body.cnf.is_some() {
            // Never as a bearer token.
            assert_eq!(
                token::verify(&ring, &case.token, case.verify_at, 0),
                Err(shared::VerifyError::UnknownVersion),
                "{}",
                case.name
            );
        }
        assert_eq!(verified.body(), &body, "{}: verify", case.name);
        assert_eq!(
            token::inspect(&case.token).unwrap(),
            body,
            "{}: inspect",
            case.name
        );
    }
    for case in &v.invalid {
        let limits = token::Limits {
            skew: case.skew,
            max_lifetime: u64::MAX,
        };
        let err = token::verify_any_with(&ring, &case.token, case.now, limits)
            .err()
            .unwrap_or_else(|| panic!("{}: verified but must fail", case.name));
        assert_eq!(err.reason(), case.reason, "{}", case.name);
        assert_eq!(
            err.to_string(),
            "invalid token",
            "{}: error must be opaque",
            case.name
        );
    }
}

#[test]
fn thumbprints_match_the_independent_generator() {
    let (v, _) = load();
    assert!(v.thumbprints.len() >= 2);
    for t in &v.thumbprints {
        let jkt = shared::dpop::jkt(&t.jwk.to_string()).expect("an allowed key");
        assert_eq!(base64_url(&jkt), t.jkt, "{}", t.jwk);
    }
}

#[test]
fn dpop_proofs_from_the_independent_signer() {
    let (v, _) = load();
    let d = &v.dpop;
    let expect = dpop::Expect {
        method: &d.method,
        url: &d.url,
        access_token: Some(&d.access_token),
        now: d.now,
        window_seconds: d.window,
        nonce_check: dpop::NonceCheck::Off,
    };
    assert!(d.proofs.len() >= 15);
    for case in &d.proofs {
        let got = dpop::check_proof(&case.proof, &expect);
        match (&case.error, got) {
            (None, Ok(p)) => assert_eq!(p.jkt_b64(), d.jkt, "{}", case.name),
            (Some(want), Err(e)) => assert_eq!(&format!("{e:?}"), want, "{}", case.name),
            (want, got) => panic!("{}: want {want:?}, got {got:?}", case.name),
        }
    }
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}
