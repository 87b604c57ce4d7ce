//! [`Families`] for [`RedbStore`]: its calls go through the writer thread ([`super::writer`]).
//!
//! Refresh token families in the redb file, one small record per family keyed by its id
//! ([`Family`]). Operations apply in one write transaction per batch
//! ([`RedbFile::apply_refresh_ops`], the group commit behind [`super::writer`]), which appends the
//! families it changed to the journal ([`super::journal`]); the sweep deletes what has expired,
//! retired keys included.

use super::{dec, RedbFile, RedbStore, CLIENTS, USERS};
use crate::secrets::RefreshToken;
use crate::store::family::{admit, Family, Step};
use crate::store::{
    ClientRecord, Families, FamilyFilter, FamilyRevocation, RefreshInfo, RefreshPolicy,
    RefreshRejection, RotateOutcome, Rotation, StoreError, UserRecord,
};
use redb::{ReadableTable, WriteTransaction};
use std::collections::HashMap;
use zeroize::Zeroizing;

/// One refresh token operation of a batch ([`super::writer`] builds them from the
/// [`crate::store::Families`] calls; the benchmark fixtures batch them directly).
pub enum FamilyOp {
    /// Start a family for `user` at `client` (password grant).
    Start {
        /// Client id.
        client: String,
        /// User name.
        user: String,
        /// The DPoP key it is bound to.
        jkt: Option<[u8; 32]>,
    },
    /// Rotate a presented token.
    Rotate {
        /// The token presented.
        presented: Zeroizing<String>,
        /// The authenticated client.
        client: String,
        /// The key of the request's DPoP proof.
        proof: Option<[u8; 32]>,
    },
    /// Revoke the family of a token if `client` owns it.
    Revoke {
        /// The token presented.
        token: Zeroizing<String>,
        /// The authenticated client.
        client: String,
    },
    /// Revoke the family `id`, whoever owns it.
    RevokeId {
        /// The family's id.
        id: [u8; 16],
    },
}

/// What one [`FamilyOp`] did, its variant matching the operation's.
pub enum FamilyDone {
    /// The first token of the new family.
    Started(Zeroizing<String>),
    /// The rotation, or why not.
    Rotated(RotateOutcome),
    /// Whether a family was revoked.
    Revoked(FamilyRevocation),
    /// The family as it was before its revocation by id, if it exists.
    RevokedId(Option<Family>),
}

impl FamilyDone {
    /// True if the operation wrote something to commit.
    fn wrote(&self) -> bool {
        match self {
            Self::Started(_) => true,
            Self::Rotated(RotateOutcome::Rotated(rotation)) => !rotation.retried,
            Self::Rotated(RotateOutcome::Refused(why)) => *why == RefreshRejection::ReuseDetected,
            Self::Revoked(r) => *r == FamilyRevocation::Revoked,
            Self::RevokedId(before) => before.as_ref().is_some_and(|f| f.revoked_at.is_none()),
        }
    }
}

/// One batch in progress: its write transaction and the families it changed so far.
struct Batch<'a> {
    tx: &'a WriteTransaction,
    changed: HashMap<[u8; 16], Family>,
}

impl RedbFile {
    fn family_in(&self, b: &Batch, id: &[u8; 16]) -> Result<Option<Family>, StoreError> {
        match b.changed.get(id) {
            Some(fam) => Ok(Some(fam.clone())),
            None => self.committed_family(b.tx, id),
        }
    }

    fn put_family(b: &mut Batch, id: [u8; 16], fam: Family) {
        b.changed.insert(id, fam);
    }

    /// Starts a family for `user` at `client` and returns its first token.
    fn issue_in(
        &self,
        b: &mut Batch,
        client: &str,
        user: &str,
        (now, jkt): (u64, Option<[u8; 32]>),
        policy: &RefreshPolicy,
    ) -> Zeroizing<String> {
        let first = RefreshToken::new_family();
        Self::put_family(b, first.family, Family::new(client, user, now, policy, jkt));
        self.hash_key.encode_refresh(first)
    }

