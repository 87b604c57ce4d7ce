//! Refresh token families in the redb file, one small record per family keyed by its id
//! ([`Family`]): a rotation reads and rewrites that one record, whatever the number of rotations
//! before it. Operations apply in one write transaction per batch
//! ([`RedbFile::apply_refresh_ops`], the group commit behind [`super::writer`]); the sweep deletes
//! what has expired, retired keys included. First-format tokens go to [`super::refresh_v1`].

use super::{dec, enc, RedbFile, CLIENTS, FAMILY_RECORDS, KEYS, USERS};
use crate::secrets::{RefreshToken, REFRESH_V1_PREFIX};
use crate::store::family::{admit, Family, Step};
use crate::store::keys::KeyRecord;
use crate::store::{
    ClientRecord, KeyState, RefreshInfo, RefreshOp, RefreshOutcome, RefreshPolicy,
    RefreshRejection, Rotation, StoreError, UserRecord,
};
use redb::{ReadableTable, WriteTransaction};
use zeroize::Zeroizing;

const TABLE: &str = "refresh_family_records";

impl RedbFile {
    fn family_in(tx: &WriteTransaction, token: RefreshToken) -> Result<Option<Family>, StoreError> {
        tx.open_table(FAMILY_RECORDS)?
            .get(token.family.as_slice())?
            .map(|v| dec::<Family>(v.value(), TABLE))
            .transpose()
    }

    fn put_family(tx: &WriteTransaction, id: [u8; 16], fam: &Family) -> Result<(), StoreError> {
        tx.open_table(FAMILY_RECORDS)?
            .insert(id.as_slice(), enc(fam).as_slice())?;
        Ok(())
    }

    /// Starts a family for `user` at `client` and returns its first token.
    fn issue_in(
        &self,
        tx: &WriteTransaction,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Zeroizing<String>, StoreError> {
        let first = RefreshToken::new_family();
        Self::put_family(tx, first.family, &Family::new(client, user, now, policy))?;
        Ok(self.hash_key.encode_refresh(first))
    }

    /// Rotates `presented` for `client` (see [`Family::step`]).
    fn rotate_in(
        &self,
        tx: &WriteTransaction,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        if presented.starts_with(REFRESH_V1_PREFIX) {
            return self.rotate_v1_in(tx, presented, client, now, policy);
        }
        let refuse = |why| Ok(RefreshOutcome::Rotated(Err(why)));
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return refuse(RefreshRejection::Unknown);
        };
        let Some(fam) = Self::family_in(tx, token)? else {
            return refuse(RefreshRejection::Unknown);
        };
        let next = match fam.step(token, client, now, policy) {
            Step::Refuse(why) => return refuse(why),
            Step::RevokeForReuse => {
                let revoked = Family {
                    revoked_at: Some(now),
                    ..fam
                };
                Self::put_family(tx, token.family, &revoked)?;
                return refuse(RefreshRejection::ReuseDetected);
            }
            Step::Retry => None,
            Step::Rotate => Some(fam.rotated(now, policy)),
        };
        let client_active = tx
            .open_table(CLIENTS)?
            .get(client)?
            .map(|v| dec::<ClientRecord>(v.value(), "clients"))
            .transpose()?
            .is_some_and(|c| c.active);
        let user = tx
            .open_table(USERS)?
            .get(fam.user.as_str())?
            .map(|v| dec::<UserRecord>(v.value(), "users"))
            .transpose()?;
        let user = match admit(client_active, user) {
            Ok(user) => user,
            Err(why) => return refuse(why),
        };
        let retried = next.is_none();
        let current = next.as_ref().unwrap_or(&fam).current(token.family);
        if let Some(next) = &next {
            Self::put_family(tx, token.family, next)?;
        }
        Ok(RefreshOutcome::Rotated(Ok(Rotation {
            successor: self.hash_key.encode_refresh(current),
            user_name: fam.user,
            user,
            retried,
        })))
    }

