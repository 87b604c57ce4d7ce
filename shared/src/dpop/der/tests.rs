//! The DER forms against independent DER parsers (`spki` and `der` of RustCrypto), and the
//! differential check: a host verifier made of this conversion and `ring` (or `p256`'s own DER
//! parsing), standing in for Envoy's BoringSSL, decides every proof as the crate's own code does.

use super::*;
use crate::dpop::{check_proof, check_proof_with, DpopError, Es256Verifier, Expect, NonceCheck};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use proptest::prelude::*;
use spki::der::Decode as _;

const URL: &str = "https://api.example.com/apiv2/MediaService/Find";
const NOW: u64 = 1_700_000_000;

/// The point of an SPKI as an independent parser reads it: the algorithm's two OIDs checked.
fn spki_point(der: &[u8]) -> Option<Vec<u8>> {
    let info = spki::SubjectPublicKeyInfoRef::from_der(der).ok()?;
    let ec = spki::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    let p256 = spki::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
    if info.algorithm.oid != ec || info.algorithm.parameters_oid().ok()? != p256 {
        return None;
    }
    info.subject_public_key.as_bytes().map(<[u8]>::to_vec)
}

/// A verifier that takes only the DER forms, as BoringSSL does: the SPKI read by `spki`, the
/// signature by `ring`'s strict ASN.1 parser (`ECDSA_P256_SHA256_ASN1`), or by `p256`'s.
struct DerHost {
    ring: bool,
}

impl Es256Verifier for DerHost {
    fn verify_es256(
        &self,
        x: &[u8; 32],
        y: &[u8; 32],
        signed: &[u8],
        sig: &[u8; 64],
    ) -> Option<bool> {
        let Some(point) = spki_point(&p256_spki(x, y)) else {
            return Some(false);
        };
        let der = es256_sig_der(sig);
        if self.ring {
            let key = ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_ASN1,
                &point,
            );
            Some(key.verify(signed, der.as_bytes()).is_ok())
        } else {
            use p256::ecdsa::signature::Verifier as _;
            let Ok(key) = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point) else {
                return Some(false);
            };
            let Ok(sig) = p256::ecdsa::Signature::from_der(der.as_bytes()) else {
                return Some(false);
            };
            Some(key.verify(signed, &sig).is_ok())
        }
    }
}

/// A host that cannot tell: every answer falls back to the crate's own code.
struct Silent;

impl Es256Verifier for Silent {
    fn verify_es256(&self, _: &[u8; 32], _: &[u8; 32], _: &[u8], _: &[u8; 64]) -> Option<bool> {
        None
    }
}

/// A host that says yes to everything: never asked about a key or a signature the crate refuses
/// on its own, and yet it decides the rest.
struct Yes;

impl Es256Verifier for Yes {
    fn verify_es256(&self, _: &[u8; 32], _: &[u8; 32], _: &[u8], _: &[u8; 64]) -> Option<bool> {
        Some(true)
    }
}

fn b64(s: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(s)
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

fn header(x: &[u8], y: &[u8]) -> String {
    format!(
        r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{{"kty":"EC","crv":"P-256","x":"{}","y":"{}"}}}}"#,
        b64(x),
        b64(y)
    )
}

fn signed_part(header: &str, jti: &str) -> String {
    let claims = format!(r#"{{"jti":"{jti}","htm":"POST","htu":"{URL}","iat":{NOW}}}"#);
    format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()))
}

/// A proof by `secret`'s key, and the same proof's parts to tamper with.
fn proof(secret: u8, jti: &str) -> (String, String, [u8; 64]) {
    let key = p256::ecdsa::SigningKey::from_slice(&[secret; 32]).unwrap();
    let point = key.verifying_key().to_encoded_point(false);
    let head = signed_part(&header(point.x().unwrap(), point.y().unwrap()), jti);
    let sig: p256::ecdsa::Signature = key.sign(head.as_bytes());
    let raw: [u8; 64] = sig.to_bytes().into();
    (format!("{head}.{}", b64(&raw)), head, raw)
}

