use super::jws::{sign, MAX_LEN, STATEMENT_TYP};
use super::keys::public_key_set;
use super::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use shared::dpop::sign::ProofKey;

const NOW: u64 = 1_800_000_000;

fn hash() -> String {
    use std::sync::OnceLock;
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| crate::passwords::hash_password("mmcs1.secret"))
        .clone()
}

fn statement() -> Statement {
    Statement {
        client_id: "acme-uploader-1".into(),
        client_name: "Acme Uploader".into(),
        software_id: "acme-uploader".into(),
        client_secret_hash: hash(),
        grant_types: vec![VendorGrant::Password, VendorGrant::ClientCredentials],
        impersonation: Impersonation::Claims,
        iat: NOW - 10,
        exp: NOW + 3600,
    }
}

fn trust(key: &ProofKey) -> Trust {
    let mut trust = Trust::default();
    trust.add("acme", parse_key_set(&public_key_set(key)).unwrap());
    trust
}

fn keys() -> [ProofKey; 2] {
    [
        ProofKey::ed25519([7; 32]),
        ProofKey::es256([9; 32]).unwrap(),
    ]
}

#[test]
fn statements_signed_with_either_kind_of_key_verify() {
    for key in keys() {
        let jws = statement().sign(&key);
        let got = statement::verify(&jws, &trust(&key), NOW).unwrap();
        assert_eq!(got.vendor, "acme");
        assert_eq!(got.statement, statement());
    }
}

#[test]
fn an_untrusted_key_a_bad_signature_and_expiry_are_refused() {
    let [ed, es] = keys();
    let jws = statement().sign(&ed);
    let refusal = statement::verify(&jws, &trust(&es), NOW).unwrap_err();
    assert_eq!(refusal, Refusal::Untrusted);
    assert_eq!(refusal.error_code(), "unapproved_software_statement");
    let mut parts: Vec<String> = jws.split('.').map(str::to_owned).collect();
    let mut claims = statement();
    claims.grant_types.push(VendorGrant::RefreshToken);
    parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    let forged = parts.join(".");
    assert_eq!(
        statement::verify(&forged, &trust(&ed), NOW),
        Err(Refusal::Signature)
    );
    assert_eq!(
        statement::verify(&jws, &trust(&ed), NOW + 3600),
        Err(Refusal::Expired)
    );
    assert_eq!(Refusal::Expired.error_code(), "invalid_software_statement");
}

#[test]
fn an_unknown_grant_and_a_costly_hash_are_refused() {
    let key = ProofKey::ed25519([7; 32]);
    let mut claims = serde_json::to_value(statement()).unwrap();
    claims["grant_types"] = serde_json::json!(["password", "implicit"]);
    let jws = sign(&key, STATEMENT_TYP, &claims);
    assert_eq!(
        statement::verify(&jws, &trust(&key), NOW),
        Err(Refusal::UnknownGrant("implicit".into()))
    );
    let mut costly = statement();
    costly.client_secret_hash = costly.client_secret_hash.replace("m=19456", "m=4000000");
    assert_eq!(
        statement::verify(&costly.sign(&key), &trust(&key), NOW),
        Err(Refusal::Claim("client_secret_hash"))
    );
}

#[test]
fn none_hmac_a_wrong_typ_and_oversize_are_refused() {
    let key = ProofKey::ed25519([7; 32]);
    let kid = keys::kid_of(&key);
    let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&statement()).unwrap());
    for alg in ["none", "HS256"] {
        let header = serde_json::json!({"alg": alg, "typ": STATEMENT_TYP, "kid": kid});
        let header = URL_SAFE_NO_PAD.encode(header.to_string());
        let jws = format!("{header}.{claims}.");
        assert_eq!(
            statement::verify(&jws, &trust(&key), NOW),
            Err(Refusal::Algorithm(alg.into()))
        );
    }
    let list = RevocationList {
        revoked_client_ids: vec!["acme-uploader-1".into()],
        iat: NOW,
    };
    let jws = list.sign(&key);
    assert_eq!(
        statement::verify(&jws, &trust(&key), NOW),
        Err(Refusal::Type)
    );
    let big = "a".repeat(MAX_LEN + 1);
    assert_eq!(
        statement::verify(&big, &trust(&key), NOW),
        Err(Refusal::TooLarge)
    );
    assert!(matches!(
        statement::verify("a.b", &trust(&key), NOW),
        Err(Refusal::Malformed(_))
    ));
}

#[test]
fn a_key_set_with_private_parts_or_a_wrong_kid_is_refused() {
    let key = ProofKey::ed25519([7; 32]);
    let private = format!(r#"{{"keys":[{}]}}"#, key.private_jwk().as_str());
    assert_eq!(
        parse_key_set(&private).unwrap_err(),
        KeySetError::Private(0)
    );
    let mut set: serde_json::Value = serde_json::from_str(&public_key_set(&key)).unwrap();
    set["keys"][0]["kid"] = "other".into();
    assert_eq!(
        parse_key_set(&set.to_string()).unwrap_err(),
        KeySetError::BadKid(0)
    );
    assert_eq!(
        parse_key_set(r#"{"keys":[]}"#).unwrap_err(),
        KeySetError::Count
    );
    assert_eq!(parse_key_set("[]").unwrap_err(), KeySetError::NotASet);
}

#[test]
fn revocation_lists_verify_and_are_not_statements() {
    let key = ProofKey::es256([9; 32]).unwrap();
    let list = RevocationList {
        revoked_client_ids: vec!["acme-uploader-1".into()],
        iat: NOW,
    };
    let jws = list.sign(&key);
    assert!(revocations::looks_like_revocations(&jws));
    let got = revocations::verify(&jws, &trust(&key), NOW).unwrap();
    assert_eq!((got.vendor.as_str(), got.list), ("acme", list));
    let statement = statement().sign(&key);
    assert!(!revocations::looks_like_revocations(&statement));
    assert_eq!(
        revocations::verify(&statement, &trust(&key), NOW),
        Err(Refusal::Type)
    );
}
