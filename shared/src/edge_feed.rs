//! The edge feed's answer as it travels (`GET /apiv2/oauth/edge`, `docs/issuer.md`): the issuer
//! serializes these types, the Envoy filter deserializes them. Defined once so both sides agree
//! on the field names and on which fields are left out.
//!
//! The JSON is an object whose fields are written in alphabetical order (the order they are
//! declared in here); optional fields are left out when absent (`cursor_stamp`, `keys`,
//! `max_token_lifetime_seconds`) or false (`full`, `more`), and read as absent or false when
//! missing. Unknown fields of the answer and of its revocations are ignored (an issuer may add
//! some); a key with an unknown field is refused.
//!
//! These types check only the JSON's shape. What an edge accepts (the cursor's order, the ranges
//! of the numbers, the keys' count) is the reader's to check: the filter's `edge::parse_answer`.

use crate::key::{Key, KEY_LEN};
use crate::revocation::{parse_hex, parse_jti, Revocation, Revoked, FAMILY_TAG_LEN};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use core::fmt;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The request header in which an edge's poll names the Envoy node it runs in (Envoy's
/// `node.id`), so the issuer can list which edge holds what (`issuer edges`).
pub const NODE_HEADER: &str = "mms-edge-node";

/// The request header in which an edge's poll names its VM: each Envoy worker runs a VM of its
/// own, each holding its own keys and revocations.
pub const VM_HEADER: &str = "mms-edge-vm";

/// Request headers that say a proxy relayed the request, lower case: RFC 7239's `Forwarded`,
/// the de facto `X-Forwarded-*`, RFC 9110's `Via`, the client address headers of nginx
/// (`X-Real-IP`), of other proxies and CDNs (`X-Client-IP`, `True-Client-IP`,
/// `CF-Connecting-IP`), and Envoy's own (`X-Envoy-External-Address`, `x-envoy-internal`).
///
/// The issuer refuses an edge feed request that carries any of them, whatever its peer: a proxy
/// on the issuer's host would make everyone beyond it a loopback peer. Envoy's HTTP client, which
/// the filters poll with, adds `x-envoy-internal` (and, for a native module, `X-Forwarded-For`):
/// the shipped configurations poll through a cluster of their own (`issuer_feed`) that strips
/// both. The tests send each of these to the feed.
pub const RELAY_HEADERS: [&str; 14] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-client-cert",
    "via",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "x-envoy-external-address",
    "x-envoy-internal",
];

/// The longest a poll may be held until there is news (`wait=S`), in seconds: the most a filter
/// asks (`wait_seconds`) and the most an issuer may be set to hold one
/// (`--feed-max-wait-seconds`).
pub const MAX_WAIT_SECONDS: u64 = 300;

/// Longest node or VM name a poll may give, in bytes; each is printable ASCII.
pub const MAX_EDGE_NAME: usize = 128;

/// True for a node or VM name a poll may give: 1 to [`MAX_EDGE_NAME`] bytes of printable ASCII.
pub fn is_edge_name(name: &str) -> bool {
    (1..=MAX_EDGE_NAME).contains(&name.len()) && name.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// The node name of an edge whose Envoy has no `node.id` (and none configured): shared by every
/// such Envoy, so nothing can be told of one VM from another's there.
pub const UNKNOWN_NODE: &str = "unknown";

/// The name of a VM ([`VM_HEADER`]): 12 hex digits, the low 40 bits of the nanosecond it was
/// configured first, then its number among the VMs its Envoy process started (low 8 bits). Envoy
/// names no worker, and two workers' VMs can start in the same tick of the clock: the number tells
/// them apart. A restarted Envoy numbers its VMs from 0 again.
pub fn vm_name(started_nanos: u128, ordinal: u32) -> String {
    format!(
        "{:010x}{:02x}",
        started_nanos & 0xff_ffff_ffff,
        ordinal & 0xff
    )
}

/// The number of the VM named `vm` among the VMs of its Envoy process ([`vm_name`]), if `vm` is
/// such a name.
pub fn vm_ordinal(vm: &str) -> Option<u8> {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (vm.len() == 12 && hex(vm))
        .then(|| u8::from_str_radix(&vm[10..], 16).ok())
        .flatten()
}

/// Longest user name or client id a revocation of the feed may name, in bytes.
pub const MAX_NAME: usize = 256;

fn is_false(b: &bool) -> bool {
    !*b
}

/// One answer of the edge feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedAnswer {
    /// The number of the last revocation this answer brings the edge to: what it sends back as
    /// `since`.
    pub cursor: u64,
    /// The stamp of the entry numbered `cursor`, 16 lower-case hex digits
    /// ([`crate::revocation::stamp_hex`]), if the issuer knows it: sent back as `since=N.STAMP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor_stamp: Option<String>,
    /// True for a full snapshot: every revocation in force, from the start of the store's
    /// history (the edge asked without a cursor, or with one of another history).
    #[serde(default, skip_serializing_if = "is_false")]
    pub full: bool,
    /// The key ring, sent only when the edge's `keys` version is not the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<FeedKey>>,
    /// The version of the key ring and the access token lifetime: the edge sends it back as
    /// `keys`.
    pub keys_version: String,
    /// The issuer's access token lifetime, in seconds; sent with the keys, and only with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_token_lifetime_seconds: Option<u64>,
    /// True if more revocations are waiting: the edge asks again at once.
    #[serde(default, skip_serializing_if = "is_false")]
    pub more: bool,
    /// The revocations after the edge's cursor, in order of their numbers.
    pub revoked: Vec<FeedEntry>,
    /// The longest wait this issuer grants (`wait=S`, in seconds), in every answer of an issuer
    /// that holds requests until there is news. An edge asks to wait only when the last answer
    /// offered it, so a new edge polls an older issuer as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_max_seconds: Option<u64>,
    /// True when the request asked to wait and was answered at once because the issuer holds as
    /// many waiting requests as it allows: the edge asks again a poll interval later.
    #[serde(default, skip_serializing_if = "is_false")]
    pub busy: bool,
}

