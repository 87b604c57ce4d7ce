//! DPoP proofs: arbitrary text never passes `check_proof` and never panics; a proof signed here
//! around an arbitrary header tail and arbitrary claims never panics, and passes only with
//! claims that fit the request.
#![no_main]
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::Signer as _;
use libfuzzer_sys::fuzz_target;
use shared::dpop::{check_proof, Expect, NonceCheck};

const NOW: u64 = 1_700_000_000;

fuzz_target!(|input: (bool, &str, &str)| {
    let (sign, a, b) = input;
    let expect = Expect {
        method: "POST",
        url: "https://media.example.com/apiv2/x",
        access_token: None,
        now: NOW,
        window_seconds: 60,
        nonce_check: NonceCheck::Off,
    };
    if !sign {
        assert!(check_proof(a, &expect).is_err(), "forged: {a:?}");
        return;
    }
    let key = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let x = URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    // `a` ends the header (more members, or junk), `b` is the whole claims part.
    let header = format!(
        r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}{a}}}"#
    );
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(b)
    );
    let sig = key.sign(signed.as_bytes()).to_bytes();
    let proof = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig));
    if let Ok(p) = check_proof(&proof, &expect) {
        assert!(p.iat.abs_diff(NOW) <= 60 && !p.jti.is_empty() && p.jti.len() <= 128);
    }
});
