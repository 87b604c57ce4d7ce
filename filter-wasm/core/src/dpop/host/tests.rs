//! The request as a protobuf reader sees it, the answers read strictly, and the known-answer
//! check against a host made of independent DER parsers and `p256`, and against hosts that
//! answer wrongly.

use super::*;
use spki::der::Decode as _;

/// Reads a serialized message's length-delimited fields, in order.
fn fields(mut input: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let tag = read_varint(&mut input).unwrap();
        assert_eq!(tag & 7, 2, "only bytes fields");
        let len = read_varint(&mut input).unwrap() as usize;
        out.push((tag >> 3, input[..len].to_vec()));
        input = &input[len..];
    }
    out
}

/// Envoy's side, with RustCrypto standing in for BoringSSL: the arguments parsed, the SPKI and
/// the DER signature read by independent DER parsers, the answer serialized.
pub(crate) struct StandIn;

impl ForeignCall for StandIn {
    fn verify_signature(&self, arguments: &[u8]) -> Option<Vec<u8>> {
        use p256::ecdsa::signature::Verifier as _;
        let f = fields(arguments);
        let get = |n| f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_slice());
        assert_eq!(get(1), Some(&b"sha256"[..]));
        let info = spki::SubjectPublicKeyInfoRef::from_der(get(2)?).ok()?;
        let key =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(info.subject_public_key.as_bytes()?).ok()?;
        let ok = p256::ecdsa::Signature::from_der(get(3)?)
            .is_ok_and(|sig| key.verify(get(4).unwrap_or_default(), &sig).is_ok());
        Some(if ok {
            vec![0x08, 0x01]
        } else {
            b"\x12\x05nope!".to_vec()
        })
    }
}

/// A host that answers every call with the same bytes, or refuses it.
struct Fixed(Option<Vec<u8>>);

impl ForeignCall for Fixed {
    fn verify_signature(&self, _: &[u8]) -> Option<Vec<u8>> {
        self.0.clone()
    }
}

#[test]
fn the_request_holds_the_four_arguments_in_their_fields() {
    let sig = [0x80; 64];
    let f = fields(&request(&KNOWN_X, &KNOWN_Y, b"text", &sig));
    let numbers: Vec<u64> = f.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    assert_eq!(f[0].1, b"sha256");
    assert_eq!(f[1].1, p256_spki(&KNOWN_X, &KNOWN_Y));
    assert_eq!(f[2].1, es256_sig_der(&sig).as_bytes());
    assert_eq!(f[3].1, b"text");
    // A long text takes a two-byte length.
    let long = vec![b'a'; 300];
    assert_eq!(fields(&request(&KNOWN_X, &KNOWN_Y, &long, &sig))[3].1, long);
}

#[test]
fn answers_are_read_strictly() {
    assert_eq!(read_answer(&[0x08, 0x01]), Some(true));
    assert_eq!(read_answer(&[0x08, 0x01, 0x12, 0x00]), Some(true));
    assert_eq!(read_answer(&[]), Some(false));
    assert_eq!(read_answer(&[0x08, 0x00]), Some(false));
    assert_eq!(read_answer(b"\x12\x03bad"), Some(false));
    assert_eq!(read_answer(&[0x08, 0x01, 0x08, 0x00]), Some(false));
    for bad in [
        &[0x08][..],
        &[0x08, 0x02],
        &[0x08, 0x81],
        &[0x12, 0x05, b'a'],
        &[0x09, 1, 2, 3, 4, 5, 6, 7, 8],
        &[0x00, 0x01],
        &[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
    ] {
        assert_eq!(read_answer(bad), None, "{bad:?}");
    }
}

#[test]
fn the_known_answer_passes_a_host_that_verifies() {
    assert!(host_answers_rightly(&HostEs256(StandIn)));
}

#[test]
fn the_known_answer_is_right_for_the_module_itself() {
    use p256::ecdsa::signature::Verifier as _;
    let point =
        p256::EncodedPoint::from_affine_coordinates((&KNOWN_X).into(), (&KNOWN_Y).into(), false);
    let key = p256::ecdsa::VerifyingKey::from_encoded_point(&point).unwrap();
    let sig = p256::ecdsa::Signature::from_slice(&KNOWN_SIG).unwrap();
    assert!(key.verify(KNOWN_TEXT, &sig).is_ok());
    let low = sig.normalize_s().unwrap();
    assert_eq!(&low.to_bytes()[32..], &KNOWN_LOW_S);
}

#[test]
fn hosts_that_answer_wrongly_or_not_at_all_fail_the_known_answer() {
    for answer in [
        None,
        Some(vec![]),
        Some(vec![0x08, 0x01]),
        Some(vec![0x08, 0x00]),
        Some(vec![0xff]),
        Some(b"\x12\x03bad".to_vec()),
    ] {
        assert!(
            !host_answers_rightly(&HostEs256(Fixed(answer.clone()))),
            "{answer:?}"
        );
    }
}
