//! The audit trail's records: who changed what, when, with the values before and after
//! (`docs/operate.md`, "Audit trail"). Administrative changes and the security events the issuer
//! decides are recorded through [`super::Audit`]; `issuer audit` reads them back.
//!
//! A record never holds a secret: its values are built from the public parts of a record
//! ([`client_view`], [`user_view`]), and every field is bounded ([`AuditEvent::new`]) since
//! targets and claims may come from clients.

use super::family::Family;
use super::{ClientRecord, KeyInfo, UserRecord};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::borrow::Cow;

/// Longest actor or target kept, in characters; longer ones are cut and end in `…`.
pub const MAX_NAME_CHARS: usize = 256;
/// Longest `before` or `after` kept, in bytes of JSON; a longer value is replaced by its first
/// [`MAX_NAME_CHARS`] characters as a string ending in `…`.
pub const MAX_VALUE_BYTES: usize = 4096;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuditAction {
    /// `issuer client add`.
    #[serde(rename = "client.add")]
    ClientAdd,
    /// `issuer client activate`.
    #[serde(rename = "client.activate")]
    ClientActivate,
    /// `issuer client deactivate`.
    #[serde(rename = "client.deactivate")]
    ClientDeactivate,
    /// `issuer client remove`.
    #[serde(rename = "client.remove")]
    ClientRemove,
    /// A change of a client's settings.
    #[serde(rename = "client.update")]
    ClientUpdate,
    /// A vendor's software statement imported (`issuer client import`, registration).
    #[serde(rename = "client.import")]
    ClientImport,
    /// A vendor's revocation list applied to a client.
    #[serde(rename = "client.vendor_revoke")]
    VendorRevoke,
    /// A vendor's statement or revocation list refused.
    #[serde(rename = "client.refused")]
    VendorRefusal,
    /// `issuer user add`.
    #[serde(rename = "user.add")]
    UserAdd,
    /// `issuer user disable`.
    #[serde(rename = "user.disable")]
    UserDisable,
    /// `issuer user enable`.
    #[serde(rename = "user.enable")]
    UserEnable,
    /// `issuer user passwd`.
    #[serde(rename = "user.passwd")]
    UserPasswd,
    /// `issuer user remove`.
    #[serde(rename = "user.remove")]
    UserRemove,
    /// A change of a user's roles or claims.
    #[serde(rename = "user.update")]
    UserUpdate,
    /// `issuer keys rotate`.
    #[serde(rename = "keys.rotate")]
    KeysRotate,
    /// `issuer keys retire`.
    #[serde(rename = "keys.retire")]
    KeysRetire,
    /// `issuer keys rotate --when-edges-ready`: a key published, held until promoted.
    #[serde(rename = "keys.publish")]
    KeysPublish,
    /// `issuer keys rotate --when-edges-ready`: the held key signs, every edge holding it.
    #[serde(rename = "keys.promote")]
    KeysPromote,
    /// `issuer keys rotate-kek`.
    #[serde(rename = "keys.rotate_kek")]
    KeysRotateKek,
    /// An administrator revoked a refresh token family (a session) by its id.
    #[serde(rename = "session.revoke")]
    SessionRevoke,
    /// A rotated refresh token presented again: its family was revoked.
    #[serde(rename = "refresh.reuse")]
    RefreshReuse,
    /// A client credentials grant for an impersonated identity.
    #[serde(rename = "token.impersonate")]
    Impersonate,
    /// A token exchange (RFC 8693): a token acting for a subject.
    #[serde(rename = "token.exchange")]
    Exchange,
    /// A token exchange refused.
    #[serde(rename = "token.exchange_refused")]
    ExchangeRefused,
    /// An access token or refresh token family revoked through RFC 7009.
    #[serde(rename = "token.revoke")]
    Revoke,
    /// A password sign-in subject became blocked by the back-off.
    #[serde(rename = "login.backoff")]
    BackOff,
}

impl AuditAction {
    /// The action's name, as `issuer audit` prints it (`client.deactivate`).
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// One entry of the audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When, in seconds since the epoch.
    pub at: u64,
    /// Who: the operating-system user of an admin command, or the client of a request.
    pub actor: String,
    /// What was done ([`AuditAction`]).
    pub action: AuditAction,
    /// To what: a client id, a user name, `keys`, a token family.
    pub target: String,
    /// The value before (`null` for an addition).
    pub before: Value,
    /// The value after (`null` for a removal).
    pub after: Value,
    /// The client of the acting user's token (a change through the admin HTTP API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The source address of the request (a change through the admin HTTP API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl AuditEvent {
    /// An event, its actor, target and values cut to their bounds.
    pub fn new(
        at: u64,
        actor: &str,
        action: AuditAction,
        target: &str,
        before: Value,
        after: Value,
    ) -> Self {
        Self {
            at,
            actor: cut(actor).into_owned(),
            action,
            target: cut(target).into_owned(),
            before: bound(before),
            after: bound(after),
            client: None,
            address: None,
        }
    }

