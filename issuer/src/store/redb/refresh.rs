//! Refresh token families in the redb file: one record per token (its family, owner, idle
//! expiry and whether it was rotated) and one per family (owner, absolute expiry, revocation,
//! the current token). Operations apply in one write transaction per batch
//! ([`RedbFile::apply_refresh_ops`], the group commit behind [`super::writer`]); the sweep deletes
//! what has expired, retired keys included.

use super::{dec, enc, RedbFile, CLIENTS, FAMILIES, KEYS, REFRESH, USERS};
use crate::secrets;
use crate::store::keys::KeyRecord;
use crate::store::{
    ClientRecord, KeyState, RefreshInfo, RefreshOp, RefreshOutcome, RefreshPolicy,
    RefreshRejection, Rotation, StoreError, UserRecord,
};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

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

impl RedbFile {
    /// Starts a refresh token family for `user` at `client` and returns its first token.
    fn issue_in(
        &self,
        tx: &WriteTransaction,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Zeroizing<String>, StoreError> {
        let token = secrets::new_refresh_token();
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
    fn rotate_in(
        &self,
        tx: &WriteTransaction,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Result<Rotation, RefreshRejection>, StoreError> {
        if !secrets::looks_like_refresh_token(presented) {
            return Ok(Err(RefreshRejection::Unknown));
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
                return Ok(Err(RefreshRejection::Unknown));
            };
            let Some(mut fam) = families
                .get(rec.family.as_bytes())?
                .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
                .transpose()?
            else {
                return Ok(Err(RefreshRejection::Unknown));
            };
            if rec.client != client {
                return Ok(Err(RefreshRejection::OtherClient));
            }
            if fam.revoked_at.is_some() {
                return Ok(Err(RefreshRejection::Revoked));
            }
            if now >= rec.expires_at || now >= fam.expires_at {
                return Ok(Err(RefreshRejection::Expired));
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
                _ => return Ok(Err(RefreshRejection::Inactive)),
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
        Ok(outcome)
    }

    /// Revokes the family of `token` if `client` owns it. `Ok(None)`: no such token;
    /// `Ok(Some(false))`: it belongs to another client (nothing changed).
    fn revoke_in(
        &self,
        tx: &WriteTransaction,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        if !secrets::looks_like_refresh_token(token) {
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

    /// Applies refresh token operations in order in **one** write transaction and commits it once
    /// (durably), or aborts it if none of them wrote. Each operation sees the effects of those
    /// before it. This is the group commit behind [`crate::writer::RefreshWriter`].
    pub fn apply_refresh_ops(
        &self,
        ops: &[(RefreshOp, u64)],
        policy: &RefreshPolicy,
    ) -> Result<Vec<RefreshOutcome>, StoreError> {
        let tx = self.db.begin_write()?;
        let mut wrote = false;
        let mut outcomes = Vec::with_capacity(ops.len());
        for (op, now) in ops {
            let outcome = match op {
                RefreshOp::Issue { client, user } => {
                    wrote = true;
                    RefreshOutcome::Issued(self.issue_in(&tx, client, user, *now, policy)?)
                }
                RefreshOp::Rotate { presented, client } => {
                    let r = self.rotate_in(&tx, presented, client, *now, policy)?;
                    wrote |= match &r {
                        Ok(rotation) => !rotation.retried,
                        Err(rejection) => *rejection == RefreshRejection::ReuseDetected,
                    };
                    RefreshOutcome::Rotated(r)
                }
                RefreshOp::Revoke { token, client } => {
                    let r = self.revoke_in(&tx, token, client, *now)?;
                    wrote |= r == Some(true);
                    RefreshOutcome::Revoked(r)
                }
            };
            outcomes.push(outcome);
        }
        if wrote {
            tx.commit()?;
        } else {
            tx.abort()?;
        }
        Ok(outcomes)
    }

    fn apply_one(
        &self,
        op: RefreshOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        let mut outcomes = self.apply_refresh_ops(&[(op, now)], policy)?;
        outcomes.pop().ok_or(StoreError::Corrupt("empty batch"))
    }

    /// Starts a refresh token family for `user` at `client` and returns its first token.
    pub fn issue_refresh(
        &self,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Zeroizing<String>, StoreError> {
        let op = RefreshOp::Issue {
            client: client.into(),
            user: user.into(),
        };
        match self.apply_one(op, now, policy)? {
            RefreshOutcome::Issued(t) => Ok(t),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// Rotates `presented` for `client` (see [`RefreshOp::Rotate`]).
    pub fn rotate_refresh(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Result<Rotation, RefreshRejection>, StoreError> {
        let op = RefreshOp::Rotate {
            presented: Zeroizing::new(presented.into()),
            client: client.into(),
        };
        match self.apply_one(op, now, policy)? {
            RefreshOutcome::Rotated(r) => Ok(r),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// Revokes the family of `token` (see [`RefreshOp::Revoke`]).
    pub fn revoke_refresh(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        let op = RefreshOp::Revoke {
            token: Zeroizing::new(token.into()),
            client: client.into(),
        };
        match self.apply_one(
            op,
            now,
            &RefreshPolicy {
                idle_ttl: 0,
                absolute_ttl: 0,
                retry_window: 0,
            },
        )? {
            RefreshOutcome::Revoked(r) => Ok(r),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// What introspection may reveal about a refresh token that is currently usable.
    pub fn refresh_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        if !secrets::looks_like_refresh_token(token) {
            return Ok(None);
        }
        let hash = self.hash_key.refresh_hash(token);
        let tx = self.db.begin_read()?;
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

    /// Deletes refresh tokens and families whose lifetime has passed and keys that have retired.
    /// Returns how many records went.
    pub fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.db.begin_write()?;
        let mut removed = 0u64;
        {
            let mut refresh = tx.open_table(REFRESH)?;
            refresh.retain(|_, v| {
                let keep =
                    serde_json::from_slice::<RefreshRecord>(v).map_or(true, |r| r.expires_at > now);
                removed += u64::from(!keep);
                keep
            })?;
            let mut families = tx.open_table(FAMILIES)?;
            families.retain(|_, v| {
                let keep =
                    serde_json::from_slice::<FamilyRecord>(v).map_or(true, |f| f.expires_at > now);
                removed += u64::from(!keep);
                keep
            })?;
            let mut keys = tx.open_table(KEYS)?;
            keys.retain(|_, v| {
                let keep = serde_json::from_slice::<KeyRecord>(v)
                    .map_or(true, |k| k.state(now, ttl) != KeyState::Retired);
                removed += u64::from(!keep);
                keep
            })?;
        }
        tx.commit()?;
        Ok(removed)
    }
}
