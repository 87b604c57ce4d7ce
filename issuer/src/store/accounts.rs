//! Clients and users as the store keeps them, and the changes an administrator makes to them.

use super::revocation;
use super::vendor::VendorClient;
use serde::{Deserialize, Serialize};
use shared::token::Claim;

/// The grants a client may be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// Resource owner password credentials (and refreshing what it issued).
    Password,
    /// Client credentials.
    ClientCredentials,
}

impl GrantKind {
    /// Parses `password` or `client_credentials`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "password" => Some(Self::Password),
            "client_credentials" => Some(Self::ClientCredentials),
            _ => None,
        }
    }
}

/// Whether a client must bind its tokens to a key with DPoP (`docs/dpop.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum DpopPolicy {
    /// A proof gets a bound token, no proof a bearer token.
    #[default]
    Allowed,
    /// No token without a proof, from any grant.
    Required,
}

impl DpopPolicy {
    /// Parses `allowed` or `required`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allowed" => Some(Self::Allowed),
            "required" => Some(Self::Required),
            _ => None,
        }
    }

    /// The word [`DpopPolicy::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Required => "required",
        }
    }

    /// The default, which records leave out.
    pub fn is_allowed(&self) -> bool {
        *self == Self::Allowed
    }
}

/// A registered client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Keyed hash of the secret (hex).
    pub secret_hash: String,
    /// Only active clients get tokens.
    pub active: bool,
    /// Grants the client may use.
    pub grants: Vec<GrantKind>,
    /// May impersonate with the client credentials grant.
    pub impersonate: bool,
    /// If not empty, the only claim types it may impersonate with.
    pub impersonate_claim_types: Vec<String>,
    /// May read the edge feed (verification keys and revocations), as an Envoy filter does.
    #[serde(default)]
    pub edge: bool,
    /// Whether its tokens must be bound with DPoP.
    #[serde(default, skip_serializing_if = "DpopPolicy::is_allowed")]
    pub dpop: DpopPolicy,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// When it was last deactivated: the time of the revocation of its tokens, which covers
    /// tokens issued up to [`crate::store::revocation::CLIENT_GRACE`] later. A token minted
    /// once it is active again is issued after that ([`ClientRecord::tokens_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deactivated_at: Option<u64>,
    /// Set for a client issued by a vendor (`docs/clients.md`): what its software statements
    /// say. Its secret is checked against their hashes, not [`ClientRecord::secret_hash`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<Box<VendorClient>>,
    /// What it may do with the token exchange grant; `None`: it cannot exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<super::ExchangePolicy>,
}

impl ClientRecord {
    /// The earliest `iat` its revocations do not cover: tokens minted for it now must be issued
    /// at or after this, or they would be refused the moment they are issued.
    pub fn tokens_after(&self) -> u64 {
        self.deactivated_at
            .map_or(0, |t| t + revocation::CLIENT_GRACE + 1)
    }
    /// The secret hash as bytes (`None` if the record is damaged).
    pub fn secret_hash_bytes(&self) -> Option<[u8; 32]> {
        hex::decode(&self.secret_hash).ok()?.try_into().ok()
    }
}

/// A user of the password grant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserRecord {
    /// The password's hash in PHC string form: Argon2id, or the bcrypt or PBKDF2-SHA256 hash of
    /// a user moved in from another server until its first sign-in; empty for a user given no
    /// password (who cannot sign in with one).
    pub password_hash: String,
    /// Disabled users cannot sign in or refresh.
    pub disabled: bool,
    /// Roles put into the user's tokens.
    pub roles: Vec<String>,
    /// Claims put into the user's tokens, as (type, value).
    pub claims: Vec<(String, String)>,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// When the password was last changed (`issuer user passwd`): refresh token families started
    /// at or before stop working.
    #[serde(default)]
    pub password_changed_at: Option<u64>,
    /// When the user was last disabled: refresh token families started at or before stop
    /// working for good, even once the user is enabled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<u64>,
    /// Set for a user of the directory (`[directory]`): the record keeps what the directory said
    /// at the last sign-in, refresh or recheck, and holds no password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<Box<DirectoryLink>>,
}

/// Where a directory user's record came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryLink {
    /// The entry's DN.
    pub dn: String,
    /// What identifies the entry for good (`crate::directory::EntryRef::key`); absent in
    /// records written before it was kept, which compare by DN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When the directory last vouched for the user (seconds since the epoch).
    pub seen_at: u64,
    /// Disabled, removed or no longer matched in the directory: the record is disabled because
    /// of it (and enabled again when the directory vouches for the user once more), unlike a
    /// user an administrator disabled, who stays disabled.
    #[serde(default)]
    pub gone: bool,
}

impl UserRecord {
    /// Refresh token families started at or before this time no longer work: the last password
    /// change or disable.
    pub fn sessions_end_at(&self) -> Option<u64> {
        self.password_changed_at.max(self.disabled_at)
    }

