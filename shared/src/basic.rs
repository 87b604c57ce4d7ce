//! HTTP Basic client credentials as RFC 6749 section 2.3.1 defines them: the client id and secret
//! are `application/x-www-form-urlencoded` encoded before they are joined with `:` and base64
//! encoded, so they are decoded twice here.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use core::fmt;
use percent_encoding::percent_decode;
use zeroize::Zeroizing;

/// Longest `Authorization` value considered, in bytes.
pub const MAX_HEADER_LEN: usize = 2048;

/// Client id and secret from an `Authorization: Basic` header. The secret is zeroized on drop
/// and redacted in `Debug`.
pub struct ClientCredentials {
    /// The client id, decoded.
    pub id: String,
    /// The client secret, decoded.
    pub secret: Zeroizing<String>,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("id", &self.id)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// Why a header is not usable Basic credentials. All of them mean `invalid_client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasicError {
    /// The scheme is not `Basic`.
    NotBasic,
    /// Not valid base64, not UTF-8, no `:`, bad percent-encoding, empty id, or too long.
    Malformed,
}

impl fmt::Display for BasicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotBasic => "client authentication must use HTTP Basic",
            Self::Malformed => "malformed HTTP Basic credentials",
        })
    }
}

impl std::error::Error for BasicError {}

fn form_decode(part: &str) -> Option<Zeroizing<String>> {
    let b = part.as_bytes();
    let escapes_ok = b
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == b'%')
        .all(|(i, _)| {
            b.get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
        });
    if !escapes_ok {
        return None;
    }
    let spaced = Zeroizing::new(part.replace('+', " "));
    let decoded = percent_decode(spaced.as_bytes()).decode_utf8().ok()?;
    Some(Zeroizing::new(decoded.into_owned()))
}

/// Parses an `Authorization` header value: `Basic`, matched case-insensitively, one or more
/// spaces, then base64 of `urlencode(id):urlencode(secret)`.
pub fn parse_basic(value: &[u8]) -> Result<ClientCredentials, BasicError> {
    if value.len() > MAX_HEADER_LEN {
        return Err(BasicError::Malformed);
    }
    let value = core::str::from_utf8(value).map_err(|_| BasicError::Malformed)?;
    let (scheme, rest) = value.split_once(' ').ok_or(BasicError::NotBasic)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(BasicError::NotBasic);
    }
    let encoded = rest.trim_start_matches(' ');
    let raw = Zeroizing::new(
        STANDARD
            .decode(encoded)
            .map_err(|_| BasicError::Malformed)?,
    );
    let text = core::str::from_utf8(&raw).map_err(|_| BasicError::Malformed)?;
    let (id, secret) = text.split_once(':').ok_or(BasicError::Malformed)?;
    let id = form_decode(id).ok_or(BasicError::Malformed)?;
    let secret = form_decode(secret).ok_or(BasicError::Malformed)?;
    if id.is_empty() || id.chars().any(char::is_control) {
        return Err(BasicError::Malformed);
    }
    Ok(ClientCredentials {
        id: id.to_string(),
        secret,
    })
}

/// The `Authorization` value a client sends: `Basic`, then base64 of
/// `urlencode(id):urlencode(secret)`. Zeroized on drop: it holds the secret.
pub fn encode_basic(id: &str, secret: &str) -> Zeroizing<String> {
    // Sized once for the longest outcome (every byte escaped as `%XX`), so no reallocation
    // leaves a copy of the secret behind.
    let mut joined = Zeroizing::new(String::with_capacity(3 * (id.len() + secret.len()) + 1));
    joined.extend(form_urlencoded::byte_serialize(id.as_bytes()));
    joined.push(':');
    joined.extend(form_urlencoded::byte_serialize(secret.as_bytes()));
    let mut out = Zeroizing::new(String::with_capacity(6 + 4 * joined.len().div_ceil(3)));
    out.push_str("Basic ");
    STANDARD.encode_string(joined.as_bytes(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encoded_credentials_parse_back() {
        for (id, secret) in [("edge", "s3cret"), ("a b:c", "x+y/z=%:é")] {
            let header = encode_basic(id, secret);
            let creds = parse_basic(header.as_bytes()).unwrap();
            assert_eq!((creds.id.as_str(), creds.secret.as_str()), (id, secret));
        }
    }

    fn header(raw: &str) -> String {
        format!("Basic {}", STANDARD.encode(raw))
    }

    #[test]
    fn decodes_form_encoding_of_id_and_secret() {
        let c = parse_basic(header("my%20app:p%3Ass+word%25").as_bytes()).unwrap();
        assert_eq!(c.id, "my app");
        assert_eq!(c.secret.as_str(), "p:ss word%");
        let c = parse_basic(format!("bAsIc   {}", STANDARD.encode("a:")).as_bytes()).unwrap();
        assert_eq!((c.id.as_str(), c.secret.as_str()), ("a", ""));
    }

    #[test]
    fn rejects_what_is_not_basic_credentials() {
        assert_eq!(
            parse_basic(b"Bearer abc").unwrap_err(),
            BasicError::NotBasic
        );
        assert_eq!(parse_basic(b"Basic").unwrap_err(), BasicError::NotBasic);
        for bad in [
            header("nocolon"),
            header(":secret"),
            header("a%zz:b"),
            "Basic !!!".into(),
            header("a%FF:b"),
        ] {
            assert_eq!(
                parse_basic(bad.as_bytes()).unwrap_err(),
                BasicError::Malformed,
                "{bad}"
            );
        }
        assert!(parse_basic(&vec![b'a'; MAX_HEADER_LEN + 1]).is_err());
    }

    #[test]
    fn debug_redacts_the_secret() {
        let c = parse_basic(header("app:hunter2").as_bytes()).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_basic(&bytes);
            let mut with_scheme = b"Basic ".to_vec();
            with_scheme.extend_from_slice(&bytes);
            let _ = parse_basic(&with_scheme);
        }

        #[test]
        fn encoded_credentials_round_trip(id in "\\PC{1,20}", secret in "\\PC{0,30}") {
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let h = header(&format!("{}:{}", enc(&id), enc(&secret)));
            let c = parse_basic(h.as_bytes()).unwrap();
            prop_assert_eq!(c.id, id);
            prop_assert_eq!(c.secret.as_str(), secret.as_str());
        }
    }
}
