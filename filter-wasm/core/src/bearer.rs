//! Reading one `Authorization`-style credential: the `Bearer` or `DPoP` scheme (RFC 9449 section
//! 7.1), case-insensitive, one or more spaces, then an RFC 6750 `b64token`. Bytes in, never a
//! panic.
//!
//! `Bearer` followed by anything but a space or more of a scheme name (a tab, a no-break space,
//! a control character) is a malformed Bearer credential, not another scheme: an upstream or a
//! proxy that reads it as Bearer must never receive a token the filter did not check.

/// The scheme a token came under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `Bearer`: the token alone.
    Bearer,
    /// `DPoP`: the token with a proof in the `DPoP` header.
    Dpop,
}

/// `Bearer <b64token>` or `DPoP <b64token>` parsed from one header value.
pub enum Bearer<'a> {
    /// Another scheme (`Basic …`, `Bearerx …`): not ours, as if absent.
    OtherScheme,
    /// One of ours with a syntactically valid token.
    Token(Scheme, &'a str),
    /// One of ours without a valid token.
    Bad,
}

/// RFC 6750 `b64token`.
fn b64token(s: &[u8]) -> bool {
    // RFC 6750 section 2.1: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
    let body_end = s.iter().rposition(|&c| c != b'=').map_or(0, |i| i + 1);
    body_end > 0
        && s[..body_end]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-._~+/".contains(&c))
}

/// RFC 9110 `tchar`: what a scheme name is made of.
fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// One credential, as a header value or one comma-separated element of it.
pub fn parse_bearer(value: &[u8]) -> Bearer<'_> {
    let starts =
        |name: &[u8]| value.len() >= name.len() && value[..name.len()].eq_ignore_ascii_case(name);
    let (scheme, rest) = if starts(b"bearer") {
        (Scheme::Bearer, &value[6..])
    } else if starts(b"dpop") {
        (Scheme::Dpop, &value[4..])
    } else {
        return Bearer::OtherScheme;
    };
    if rest.is_empty() {
        return Bearer::Bad;
    }
    if tchar(rest[0]) {
        // `Bearerx ...` is another scheme name.
        return Bearer::OtherScheme;
    }
    if rest[0] != b' ' {
        return Bearer::Bad;
    }
    let token = &rest[rest.iter().position(|&c| c != b' ').unwrap_or(rest.len())..];
    if !b64token(token) {
        return Bearer::Bad;
    }
    // b64token characters are ASCII, so this cannot fail.
    match core::str::from_utf8(token) {
        Ok(t) => Bearer::Token(scheme, t),
        Err(_) => Bearer::Bad,
    }
}

/// `s` without the optional whitespace (spaces, tabs) around it.
pub fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_then_anything_but_a_space_or_a_scheme_name_is_malformed() {
        for value in [
            &b"Bearer\tabc"[..],
            b"Bearer\xc2\xa0abc",
            b"bearer\x0babc",
            b"BEARER\x00abc",
            b"Bearer\"abc",
            b"Bearer:abc",
        ] {
            assert!(matches!(parse_bearer(value), Bearer::Bad), "{value:?}");
        }
        for value in [
            &b"Bearerx abc"[..],
            b"Bearer-2 abc",
            b"Basic abc",
            b"Bear abc",
        ] {
            assert!(
                matches!(parse_bearer(value), Bearer::OtherScheme),
                "{value:?}"
            );
        }
        assert!(matches!(
            parse_bearer(b"bearer  abc"),
            Bearer::Token(Scheme::Bearer, "abc")
        ));
        assert!(matches!(
            parse_bearer(b"dPoP abc"),
            Bearer::Token(Scheme::Dpop, "abc")
        ));
        for value in [&b"DPoP\tabc"[..], b"DPoP", b"DPoP abc def"] {
            assert!(matches!(parse_bearer(value), Bearer::Bad), "{value:?}");
        }
        assert!(matches!(parse_bearer(b"DPoPx abc"), Bearer::OtherScheme));
    }

    #[test]
    fn b64token_is_rfc_6750_exactly() {
        for b in 0..=255u8 {
            let rfc = b.is_ascii_alphanumeric() || b"-._~+/".contains(&b);
            assert_eq!(b64token(&[b]), rfc, "byte {b}");
            assert_eq!(b64token(&[b, b'=', b'=']), rfc, "byte {b} then padding");
        }
        for (s, ok) in [
            ("", false),
            ("=", false),
            ("a=b", false),
            ("mmat1.x-y_z~+/==", true),
        ] {
            assert_eq!(b64token(s.as_bytes()), ok, "{s:?}");
        }
    }
}
