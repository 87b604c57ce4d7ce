//! Every refusal reason of [`check_proof`], with proofs signed here by the signing halves of the
//! same crates (fixed keys), the `htu` normalisation, thumbprints and nonces.

use super::*;
use crate::key::Key;
use ed25519_dalek::Signer as _;
use proptest::prelude::*;

const URL: &str = "https://api.example.com/apiv2/MediaService/Find";
const NOW: u64 = 1_700_000_000;

enum Signer {
    Es(p256::ecdsa::SigningKey),
    Ed(ed25519_dalek::SigningKey),
}

fn b64(s: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(s)
}

fn es() -> Signer {
    Signer::Es(p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap())
}

fn ed() -> Signer {
    Signer::Ed(ed25519_dalek::SigningKey::from_bytes(&[9; 32]))
}

impl Signer {
    fn alg(&self) -> &'static str {
        match self {
            Self::Es(_) => "ES256",
            Self::Ed(_) => "EdDSA",
        }
    }

    fn jwk(&self) -> String {
        match self {
            Self::Es(k) => {
                let p = k.verifying_key().to_encoded_point(false);
                format!(
                    r#"{{"kty":"EC","crv":"P-256","x":"{}","y":"{}"}}"#,
                    b64(p.x().unwrap()),
                    b64(p.y().unwrap())
                )
            }
            Self::Ed(k) => format!(
                r#"{{"kty":"OKP","crv":"Ed25519","x":"{}"}}"#,
                b64(k.verifying_key().as_bytes())
            ),
        }
    }

    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match self {
            Self::Es(k) => {
                let s: p256::ecdsa::Signature = k.sign(msg);
                s.to_bytes().to_vec()
            }
            Self::Ed(k) => k.sign(msg).to_bytes().to_vec(),
        }
    }

    fn header(&self) -> String {
        format!(
            r#"{{"typ":"dpop+jwt","alg":"{}","jwk":{}}}"#,
            self.alg(),
            self.jwk()
        )
    }

    fn proof_with(&self, header: &str, claims: &str) -> String {
        let signed = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
        format!("{signed}.{}", b64(&self.sign(signed.as_bytes())))
    }

    fn proof(&self, claims: &str) -> String {
        self.proof_with(&self.header(), claims)
    }
}

fn claims(extra: &str) -> String {
    format!(r#"{{"jti":"j-1","htm":"POST","htu":"{URL}","iat":{NOW}{extra}}}"#)
}

fn expect() -> Expect<'static> {
    Expect {
        method: "POST",
        url: URL,
        access_token: None,
        now: NOW,
        window_seconds: 60,
        nonce_check: NonceCheck::Off,
    }
}

#[test]
fn good_proofs_of_both_algorithms_are_accepted() {
    for s in [es(), ed()] {
        let p = check_proof(&s.proof(&claims("")), &expect()).unwrap();
        assert_eq!(p.jti, "j-1");
        assert_eq!(p.iat, NOW);
        assert_eq!(Some(p.jkt), jkt(&s.jwk()));
        assert!(p.confirms(&p.jkt));
        assert!(!p.confirms(&[0; 32]));
    }
}

#[test]
fn shape_and_size_are_checked_first() {
    let e = expect();
    let good = es().proof(&claims(""));
    assert_eq!(
        check_proof(&"a".repeat(MAX_PROOF_LEN + 1), &e),
        Err(DpopError::TooLong)
    );
    for bad in [
        "",
        "a.b",
        "a.b.c.d",
        "!!.b.c",
        &format!("{good}.x"),
        &good.replace('.', ""),
    ] {
        assert_eq!(check_proof(bad, &e), Err(DpopError::Malformed), "{bad}");
    }
}

#[test]
fn header_refusals() {
    let (s, c) = (es(), claims(""));
    let jwk = s.jwk();
    let cases = [
        (
            format!(r#"{{"typ":"jwt","alg":"ES256","jwk":{jwk}}}"#),
            DpopError::BadType,
        ),
        (
            format!(r#"{{"alg":"ES256","jwk":{jwk}}}"#),
            DpopError::BadType,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"none","jwk":{jwk}}}"#),
            DpopError::BadAlgorithm,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"HS256","jwk":{jwk}}}"#),
            DpopError::BadAlgorithm,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"RS256","jwk":{jwk}}}"#),
            DpopError::BadAlgorithm,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{jwk},"crit":["x"]}}"#),
            DpopError::CriticalHeader,
        ),
        (
            r#"{"typ":"dpop+jwt","alg":"ES256"}"#.into(),
            DpopError::BadKey,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{jwk}}}"#),
            DpopError::BadKey,
        ),
        (
            format!(
                r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{}}}"#,
                jwk.replace("}", r#","d":"AA"}"#)
            ),
            DpopError::PrivateKey,
        ),
        (
            format!(r#"{{"typ":"dpop+jwt","alg":"ES256","alg":"ES256","jwk":{jwk}}}"#),
            DpopError::Malformed,
        ),
    ];
    for (header, want) in cases {
        assert_eq!(
            check_proof(&s.proof_with(&header, &c), &expect()),
            Err(want),
            "{header}"
        );
    }
}

