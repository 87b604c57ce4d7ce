//! What to do with one request: a pure function of its path and headers, the time, the
//! configuration and the state learnt from the edge feed. No host calls here; the Envoy adapter
//! applies the result.

use crate::bearer::{parse_bearer, trim_ows, Bearer};
use crate::config::{Config, IDENTITY_HEADERS};
use crate::edge::EdgeState;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use shared::token::{self, SubjectKind};
use shared::VerifyError;

/// How a request ended, one Envoy counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A valid token: identity headers set, request forwarded.
    Allowed,
    /// No bearer token: 401 without an error code.
    Missing,
    /// Not a usable `Bearer` header, two tokens, or not a token of our format: 400 or 401.
    Malformed,
    /// Forged, tampered, unknown key, not yet valid, or claiming a lifetime longer than the
    /// configured maximum: 401 `invalid_token`.
    Invalid,
    /// Expired beyond the clock skew: 401 `invalid_token`.
    Expired,
    /// An exempt path: forwarded without a token check (identity headers still removed).
    Exempt,
    /// A valid token that a revocation from the edge feed covers: 401 `invalid_token`.
    Revoked,
    /// Edge sync has no keys yet, or its state is older than `max_staleness_seconds`: 503.
    Unavailable,
}

impl Outcome {
    /// All outcomes, in counter order.
    pub const ALL: [Outcome; 8] = [
        Self::Allowed,
        Self::Missing,
        Self::Malformed,
        Self::Invalid,
        Self::Expired,
        Self::Exempt,
        Self::Revoked,
        Self::Unavailable,
    ];

    /// Counter name suffix.
    pub fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Invalid => "invalid",
            Self::Expired => "expired",
            Self::Exempt => "exempt",
            Self::Revoked => "revoked",
            Self::Unavailable => "unavailable",
        }
    }
}

/// A local answer instead of forwarding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// 400, 401, or 503 when the filter cannot verify at all.
    pub status: u32,
    /// The `WWW-Authenticate` value (RFC 6750 section 3).
    pub www_authenticate: String,
    /// A small JSON body: `{"error": ..., "error_description": ...}`.
    pub body: String,
}

/// The filter's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forward; remove the identity headers.
    Exempt,
    /// Forward; remove the identity headers, then set these.
    Allow(Vec<(&'static str, String)>),
    /// Answer locally.
    Deny(Denial),
}

/// Bytes percent-encoded in identity header values: controls, non-ASCII (always), and the
/// characters that would make a value ambiguous.
const ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'"')
    .add(b'\\')
    .add(b',')
    .add(b'=');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, ENCODE).to_string()
}

/// True if the path (query removed) starts with an exempt prefix and has nothing a proxy or an
/// upstream could normalise into another path. Anything doubtful stays protected: `%`, `\`, `//`,
/// dot segments, and `;` anywhere (path parameters: Tomcat, Jetty and Spring read `..;` as `..`).
///
/// The shipped configurations exempt nothing here: Envoy's route table keeps the filter off the
/// issuer's route, so the exemption follows the route Envoy matched, not a second path parser.
pub fn is_exempt(cfg: &Config, path: &[u8]) -> bool {
    if cfg.exempt_prefixes.is_empty() {
        return false;
    }
    let path = &path[..path
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(path.len())];
    let clean = !path.contains(&b'%')
        && !path.contains(&b'\\')
        && !path.contains(&b';')
        && !path.windows(2).any(|w| w == b"//")
        && !path
            .split(|&c| c == b'/')
            .any(|seg| seg == b"." || seg == b"..");
    clean
        && cfg
            .exempt_prefixes
            .iter()
            .any(|p| path.starts_with(p.as_bytes()))
}

fn deny(cfg: &Config, status: u32, error: Option<&str>, description: &str) -> Decision {
    let www_authenticate = match error {
        None => format!("Bearer realm=\"{}\"", cfg.realm),
        Some(e) => format!(
            "Bearer realm=\"{}\", error=\"{e}\", error_description=\"{description}\"",
            cfg.realm
        ),
    };
    let body = format!(
        "{{\"error\":\"{}\",\"error_description\":\"{description}\"}}",
        error.unwrap_or("unauthorized")
    );
    Decision::Deny(Denial {
        status,
        www_authenticate,
        body,
    })
}

/// 400 `invalid_request`: the credentials are not one well-formed bearer token.
fn bad_request(cfg: &Config, description: &str) -> (Decision, Outcome, Option<VerifyError>) {
    (
        deny(cfg, 400, Some("invalid_request"), description),
        Outcome::Malformed,
        None,
    )
}

