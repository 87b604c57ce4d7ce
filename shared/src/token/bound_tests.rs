//! Bound (`mmat2`) tokens: the confirmation round-trips inside the MAC, and a bound token can
//! never pass as a bearer token of version 1.

use super::*;

fn key() -> Key {
    Key::new(1, [1; 32])
}

fn ring() -> KeyRing {
    KeyRing::new(vec![key()], Some(1)).unwrap()
}

fn verify(ring: &KeyRing, token: &str, now: u64, skew: u64) -> Result<VerifiedToken, VerifyError> {
    let limits = Limits {
        skew,
        max_lifetime: u64::MAX,
    };
    verify_any_with(ring, token, now, limits)
}

fn bound_body() -> TokenBody {
    TokenBody {
        kid: 1,
        jti: [9; JTI_LEN],
        iat: 1_000,
        exp: 1_900,
        client: "app".into(),
        identity: Identity {
            kind: SubjectKind::Client,
            subject: String::new(),
            roles: vec![],
            claims: vec![],
        },
        cnf: Some([0xab; JKT_LEN]),
        act: None,
    }
}

#[test]
fn a_bound_token_is_mmat2_and_carries_its_confirmation() {
    let t = mint(&key(), &bound_body()).unwrap();
    assert!(t.starts_with(BOUND_PREFIX));
    let v = verify(&ring(), &t, 1_500, 0).unwrap();
    assert_eq!(v.confirmation(), Some(&[0xab; JKT_LEN]));
    assert_eq!(inspect(&t).unwrap(), bound_body());
    let bearer = TokenBody {
        cnf: None,
        ..bound_body()
    };
    let t1 = mint(&key(), &bearer).unwrap();
    assert!(t1.starts_with(PREFIX));
    assert_eq!(verify(&ring(), &t1, 1_500, 0).unwrap().confirmation(), None);
}

#[test]
fn the_bearer_verifiers_refuse_a_bound_token_as_an_unknown_version() {
    let t = mint(&key(), &bound_body()).unwrap();
    assert!(is_bound(&t));
    assert_eq!(
        super::verify(&ring(), &t, 1_500, 0),
        Err(VerifyError::UnknownVersion)
    );
    let limits = Limits {
        skew: 0,
        max_lifetime: 900,
    };
    assert_eq!(
        verify_with(&ring(), &t, 1_500, limits),
        Err(VerifyError::UnknownVersion)
    );
    assert!(verify_any_with(&ring(), &t, 1_500, limits).is_ok());
    let bearer = mint(
        &key(),
        &TokenBody {
            cnf: None,
            ..bound_body()
        },
    )
    .unwrap();
    assert!(!is_bound(&bearer));
    assert!(verify_with(&ring(), &bearer, 1_500, limits).is_ok());
}

#[test]
fn relabelling_the_version_fails_either_way() {
    let t2 = mint(&key(), &bound_body()).unwrap();
    let as_v1 = t2.replacen(BOUND_PREFIX, PREFIX, 1);
    assert_eq!(
        verify(&ring(), &as_v1, 1_500, 0),
        Err(VerifyError::BadSignature)
    );
    let bearer = TokenBody {
        cnf: None,
        ..bound_body()
    };
    let t1 = mint(&key(), &bearer).unwrap();
    let as_v2 = t1.replacen(PREFIX, BOUND_PREFIX, 1);
    assert_eq!(
        verify(&ring(), &as_v2, 1_500, 0),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn a_v1_body_with_a_trailing_jkt_is_malformed_even_with_a_good_tag() {
    // What a v1-only decoder would see if the prefix were ignored: 32 extra bytes.
    let mut raw = body::encode_body(&bound_body());
    let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
    let mac = tag(&key(), signed.as_bytes()).finalize().into_bytes();
    let t = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac));
    assert_eq!(verify(&ring(), &t, 1_500, 0), Err(VerifyError::Malformed));
    // And a v2 body short of its confirmation.
    raw.truncate(raw.len() - 1);
    let signed = format!("{BOUND_PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
    let mac = tag(&key(), signed.as_bytes()).finalize().into_bytes();
    let t = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac));
    assert_eq!(verify(&ring(), &t, 1_500, 0), Err(VerifyError::Malformed));
}

#[test]
fn every_byte_of_the_confirmation_is_inside_the_mac() {
    let t = mint(&key(), &bound_body()).unwrap();
    let (signed, _) = t.rsplit_once('.').unwrap();
    let raw = URL_SAFE_NO_PAD
        .decode(&signed[BOUND_PREFIX.len()..])
        .unwrap();
    for i in raw.len() - JKT_LEN..raw.len() {
        let mut bad = raw.clone();
        bad[i] ^= 1;
        let forged = t.replacen(
            &signed[BOUND_PREFIX.len()..],
            &URL_SAFE_NO_PAD.encode(&bad),
            1,
        );
        assert_eq!(
            verify(&ring(), &forged, 1_500, 0),
            Err(VerifyError::BadSignature)
        );
    }
}
