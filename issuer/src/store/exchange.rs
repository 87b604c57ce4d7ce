//! A client's token exchange policy (RFC 8693, `docs/issuer.md`): whose tokens it may exchange,
//! for which subjects (by their roles or claims), how deep the actor chain of what it gets may
//! be, and which audiences it may ask for. Kept in its [`super::ClientRecord`]; a client without
//! one cannot exchange.

use serde::{Deserialize, Serialize};
use shared::rules::{client_id_ok, name_ok};
use shared::token::{Identity, MAX_CHAIN_DEPTH};

/// The deepest actor chain a client's exchange makes when its policy does not say
/// (`--exchange-max-depth`); never more than [`MAX_CHAIN_DEPTH`].
pub const DEFAULT_EXCHANGE_MAX_DEPTH: u8 = 4;

/// Most clients, and most audiences, one policy names.
pub const MAX_EXCHANGE_ITEMS: usize = 64;

/// What a client may do with the token exchange grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangePolicy {
    /// The clients whose tokens (subject tokens issued to them) it may exchange; never empty.
    pub from: Vec<String>,
    /// The deepest actor chain its tokens may carry, it included: 1 to [`MAX_CHAIN_DEPTH`].
    #[serde(default = "default_depth")]
    pub max_depth: u8,
    /// The audiences it may name (`audience` or `resource`); empty: it may name none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// Only subjects holding one of these roles; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_roles: Vec<String>,
    /// Only subjects carrying one of these claims, each `type=value`; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_claims: Vec<String>,
}

fn default_depth() -> u8 {
    DEFAULT_EXCHANGE_MAX_DEPTH
}

/// Why a policy cannot be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// No client to exchange from, or a client id that cannot be one.
    #[error("exchange_from names 1 to 64 client ids (no control character, no ':')")]
    From,
    /// A depth of 0 or past the cap.
    #[error("exchange_max_depth is 1 to 8 (MAX_CHAIN_DEPTH)")]
    Depth,
    /// An audience that is empty, too long, or holds a control character or a `,`.
    #[error("an exchange audience is 1 to 255 characters, without control characters or ','")]
    Audience,
    /// A subject role that cannot be one, or a subject claim not of the form `type=value`.
    #[error(
        "exchange subject roles and claims are at most 64 each, a role or a claim's type and \
         value 1 to 255 characters without control characters or ',', a claim as type=value"
    )]
    Subject,
}

impl ExchangePolicy {
    /// The policy as a client's record keeps it, its lists sorted and without duplicates.
    pub fn new(
        from: Vec<String>,
        max_depth: u8,
        audiences: Vec<String>,
    ) -> Result<Self, PolicyError> {
        let tidy = |mut v: Vec<String>| {
            v.sort();
            v.dedup();
            v
        };
        let (from, audiences) = (tidy(from), tidy(audiences));
        if from.is_empty()
            || from.len() > MAX_EXCHANGE_ITEMS
            || !from.iter().all(|c| client_id_ok(c))
        {
            return Err(PolicyError::From);
        }
        if max_depth == 0 || usize::from(max_depth) > MAX_CHAIN_DEPTH {
            return Err(PolicyError::Depth);
        }
        if audiences.len() > MAX_EXCHANGE_ITEMS
            || !audiences.iter().all(|a| name_ok(a) && !a.contains(','))
        {
            return Err(PolicyError::Audience);
        }
        Ok(Self {
            from,
            max_depth,
            audiences,
            subject_roles: Vec::new(),
            subject_claims: Vec::new(),
        })
    }

    /// The policy narrowed to subjects holding one of `roles` (if any are named) and carrying
    /// one of `claims` (`type=value`, if any are named).
    pub fn for_subjects(
        mut self,
        roles: Vec<String>,
        claims: Vec<String>,
    ) -> Result<Self, PolicyError> {
        let item_ok = |s: &str| name_ok(s) && !s.contains(',');
        let claim_ok = |c: &String| {
            c.split_once('=')
                .is_some_and(|(t, v)| item_ok(t) && item_ok(v))
        };
        if roles.len() > MAX_EXCHANGE_ITEMS
            || claims.len() > MAX_EXCHANGE_ITEMS
            || !roles.iter().all(|r| item_ok(r))
            || !claims.iter().all(claim_ok)
        {
            return Err(PolicyError::Subject);
        }
        let tidy = |mut v: Vec<String>| {
            v.sort();
            v.dedup();
            v
        };
        self.subject_roles = tidy(roles);
        self.subject_claims = tidy(claims);
        Ok(self)
    }