    /// Rotates `presented` for `client` (see [`Family::step`]).
    fn rotate_in(
        &self,
        b: &mut Batch,
        presented: &str,
        client: &str,
        (now, proof): (u64, Option<[u8; 32]>),
        policy: &RefreshPolicy,
    ) -> Result<RotateOutcome, StoreError> {
        let refuse = |why| Ok(RotateOutcome::Refused(why));
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return refuse(RefreshRejection::Unknown);
        };
        let Some(fam) = self.family_in(b, &token.family)? else {
            return refuse(RefreshRejection::Unknown);
        };
        let next = match fam.step(token, client, now, policy, proof) {
            Step::Refuse(why) => return refuse(why),
            Step::RevokeForReuse => {
                let tokens = self.hash_key.family_revocation(&token.family);
                Self::record_revocation_in(b.tx, tokens, now, None)?;
                let revoked = Family {
                    revoked_at: Some(now),
                    ..fam
                };
                Self::put_family(b, token.family, revoked);
                return refuse(RefreshRejection::ReuseDetected);
            }
            Step::Retry => None,
            Step::Rotate => Some(fam.rotated(now, policy)),
        };
        let client_active =
            b.tx.open_table(CLIENTS)?
                .get(client)?
                .map(|v| dec::<ClientRecord>(v.value(), "clients"))
                .transpose()?
                .is_some_and(|c| c.active);
        let user =
            b.tx.open_table(USERS)?
                .get(fam.user.as_str())?
                .map(|v| dec::<UserRecord>(v.value(), "users"))
                .transpose()?;
        let user = match admit(client_active, user, fam.created_at) {
            Ok(user) => user,
            Err(why) => return refuse(why),
        };
        let retried = next.is_none();
        let current = next.as_ref().unwrap_or(&fam).current(token.family);
        if let Some(next) = next {
            Self::put_family(b, token.family, next);
        }
        Ok(RotateOutcome::Rotated(Rotation {
            successor: self.hash_key.encode_refresh(current),
            user_name: fam.user,
            user,
            retried,
        }))
    }

    /// Revokes the family of `token` if `client` owns it.
    fn revoke_in(
        &self,
        b: &mut Batch,
        presented: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError> {
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return Ok(FamilyRevocation::Unknown);
        };
        let Some(fam) = self.family_in(b, &token.family)? else {
            return Ok(FamilyRevocation::Unknown);
        };
        if fam.client != client {
            return Ok(FamilyRevocation::OtherClient);
        }
        self.revoke_id_in(b, token.family, now)?;
        Ok(FamilyRevocation::Revoked)
    }

    /// Revokes the family `id` unless it is revoked already; the family as it was before.
    fn revoke_id_in(
        &self,
        b: &mut Batch,
        id: [u8; 16],
        now: u64,
    ) -> Result<Option<Family>, StoreError> {
        let Some(fam) = self.family_in(b, &id)? else {
            return Ok(None);
        };
        if fam.revoked_at.is_none() {
            let tokens = self.hash_key.family_revocation(&id);
            Self::record_revocation_in(b.tx, tokens, now, None)?;
            let revoked = Family {
                revoked_at: Some(now),
                ..fam.clone()
            };
            Self::put_family(b, id, revoked);
        }
        Ok(Some(fam))
    }

    fn apply_in(
        &self,
        b: &mut Batch,
        op: &FamilyOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<FamilyDone, StoreError> {
        Ok(match op {
            FamilyOp::Start { client, user, jkt } => {
                FamilyDone::Started(self.issue_in(b, client, user, (now, *jkt), policy))
            }
            FamilyOp::Rotate {
                presented,
                client,
                proof,
            } => {
                FamilyDone::Rotated(self.rotate_in(b, presented, client, (now, *proof), policy)?)
            }
            FamilyOp::Revoke { token, client } => {
                FamilyDone::Revoked(self.revoke_in(b, token, client, now)?)
            }
            FamilyOp::RevokeId { id } => FamilyDone::RevokedId(self.revoke_id_in(b, *id, now)?),
        })
    }

    /// Applies refresh token operations in order in **one** write transaction and commits it once
    /// (durably), or aborts it if none of them wrote. Each operation sees the effects of those
    /// before it. A record that does not decode fails its own operation only (nothing of it was
    /// written: every operation reads before it writes); a storage error fails the whole batch.
    /// This is the group commit behind [`super::writer::RefreshWriter`].
    pub fn apply_refresh_ops(
        &self,
        ops: &[(FamilyOp, u64)],
        policy: &RefreshPolicy,
    ) -> Result<Vec<Result<FamilyDone, StoreError>>, StoreError> {
        let tx = self.begin_write()?;
        let mut b = Batch {
            tx: &tx,
            changed: HashMap::new(),
        };
        let mut wrote = false;
        let mut outcomes = Vec::with_capacity(ops.len());
        for (op, now) in ops {
            let outcome = match self.apply_in(&mut b, op, *now, policy) {
                Err(StoreError::Corrupt(table)) => Err(StoreError::Corrupt(table)),
                Err(other) => return Err(other),
                Ok(outcome) => {
                    wrote |= outcome.wrote();
                    Ok(outcome)
                }
            };
            outcomes.push(outcome);
        }
        let changed = b.changed;
        if wrote {
            self.journal_in(&tx, &changed)?;
            tx.commit()?;
            self.publish(changed);
        } else {
            tx.abort()?;
        }
        Ok(outcomes)
    }

    /// Applies one operation in a transaction of its own.
    #[cfg(test)]
    pub(super) fn apply_refresh_op(
        &self,
        op: FamilyOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<FamilyDone, StoreError> {
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
        let Some(token) = self.hash_key.verify_refresh(presented) else {
            return Ok(None);
        };
        Ok(self
            .read_family(&token.family)?
            .filter(|f| f.usable(token, now))
            .map(|f| RefreshInfo {
                client: f.client,
                user: f.user,
                expires_at: f.expires_at,
            }))
    }
}

#[async_trait::async_trait]
impl Families for RedbStore {
    async fn start_family(
        &self,
        client: &str,
        user: &str,
        now: u64,
        jkt: Option<[u8; 32]>,
    ) -> Result<Zeroizing<String>, StoreError> {
        self.watch(self.writer.start(client, user, now, jkt).await)
    }

    async fn rotate_family(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        proof: Option<[u8; 32]>,
    ) -> Result<RotateOutcome, StoreError> {
        self.watch(self.writer.rotate(presented, client, now, proof).await)
    }

    async fn revoke_family(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError> {
        self.watch(self.writer.revoke(token, client, now).await)
    }

    async fn family_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        self.watch(self.file.refresh_info(token, now))
    }

    async fn live_families(
        &self,
        filter: &FamilyFilter<'_>,
        now: u64,
    ) -> Result<Vec<([u8; 16], Family)>, StoreError> {
        self.watch(self.file.live_families(filter, now))
    }

    async fn family(&self, id: &[u8; 16]) -> Result<Option<Family>, StoreError> {
        self.watch(self.file.read_family(id))
    }

    async fn revoke_family_id(
        &self,
        id: &[u8; 16],
        now: u64,
    ) -> Result<Option<Family>, StoreError> {
        self.watch(self.writer.revoke_id(*id, now).await)
    }
}
