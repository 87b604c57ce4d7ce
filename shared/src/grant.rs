//! The token endpoint's form body, parsed into a typed grant request.
//!
//! RFC 6749 rules applied here: parameters without a value count as omitted (section 3.1), a
//! parameter may not repeat (section 3.1), unknown parameters are ignored (section 3.2), and a
//! client uses one authentication method only (section 2.3), so `client_secret` in the body is
//! refused because the issuer takes HTTP Basic only.

use crate::claims::{parse_impersonate_claims, parse_roles};
use crate::error::{ErrorCode, RequestError};
use crate::token::Claim;
use core::fmt;
use std::collections::HashSet;
use zeroize::Zeroizing;

/// Most parameters one request may carry.
pub const MAX_PARAMS: usize = 64;

/// The `grant_type` of token exchange (RFC 8693 section 2.1).
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// The one token type token exchange takes and issues: an access token (RFC 8693 section 3).
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Who a client-credentials token is issued for, when the client impersonates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Impersonation {
    /// `impersonate_claims` (supersedes the other two parameters when present).
    Claims(Vec<Claim>),
    /// The obsolete `impersonate_as` (a user name) and/or `roles`.
    Legacy {
        /// `impersonate_as`, if given.
        user: Option<String>,
        /// `roles`, possibly empty.
        roles: Vec<String>,
    },
}

impl Impersonation {
    /// The claim types this impersonation asserts (none for the legacy form).
    pub fn claim_types(&self) -> impl Iterator<Item = &str> {
        let claims: &[Claim] = match self {
            Self::Claims(c) => c,
            Self::Legacy { .. } => &[],
        };
        claims.iter().map(|c| c.typ.as_str())
    }
}

/// A grant request, validated.
pub enum Grant {
    /// `grant_type=password`.
    Password {
        /// The resource owner's user name.
        username: String,
        /// The resource owner's password.
        password: Zeroizing<String>,
    },
    /// `grant_type=refresh_token`.
    RefreshToken {
        /// The refresh token presented.
        refresh_token: Zeroizing<String>,
    },
    /// `grant_type=client_credentials`.
    ClientCredentials {
        /// The impersonation asked for, if any.
        impersonation: Option<Impersonation>,
    },
    /// `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` (RFC 8693).
    TokenExchange {
        /// `subject_token`: the access token whose subject the new token speaks for.
        subject_token: Zeroizing<String>,
        /// `actor_token`: the acting client's own access token, if sent.
        actor_token: Option<Zeroizing<String>>,
        /// `audience` or `resource` (both only if equal), if sent.
        audience: Option<String>,
    },
}

impl Grant {
    /// The `grant_type` value of this grant.
    pub fn grant_type(&self) -> &'static str {
        match self {
            Self::Password { .. } => "password",
            Self::RefreshToken { .. } => "refresh_token",
            Self::ClientCredentials { .. } => "client_credentials",
            Self::TokenExchange { .. } => "token_exchange",
        }
    }
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"[redacted]")
                .finish(),
            Self::RefreshToken { .. } => f
                .debug_struct("RefreshToken")
                .field("refresh_token", &"[redacted]")
                .finish(),
            Self::ClientCredentials { impersonation } => f
                .debug_struct("ClientCredentials")
                .field("impersonation", impersonation)
                .finish(),
            Self::TokenExchange {
                actor_token,
                audience,
                ..
            } => f
                .debug_struct("TokenExchange")
                .field("subject_token", &"[redacted]")
                .field("actor_token", &actor_token.as_ref().map(|_| "[redacted]"))
                .field("audience", audience)
                .finish(),
        }
    }
}

/// A parsed token request: the grant, and the `client_id` parameter if the client sent one
/// (the issuer checks that it names the authenticated client).
#[derive(Debug)]
pub struct TokenRequest {
    /// The grant asked for.
    pub grant: Grant,
    /// `client_id` from the body, if present.
    pub client_id: Option<String>,
}

const KNOWN: [&str; 19] = [
    "grant_type",
    "username",
    "password",
    "refresh_token",
    "impersonate_claims",
    "impersonate_as",
    "roles",
    "scope",
    "client_id",
    "client_secret",
    "token",
    "token_type_hint",
    "subject_token",
    "subject_token_type",
    "actor_token",
    "actor_token_type",
    "requested_token_type",
    "audience",
    "resource",
];

