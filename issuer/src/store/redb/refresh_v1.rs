//! First-format refresh tokens (`mmrt1.`) in the redb file: one record per token (its family,
//! owner, idle expiry and whether it was rotated) and one per family (owner, absolute expiry,
//! revocation, the current token's hash). New families use the one-record layout of
//! [`super::refresh`]; families of this format keep rotating here, each successor in this format,
//! until they expire (at most the absolute lifetime after the upgrade), and the sweep empties these
//! tables. Remove this module one absolute lifetime after every data dir runs the new layout.

use super::{dec, enc, RedbFile, CLIENTS, FAMILIES, REFRESH, USERS};
use crate::secrets;
use crate::store::{
    ClientRecord, RefreshInfo, RefreshOutcome, RefreshPolicy, RefreshRejection, Rotation,
    StoreError, UserRecord,
};
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum RefreshState {
    Active,
    Rotated { at: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefreshRecord {
    family: String,
    client: String,
    user: String,
    expires_at: u64,
    state: RefreshState,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FamilyRecord {
    client: String,
    user: String,
    created_at: u64,
    expires_at: u64,
    revoked_at: Option<u64>,
    current: String,
}

/// When a stored first-format token record expires (`None` if it does not decode).
pub(super) fn token_expiry(record: &[u8]) -> Option<u64> {
    serde_json::from_slice::<RefreshRecord>(record)
        .ok()
        .map(|r| r.expires_at)
}

/// When a stored first-format family record expires (`None` if it does not decode).
pub(super) fn family_expiry(record: &[u8]) -> Option<u64> {
    serde_json::from_slice::<FamilyRecord>(record)
        .ok()
        .map(|f| f.expires_at)
}

impl RedbFile {
    /// Starts a first-format family (only tests still make them) and returns its first token.
    #[cfg(test)]
    pub(super) fn issue_v1_in(
        &self,
        tx: &WriteTransaction,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<zeroize::Zeroizing<String>, StoreError> {
        let token = secrets::new_refresh_token_v1();
        let hash = self.hash_key.refresh_hash(&token);
        let family = hex::encode(secrets::random16());
        let fam = FamilyRecord {
            client: client.into(),
            user: user.into(),
            created_at: now,
            expires_at: now + policy.absolute_ttl,
            revoked_at: None,
            current: hex::encode(hash),
        };
        let rec = RefreshRecord {
            family: family.clone(),
            client: client.into(),
            user: user.into(),
            expires_at: (now + policy.idle_ttl).min(fam.expires_at),
            state: RefreshState::Active,
        };
        tx.open_table(FAMILIES)?
            .insert(family.as_bytes(), enc(&fam).as_slice())?;
        tx.open_table(REFRESH)?
            .insert(hash.as_slice(), enc(&rec).as_slice())?;
        Ok(token)
    }

    /// Rotates `presented` for `client`: the successor on success, or why not. Reuse of a rotated
    /// token outside the retry window revokes its family in the same transaction.
    pub(super) fn rotate_v1_in(
        &self,
        tx: &WriteTransaction,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        if !secrets::looks_like_refresh_token_v1(presented) {
            return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Unknown)));
        }
        let hash = self.hash_key.refresh_hash(presented);
        let outcome: Result<Rotation, RefreshRejection> = 'outcome: {
            let mut refresh = tx.open_table(REFRESH)?;
            let mut families = tx.open_table(FAMILIES)?;
            let Some(mut rec) = refresh
                .get(hash.as_slice())?
                .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
                .transpose()?
            else {
                return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Unknown)));
            };
            let Some(mut fam) = families
                .get(rec.family.as_bytes())?
                .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
                .transpose()?
            else {
                return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Unknown)));
            };
            if rec.client != client {
                return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::OtherClient)));
            }
            if fam.revoked_at.is_some() {
                return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Revoked)));
            }
            if now >= rec.expires_at || now >= fam.expires_at {
                return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Expired)));
            }
            let successor = self.hash_key.refresh_successor(presented);
            let successor_hash = self.hash_key.refresh_hash(&successor);
            let retried = match rec.state {
                RefreshState::Active => false,
                RefreshState::Rotated { at }
                    if now.saturating_sub(at) <= policy.retry_window
                        && fam.current == hex::encode(successor_hash) =>
                {
                    true
                }
                RefreshState::Rotated { .. } => {
                    fam.revoked_at = Some(now);
                    families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
                    break 'outcome Err(RefreshRejection::ReuseDetected);
                }
            };
            let client_active = tx
                .open_table(CLIENTS)?
                .get(client)?
                .map(|v| dec::<ClientRecord>(v.value(), "clients"))
                .transpose()?
                .is_some_and(|c| c.active);
            let user = tx
                .open_table(USERS)?
                .get(rec.user.as_str())?
                .map(|v| dec::<UserRecord>(v.value(), "users"))
                .transpose()?;
            let user = match user {
                Some(u) if client_active && !u.disabled => u,
                _ => return Ok(RefreshOutcome::Rotated(Err(RefreshRejection::Inactive))),
            };
            if !retried {
                let next = RefreshRecord {
                    family: rec.family.clone(),
                    client: client.into(),
                    user: rec.user.clone(),
                    expires_at: (now + policy.idle_ttl).min(fam.expires_at),
                    state: RefreshState::Active,
                };
                refresh.insert(successor_hash.as_slice(), enc(&next).as_slice())?;
                rec.state = RefreshState::Rotated { at: now };
                refresh.insert(hash.as_slice(), enc(&rec).as_slice())?;
                fam.current = hex::encode(successor_hash);
                families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
            }
            Ok(Rotation {
                successor,
                user_name: rec.user,
                user,
                retried,
            })
        };
        Ok(RefreshOutcome::Rotated(outcome))
    }

    /// Revokes the family of `token` if `client` owns it. `Ok(None)`: no such token;
    /// `Ok(Some(false))`: it belongs to another client (nothing changed).
    pub(super) fn revoke_v1_in(
        &self,
        tx: &WriteTransaction,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        if !secrets::looks_like_refresh_token_v1(token) {
            return Ok(None);
        }
        let hash = self.hash_key.refresh_hash(token);
        {
            let refresh = tx.open_table(REFRESH)?;
            let mut families = tx.open_table(FAMILIES)?;
            let Some(rec) = refresh
                .get(hash.as_slice())?
                .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
                .transpose()?
            else {
                return Ok(None);
            };
            if rec.client != client {
                return Ok(Some(false));
            }
            let fam = families
                .get(rec.family.as_bytes())?
                .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
                .transpose()?;
            if let Some(mut fam) = fam {
                if fam.revoked_at.is_none() {
                    fam.revoked_at = Some(now);
                    families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
                }
            }
        }
        Ok(Some(true))
    }

    /// What introspection may reveal about a first-format token that is currently usable.
    pub(super) fn refresh_info_v1(
        &self,
        token: &str,
        now: u64,
    ) -> Result<Option<RefreshInfo>, StoreError> {
        if !secrets::looks_like_refresh_token_v1(token) {
            return Ok(None);
        }
        let hash = self.hash_key.refresh_hash(token);
        let tx = self.begin_read()?;
        let refresh = tx.open_table(REFRESH)?;
        let families = tx.open_table(FAMILIES)?;
        let Some(rec) = refresh
            .get(hash.as_slice())?
            .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
            .transpose()?
        else {
            return Ok(None);
        };
        let Some(fam) = families
            .get(rec.family.as_bytes())?
            .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
            .transpose()?
        else {
            return Ok(None);
        };
        let usable = rec.state == RefreshState::Active
            && fam.revoked_at.is_none()
            && now < rec.expires_at
            && now < fam.expires_at;
        Ok(usable.then(|| RefreshInfo {
            client: rec.client,
            user: rec.user,
            expires_at: rec.expires_at.min(fam.expires_at),
        }))
    }
}