#[test]
fn keys_off_the_curve_or_of_the_wrong_length_are_refused() {
    let x = b64(&[1; 32]);
    let short = b64(&[1; 31]);
    for jwk in [
        format!(r#"{{"kty":"EC","crv":"P-256","x":"{x}","y":"{x}"}}"#),
        format!(r#"{{"kty":"EC","crv":"P-256","x":"{short}","y":"{x}"}}"#),
        format!(r#"{{"kty":"EC","crv":"P-384","x":"{x}","y":"{x}"}}"#),
        format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{short}"}}"#),
        format!(r#"{{"kty":"OKP","crv":"X25519","x":"{x}"}}"#),
        format!(r#"{{"kty":"RSA","n":"{x}","e":"AQAB"}}"#),
    ] {
        assert_eq!(jkt(&jwk), None, "{jwk}");
    }
}

#[test]
fn a_proof_under_a_point_off_the_curve_is_refused_for_its_key() {
    let x = b64(&[1; 32]);
    let header = format!(
        r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{{"kty":"EC","crv":"P-256","x":"{x}","y":"{x}"}}}}"#
    );
    let proof = es().proof_with(&header, &claims(""));
    assert_eq!(check_proof(&proof, &expect()), Err(DpopError::BadKey));
}

#[test]
fn a_signature_by_another_key_or_over_other_bytes_fails() {
    let (a, b) = (
        es(),
        Signer::Es(p256::ecdsa::SigningKey::from_slice(&[8; 32]).unwrap()),
    );
    let forged = b.proof_with(&a.header(), &claims(""));
    assert_eq!(
        check_proof(&forged, &expect()),
        Err(DpopError::BadSignature)
    );
    let good = ed().proof(&claims(""));
    let (head, sig) = good.rsplit_once('.').unwrap();
    let other = format!("{head}x.{sig}");
    assert!(check_proof(&other, &expect()).is_err());
    let truncated = format!("{head}.{}", &sig[..sig.len() - 2]);
    assert_eq!(
        check_proof(&truncated, &expect()),
        Err(DpopError::BadSignature)
    );
}

#[test]
fn an_es256_signature_with_high_s_is_accepted() {
    // WebCrypto does not normalise s; n - s verifies as well as s.
    let s = es();
    let good = s.proof(&claims(""));
    let (head, sig) = good.rsplit_once('.').unwrap();
    let sig = p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
    let (r, low) = sig.split_scalars();
    let flipped = p256::ecdsa::Signature::from_scalars(r, -*low).unwrap();
    let proof = format!("{head}.{}", b64(&flipped.to_bytes()));
    assert!(check_proof(&proof, &expect()).is_ok());
}

#[test]
fn claim_refusals() {
    let s = ed();
    let long = "j".repeat(MAX_JTI_LEN + 1);
    let cases = [
        (claims("").replace("j-1", ""), DpopError::BadJti),
        (claims("").replace("j-1", &long), DpopError::BadJti),
        (
            claims("").replace("POST", "post"),
            DpopError::MethodMismatch,
        ),
        (
            claims("").replace("/Find", "/Other"),
            DpopError::UrlMismatch,
        ),
        (
            claims("").replace(&NOW.to_string(), &(NOW - 61).to_string()),
            DpopError::Stale,
        ),
        (
            claims("").replace(&NOW.to_string(), &(NOW + MAX_AHEAD_SECONDS + 1).to_string()),
            DpopError::FromTheFuture,
        ),
        (
            claims("").replace(&NOW.to_string(), "1.5"),
            DpopError::Malformed,
        ),
        (
            claims("").replace(r#""jti":"j-1","#, ""),
            DpopError::Malformed,
        ),
    ];
    for (c, want) in cases {
        assert_eq!(check_proof(&s.proof(&c), &expect()), Err(want), "{c}");
    }
    for iat in [NOW - 60, NOW + MAX_AHEAD_SECONDS] {
        let c = claims("").replace(&NOW.to_string(), &iat.to_string());
        assert!(check_proof(&s.proof(&c), &expect()).is_ok());
    }
}

#[test]
fn ath_is_required_and_checked_with_an_access_token() {
    let s = es();
    let e = Expect {
        access_token: Some("mmat2.abc.def"),
        ..expect()
    };
    assert_eq!(
        check_proof(&s.proof(&claims("")), &e),
        Err(DpopError::MissingAth)
    );
    let wrong = claims(&format!(r#","ath":"{}""#, ath("other")));
    assert_eq!(
        check_proof(&s.proof(&wrong), &e),
        Err(DpopError::AthMismatch)
    );
    let right = claims(&format!(r#","ath":"{}""#, ath("mmat2.abc.def")));
    assert!(check_proof(&s.proof(&right), &e).is_ok());
}

#[test]
fn nonces_are_required_and_checked_when_asked_for() {
    let key = Key::new(3, [3; 32]);
    let ring = KeyRing::new(vec![key.clone()], Some(3)).unwrap();
    let e = Expect {
        nonce_check: NonceCheck::Required {
            ring: &ring,
            window: 300,
        },
        ..expect()
    };
    let s = ed();
    let none = s.proof(&claims(""));
    assert_eq!(check_proof(&none, &e), Err(DpopError::NonceRequired));
    assert_eq!(DpopError::NonceRequired.error_code(), "use_dpop_nonce");
    assert_eq!(DpopError::BadSignature.error_code(), "invalid_dpop_proof");
    let bad = claims(r#","nonce":"made-up""#);
    assert_eq!(check_proof(&s.proof(&bad), &e), Err(DpopError::BadNonce));
    let good = claims(&format!(r#","nonce":"{}""#, nonce_for(&key, NOW, 300)));
    assert!(check_proof(&s.proof(&good), &e).is_ok());
    assert!(check_proof(&s.proof(&good), &expect()).is_ok());
}

#[test]
fn nonce_lifetime_and_keys() {
    let key = Key::new(3, [3; 32]);
    let ring = KeyRing::new(vec![key.clone()], Some(3)).unwrap();
    let other = KeyRing::new(vec![Key::new(3, [4; 32])], Some(3)).unwrap();
    let n = nonce_for(&key, 1_000, 100);
    assert_eq!(n.len(), NONCE_LEN);
    assert!(nonce_ok(&ring, &n, 900, 100));
    assert!(nonce_ok(&ring, &n, 1_199, 100));
    assert!(!nonce_ok(&ring, &n, 1_200, 100));
    assert!(!nonce_ok(&ring, &n, 899, 100));
    assert!(!nonce_ok(&other, &n, 1_000, 100));
    assert!(!nonce_ok(&ring, &n, 1_000, 50));
    let mut bytes = n.into_bytes();
    bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
    assert!(!nonce_ok(
        &ring,
        core::str::from_utf8(&bytes).unwrap(),
        1_000,
        100
    ));
}

#[test]
fn htu_normalisation() {
    let same = [
        "HTTPS://API.Example.COM:443/apiv2/MediaService/Find?x=1#f",
        "https://api.example.com/apiv2/Media%53ervice/Find",
        "https://api.example.com:/apiv2/MediaService/Find",
    ];
    for u in same {
        assert!(htu::same(u, URL), "{u}");
    }
    assert!(htu::same("http://h", "http://h:80/"));
    assert!(htu::same("http://h/a%2fb", "http://h/a%2Fb"));
    for u in [
        "https://api.example.com:8443/apiv2/MediaService/Find",
        "http://api.example.com/apiv2/MediaService/Find",
        "https://api.example.com/apiv2/mediaservice/Find",
        "https://u@api.example.com/apiv2/MediaService/Find",
        "https://api.example.com:0/apiv2/MediaService/Find",
        "https://api.example.com/apiv2/MediaService/Find%",
        "ftp://api.example.com/apiv2/MediaService/Find",
        "/apiv2/MediaService/Find",
    ] {
        assert!(!htu::same(u, URL), "{u}");
    }
}

#[test]
fn thumbprint_of_a_fixed_p256_key() {
    // The P-256 key of RFC 7515 appendix A.3, members out of order and with whitespace; the
    // thumbprint was computed independently (Python's hashlib over the canonical JSON).
    let jwk = r#"{ "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0", "kty": "EC",
        "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "crv": "P-256", "kid": "k" }"#;
    let t = jkt(jwk).unwrap();
    assert_eq!(b64(&t), "oKIywvGUpTVTyxMQ3bwIIeQUudfr_CkLMjCE19ECD-U");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_proofs_never_pass(s in "\\PC{0,200}|[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,90}") {
        prop_assert!(check_proof(&s, &expect()).is_err());
    }

    #[test]
    fn htu_normalisation_is_idempotent(u in "https?://[A-Za-z0-9.]{1,10}(:[0-9]{0,4})?(/[A-Za-z0-9%._~-]{0,8}){0,3}") {
        if let Some(n) = htu::normalise(&u) {
            prop_assert_eq!(htu::normalise(&n), Some(n.clone()));
        }
    }
}
