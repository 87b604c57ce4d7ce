//! The `htu` comparison of RFC 9449 section 4.3: both URLs without query and fragment, normalised
//! as RFC 3986 section 6.2.2 and 6.2.3 say for `http` and `https`: scheme and host in lower case,
//! the default port (80, 443) and an empty port dropped, an empty path made `/`,
//! percent-encodings in upper case and those of unreserved characters decoded. Dot segments are
//! not removed (a proof must name the path the server sees), and userinfo is refused.

/// The normalised `scheme://host[:port]/path` of an absolute `http` or `https` URL; `None` for
/// anything else.
pub(super) fn normalise(url: &str) -> Option<String> {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if authority.contains('@') || authority.is_empty() {
        return None;
    }
    // A port is the digits after the last colon outside an IPv6 literal's brackets.
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], &authority[i + 1..]),
        _ => (authority, ""),
    };
    if host.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut out = String::with_capacity(url.len() + 1);
    out.push_str(&scheme);
    out.push_str("://");
    out.push_str(&percent_case(&host.to_ascii_lowercase())?);
    let digits = port.trim_start_matches('0');
    if !port.is_empty() && digits.is_empty() {
        // Port 0 (all zeros): kept, so it never equals the default.
        out.push_str(":0");
    } else if !digits.is_empty() && digits != default_port {
        out.push(':');
        out.push_str(digits);
    }
    if path.is_empty() {
        out.push('/');
    } else {
        out.push_str(&percent_case(path)?);
    }
    Some(out)
}

/// `s` with every `%XX` in upper case, or decoded when it encodes an unreserved character
/// (ALPHA, DIGIT, `-`, `.`, `_`, `~`); `None` for a `%` not followed by two hex digits.
fn percent_case(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let hex = rest.get(i + 1..i + 3)?;
        let byte = u8::from_str_radix(hex, 16).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push_str(&hex.to_ascii_uppercase());
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Whether the proof's `htu` names the same resource as the URL the request was sent to.
pub(super) fn same(htu: &str, expected: &str) -> bool {
    match (normalise(htu), normalise(expected)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}