    /// This event, made through `client` from `address` (each cut to its bound).
    pub fn through(mut self, client: Option<&str>, address: Option<&str>) -> Self {
        self.client = client.map(|c| cut(c).into_owned());
        self.address = address.map(|a| cut(a).into_owned());
        self
    }

    /// The event as the store keeps it.
    pub fn encode(&self) -> EncodedEvent {
        EncodedEvent {
            at: self.at,
            text: serde_json::to_string(self).expect("an event serializes"),
        }
    }
}

/// An event as the stores keep it: its time and its JSON text, which reads back as the
/// [`AuditEvent`] it encodes. The records of tokens being issued are made straight in this form
/// ([`EncodedEvent::issued`]): on the token path an event costs one serialization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEvent {
    at: u64,
    text: String,
}

/// The fields of an [`AuditEvent`] as borrowed parts, serialized in its order and names.
#[derive(Serialize)]
struct Parts<'a, B, A> {
    at: u64,
    actor: &'a str,
    action: AuditAction,
    target: &'a str,
    before: B,
    after: A,
}

/// Room made for a token's record: an exchange's, with a chain of a few actors, fits.
const ISSUED_BYTES: usize = 512;

/// A value within [`MAX_VALUE_BYTES`] as it is, or the cut string of its text.
#[derive(Serialize)]
#[serde(untagged)]
enum Bounded<'a, A> {
    Whole(&'a A),
    Cut(Cow<'a, str>),
}

impl EncodedEvent {
    /// The record of a token issued: [`AuditEvent::new`] with `before` null and `after`, typed,
    /// serialized once and bounded as it bounds a [`Value`].
    pub fn issued<A: Serialize>(
        at: u64,
        actor: &str,
        action: AuditAction,
        target: &str,
        after: &A,
    ) -> Self {
        let (actor, target) = (cut(actor), cut(target));
        let parts = |after| Parts {
            at,
            actor: &actor,
            action,
            target: &target,
            before: (),
            after,
        };
        let mut text = Vec::with_capacity(ISSUED_BYTES);
        if serde_json::to_writer(Within(MAX_VALUE_BYTES), after).is_ok() {
            serde_json::to_writer(&mut text, &parts(Bounded::Whole(after)))
        } else {
            let whole = serde_json::to_string(after).expect("an event serializes");
            serde_json::to_writer(&mut text, &parts(Bounded::Cut(cut(&whole))))
        }
        .expect("an event serializes");
        Self {
            at,
            text: String::from_utf8(text).expect("JSON is UTF-8"),
        }
    }

    /// When the event happened, in seconds since the epoch.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// Its JSON text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

fn cut(s: &str) -> Cow<'_, str> {
    if s.chars().count() <= MAX_NAME_CHARS {
        return Cow::Borrowed(s);
    }
    let mut out: String = s.chars().take(MAX_NAME_CHARS - 1).collect();
    out.push('…');
    Cow::Owned(out)
}

fn bound(v: Value) -> Value {
    if serde_json::to_writer(Within(MAX_VALUE_BYTES), &v).is_ok() {
        v
    } else {
        Value::String(cut(&v.to_string()).into_owned())
    }
}

/// A writer that keeps nothing and fails once more than its bytes were written: whether a
/// value's JSON fits, found without making the text.
struct Within(usize);

impl std::io::Write for Within {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self
            .0
            .checked_sub(buf.len())
            .ok_or_else(|| std::io::Error::other("over the bound"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Of two objects, only the fields that differ (`{"active":true}` → `{"active":false}`); any
/// other pair of values as it is (an addition, a removal, a list).
pub fn changed(before: Value, after: Value) -> (Value, Value) {
    match (before, after) {
        (Value::Object(mut b), Value::Object(mut a)) => {
            let same: Vec<String> = b
                .iter()
                .filter(|(k, v)| a.get(*k) == Some(*v))
                .map(|(k, _)| k.clone())
                .collect();
            for k in &same {
                b.remove(k);
                a.remove(k);
            }
            (Value::Object(b), Value::Object(a))
        }
        pair => pair,
    }
}

/// What the audit trail shows of a client: everything but its secret's hash.
pub fn client_view(c: &ClientRecord) -> Value {
    let mut view = json!({
        "active": c.active,
        "grants": c.grants,
        "impersonate": c.impersonate,
        "impersonate_claim_types": c.impersonate_claim_types,
        "edge": c.edge,
        "dpop": c.dpop,
    });
    if let Some(v) = &c.vendor {
        view["vendor"] = json!({
            "vendor": v.vendor,
            "client_name": v.client_name,
            "software_id": v.software_id,
            "grants": v.grants,
            "impersonation": v.impersonation,
            "pending": v.pending,
            "revoked": v.revoked,
            "expires_at": v.expires_at(),
            "statements": v.secrets.iter().map(|s| json!({"iat": s.iat, "exp": s.exp})).collect::<Vec<_>>(),
        });
    }
    view
}

/// What the audit trail shows of a user: everything but the password's hash, of which only
/// when it last changed.
pub fn user_view(u: &UserRecord) -> Value {
    json!({
        "disabled": u.disabled,
        "roles": u.roles,
        "claims": u.claims,
        "password_changed_at": u.password_changed_at,
        "directory": u.directory.as_ref().map(|d| &d.dn),
    })
}

/// What the audit trail shows of a refresh token family (never a token).
pub fn family_view(f: &Family) -> Value {
    json!({
        "user": f.user,
        "client": f.client,
        "created": f.created_at,
        "last_used": f.last_used(),
        "expires_at": f.expires_at,
        "revoked_at": f.revoked_at,
    })
}

/// What the audit trail shows of the signing keys: each key's id and state (never its secret).
pub fn keys_view(keys: &[KeyInfo]) -> Value {
    keys.iter()
        .map(|k| json!({"kid": k.kid, "state": k.state.as_str()}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_fields_are_cut_to_their_bounds() {
        let long = "x".repeat(10_000);
        let e = AuditEvent::new(
            1,
            &long,
            AuditAction::Impersonate,
            &long,
            Value::Null,
            json!({ "claims": long }),
        );
        assert_eq!(e.actor.chars().count(), MAX_NAME_CHARS);
        assert!(e.target.ends_with('…'));
        assert!(e.after.to_string().len() <= MAX_VALUE_BYTES);
        assert_eq!(e.before, Value::Null);
    }

    #[test]
    fn an_issued_record_reads_back_as_the_event_made_from_values() {
        #[derive(Serialize)]
        struct After<'a> {
            subject: &'a str,
            actors: &'a [&'a str],
            exp: u64,
        }
        let long = "y".repeat(10_000);
        // Over the bound, `after` is cut from its text, whose fields a typed value writes in
        // its own order: only the cut is compared.
        for (actor, subject) in [("svc", "alice"), (long.as_str(), long.as_str())] {
            let after = After {
                subject,
                actors: &["svc", "gateway"],
                exp: 7,
            };
            let typed = EncodedEvent::issued(9, actor, AuditAction::Exchange, subject, &after);
            let valued = AuditEvent::new(
                9,
                actor,
                AuditAction::Exchange,
                subject,
                Value::Null,
                serde_json::to_value(&after).unwrap(),
            );
            let mut read: AuditEvent = serde_json::from_str(typed.text()).unwrap();
            if subject == long {
                let cut = read.after.as_str().unwrap();
                assert_eq!(cut.chars().count(), MAX_NAME_CHARS);
                assert!(cut.starts_with("{\"subject\":\"yyy") && cut.ends_with('…'));
                read.after = valued.after.clone();
            }
            assert_eq!(read, valued);
            assert_eq!(typed.at(), 9);
            let decoded: AuditEvent = serde_json::from_str(valued.encode().text()).unwrap();
            assert_eq!(decoded, valued);
        }
    }

    #[test]
    fn changes_keep_only_what_differs() {
        let (b, a) = changed(
            json!({"active": true, "grants": ["password"]}),
            json!({"active": false, "grants": ["password"]}),
        );
        assert_eq!((b, a), (json!({"active": true}), json!({"active": false})));
        let (b, a) = changed(Value::Null, json!({"active": false}));
        assert_eq!((b, a), (Value::Null, json!({"active": false})));
    }

    #[test]
    fn actions_have_dotted_names() {
        assert_eq!(AuditAction::ClientDeactivate.as_str(), "client.deactivate");
        assert_eq!(AuditAction::KeysRotate.as_str(), "keys.rotate");
        assert_eq!(AuditAction::RefreshReuse.as_str(), "refresh.reuse");
    }
}
