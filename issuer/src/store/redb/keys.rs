//! [`SigningKeys`] for [`RedbStore`]: the signing keys in the redb file, one JSON record per key
//! id ([`KeyRecord`]), their lives decided by [`crate::store::keys`].

use super::{dec, enc, RedbFile, RedbStore, KEYS};
use crate::secrets;
use crate::store::keys::{
    KeyRecord, PromoteOutcome, Promotion, RetireOutcome, Rotated, RotationPlan,
};
use crate::store::{KeyInfo, KeyState, SigningKeys, StoreError};
use redb::ReadableTable;
use shared::{Key, KeyRing};
use zeroize::Zeroizing;

impl RedbFile {
    /// Every key still on record, with its state at `now`.
    pub fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_read()?;
        let t = tx.open_table(KEYS)?;
        t.iter()?
            .map(|r| {
                let (k, v) = r?;
                let rec: KeyRecord = dec(v.value(), "keys")?;
                Ok(rec.info(k.value(), now, ttl))
            })
            .collect()
    }

    /// The key ring at `now`: the signing key, a pending key (so verifiers learn it before it
    /// signs) and every superseded key not yet retired.
    pub fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_read()?;
        let t = tx.open_table(KEYS)?;
        let mut keys = Vec::new();
        let mut signing = None;
        for r in t.iter()? {
            let (k, v) = r?;
            let rec: KeyRecord = dec(v.value(), "keys")?;
            match rec.state(now, ttl) {
                KeyState::Retired => continue,
                KeyState::Signing => signing = Some(k.value()),
                KeyState::Pending | KeyState::Held | KeyState::Verifying => {}
            }
            let secret =
                Zeroizing::new(hex::decode(&rec.secret).map_err(|_| StoreError::Corrupt("keys"))?);
            keys.push(Key::from_slice(k.value(), &secret).ok_or(StoreError::Corrupt("keys"))?);
        }
        KeyRing::new(keys, signing).ok_or(StoreError::Corrupt("keys"))
    }

    /// Adds a new key that becomes the signing key `delay` seconds from `now`; until then it is
    /// published (in the ring and the filter configuration) but does not sign. The current signing
    /// key keeps verifying until it retires. Returns the new key id, or `None` while another
    /// rotation is still pending.
    pub fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        let rotated = {
            let mut t = tx.open_table(KEYS)?;
            let mut records = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                records.push((k.value(), dec::<KeyRecord>(v.value(), "keys")?));
            }
            let Some(plan) =
                RotationPlan::of(records.iter().map(|(k, r)| (*k, r)), now, delay, ttl)
            else {
                return Ok(None);
            };
            let last = records.last().map_or(0, |(k, _)| *k);
            for (kid, mut rec) in records {
                if plan.supersede.contains(&kid) {
                    rec.superseded_at = Some(plan.signs_from);
                } else if plan.drop_pending.contains(&kid) {
                    rec.retired_at = Some(now);
                } else {
                    continue;
                }
                t.insert(kid, enc(&rec).as_slice())?;
            }
            let kid = last + 1;
            let rec = KeyRecord {
                secret: hex::encode(*secrets::random32()),
                created_at: now,
                signs_from: plan.signs_from,
                superseded_at: None,
                retired_at: None,
            };
            t.insert(kid, enc(&rec).as_slice())?;
            Rotated {
                kid,
                dropped: plan.drop_pending,
            }
        };
        tx.commit()?;
        Ok(Some(rotated))
    }

    /// See [`Store::retire_key`].
    pub fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        let outcome = {
            let mut t = tx.open_table(KEYS)?;
            let found = t.get(kid)?.map(|v| dec::<KeyRecord>(v.value(), "keys"));
            match found {
                None => RetireOutcome::Unknown,
                Some(rec) => {
                    let mut rec = rec?;
                    let outcome = RetireOutcome::of(&rec, now, ttl);
                    if outcome == RetireOutcome::Retired {
                        rec.retired_at = Some(now);
                        t.insert(kid, enc(&rec).as_slice())?;
                    }
                    outcome
                }
            }
        };
        tx.commit()?;
        Ok(outcome)
    }

    /// See [`crate::store::SigningKeys::promote_key`].
    pub fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        {
            let mut t = tx.open_table(KEYS)?;
            let mut records = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                records.push((k.value(), dec::<KeyRecord>(v.value(), "keys")?));
            }
            let held = records.iter().find(|(k, _)| *k == kid).map(|(_, r)| r);
            let promotion = match Promotion::of(kid, held, now, ttl) {
                Ok(p) => p,
                Err(outcome) => return Ok(outcome),
            };
            for (k, mut rec) in records {
                if promotion.apply(k, &mut rec, now) {
                    t.insert(k, enc(&rec).as_slice())?;
                }
            }
        }
        tx.commit()?;
        Ok(PromoteOutcome::Promoted)
    }
}

#[async_trait::async_trait]
impl SigningKeys for RedbStore {
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        self.watch(self.file.key_infos(now))
    }

    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        self.watch(self.file.key_ring(now))
    }

    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError> {
        self.watch(self.file.rotate_key(now, delay))
    }

    async fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError> {
        self.watch(self.file.retire_key(kid, now))
    }

    async fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError> {
        self.watch(self.file.promote_key(kid, now))
    }
}