/// Every proof of the differential: good ones, high `s`, other keys' and other bytes' signatures,
/// `r` or `s` zero, the group order or all ones, short or long signatures, points off the curve.
fn cases() -> Vec<String> {
    let mut out = Vec::new();
    let n = hex32("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
    for secret in 1..=12u8 {
        let (good, head, raw) = proof(secret, &format!("j-{secret}"));
        out.push(good);
        let sig = p256::ecdsa::Signature::from_slice(&raw).unwrap();
        let (r, s) = sig.split_scalars();
        let high = p256::ecdsa::Signature::from_scalars(r, -*s).unwrap();
        out.push(format!("{head}.{}", b64(&high.to_bytes())));
        let mut flipped = raw;
        flipped[usize::from(secret) % 64] ^= 1;
        out.push(format!("{head}.{}", b64(&flipped)));
        let (_, other_head, _) = proof(secret.wrapping_add(1), "other");
        out.push(format!("{other_head}.{}", b64(&raw)));
        for (r, s) in [
            ([0u8; 32], raw[32..].try_into().unwrap()),
            (raw[..32].try_into().unwrap(), [0u8; 32]),
            (n, raw[32..].try_into().unwrap()),
            (raw[..32].try_into().unwrap(), n),
            ([0xff; 32], [0xff; 32]),
            ([0x7f; 32], [0x80; 32]),
            ([1; 32], [0; 32]),
        ] {
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&r);
            sig[32..].copy_from_slice(&s);
            out.push(format!("{head}.{}", b64(&sig)));
        }
        out.push(format!("{head}.{}", b64(&raw[..63])));
        out.push(format!("{head}.{}", b64(&[&raw[..], &[0]].concat())));
        // A DER signature where the raw one belongs: refused, never read as DER.
        out.push(format!("{head}.{}", b64(es256_sig_der(&raw).as_bytes())));
        // The point moved off the curve: y + 1, x and y swapped, coordinates ≥ p.
        let key = p256::ecdsa::SigningKey::from_slice(&[secret; 32]).unwrap();
        let point = key.verifying_key().to_encoded_point(false);
        let (x, y) = (point.x().unwrap().to_vec(), point.y().unwrap().to_vec());
        let mut y1 = y.clone();
        y1[31] ^= 1;
        let p = hex32("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff");
        for (x, y) in [
            (x.clone(), y1),
            (y.clone(), x.clone()),
            (p.to_vec(), y.clone()),
        ] {
            let head = signed_part(&header(&x, &y), "off");
            out.push(format!("{head}.{}", b64(&raw)));
        }
    }
    out
}

