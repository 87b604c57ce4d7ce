//! Minting, verifying and inspecting `mmat1` tokens.

use super::*;
use proptest::prelude::*;

fn key(id: u32) -> Key {
    Key::new(id, [id as u8; 32])
}

fn body(kid: u32) -> TokenBody {
    TokenBody {
        kid,
        jti: [7; JTI_LEN],
        iat: 1_000,
        exp: 1_900,
        client: "app".into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice".into(),
            roles: vec!["editor".into()],
            claims: vec![Claim {
                typ: "email".into(),
                value: "a@example.com".into(),
            }],
        },
        cnf: None,
        act: None,
    }
}

#[test]
fn mint_then_verify_round_trips() {
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    let t = mint(&key(1), &body(1)).unwrap();
    assert!(t.starts_with("mmat1."));
    assert_eq!(verify(&ring, &t, 1_500, 0).unwrap().body(), &body(1));
    assert_eq!(inspect(&t).unwrap(), body(1));
}

#[test]
fn lifetime_is_checked_with_skew() {
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    let t = mint(&key(1), &body(1)).unwrap();
    assert_eq!(verify(&ring, &t, 1_900, 0), Err(VerifyError::Expired));
    assert!(verify(&ring, &t, 1_900, 30).is_ok());
    assert_eq!(verify(&ring, &t, 1_930, 30), Err(VerifyError::Expired));
    assert_eq!(verify(&ring, &t, 999, 0), Err(VerifyError::NotYetValid));
    assert!(verify(&ring, &t, 990, 10).is_ok());
}

#[test]
fn a_lifetime_over_the_limit_is_refused_after_every_other_check() {
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    // iat 1,000, exp 1,900: a lifetime of 900 s.
    let t = mint(&key(1), &body(1)).unwrap();
    let within = |max_lifetime| {
        verify_with(
            &ring,
            &t,
            1_500,
            Limits {
                skew: 0,
                max_lifetime,
            },
        )
    };
    assert_eq!(within(900).unwrap().body(), &body(1));
    assert_eq!(within(899), Err(VerifyError::LifetimeTooLong));
    assert_eq!(within(0), Err(VerifyError::LifetimeTooLong));
    assert!(verify(&ring, &t, 1_500, 0).is_ok(), "no limit");
    let limits = Limits {
        skew: 30,
        max_lifetime: 1,
    };
    assert_eq!(
        verify_with(&ring, &t, 1_930, limits),
        Err(VerifyError::Expired),
        "expiry first"
    );
    assert_eq!(
        verify_with(&ring, &t, 969, limits),
        Err(VerifyError::NotYetValid)
    );
    assert!(verify_with(
        &ring,
        &t,
        1_929,
        Limits {
            max_lifetime: 900,
            ..limits
        }
    )
    .is_ok());
    let other = KeyRing::new(vec![key(2)], Some(2)).unwrap();
    assert_eq!(
        verify_with(&other, &t, 1_500, limits),
        Err(VerifyError::UnknownKey)
    );
}

#[test]
fn the_tag_is_checked_before_the_body_is_read() {
    // A body whose subject kind byte is 9: broken, but with a readable key id.
    let broken = |kid: u32, signer: &Key| {
        let mut raw = encode_body(&body(kid));
        raw[4 + JTI_LEN + 16] = 9;
        let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
        let tag = tag(signer, signed.as_bytes()).finalize().into_bytes();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag))
    };
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    let check = |t: &str| verify(&ring, t, 1_500, 0);
    assert_eq!(check(&broken(1, &key(1))), Err(VerifyError::Malformed));
    assert_eq!(check(&broken(7, &key(1))), Err(VerifyError::UnknownKey));
    assert_eq!(check(&broken(1, &key(2))), Err(VerifyError::BadSignature));
}