    /// The earliest `iat` the user's revocations do not cover (a user revocation covers tokens
    /// issued at or before it): tokens minted for the user now are issued at or after this.
    pub fn tokens_after(&self) -> u64 {
        self.sessions_end_at().map_or(0, |t| t + 1)
    }

    /// The user's claims as token claims.
    pub fn token_claims(&self) -> Vec<Claim> {
        self.claims
            .iter()
            .map(|(t, v)| Claim {
                typ: t.clone(),
                value: v.clone(),
            })
            .collect()
    }
}

/// A change to a client, applied by [`super::Clients::update_client`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientChange {
    /// Allow (`true`) or stop (`false`) it getting tokens.
    SetActive(bool),
    /// What it may do (`issuer apply`): its grants, and whether it may impersonate and with which
    /// claim types. Nothing is revoked: tokens already issued stay valid until they expire, and
    /// every later request is checked against the new settings.
    SetAccess {
        /// Grants it may use.
        grants: Vec<GrantKind>,
        /// May impersonate.
        impersonate: bool,
        /// If not empty, the only claim types it may impersonate with.
        claim_types: Vec<String>,
        /// Whether its tokens must be bound with DPoP.
        dpop: DpopPolicy,
        /// What it may do with the token exchange grant.
        exchange: Option<super::ExchangePolicy>,
    },
    /// Require DPoP of it, or not (`issuer client dpop`). Tokens already issued stay as they are.
    SetDpop(DpopPolicy),
    /// Activate a vendor's client with these grants and impersonation (the admin command checks
    /// they are within its statement's): it is no longer pending.
    ActivateVendor {
        /// Grants it may use.
        grants: Vec<GrantKind>,
        /// May impersonate.
        impersonate: bool,
    },
    /// A newer statement of a vendor's client ([`super::vendor::admit`]): its facts replaced,
    /// and what it may do narrowed to what the newer statement allows, never widened.
    Restate(Box<VendorClient>),
    /// Its vendor revoked it: inactive for good, its tokens revoked.
    VendorRevoke,
}

impl ClientChange {
    /// What the change revokes: a deactivated client's tokens.
    pub fn revokes(&self, id: &str) -> Option<revocation::Revoked> {
        match self {
            Self::SetActive(false) | Self::VendorRevoke => {
                Some(revocation::Revoked::Client { id: id.into() })
            }
            Self::SetActive(true)
            | Self::SetAccess { .. }
            | Self::SetDpop(_)
            | Self::ActivateVendor { .. }
            | Self::Restate(_) => None,
        }
    }

    /// Applies the change to a record at `now` (when a deactivation revokes its tokens).
    pub fn apply(&self, rec: &mut ClientRecord, now: u64) {
        match self {
            Self::SetActive(active) => {
                if rec.active && !active {
                    rec.deactivated_at = Some(now);
                }
                rec.active = *active;
            }
            Self::SetAccess {
                grants,
                impersonate,
                claim_types,
                dpop,
                exchange,
            } => {
                rec.grants.clone_from(grants);
                rec.impersonate = *impersonate;
                rec.impersonate_claim_types.clone_from(claim_types);
                rec.dpop = *dpop;
                rec.exchange.clone_from(exchange);
            }
            Self::SetDpop(dpop) => rec.dpop = *dpop,
            Self::ActivateVendor {
                grants,
                impersonate,
            } => {
                if let Some(v) = rec.vendor.as_mut() {
                    v.pending = false;
                }
                rec.grants.clone_from(grants);
                rec.impersonate = *impersonate;
                rec.active = true;
            }
            Self::Restate(next) => {
                rec.grants.retain(|g| next.allows(&[*g]));
                if next.impersonation == crate::vendor::Impersonation::None {
                    rec.impersonate = false;
                }
                rec.vendor = Some(next.clone());
            }
            Self::VendorRevoke => {
                if rec.active {
                    rec.deactivated_at = Some(now);
                }
                rec.active = false;
                if let Some(v) = rec.vendor.as_mut() {
                    v.revoked = true;
                }
            }
        }
    }
}

