//! The DER forms ES256 takes to the host (`shared::dpop::der`) and the foreign call's protobuf
//! (`filter_core::dpop::host`): any 64 bytes make strict DER that reads back as the same `r` and
//! `s` (and as the same signature through RustCrypto's DER parser, when in range); any point makes
//! an SPKI ending in it; the request reads back as its four fields; and any answer bytes are read
//! without a panic.
#![no_main]
use filter_core::dpop::host::{read_answer, request};
use libfuzzer_sys::fuzz_target;
use shared::dpop::der::{es256_sig_der, p256_spki, MAX_SIG_DER_LEN, SPKI_LEN};

/// An INTEGER at the front of `der`: its minimal, non-negative content, and the rest.
fn integer(der: &[u8]) -> (&[u8], &[u8]) {
    assert_eq!(der[0], 0x02);
    let len = usize::from(der[1]);
    assert!((1..=33).contains(&len));
    let content = &der[2..2 + len];
    assert_eq!(content[0] & 0x80, 0, "non-negative");
    if len > 1 {
        assert!(content[0] != 0 || content[1] & 0x80 != 0, "minimal");
    }
    let digits = if content[0] == 0 && len > 1 {
        &content[1..]
    } else {
        content
    };
    (digits, &der[2 + len..])
}

fn unpad(n: &[u8]) -> &[u8] {
    let start = n.iter().position(|&b| b != 0).unwrap_or(n.len() - 1);
    &n[start..]
}

fuzz_target!(|input: ([u8; 64], [u8; 32], [u8; 32], &[u8])| {
    let (raw, x, y, text) = input;
    let der = es256_sig_der(&raw);
    let der = der.as_bytes();
    assert!(der.len() <= MAX_SIG_DER_LEN);
    assert_eq!(der[0], 0x30);
    assert_eq!(usize::from(der[1]), der.len() - 2);
    let (r, rest) = integer(&der[2..]);
    let (s, rest) = integer(rest);
    assert!(rest.is_empty());
    assert_eq!(r, unpad(&raw[..32]));
    assert_eq!(s, unpad(&raw[32..]));
    if let Ok(sig) = p256::ecdsa::Signature::from_slice(&raw) {
        assert_eq!(p256::ecdsa::Signature::from_der(der).unwrap(), sig);
    }
    let spki = p256_spki(&x, &y);
    assert_eq!(spki.len(), SPKI_LEN);
    assert_eq!(&spki[SPKI_LEN - 64..SPKI_LEN - 32], &x);
    assert_eq!(&spki[SPKI_LEN - 32..], &y);
    let req = request(&x, &y, text, &raw);
    assert!(req.ends_with(text));
    // Whatever a host answers: read, never a panic; a lone `result: true` is true.
    let answer = read_answer(text);
    if text == [0x08, 0x01] {
        assert_eq!(answer, Some(true));
    }
});
