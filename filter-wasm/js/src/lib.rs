//! Token inspection and DPoP proofs for browsers and Node (built with wasm-bindgen).
//!
//! Web and Node clients learn when their token expires, whom it represents and whether it is
//! bound to a key, to refresh ahead of time and show the signed-in identity. Inspection needs no
//! key and proves nothing: anyone can make a token that inspects well. Only the issuer, the filter
//! and introspection verify. Clients of bound (DPoP) tokens make their proofs with [`dpop`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use js_sys::{Array, Date, Object, Reflect};
use shared::token::{self, TokenBody};
use shared::VerifyError;
use wasm_bindgen::prelude::*;

pub mod dpop;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** Whom a token speaks for. */
export type SubjectKind = "user" | "client" | "impersonation";

/** One `type=value` claim. */
export interface Claim {
  type: string;
  value: string;
}

/** What a token says. Not verified: inspection needs no key and cannot detect forgery. */
export interface TokenInfo {
  /** Format version: 1 for `mmat1.` (bearer) tokens, 2 for `mmat2.` (bound) tokens. */
  version: number;
  /** Whether the token is bound to a key (DPoP): it is then sent as `Authorization: DPoP
   * <token>` with a proof by that key, never as `Bearer`. */
  bound: boolean;
  /** The thumbprint of the key a bound token is bound to (base64url, as `DpopKey.thumbprint`);
   * null for a bearer token. */
  jkt: string | null;
  /** Id of the key that signed it. */
  keyId: number;
  /** Random token id, 32 lower-case hex digits. */
  tokenId: string;
  /** Issue time. */
  issuedAt: Date;
  /** Expiry time. */
  expiresAt: Date;
  /** Seconds until expiry at the time of inspection; 0 once expired. */
  secondsLeft: number;
  /** True once the expiry has passed at the time of inspection. */
  expired: boolean;
  /** The client the token was issued to (the actor when impersonating). */
  client: string;
  /** User, the client itself, or impersonation by the client. */
  subjectKind: SubjectKind;
  /** User name; null for client tokens and claim-only impersonation. */
  subject: string | null;
  /** Roles of the subject. */
  roles: string[];
  /** Claims of the subject. */
  claims: Claim[];
  /** A token from token exchange: the clients acting for the subject, the current actor
   * (`client`) first, each earlier one after it; null for a token nobody acts through. */
  actors: string[] | null;
  /** A token from token exchange: the client the subject's first token was issued to; null
   * otherwise. */
  actorOrigin: string | null;
}
"#;

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(obj, &JsValue::from_str(key), &value.into());
}

fn date(seconds: u64) -> Date {
    Date::new(&JsValue::from_f64(seconds as f64 * 1000.0))
}

fn info(b: &TokenBody, now_ms: f64) -> Object {
    let o = Object::new();
    let id = &b.identity;
    let exp_ms = b.exp as f64 * 1000.0;
    let left = ((exp_ms - now_ms) / 1000.0).floor().max(0.0);
    let version = if b.cnf.is_some() {
        token::BOUND_VERSION
    } else {
        token::VERSION
    };
    set(&o, "version", version);
    set(&o, "bound", b.cnf.is_some());
    set(
        &o,
        "jkt",
        b.cnf
            .map_or(JsValue::NULL, |c| URL_SAFE_NO_PAD.encode(c).into()),
    );
    set(&o, "keyId", b.kid);
    set(&o, "tokenId", b.jti_hex());
    set(&o, "issuedAt", date(b.iat));
    set(&o, "expiresAt", date(b.exp));
    set(&o, "secondsLeft", left);
    set(&o, "expired", now_ms >= exp_ms);
    set(&o, "client", b.client.as_str());
    set(&o, "subjectKind", id.kind.as_str());
    set(
        &o,
        "subject",
        if id.subject.is_empty() {
            JsValue::NULL
        } else {
            JsValue::from_str(&id.subject)
        },
    );
    set(
        &o,
        "roles",
        id.roles
            .iter()
            .map(|r| JsValue::from_str(r))
            .collect::<Array>(),
    );
    let claims: Array = id
        .claims
        .iter()
        .map(|c| {
            let claim = Object::new();
            set(&claim, "type", c.typ.as_str());
            set(&claim, "value", c.value.as_str());
            JsValue::from(claim)
        })
        .collect();
    set(&o, "claims", claims);
    let (actors, origin) = match &b.act {
        Some(chain) => (
            chain
                .actors
                .iter()
                .map(|a| JsValue::from_str(a))
                .collect::<Array>()
                .into(),
            JsValue::from_str(&chain.origin),
        ),
        None => (JsValue::NULL, JsValue::NULL),
    };
    set(&o, "actors", actors);
    set(&o, "actorOrigin", origin);
    o
}

/// Reads a token without any key. `now` (default: the current time) is the moment `secondsLeft`
/// and `expired` are computed for. Throws an `Error` with a clear message for anything that is not
/// exactly a well-formed `mmat1` or `mmat2` token (surrounding whitespace included, as every implementation of
/// the format refuses it).
#[wasm_bindgen(js_name = inspectToken, unchecked_return_type = "TokenInfo")]
pub fn inspect_token(token: &str, now: Option<Date>) -> Result<JsValue, JsError> {
    let now_ms = now.map_or_else(Date::now, |d| d.get_time());
    if now_ms.is_nan() {
        return Err(JsError::new("inspectToken: `now` is an invalid Date"));
    }
    match token::inspect(token) {
        Ok(body) => Ok(info(&body, now_ms).into()),
        Err(VerifyError::UnknownVersion) => Err(JsError::new(&format!(
            "inspectToken: unsupported token version (this module reads {} and {})",
            token::PREFIX.trim_end_matches('.'),
            token::BOUND_PREFIX.trim_end_matches('.')
        ))),
        Err(_) if token.is_empty() => Err(JsError::new("inspectToken: the token is empty")),
        Err(_) => Err(JsError::new(&format!(
            "inspectToken: malformed token (expected {}<body>.<tag> or {}<body>.<tag>, at most {} characters)",
            token::PREFIX,
            token::BOUND_PREFIX,
            token::MAX_TOKEN_LEN
        ))),
    }
}