    /// Whether it may exchange a token of `subject`: one of the roles it names, and one of the
    /// claims, each where it names any.
    pub fn for_subject(&self, subject: &Identity) -> bool {
        let role = self.subject_roles.is_empty()
            || subject.roles.iter().any(|r| self.subject_roles.contains(r));
        let claim = self.subject_claims.is_empty()
            || subject.claims.iter().any(|c| {
                self.subject_claims.iter().any(|want| {
                    want.split_once('=')
                        .is_some_and(|(t, v)| t == c.typ && v == c.value)
                })
            });
        role && claim
    }

    /// Whether it may exchange a token issued to `client`.
    pub fn from_client(&self, client: &str) -> bool {
        self.from.iter().any(|c| c == client)
    }

    /// The deepest chain it may make: its own limit within the format's.
    pub fn depth(&self) -> usize {
        usize::from(self.max_depth).min(MAX_CHAIN_DEPTH)
    }

    /// Whether it may name `audience`.
    pub fn allows_audience(&self, audience: &str) -> bool {
        self.audiences.iter().any(|a| a == audience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn a_policy_is_checked_and_kept_sorted() {
        let p = ExchangePolicy::new(v(&["web", "app", "web"]), 3, v(&["media"])).unwrap();
        assert_eq!(p.from, v(&["app", "web"]));
        assert!(p.from_client("web") && !p.from_client("other"));
        assert!(p.allows_audience("media") && !p.allows_audience("billing"));
        assert_eq!(p.depth(), 3);
        assert_eq!(
            ExchangePolicy::new(vec![], 3, vec![]),
            Err(PolicyError::From)
        );
        assert_eq!(
            ExchangePolicy::new(v(&["a:b"]), 3, vec![]),
            Err(PolicyError::From)
        );
        assert_eq!(
            ExchangePolicy::new(v(&["a"]), 0, vec![]),
            Err(PolicyError::Depth)
        );
        assert_eq!(
            ExchangePolicy::new(v(&["a"]), MAX_CHAIN_DEPTH as u8 + 1, vec![]),
            Err(PolicyError::Depth)
        );
        assert_eq!(
            ExchangePolicy::new(v(&["a"]), 1, v(&["x,y"])),
            Err(PolicyError::Audience)
        );
    }

    fn subject(roles: &[&str], claims: &[(&str, &str)]) -> Identity {
        Identity {
            kind: shared::token::SubjectKind::User,
            subject: "alice".into(),
            roles: v(roles),
            claims: claims
                .iter()
                .map(|(t, value)| shared::token::Claim {
                    typ: (*t).into(),
                    value: (*value).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_policy_narrowed_by_role_and_claim_takes_only_subjects_matching_both() {
        let any = ExchangePolicy::new(v(&["app"]), 4, vec![]).unwrap();
        assert!(any.for_subject(&subject(&[], &[])));
        let p = any
            .clone()
            .for_subjects(v(&["editor", "viewer"]), v(&["dept=news"]))
            .unwrap();
        assert!(p.for_subject(&subject(&["viewer"], &[("dept", "news")])));
        assert!(!p.for_subject(&subject(&["viewer"], &[("dept", "sports")])));
        assert!(!p.for_subject(&subject(&["admin"], &[("dept", "news")])));
        assert!(!p.for_subject(&subject(&[], &[])));
        let roles_only = any.clone().for_subjects(v(&["editor"]), vec![]).unwrap();
        assert!(roles_only.for_subject(&subject(&["editor"], &[])));
        for bad in [
            (v(&["a,b"]), vec![]),
            (vec![], v(&["no-equals"])),
            (vec![], v(&["=value"])),
            (vec![], v(&["type="])),
        ] {
            assert_eq!(
                any.clone().for_subjects(bad.0, bad.1),
                Err(PolicyError::Subject)
            );
        }
    }

    #[test]
    fn a_stored_policy_without_a_depth_gets_the_default() {
        let p: ExchangePolicy = serde_json::from_str(r#"{"from":["web"]}"#).unwrap();
        assert_eq!(p.max_depth, DEFAULT_EXCHANGE_MAX_DEPTH);
        assert!(p.audiences.is_empty());
    }
}