fn repeated(name: &'static str) -> RequestError {
    RequestError::invalid_request(match name {
        "grant_type" => "parameter grant_type is repeated",
        "username" => "parameter username is repeated",
        "password" => "parameter password is repeated",
        "refresh_token" => "parameter refresh_token is repeated",
        "impersonate_claims" => "parameter impersonate_claims is repeated",
        "impersonate_as" => "parameter impersonate_as is repeated",
        "roles" => "parameter roles is repeated",
        "scope" => "parameter scope is repeated",
        "client_id" => "parameter client_id is repeated",
        "token" => "parameter token is repeated",
        "token_type_hint" => "parameter token_type_hint is repeated",
        "subject_token" => "parameter subject_token is repeated",
        "subject_token_type" => "parameter subject_token_type is repeated",
        "actor_token" => "parameter actor_token is repeated",
        "actor_token_type" => "parameter actor_token_type is repeated",
        "requested_token_type" => "parameter requested_token_type is repeated",
        "audience" => "parameter audience is repeated: one audience per exchange",
        "resource" => "parameter resource is repeated: one resource per exchange",
        _ => "a parameter is repeated",
    })
}

/// The recognised parameters of one body, each at most once, empty values dropped.
#[derive(Default)]
struct Params {
    values: [Option<Zeroizing<String>>; KNOWN.len()],
}

impl Params {
    fn get(&self, name: &str) -> Option<&str> {
        let i = KNOWN.iter().position(|k| *k == name)?;
        self.values[i].as_deref().map(String::as_str)
    }

    fn take(&mut self, name: &str) -> Option<Zeroizing<String>> {
        let i = KNOWN.iter().position(|k| *k == name)?;
        self.values[i].take()
    }

    fn require(
        &mut self,
        name: &'static str,
        missing: &'static str,
    ) -> Result<Zeroizing<String>, RequestError> {
        self.take(name)
            .ok_or(RequestError::invalid_request(missing))
    }
}

fn parse_params(body: &[u8]) -> Result<Params, RequestError> {
    let mut params = Params::default();
    let mut seen_unknown = HashSet::new();
    let mut seen_known = [false; KNOWN.len()];
    for (count, (name, value)) in form_urlencoded::parse(body).enumerate() {
        if count == MAX_PARAMS {
            return Err(RequestError::invalid_request("too many parameters"));
        }
        // form_urlencoded replaces invalid UTF-8 with U+FFFD; a body must be UTF-8.
        if name.contains('\u{FFFD}') || value.contains('\u{FFFD}') {
            return Err(RequestError::invalid_request("parameters must be UTF-8"));
        }
        let value = Zeroizing::new(value.into_owned());
        match KNOWN.iter().position(|k| *k == name) {
            Some(i) => {
                if seen_known[i] {
                    return Err(repeated(KNOWN[i]));
                }
                seen_known[i] = true;
                if !value.is_empty() {
                    params.values[i] = Some(value);
                }
            }
            None => {
                if !seen_unknown.insert(name.into_owned()) {
                    return Err(repeated(""));
                }
            }
        }
    }
    Ok(params)
}

/// A user name parameter (`username`, `impersonate_as`): what a token can carry as its subject.
fn user_name(value: Zeroizing<String>, what: &'static str) -> Result<String, RequestError> {
    if !crate::rules::subject_ok(&value) {
        return Err(RequestError::invalid_request(what));
    }
    Ok(value.to_string())
}

/// The parameters of token exchange (RFC 8693 section 2.1): the subject token and its type
/// (required), the actor token and its type (together or neither), the requested type (an
/// access token, if named), and one target, `audience` or `resource` (if both, the same).
fn token_exchange(p: &mut Params) -> Result<Grant, RequestError> {
    let subject_token = p.require("subject_token", "missing parameter subject_token")?;
    let is_access = |p: &Params, name| p.get(name).map(|t| t == ACCESS_TOKEN_TYPE);
    match is_access(p, "subject_token_type") {
        None => {
            return Err(RequestError::invalid_request(
                "missing parameter subject_token_type",
            ))
        }
        Some(false) => {
            return Err(RequestError::invalid_request(
                "subject_token_type must be urn:ietf:params:oauth:token-type:access_token",
            ))
        }
        Some(true) => {}
    }
    let actor_token = p.take("actor_token");
    match (actor_token.is_some(), is_access(p, "actor_token_type")) {
        (true, Some(true)) | (false, None) => {}
        (true, None) => {
            return Err(RequestError::invalid_request(
                "missing parameter actor_token_type",
            ))
        }
        (false, Some(_)) => {
            return Err(RequestError::invalid_request(
                "actor_token_type without actor_token",
            ))
        }
        (true, Some(false)) => {
            return Err(RequestError::invalid_request(
                "actor_token_type must be urn:ietf:params:oauth:token-type:access_token",
            ))
        }
    }
    if is_access(p, "requested_token_type") == Some(false) {
        return Err(RequestError::invalid_request(
            "requested_token_type must be urn:ietf:params:oauth:token-type:access_token",
        ));
    }
    let audience = match (p.take("audience"), p.take("resource")) {
        (Some(a), Some(r)) if *a != *r => {
            return Err(RequestError::invalid_request(
                "audience and resource name different targets: send one",
            ))
        }
        (Some(t), _) | (None, Some(t)) => Some(t.to_string()),
        (None, None) => None,
    };
    if audience.as_ref().is_some_and(|a| !crate::rules::name_ok(a)) {
        return Err(RequestError {
            code: ErrorCode::InvalidTarget,
            description: "the audience is too long or holds control characters",
        });
    }
    Ok(Grant::TokenExchange {
        subject_token,
        actor_token,
        audience,
    })
}