fn identity_headers(t: &token::TokenBody) -> Vec<(&'static str, String)> {
    let id = &t.identity;
    let mut h = Vec::with_capacity(IDENTITY_HEADERS.len());
    h.push(("x-auth-client", enc(&t.client)));
    h.push(("x-auth-subject-kind", id.kind.as_str().to_owned()));
    if !id.subject.is_empty() {
        h.push(("x-auth-subject", enc(&id.subject)));
    } else if id.kind == SubjectKind::Client {
        h.push(("x-auth-subject", enc(&t.client)));
    }
    if !id.roles.is_empty() {
        h.push((
            "x-auth-roles",
            id.roles
                .iter()
                .map(|r| enc(r))
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    if !id.claims.is_empty() {
        let claims: Vec<_> = id
            .claims
            .iter()
            .map(|c| format!("{}={}", enc(&c.typ), enc(&c.value)))
            .collect();
        h.push(("x-auth-claims", claims.join(",")));
    }
    h.push(("x-auth-token-id", t.jti_hex()));
    h.push(("x-auth-expires", t.exp.to_string()));
    h
}

/// Decides a request from its `:path`, its headers (names lower case, as Envoy gives them;
/// values as raw bytes), the verification state and the time in seconds since the Unix epoch.
///
/// Returns the decision, its outcome, and for failed verification the detailed reason (for logs).
pub fn decide<'a>(
    cfg: &Config,
    state: &EdgeState,
    path: &[u8],
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    now: u64,
) -> (Decision, Outcome, Option<VerifyError>) {
    if is_exempt(cfg, path) {
        return (Decision::Exempt, Outcome::Exempt, None);
    }
    if state.unusable(cfg.edge_sync.as_ref(), now) {
        let d = deny(
            cfg,
            503,
            Some("temporarily_unavailable"),
            "tokens cannot be verified at the moment",
        );
        return (d, Outcome::Unavailable, None);
    }
    let mut primary: Option<&str> = None;
    let mut alternative: Option<&str> = None;
    for (name, value) in headers {
        let slot = if name.eq_ignore_ascii_case("authorization") {
            &mut primary
        } else if name.eq_ignore_ascii_case(&cfg.alternative_header) {
            &mut alternative
        } else {
            continue;
        };
        // Proxies join repeated headers with commas (Envoy does for HTTP/2), and a b64token never
        // holds one, so each comma-separated element counts as a header value of its own.
        for element in value
            .split(|&c| c == b',')
            .map(trim_ows)
            .filter(|e| !e.is_empty())
        {
            match parse_bearer(element) {
                Bearer::OtherScheme => {}
                Bearer::Bad => {
                    return bad_request(cfg, "malformed Bearer credentials");
                }
                Bearer::Token(t) => {
                    if slot.is_some() {
                        return bad_request(cfg, "more than one access token");
                    }
                    *slot = Some(t);
                }
            }
        }
    }
    let token = match (primary, alternative) {
        (Some(a), Some(b)) if a != b => {
            return bad_request(cfg, "more than one access token");
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => {
            return (
                deny(cfg, 401, None, "a bearer token is required"),
                Outcome::Missing,
                None,
            )
        }
    };
    let verified = token::verify(&state.ring, token, now, cfg.clock_skew).and_then(|v| {
        let body = v.body();
        if body.exp.saturating_sub(body.iat) > state.max_lifetime {
            Err(VerifyError::LifetimeTooLong)
        } else {
            Ok(v)
        }
    });
    match verified {
        Ok(v) if state.revoked.covers(v.body()) => (
            deny(
                cfg,
                401,
                Some("invalid_token"),
                "the access token was revoked",
            ),
            Outcome::Revoked,
            None,
        ),
        Ok(v) => (
            Decision::Allow(identity_headers(v.body())),
            Outcome::Allowed,
            None,
        ),
        Err(e) => {
            let (outcome, description) = match e {
                VerifyError::Expired => (Outcome::Expired, "the access token expired"),
                VerifyError::Malformed | VerifyError::UnknownVersion => {
                    (Outcome::Malformed, "the access token is invalid")
                }
                _ => (Outcome::Invalid, "the access token is invalid"),
            };
            (
                deny(cfg, 401, Some("invalid_token"), description),
                outcome,
                Some(e),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use shared::token::{Claim, Identity, TokenBody};
    use shared::Key;

    const SECRET: [u8; 32] = [7; 32];

    fn cfg() -> Config {
        cfg_with(r#","exempt_prefixes":["/apiv2/oauth/"]"#)
    }

    fn cfg_with(extra: &str) -> Config {
        use base64::Engine as _;
        let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
        Config::parse(format!(r#"{{"keys":[{{"kid":3,"secret":"{s}"}}]{extra}}}"#).as_bytes())
            .unwrap()
    }

    fn mint(kind: SubjectKind, subject: &str, exp: u64) -> String {
        let body = TokenBody {
            kid: 3,
            jti: [0xab; 16],
            iat: 1_000,
            exp,
            client: "app".into(),
            identity: Identity {
                kind,
                subject: subject.into(),
                roles: if kind == SubjectKind::Client {
                    vec![]
                } else {
                    vec!["editor".into(), "viewer".into()]
                },
                claims: if kind == SubjectKind::Client {
                    vec![]
                } else {
                    vec![Claim {
                        typ: "email".into(),
                        value: "z@x.y".into(),
                    }]
                },
            },
        };
        token::mint(&Key::new(3, SECRET), &body).unwrap()
    }

    fn run(path: &str, headers: &[(&str, &str)], now: u64) -> (Decision, Outcome) {
        let cfg = cfg();
        let (d, o, _) = decide(
            &cfg,
            &EdgeState::new(&cfg, now),
            path.as_bytes(),
            headers.iter().map(|(n, v)| (*n, v.as_bytes())),
            now,
        );
        (d, o)
    }

    fn denial(d: Decision) -> Denial {
        match d {
            Decision::Deny(x) => x,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn valid_tokens_set_identity_headers() {
        let t = mint(SubjectKind::User, "Zoë Doe", 2_000);
        for (name, scheme) in [
            ("authorization", "Bearer"),
            ("authorization", "bearer"),
            ("serviceauthorization", "BEARER"),
        ] {
            let v = format!("{scheme}   {t}");
            let (d, o) = run("/apiv2/MediaService/Find", &[(name, &v)], 1_500);
            assert_eq!(o, Outcome::Allowed);
            let Decision::Allow(h) = d else { panic!() };
            let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
            assert_eq!(get("x-auth-client"), Some("app"));
            assert_eq!(get("x-auth-subject-kind"), Some("user"));
            assert_eq!(get("x-auth-subject"), Some("Zo%C3%AB%20Doe"));
            assert_eq!(get("x-auth-roles"), Some("editor,viewer"));
            assert_eq!(get("x-auth-claims"), Some("email=z@x.y"));
            assert_eq!(
                get("x-auth-token-id"),
                Some("abababababababababababababababab")
            );
            assert_eq!(get("x-auth-expires"), Some("2000"));
        }
        let c = mint(SubjectKind::Client, "", 2_000);
        let Decision::Allow(h) = run(
            "/apiv2/x",
            &[("authorization", &format!("Bearer {c}"))],
            1_500,
        )
        .0
        else {
            panic!()
        };
        assert!(
            h.contains(&("x-auth-subject", "app".into()))
                && h.contains(&("x-auth-subject-kind", "client".into()))
        );
        assert!(!h.iter().any(|(n, _)| *n == "x-auth-roles"));
    }

    #[test]
    fn missing_token_is_401_without_error_code() {
        for headers in [
            vec![],
            vec![("authorization", "Basic YTpi")],
            vec![("authorization", "Bearerx abc")],
        ] {
            let (d, o) = run("/apiv2/MediaService/Find", &headers, 1_500);
            assert_eq!(o, Outcome::Missing);
            let d = denial(d);
            assert_eq!(
                (d.status, d.www_authenticate.as_str()),
                (401, "Bearer realm=\"media\"")
            );
        }
    }

    #[test]
    fn bad_tokens_are_401_invalid_token() {
        let t = mint(SubjectKind::User, "u", 2_000);
        let forged = format!("{}A", &t[..t.len() - 1]);
        let other_key = {
            let body = token::inspect(&t).unwrap();
            token::mint(&Key::new(3, [9; 32]), &body).unwrap()
        };
        let cases = [
            ("garbage", Outcome::Malformed),
            ("mmat9.AAAA.AAAA", Outcome::Malformed),
            (forged.as_str(), Outcome::Invalid),
            (other_key.as_str(), Outcome::Invalid),
        ];
        for (token, outcome) in cases {
            let (d, o) = run(
                "/apiv2/a",
                &[("authorization", &format!("Bearer {token}"))],
                1_500,
            );
            assert_eq!(o, outcome, "{token}");
            let d = denial(d);
            assert_eq!(d.status, 401);
            assert!(
                d.www_authenticate.contains("error=\"invalid_token\""),
                "{}",
                d.www_authenticate
            );
            assert!(d.body.contains("\"error\":\"invalid_token\""));
        }
        let (d, o) = run(
            "/apiv2/a",
            &[("authorization", &format!("Bearer {t}"))],
            2_030,
        );
        assert_eq!(o, Outcome::Expired);
        assert!(denial(d).www_authenticate.contains("expired"));
        assert_eq!(
            run(
                "/apiv2/a",
                &[("authorization", &format!("Bearer {t}"))],
                2_029
            )
            .1,
            Outcome::Allowed,
            "30 s skew"
        );
    }

    #[test]
    fn two_tokens_or_malformed_bearer_are_400() {
        let a = format!("Bearer {}", mint(SubjectKind::User, "a", 2_000));
        let b = format!("Bearer {}", mint(SubjectKind::User, "b", 2_000));
        for headers in [
            vec![("authorization", a.as_str()), ("authorization", a.as_str())],
            vec![
                ("authorization", a.as_str()),
                ("serviceauthorization", b.as_str()),
            ],
            vec![
                ("serviceauthorization", a.as_str()),
                ("serviceauthorization", b.as_str()),
            ],
            vec![("authorization", "Bearer")],
            vec![("authorization", "Bearer ")],
            vec![("authorization", "Bearer a b")],
            vec![("authorization", "Bearer x/y z")],
        ] {
            let (d, o) = run("/apiv2/a", &headers, 1_500);
            assert_eq!(o, Outcome::Malformed, "{headers:?}");
            let d = denial(d);
            assert_eq!(d.status, 400);
            assert!(d.www_authenticate.contains("error=\"invalid_request\""));
        }
        // Repeated headers joined by a proxy are still two tokens.
        let joined = format!("{a}, {b}");
        let d = denial(run("/apiv2/a", &[("authorization", &joined)], 1_500).0);
        assert!(
            d.www_authenticate.contains("more than one access token"),
            "{}",
            d.www_authenticate
        );
        // The same token in both headers is one token.
        assert_eq!(
            run(
                "/apiv2/a",
                &[("authorization", &a), ("serviceauthorization", &a)],
                1_500
            )
            .1,
            Outcome::Allowed
        );
        // A non-bearer Authorization does not hide the alternative header.
        assert_eq!(
            run(
                "/apiv2/a",
                &[
                    ("authorization", "Basic YTpi"),
                    ("serviceauthorization", &a)
                ],
                1_500
            )
            .1,
            Outcome::Allowed
        );
    }

    #[test]
    fn exemptions_are_strict() {
        for p in ["/apiv2/oauth/token", "/apiv2/oauth/token?x=1"] {
            assert_eq!(run(p, &[], 0).1, Outcome::Exempt, "{p}");
        }
        for p in [
            "/apiv2/oauth",
            "/apiv2/oauth/../MediaService/Find",
            "/apiv2/oauth/%2e%2e/x",
            "/apiv2//oauth/x",
            "/apiv2/oauth/./x",
            "/APIV2/oauth/token",
            "/apiv2/oauth\\x",
            "/apiv2/oauth/..;/MediaService/Find",
            "/apiv2/oauth/.;x/MediaService/Find",
            "/apiv2/oauth/token;jsessionid=1",
            "",
            "*",
        ] {
            assert_eq!(
                run(p, &[], 0).1,
                Outcome::Missing,
                "{p} must stay protected"
            );
        }
    }

    #[test]
    fn nothing_is_exempt_by_default() {
        let cfg = cfg_with("");
        for p in ["/apiv2/oauth/token", "/apiv2/oauth/anything", "/"] {
            let (_, o, _) = decide(&cfg, &EdgeState::new(&cfg, 0), p.as_bytes(), [], 0);
            assert_eq!(o, Outcome::Missing, "{p}");
        }
    }

    #[test]
    fn tokens_claiming_more_than_the_maximum_lifetime_are_refused() {
        let cfg = cfg_with(r#","max_token_lifetime_seconds":600"#);
        let check = |exp: u64| {
            let t = format!("Bearer {}", mint(SubjectKind::User, "u", exp));
            decide(
                &cfg,
                &EdgeState::new(&cfg, 0),
                b"/apiv2/a",
                [("authorization", t.as_bytes())],
                1_200,
            )
        };
        // iat is 1,000: a lifetime of exactly 600 s passes, one second more does not.
        assert_eq!(check(1_600).1, Outcome::Allowed);
        let (d, o, reason) = check(1_601);
        assert_eq!(o, Outcome::Invalid);
        assert_eq!(reason, Some(VerifyError::LifetimeTooLong));
        assert!(denial(d).www_authenticate.contains("invalid_token"));
        // Ten years.
        assert_eq!(check(1_000 + 10 * 365 * 86_400).1, Outcome::Invalid);
    }

    proptest! {
        #[test]
        fn never_panics_and_never_allows_without_a_valid_token(
            path in "\\PC{0,40}",
            headers in proptest::collection::vec(("authorization|serviceauthorization|x-auth-subject|other", proptest::collection::vec(any::<u8>(), 0..80)), 0..6),
        ) {
            let cfg = cfg();
            let (d, o, _) = decide(&cfg, &EdgeState::new(&cfg, 0), path.as_bytes(), headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())), 1_500);
            prop_assert!(!matches!(d, Decision::Allow(_)));
            prop_assert!(o != Outcome::Allowed);
        }
    }
}
