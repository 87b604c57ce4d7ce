//! Micro-benchmarks of DPoP proof checks, one per algorithm: the cost a bound request adds at
//! the edge (one signature verification, the JSON and the thumbprint), and the ablation: the
//! ES256 signature check alone by the build's backend, on the same bytes, so that the rest of
//! the check is the difference.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ed25519_dalek::Signer as _;
use shared::dpop::{ath, check_proof, Expect, NonceCheck};

const URL: &str = "https://media.example.com/apiv2/MediaService/Find";
const NOW: u64 = 1_700_000_000;
const TOKEN: &str = "mmat2.AAAA.BBBB";

fn b64(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

fn jws(alg: &str, jwk: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let header = format!(r#"{{"typ":"dpop+jwt","alg":"{alg}","jwk":{jwk}}}"#);
    let claims = format!(
        r#"{{"jti":"bench-1","htm":"POST","htu":"{URL}","iat":{NOW},"ath":"{}"}}"#,
        ath(TOKEN)
    );
    let signed = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let sig = sign(signed.as_bytes());
    format!("{signed}.{}", b64(&sig))
}

fn benches(c: &mut Criterion) {
    let es = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
    let point = es.verifying_key().to_encoded_point(false);
    let es_jwk = format!(
        r#"{{"kty":"EC","crv":"P-256","x":"{}","y":"{}"}}"#,
        b64(point.x().unwrap()),
        b64(point.y().unwrap())
    );
    let es_proof = jws("ES256", &es_jwk, |m| {
        let s: p256::ecdsa::Signature = es.sign(m);
        s.to_bytes().to_vec()
    });
    let ed = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let ed_jwk = format!(
        r#"{{"kty":"OKP","crv":"Ed25519","x":"{}"}}"#,
        b64(ed.verifying_key().as_bytes())
    );
    let ed_proof = jws("EdDSA", &ed_jwk, |m| ed.sign(m).to_bytes().to_vec());
    let expect = Expect {
        method: "POST",
        url: URL,
        access_token: Some(TOKEN),
        now: NOW,
        window_seconds: 60,
        nonce_check: NonceCheck::Off,
    };
    for (name, proof) in [("dpop_es256", &es_proof), ("dpop_eddsa", &ed_proof)] {
        check_proof(proof, &expect).unwrap();
        c.bench_function(name, |bench| {
            bench.iter(|| check_proof(black_box(proof), black_box(&expect)).unwrap())
        });
    }
}

/// The signature alone: what `check_proof` spends outside it is the parsing, the thumbprint and
/// the claims.
fn signature_only(c: &mut Criterion) {
    let es = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
    let point = es.verifying_key().to_encoded_point(false);
    let signed = b"eyJ0eXAiOiJkcG9wK2p3dCJ9.eyJqdGkiOiJiZW5jaC0xIn0".repeat(8);
    let sig: p256::ecdsa::Signature = es.sign(&signed);
    let sig = sig.to_bytes();
    #[cfg(feature = "ring")]
    {
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            point.as_bytes(),
        );
        key.verify(&signed, &sig).unwrap();
        c.bench_function("dpop_es256_signature_only", |bench| {
            bench.iter(|| key.verify(black_box(&signed), black_box(&sig)).unwrap())
        });
    }
    #[cfg(not(feature = "ring"))]
    {
        use p256::ecdsa::signature::Verifier as _;
        let key = p256::ecdsa::VerifyingKey::from_encoded_point(&point).unwrap();
        let sig = p256::ecdsa::Signature::from_slice(&sig).unwrap();
        c.bench_function("dpop_es256_signature_only", |bench| {
            bench.iter(|| key.verify(black_box(&signed), black_box(&sig)).unwrap())
        });
    }
}

criterion_group!(dpop_benches, benches, signature_only);
criterion_main!(dpop_benches);