/// Parses the body of a revocation (RFC 7009) or introspection (RFC 7662) request and returns its
/// required `token` parameter. `token_type_hint` is accepted and not needed: tokens say what they are.
pub fn parse_token_param(body: &[u8]) -> Result<Zeroizing<String>, RequestError> {
    let mut p = parse_params(body)?;
    if p.get("client_secret").is_some() {
        return Err(RequestError::invalid_request(
            "client credentials must be sent with HTTP Basic authentication only",
        ));
    }
    p.require("token", "missing parameter token")
}

/// Parses an `application/x-www-form-urlencoded` token request body.
pub fn parse_token_request(body: &[u8]) -> Result<TokenRequest, RequestError> {
    let mut p = parse_params(body)?;
    if p.get("client_secret").is_some() {
        return Err(RequestError::invalid_request(
            "client credentials must be sent with HTTP Basic authentication only",
        ));
    }
    let client_id = p.take("client_id").map(|v| v.to_string());
    let grant_type = p.require("grant_type", "missing parameter grant_type")?;
    let grant = match grant_type.as_str() {
        "password" => {
            let username = p.require("username", "missing parameter username")?;
            let password = p.require("password", "missing parameter password")?;
            Grant::Password {
                username: user_name(username, "username is too long or holds control characters")?,
                password,
            }
        }
        "refresh_token" => Grant::RefreshToken {
            refresh_token: p.require("refresh_token", "missing parameter refresh_token")?,
        },
        "client_credentials" => {
            let impersonation = if let Some(list) = p.get("impersonate_claims") {
                Some(Impersonation::Claims(parse_impersonate_claims(list)?))
            } else {
                let user = p
                    .take("impersonate_as")
                    .map(|u| user_name(u, "impersonate_as is too long or holds control characters"))
                    .transpose()?;
                let roles = p
                    .get("roles")
                    .map(parse_roles)
                    .transpose()?
                    .unwrap_or_default();
                (user.is_some() || !roles.is_empty())
                    .then_some(Impersonation::Legacy { user, roles })
            };
            Grant::ClientCredentials { impersonation }
        }
        TOKEN_EXCHANGE => token_exchange(&mut p)?,
        _ => {
            return Err(RequestError {
                code: ErrorCode::UnsupportedGrantType,
                description: "grant_type must be password, refresh_token, client_credentials or \
                              urn:ietf:params:oauth:grant-type:token-exchange",
            })
        }
    };
    Ok(TokenRequest { grant, client_id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> Result<TokenRequest, RequestError> {
        parse_token_request(s.as_bytes())
    }

    fn code(s: &str) -> ErrorCode {
        parse(s).unwrap_err().code
    }

    #[test]
    fn password_grant() {
        let r = parse("grant_type=password&username=al%20ice&password=p%26w+d&scope=x").unwrap();
        match r.grant {
            Grant::Password { username, password } => {
                assert_eq!(username, "al ice");
                assert_eq!(password.as_str(), "p&w d");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            code("grant_type=password&username=a"),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code("grant_type=password&username=a&password="),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn grant_type_rules() {
        assert_eq!(code(""), ErrorCode::InvalidRequest);
        assert_eq!(code("grant_type="), ErrorCode::InvalidRequest);
        assert_eq!(code("grant_type=implicit"), ErrorCode::UnsupportedGrantType);
        assert_eq!(
            code("grant_type=password&grant_type=password"),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code("grant_type=client_credentials&x=1&x=2"),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code("grant_type=client_credentials&client_secret=s"),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code("grant_type=client_credentials&a=%FF"),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn client_credentials_impersonation() {
        let imp = |s: &str| match parse(s).unwrap().grant {
            Grant::ClientCredentials { impersonation } => impersonation,
            other => panic!("{other:?}"),
        };
        assert_eq!(imp("grant_type=client_credentials"), None);
        assert_eq!(
            imp("grant_type=client_credentials&impersonate_as=bob&roles=a,%20b"),
            Some(Impersonation::Legacy {
                user: Some("bob".into()),
                roles: vec!["a".into(), "b".into()]
            })
        );
        assert_eq!(
            imp("grant_type=client_credentials&impersonate_as=bob&roles=,,&impersonate_claims=upn%3Dcarol"),
            Some(Impersonation::Claims(vec![Claim {
                typ: "upn".into(),
                value: "carol".into()
            }]))
        );
        assert_eq!(
            code("grant_type=client_credentials&impersonate_claims=nope"),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code("grant_type=client_credentials&roles=a,,b"),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn client_id_is_reported_and_refresh_requires_its_token() {
        let r = parse("grant_type=refresh_token&refresh_token=abc&client_id=app").unwrap();
        assert_eq!(r.client_id.as_deref(), Some("app"));
        assert!(matches!(r.grant, Grant::RefreshToken { .. }));
        assert_eq!(code("grant_type=refresh_token"), ErrorCode::InvalidRequest);
    }

    #[test]
    fn token_exchange_parameters() {
        let base = format!(
            "grant_type={TOKEN_EXCHANGE}&subject_token=s&subject_token_type={ACCESS_TOKEN_TYPE}"
        );
        match parse(&format!("{base}&resource=media&audience=media"))
            .unwrap()
            .grant
        {
            Grant::TokenExchange {
                subject_token,
                actor_token,
                audience,
            } => {
                assert_eq!(subject_token.as_str(), "s");
                assert!(actor_token.is_none());
                assert_eq!(audience.as_deref(), Some("media"));
            }
            other => panic!("{other:?}"),
        }
        let with_actor = format!("{base}&actor_token=a&actor_token_type={ACCESS_TOKEN_TYPE}");
        assert!(matches!(
            parse(&with_actor).unwrap().grant,
            Grant::TokenExchange {
                actor_token: Some(_),
                ..
            }
        ));
        for bad in [
            format!("grant_type={TOKEN_EXCHANGE}&subject_token_type={ACCESS_TOKEN_TYPE}"),
            format!("grant_type={TOKEN_EXCHANGE}&subject_token=s"),
            format!("grant_type={TOKEN_EXCHANGE}&subject_token=s&subject_token_type=urn:x"),
            format!("{base}&actor_token=a"),
            format!("{base}&actor_token_type={ACCESS_TOKEN_TYPE}"),
            format!("{base}&actor_token=a&actor_token_type=urn:x"),
            format!("{base}&requested_token_type=urn:ietf:params:oauth:token-type:refresh_token"),
            format!("{base}&audience=a&resource=b"),
            format!("{base}&audience=a&audience=a"),
            format!("{base}&subject_token=s"),
        ] {
            assert_eq!(code(&bad), ErrorCode::InvalidRequest, "{bad}");
        }
        assert_eq!(
            code(&format!("{base}&audience=a%0Ab")),
            ErrorCode::InvalidTarget
        );
        let r = parse(&format!("{base}&actor_token=secret-actor")).unwrap_err();
        assert!(!r.description.contains("secret"));
        let r = parse(&with_actor.replace("subject_token=s", "subject_token=hunter2")).unwrap();
        assert!(!format!("{r:?}").contains("hunter2"));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let r = parse("grant_type=password&username=a&password=hunter2").unwrap();
        assert!(!format!("{r:?}").contains("hunter2"));
        let r = parse("grant_type=refresh_token&refresh_token=rt-secret").unwrap();
        assert!(!format!("{r:?}").contains("rt-secret"));
    }

    #[test]
    fn parameter_count_is_bounded() {
        let body = (0..=MAX_PARAMS)
            .map(|i| format!("p{i}=1"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(
            code(&format!("grant_type=client_credentials&{body}")),
            ErrorCode::InvalidRequest
        );
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_token_request(&bytes);
        }

        #[test]
        fn never_panics_on_form_like_text(s in "[a-z_=&%0-9A-F+,]{0,120}") {
            let _ = parse(&s);
            let _ = parse(&format!("grant_type=client_credentials&{s}"));
        }
    }
}