/// A change to a user, applied by [`super::Users::update_user`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserChange {
    /// Disable the user at `at`: sign-ins and refreshes stop, and so do for good the refresh
    /// token families started before (enabling the user again does not revive them), as do access
    /// tokens issued before (a revocation).
    Disable {
        /// When (seconds since the epoch).
        at: u64,
    },
    /// Enable the user again.
    Enable,
    /// The directory vouched for the user at `at`, with these roles and claims; a user disabled
    /// because the directory had (not by an administrator) is enabled again.
    DirectorySeen {
        /// The entry's DN.
        dn: String,
        /// What identifies the entry for good.
        key: String,
        roles: Vec<String>,
        claims: Vec<(String, String)>,
        /// When (seconds since the epoch).
        at: u64,
    },
    /// The directory no longer holds the user as enabled (disabled, removed, or not matched):
    /// disabled at `at` like [`UserChange::Disable`], marked so a later
    /// [`UserChange::DirectorySeen`] enables the user again.
    DirectoryGone {
        /// When (seconds since the epoch).
        at: u64,
    },
    /// A new Argon2id hash (PHC string), set at `at`: refresh token families started before
    /// stop working, as do access tokens issued before (a revocation).
    SetPassword {
        /// The PHC string.
        hash: String,
        /// When (seconds since the epoch).
        at: u64,
    },
    /// New roles and claims (`issuer apply`) of a local user. Nothing is revoked: access tokens
    /// already issued carry the old ones until they expire; the next refresh or sign-in carries
    /// the new ones.
    SetProfile {
        roles: Vec<String>,
        claims: Vec<(String, String)>,
    },
    /// The same password, hashed anew with Argon2id at a sign-in (the user had a bcrypt or PBKDF2
    /// hash): replaces the hash only if it is still `from` (a `user passwd` meanwhile wins), and
    /// revokes nothing, as the password did not change.
    UpgradeHash {
        /// The hash the sign-in was checked against.
        from: String,
        /// Its Argon2id replacement.
        to: String,
    },
}

impl UserChange {
    /// What the change revokes: the tokens of a user disabled or given a new password.
    pub fn revokes(&self, name: &str) -> Option<revocation::Revoked> {
        match self {
            Self::Disable { .. } | Self::SetPassword { .. } | Self::DirectoryGone { .. } => {
                Some(revocation::Revoked::User { name: name.into() })
            }
            Self::Enable
            | Self::DirectorySeen { .. }
            | Self::SetProfile { .. }
            | Self::UpgradeHash { .. } => None,
        }
    }

    /// Applies the change to a record.
    pub fn apply(&self, rec: &mut UserRecord) {
        match self {
            Self::Disable { at } => {
                rec.disabled = true;
                rec.disabled_at = Some(*at);
                // An administrator's disable: the directory vouching again does not undo it.
                if let Some(link) = rec.directory.as_mut() {
                    link.gone = false;
                }
            }
            Self::Enable => rec.disabled = false,
            Self::DirectorySeen {
                dn,
                key,
                roles,
                claims,
                at,
            } => {
                if rec.directory.as_ref().is_some_and(|l| l.gone) {
                    rec.disabled = false;
                }
                rec.directory = Some(Box::new(DirectoryLink {
                    dn: dn.clone(),
                    key: Some(key.clone()),
                    seen_at: *at,
                    gone: false,
                }));
                rec.roles.clone_from(roles);
                rec.claims.clone_from(claims);
            }
            // A user an administrator disabled stays so, not marked gone.
            Self::DirectoryGone { at } if !rec.disabled => {
                rec.disabled = true;
                rec.disabled_at = Some(*at);
                if let Some(link) = rec.directory.as_mut() {
                    link.gone = true;
                }
            }
            Self::DirectoryGone { .. } => {}
            Self::SetPassword { hash, at } => {
                rec.password_hash.clone_from(hash);
                rec.password_changed_at = Some(*at);
            }
            Self::SetProfile { roles, claims } => {
                rec.roles.clone_from(roles);
                rec.claims.clone_from(claims);
            }
            Self::UpgradeHash { from, to } if rec.password_hash == *from => {
                rec.password_hash.clone_from(to);
            }
            Self::UpgradeHash { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(hash: &str) -> UserRecord {
        UserRecord {
            password_hash: hash.into(),
            disabled: false,
            roles: vec!["r".into()],
            claims: vec![],
            created_at: 1,
            password_changed_at: None,
            disabled_at: None,
            directory: None,
        }
    }

    #[test]
    fn a_hash_upgrade_replaces_only_the_hash_it_was_checked_against_and_revokes_nothing() {
        let up = UserChange::UpgradeHash {
            from: "$2b$old".into(),
            to: "$argon2id$new".into(),
        };
        assert_eq!(up.revokes("u"), None);
        let mut rec = user("$2b$old");
        up.apply(&mut rec);
        assert_eq!(rec.password_hash, "$argon2id$new");
        assert_eq!((rec.password_changed_at, rec.tokens_after()), (None, 0));
        // A `user passwd` came first: it stays.
        let mut rec = user("$argon2id$set-by-passwd");
        up.apply(&mut rec);
        assert_eq!(rec.password_hash, "$argon2id$set-by-passwd");
        let profile = UserChange::SetProfile {
            roles: vec!["a".into()],
            claims: vec![("t".into(), "v".into())],
        };
        assert_eq!(profile.revokes("u"), None);
        profile.apply(&mut rec);
        assert_eq!(
            (rec.roles.len(), rec.claims.len(), rec.disabled),
            (1, 1, false)
        );
    }
}
