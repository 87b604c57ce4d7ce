//! How the filter writes a value into an identity header: percent-encoded, so that a list of
//! them (`x-auth-roles`, `x-auth-actors`) or a pair (`x-auth-claims`) stays unambiguous.

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// Bytes percent-encoded in identity header values: controls, non-ASCII (always), and the
/// characters that would make a value ambiguous.
const ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'"')
    .add(b'\\')
    .add(b',')
    .add(b'=');

/// `s` as an identity header writes it.
pub(crate) fn enc(s: &str) -> String {
    utf8_percent_encode(s, ENCODE).to_string()
}

/// `s` as an identity header writes it, appended to `out` (a list's element, without an
/// allocation of its own).
pub(crate) fn enc_into(out: &mut String, s: &str) {
    out.extend(utf8_percent_encode(s, ENCODE));
}
