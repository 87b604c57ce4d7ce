//! The origin of the URL a proof's `htu` is compared with: `dpop.public_origin`, required, and
//! never what the request says (`:authority` from `Host`, `:scheme` from `X-Forwarded-Proto` or
//! an HTTP/2 client), which is the client's to choose.

use super::*;

const FIND: &str = "/apiv2/MediaService/Find";

/// The outcome of a bound request whose pseudo-headers say `scheme` and `authority`, with a
/// fresh proof (`jti`) for `htu_origin` + [`FIND`].
fn outcome(edge: &Edge, (scheme, authority): (&str, &str), htu_origin: &str, jti: &str) -> Outcome {
    let key = es();
    let t = token(Some(key.jkt()));
    let p = proof(&key, jti, &format!("{htu_origin}{FIND}"), &t, None);
    let h = edge.send_as(
        scheme,
        authority,
        &[("authorization", &format!("DPoP {t}")), ("dpop", &p)],
    );
    if h.outcome == Outcome::DpopInvalid {
        assert!(
            www(&h).contains("error=\"invalid_dpop_proof\""),
            "{}",
            www(&h)
        );
    }
    h.outcome
}

#[test]
fn a_proof_for_the_host_the_request_names_is_refused() {
    let edge = Edge::new(r#""public_origin":"https://api.example""#);
    let evil = ("http", "evil.example");
    assert_eq!(
        outcome(&edge, evil, "http://evil.example", "e1"),
        Outcome::DpopInvalid
    );
    let evil_tls = ("https", "evil.example");
    assert_eq!(
        outcome(&edge, evil_tls, "https://evil.example", "e2"),
        Outcome::DpopInvalid
    );
    // The request's authority plays no part: the configured origin is what a proof must name.
    assert_eq!(
        outcome(&edge, evil, "https://api.example", "e3"),
        Outcome::DpopAllowed
    );
    assert_eq!(
        outcome(&edge, ("https", "api.example"), "https://api.example", "e4"),
        Outcome::DpopAllowed
    );
}

#[test]
fn a_scheme_the_client_claims_on_a_plain_listener_changes_nothing() {
    let edge = Edge::new(r#""public_origin":"http://api.example:10000""#);
    let claims_https = ("https", "api.example:10000");
    let https = "https://api.example:10000";
    assert_eq!(
        outcome(&edge, claims_https, https, "s1"),
        Outcome::DpopInvalid
    );
    let plain = "http://api.example:10000";
    assert_eq!(
        outcome(&edge, claims_https, plain, "s2"),
        Outcome::DpopAllowed
    );
    assert_eq!(
        outcome(&edge, ("http", "api.example:10000"), plain, "s3"),
        Outcome::DpopAllowed
    );
}

#[test]
fn a_path_that_is_not_absolute_is_no_url() {
    let edge = Edge::new("");
    let key = es();
    let t = token(Some(key.jkt()));
    let p = proof(
        &key,
        "p1",
        "https://api.example.com@evil.example/x",
        &t,
        None,
    );
    let h = handle(
        &edge.cfg,
        &edge.state,
        &edge.replays,
        &[
            (":method", b"POST"),
            (":path", b"@evil.example/x"),
            ("authorization", format!("DPoP {t}").as_bytes()),
            ("dpop", p.as_bytes()),
        ],
        NOW,
    );
    assert_eq!(h.outcome, Outcome::DpopInvalid);
}

fn parse(dpop: Option<&str>) -> Result<Config, crate::config::ConfigError> {
    let dpop = dpop.map_or(String::new(), |d| format!(r#","dpop":{{{d}}}"#));
    let json = format!(
        r#"{{"keys":[{{"kid":1,"secret":"{}"}}]{dpop}}}"#,
        "A".repeat(43)
    );
    Config::parse(json.as_bytes())
}

#[test]
fn a_configuration_without_a_public_origin_is_refused_naming_it() {
    for dpop in [None, Some(""), Some(r#""require_nonce":true"#)] {
        let e = parse(dpop).unwrap_err().to_string();
        assert!(
            e.contains("dpop.public_origin is required"),
            "{dpop:?}: {e}"
        );
        assert!(
            e.contains(r#""dpop": {"public_origin": "https://"#),
            "an example: {e}"
        );
    }
}

#[test]
fn a_public_origin_is_a_scheme_a_host_and_a_port_only() {
    for bad in [
        "https://x.example/path",
        "https://x.example?q",
        "https://x.example#f",
        "https://user@x.example",
        "ftp://x.example",
        "x.example",
        "https://",
        "https://:443",
        "https://x.example:",
        "https://x.example:0",
        "https://x.example:65536",
        "https://x.example:1:2",
        "https://::1",
        "https://[]",
        "https://[x.example]",
        "https://x_y.example",
        "",
    ] {
        let e = parse(Some(&format!(r#""public_origin":"{bad}""#)));
        let e = e.map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("dpop.public_origin: http(s)://host[:port]"),
            "{bad}: {e}"
        );
    }
    for (good, kept) in [
        ("https://media.example.com", "https://media.example.com"),
        ("https://media.example.com/", "https://media.example.com"),
        ("http://127.0.0.1:10000", "http://127.0.0.1:10000"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("https://[2001:db8::1]", "https://[2001:db8::1]"),
    ] {
        let cfg = parse(Some(&format!(r#""public_origin":"{good}""#))).unwrap();
        assert_eq!(cfg.dpop.public_origin, kept);
    }
}

#[test]
fn the_other_dpop_settings_keep_their_bounds() {
    for bad in [
        r#""proof_window_seconds":0"#,
        r#""proof_window_seconds":601"#,
        r#""replay_entries":10"#,
        r#""other":1"#,
    ] {
        assert!(parse(Some(&format!("{ORIGIN},{bad}"))).is_err(), "{bad}");
    }
}