/// A revocation as the feed writes it: its numbers and `kind`, with the one field its kind
/// names (`jti` for `token`, `name` for `user`, `id` for `client`, `tag` for `family`). Written
/// field by field rather than with serde's `flatten` over [`Revoked`], which costs the filter's
/// module 50 KB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedEntry {
    /// When it was recorded (seconds since the epoch).
    pub at: u64,
    /// The client id, for `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The token id in 32 hex digits, for `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// `token`, `user`, `client` or `family`.
    pub kind: String,
    /// The user name, for `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its number.
    pub seq: u64,
    /// The family tag in 16 hex digits, for `family`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// When every token it covers has expired (seconds since the epoch).
    pub until: u64,
}

impl From<&Revocation> for FeedEntry {
    fn from(r: &Revocation) -> Self {
        let mut e = Self {
            at: r.at,
            id: None,
            jti: None,
            kind: String::new(),
            name: None,
            seq: r.seq,
            tag: None,
            until: r.until,
        };
        let kind = match &r.what {
            Revoked::Token { jti } => {
                e.jti = Some(jti.clone());
                "token"
            }
            Revoked::User { name } => {
                e.name = Some(name.clone());
                "user"
            }
            Revoked::Client { id } => {
                e.id = Some(id.clone());
                "client"
            }
            Revoked::Family { tag } => {
                e.tag = Some(tag.clone());
                "family"
            }
        };
        e.kind = kind.into();
        e
    }
}

impl FeedEntry {
    /// What the entry revokes, if it names exactly one thing of its kind, well formed: a token
    /// id of 32 hex digits, a user name or client id of 1 to [`MAX_NAME`] bytes, a family tag of
    /// 16 hex digits. `None` for anything else (another kind, a field of another kind beside).
    pub fn revoked(self) -> Option<Revoked> {
        let name_ok = |n: &String| !n.is_empty() && n.len() <= MAX_NAME;
        let tag_ok = |t: &String| parse_hex::<FAMILY_TAG_LEN>(t).is_some();
        match (self.kind.as_str(), self.jti, self.name, self.id, self.tag) {
            ("token", Some(jti), None, None, None) if parse_jti(&jti).is_some() => {
                Some(Revoked::Token { jti })
            }
            ("user", None, Some(name), None, None) if name_ok(&name) => {
                Some(Revoked::User { name })
            }
            ("client", None, None, Some(id), None) if name_ok(&id) => Some(Revoked::Client { id }),
            ("family", None, None, None, Some(tag)) if tag_ok(&tag) => {
                Some(Revoked::Family { tag })
            }
            _ => None,
        }
    }
}

/// A key as the feed (and the filter's configuration) writes it: its id and its 32 secret bytes
/// in unpadded base64url. The secret is wiped on drop and never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedKey {
    /// The key id.
    pub kid: u32,
    /// The secret, unpadded base64url.
    pub secret: Zeroizing<String>,
}

/// Why a [`FeedKey`] is no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadSecret {
    /// The secret is not unpadded base64url.
    Encoding,
    /// The secret is not [`KEY_LEN`] bytes.
    Length,
}

impl FeedKey {
    /// The key as the feed writes it.
    pub fn new(key: &Key) -> Self {
        Self {
            kid: key.id(),
            secret: Zeroizing::new(URL_SAFE_NO_PAD.encode(key.secret())),
        }
    }

    /// The key it writes.
    pub fn key(&self) -> Result<Key, BadSecret> {
        let secret = URL_SAFE_NO_PAD
            .decode(self.secret.as_bytes())
            .map(Zeroizing::new)
            .map_err(|_| BadSecret::Encoding)?;
        if secret.len() != KEY_LEN {
            return Err(BadSecret::Length);
        }
        Key::from_slice(self.kid, &secret).ok_or(BadSecret::Length)
    }
}

impl fmt::Debug for FeedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedKey")
            .field("kid", &self.kid)
            .field("secret", &"[redacted]")
            .finish()
    }
}

#[cfg(test)]
mod tests;
