//! Runs every JSON test vector of `test_vectors/tokens.json`: valid tokens must mint byte for byte
//! and verify; must-fail tokens must fail for the stated reason.

use serde::Deserialize;
use shared::token::{self, Claim, Identity, SubjectKind, TokenBody};
use shared::{Key, KeyRing};

#[derive(Deserialize)]
struct Vectors {
    keys: Vec<VKey>,
    valid: Vec<Valid>,
    invalid: Vec<Invalid>,
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
    verify_at: u64,
    token: String,
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
            cnf: None,
        };
        let key = ring.get(case.kid).unwrap();
        assert_eq!(
            token::mint(key, &body).unwrap(),
            case.token,
            "{}: mint",
            case.name
        );
        let verified = token::verify(&ring, &case.token, case.verify_at, 0)
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
        assert_eq!(verified.body(), &body, "{}: verify", case.name);
        assert_eq!(
            token::inspect(&case.token).unwrap(),
            body,
            "{}: inspect",
            case.name
        );
    }
    for case in &v.invalid {
        let err = token::verify(&ring, &case.token, case.now, case.skew)
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