fn hex32(s: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

#[test]
fn the_spki_is_what_an_independent_parser_reads() {
    let x = [0x11; 32];
    let y = [0xee; 32];
    let der = p256_spki(&x, &y);
    let point = spki_point(&der).unwrap();
    assert_eq!(point.len(), 65);
    assert_eq!(point[0], 4);
    assert_eq!(&point[1..33], &x);
    assert_eq!(&point[33..], &y);
}

#[test]
fn every_proof_is_decided_alike_by_the_host_stand_ins_and_the_crate() {
    let cases = cases();
    let mut accepted = 0;
    for case in &cases {
        let own = check_proof(case, &expect());
        for host in [DerHost { ring: true }, DerHost { ring: false }] {
            let via = check_proof_with(case, &expect(), Some(&host));
            assert_eq!(via, own, "{case}");
        }
        assert_eq!(check_proof_with(case, &expect(), Some(&Silent)), own);
        accepted += usize::from(own.is_ok());
    }
    // Two good ones a key: the signature as made and with the other s.
    assert_eq!(accepted, 24);
}

#[test]
fn the_stand_ins_refuse_points_off_the_curve_themselves() {
    let (_, head, raw) = proof(3, "j");
    let p = hex32("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff");
    for (x, y) in [([1u8; 32], [1u8; 32]), (p, [2; 32]), ([0; 32], [0; 32])] {
        for host in [DerHost { ring: true }, DerHost { ring: false }] {
            assert_eq!(
                host.verify_es256(&x, &y, head.as_bytes(), &raw),
                Some(false)
            );
        }
    }
}

#[test]
fn a_host_is_asked_only_about_keys_and_signatures_the_crate_finds_well_formed() {
    for case in cases() {
        let own = check_proof(&case, &expect());
        let yes = check_proof_with(&case, &expect(), Some(&Yes));
        match own {
            Err(DpopError::BadKey) => assert_eq!(yes, own, "{case}"),
            Err(DpopError::BadSignature) => {
                let sig = URL_SAFE_NO_PAD
                    .decode(case.rsplit_once('.').unwrap().1)
                    .unwrap();
                let in_range = <[u8; 64]>::try_from(sig.as_slice())
                    .ok()
                    .and_then(|raw| p256::ecdsa::Signature::from_slice(&raw).ok())
                    .is_some();
                // Out of range or of the wrong length: refused before the host.
                assert_eq!(yes.is_ok(), in_range, "{case}");
            }
            _ => assert_eq!(yes.is_ok(), own.is_ok(), "{case}"),
        }
    }
}

/// Reads an `ECDSA-Sig-Value` back with the `der` crate, strictly.
fn read_back(der: &[u8]) -> Option<([u8; 32], [u8; 32])> {
    use spki::der::asn1::UintRef;
    use spki::der::{Reader as _, SliceReader};
    let mut reader = SliceReader::new(der).ok()?;
    let (r, s) = reader
        .sequence(|seq| Ok((UintRef::decode(seq)?, UintRef::decode(seq)?)))
        .ok()?;
    reader.finish(()).ok()?;
    let pad = |n: &[u8]| -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        out.get_mut(32usize.checked_sub(n.len())?..)?
            .copy_from_slice(n);
        Some(out)
    };
    Some((pad(r.as_bytes())?, pad(s.as_bytes())?))
}

#[test]
fn edge_values_of_r_and_s() {
    for (r, s) in [
        ([0u8; 32], [0u8; 32]),
        ([0xff; 32], [0x80; 32]),
        ([0x7f; 32], [0x01; 32]),
    ] {
        let mut raw = [0u8; 64];
        raw[..32].copy_from_slice(&r);
        raw[32..].copy_from_slice(&s);
        let der = es256_sig_der(&raw);
        assert_eq!(read_back(der.as_bytes()), Some((r, s)));
    }
    let mut all = [0xff; 64];
    assert_eq!(es256_sig_der(&all).as_bytes().len(), MAX_SIG_DER_LEN);
    all = [0; 64];
    assert_eq!(es256_sig_der(&all).as_bytes(), &[0x30, 6, 2, 1, 0, 2, 1, 0]);
}

proptest! {
    #[test]
    fn any_signature_round_trips_through_strict_der(raw in proptest::array::uniform32(any::<u8>()),
                                                      s in proptest::array::uniform32(any::<u8>()),
                                                      zeros in 0usize..32) {
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&raw);
        sig[32..].copy_from_slice(&s);
        sig[..zeros].fill(0);
        let der = es256_sig_der(&sig);
        let (r2, s2) = read_back(der.as_bytes()).expect("strict DER");
        prop_assert_eq!(&r2[..], &sig[..32]);
        prop_assert_eq!(&s2[..], &sig[32..]);
        if let Ok(parsed) = p256::ecdsa::Signature::from_slice(&sig) {
            prop_assert_eq!(p256::ecdsa::Signature::from_der(der.as_bytes()).unwrap(), parsed);
        }
    }
}