#[test]
fn unknown_key_and_wrong_key_fail() {
    let t = mint(&key(1), &body(1)).unwrap();
    let other = KeyRing::new(vec![key(2)], Some(2)).unwrap();
    assert_eq!(verify(&other, &t, 1_500, 0), Err(VerifyError::UnknownKey));
    let same_id_other_secret = KeyRing::new(vec![Key::new(1, [9; 32])], Some(1)).unwrap();
    assert_eq!(
        verify(&same_id_other_secret, &t, 1_500, 0),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn every_single_byte_change_fails() {
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    let t = mint(&key(1), &body(1)).unwrap();
    for i in 0..t.len() {
        for replacement in 0u8..128 {
            let mut bytes = t.clone().into_bytes();
            if bytes[i] == replacement {
                continue;
            }
            bytes[i] = replacement;
            let tampered = String::from_utf8(bytes).unwrap();
            assert!(
                verify(&ring, &tampered, 1_500, 0).is_err(),
                "byte {i} -> {replacement:#x} verified"
            );
        }
    }
    for cut in 0..t.len() {
        assert!(
            verify(&ring, &t[..cut], 1_500, 0).is_err(),
            "prefix of {cut} bytes verified"
        );
    }
}

#[test]
fn mint_refuses_bad_identities() {
    let mut b = body(1);
    b.identity.roles.push("a,b".into());
    assert_eq!(mint(&key(1), &b), Err(MintError::InvalidField("role")));
    let mut b = body(1);
    b.identity.kind = SubjectKind::Client;
    assert_eq!(mint(&key(1), &b), Err(MintError::InconsistentIdentity));
    let mut b = body(1);
    b.client = "x\ny".into();
    assert_eq!(mint(&key(1), &b), Err(MintError::InvalidField("client")));
    assert_eq!(mint(&key(2), &body(1)), Err(MintError::KeyMismatch));
    let mut b = body(1);
    b.exp = 10;
    assert_eq!(mint(&key(1), &b), Err(MintError::ExpiresBeforeIssued));
}

#[test]
fn oversize_and_other_versions_are_rejected() {
    let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
    let long = format!("mmat1.{}.{}", "A".repeat(MAX_TOKEN_LEN), "A".repeat(43));
    assert_eq!(verify(&ring, &long, 0, 0), Err(VerifyError::Malformed));
    let t = mint(&key(1), &body(1)).unwrap();
    let v3 = t.replacen("mmat1.", "mmat3.", 1);
    assert_eq!(
        verify(&ring, &v3, 1_500, 0),
        Err(VerifyError::UnknownVersion)
    );
    assert_eq!(inspect(&v3), Err(VerifyError::UnknownVersion));
}

fn arb_identity() -> impl Strategy<Value = Identity> {
    let item = "[^,=\\p{Cc}]{1,20}";
    (
        0u8..3,
        "[^\\p{Cc}]{1,30}",
        proptest::collection::vec(item, 0..5),
        proptest::collection::vec((item, item), 0..5),
    )
        .prop_map(|(k, subject, roles, claims)| {
            let claims = claims
                .into_iter()
                .map(|(typ, value)| Claim { typ, value })
                .collect();
            match k {
                0 => Identity {
                    kind: SubjectKind::User,
                    subject,
                    roles,
                    claims,
                },
                1 => Identity {
                    kind: SubjectKind::Client,
                    subject: String::new(),
                    roles: vec![],
                    claims: vec![],
                },
                _ => Identity {
                    kind: SubjectKind::Impersonation,
                    subject,
                    roles,
                    claims,
                },
            }
        })
}

proptest! {
    #[test]
    fn any_valid_body_round_trips(
        kid in 1u32..5,
        jti in any::<[u8; 16]>(),
        iat in 0u64..u64::MAX / 2,
        life in 1u64..1_000_000,
        client in "[^\\p{Cc}]{1,40}",
        identity in arb_identity(),
        cnf in any::<Option<[u8; 32]>>(),
    ) {
        let body = TokenBody { kid, jti, iat, exp: iat + life, client, identity, cnf, act: None };
        let ring = KeyRing::new((1..5).map(key).collect(), Some(kid)).unwrap();
        let t = mint(&key(kid), &body).unwrap();
        prop_assert!(t.len() <= MAX_TOKEN_LEN);
        prop_assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
        let limits = Limits { skew: 0, max_lifetime: u64::MAX };
        let verified = verify_any_with(&ring, &t, iat, limits).unwrap();
        prop_assert_eq!(verify(&ring, &t, iat, 0).is_ok(), body.cnf.is_none());
        prop_assert_eq!(verified.body(), &body);
        prop_assert_eq!(inspect(&t).unwrap(), body);
    }

    #[test]
    fn random_input_never_verifies(s in "\\PC{0,300}|mmat1\\.[A-Za-z0-9_-]{0,200}\\.[A-Za-z0-9_-]{43}") {
        let ring = KeyRing::new(vec![key(1)], Some(1)).unwrap();
        prop_assert!(verify(&ring, &s, 1_500, u64::MAX).is_err());
        let _ = inspect(&s);
    }
}

#[test]
fn the_token_id_reads_as_lower_case_hex_of_its_bytes() {
    let mut b = body(1);
    b.jti = [
        0x00, 0x01, 0x0a, 0x0f, 0x10, 0x7f, 0x80, 0x9a, 0xab, 0xbc, 0xcd, 0xde, 0xef, 0xf0, 0xfe,
        0xff,
    ];
    assert_eq!(b.jti_hex(), "00010a0f107f809aabbccddeeff0feff");
}