    /// Revokes the family of `token` if `client` owns it. `None`: no such token; `Some(false)`: it
    /// belongs to another client (nothing changed).
    fn revoke_in(
        &self,
        tx: &WriteTransaction,
        presented: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        if presented.starts_with(REFRESH_V1_PREFIX) {
            return self.revoke_v1_in(tx, presented, client, now);
        }
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return Ok(None);
        };
        let Some(fam) = Self::family_in(tx, token)? else {
            return Ok(None);
        };
        if fam.client != client {
            return Ok(Some(false));
        }
        if fam.revoked_at.is_none() {
            let revoked = Family {
                revoked_at: Some(now),
                ..fam
            };
            Self::put_family(tx, token.family, &revoked)?;
        }
        Ok(Some(true))
    }

    fn apply_in(
        &self,
        tx: &WriteTransaction,
        op: &RefreshOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        Ok(match op {
            RefreshOp::Issue { client, user } => {
                RefreshOutcome::Issued(self.issue_in(tx, client, user, now, policy)?)
            }
            RefreshOp::Rotate { presented, client } => {
                self.rotate_in(tx, presented, client, now, policy)?
            }
            RefreshOp::Revoke { token, client } => {
                RefreshOutcome::Revoked(self.revoke_in(tx, token, client, now)?)
            }
        })
    }

    /// Applies refresh token operations in order in **one** write transaction and commits it once
    /// (durably), or aborts it if none of them wrote. Each operation sees the effects of those
    /// before it. A record that does not decode fails its own operation only (nothing of it was
    /// written: every operation reads before it writes); a storage error fails the whole batch.
    /// This is the group commit behind [`super::writer::RefreshWriter`].
    pub fn apply_refresh_ops(
        &self,
        ops: &[(RefreshOp, u64)],
        policy: &RefreshPolicy,
    ) -> Result<Vec<Result<RefreshOutcome, StoreError>>, StoreError> {
        let tx = self.begin_write()?;
        let mut wrote = false;
        let mut outcomes = Vec::with_capacity(ops.len());
        for (op, now) in ops {
            let outcome = match self.apply_in(&tx, op, *now, policy) {
                Err(StoreError::Corrupt(table)) => Err(StoreError::Corrupt(table)),
                Err(other) => return Err(other),
                Ok(outcome) => {
                    wrote |= match &outcome {
                        RefreshOutcome::Issued(_) => true,
                        RefreshOutcome::Rotated(Ok(rotation)) => !rotation.retried,
                        RefreshOutcome::Rotated(Err(why)) => {
                            *why == RefreshRejection::ReuseDetected
                        }
                        RefreshOutcome::Revoked(r) => *r == Some(true),
                    };
                    Ok(outcome)
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

    /// Applies one operation in a transaction of its own (admin commands and tests).
    pub fn apply_refresh_op(
        &self,
        op: RefreshOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        self.apply_refresh_ops(&[(op, now)], policy)?
            .pop()
            .ok_or(StoreError::Corrupt("empty batch"))?
    }

    /// What introspection may reveal about a refresh token that is currently usable.
    pub fn refresh_info(
        &self,
        presented: &str,
        now: u64,
    ) -> Result<Option<RefreshInfo>, StoreError> {
        if presented.starts_with(REFRESH_V1_PREFIX) {
            return self.refresh_info_v1(presented, now);
        }
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return Ok(None);
        };
        let tx = self.begin_read()?;
        let fam = tx
            .open_table(FAMILY_RECORDS)?
            .get(token.family.as_slice())?
            .map(|v| dec::<Family>(v.value(), TABLE))
            .transpose()?;
        Ok(fam.filter(|f| f.usable(token, now)).map(|f| RefreshInfo {
            client: f.client,
            user: f.user,
            expires_at: f.expires_at,
        }))
    }

    /// How many families are on record (live, revoked or expired but not yet swept).
    pub fn family_count(&self) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata as _;
        let tx = self.begin_read()?;
        Ok(tx.open_table(FAMILY_RECORDS)?.len()?)
    }

    /// Deletes families whose lifetime has passed (first-format records too) and keys that have
    /// retired. Returns how many records went.
    pub fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        let mut removed = self.sweep_v1_in(&tx, now)?;
        tx.open_table(FAMILY_RECORDS)?.retain(|_, v| {
            let keep = serde_json::from_slice::<Family>(v).map_or(true, |f| f.expires_at > now);
            removed += u64::from(!keep);
            keep
        })?;
        tx.open_table(KEYS)?.retain(|_, v| {
            let keep = serde_json::from_slice::<KeyRecord>(v)
                .map_or(true, |k| k.state(now, ttl) != KeyState::Retired);
            removed += u64::from(!keep);
            keep
        })?;
        tx.commit()?;
        Ok(removed)
    }
}
