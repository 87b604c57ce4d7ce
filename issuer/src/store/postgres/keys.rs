//! [`SigningKeys`] for [`PgStore`].
//!
//! Signing keys on PostgreSQL: each sealed under the key-encryption key in its row, opened when
//! read; and re-sealing every secret, the second step of a KEK rotation.

use super::{int, serializable, uint, PgStore};
use crate::secrets;
use crate::store::keys::{
    KeyRecord, PromoteOutcome, Promotion, RetireOutcome, Rotated, RotationPlan,
};
use crate::store::{AccessLifetime, KeyInfo, KeyState, SigningKeys, StoreError};
use shared::{Key, KeyRing};
use zeroize::Zeroizing;

/// A key's record from `row`, whose columns from `at` on are `created_at, signs_from,
/// superseded_at, retired_at`, with `secret`.
pub(super) fn key_record(row: &tokio_postgres::Row, at: usize, secret: String) -> KeyRecord {
    KeyRecord {
        secret,
        created_at: uint(row.get(at)),
        signs_from: uint(row.get(at + 1)),
        superseded_at: row.get::<_, Option<i64>>(at + 2).map(uint),
        retired_at: row.get::<_, Option<i64>>(at + 3).map(uint),
    }
}

/// Every key's times, by id, locked for the transaction `tx` (the secrets are not read).
async fn locked_keys(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<Vec<(u32, KeyRecord)>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT kid, created_at, signs_from, superseded_at, retired_at \
             FROM signing_keys ORDER BY kid FOR UPDATE",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let kid = u32::try_from(r.get::<_, i32>(0)).ok()?;
            Some((kid, key_record(r, 1, String::new())))
        })
        .collect())
}

impl PgStore {
    /// Re-seals every sealed secret under the current KEK (opened with the current or the previous
    /// one), in one transaction: the second step of a KEK rotation. Returns how many were sealed.
    pub async fn reseal(&self) -> Result<u64, StoreError> {
        serializable!(self, |tx| {
            let mut n = 0u64;
            for r in tx
                .query("SELECT name, sealed FROM sealed_secrets FOR UPDATE", &[])
                .await?
            {
                let name: String = r.get(0);
                let plain = self
                    .kek
                    .open(&name, &r.get::<_, Vec<u8>>(1), "sealed secret")?;
                let sealed = self.kek.seal(&name, &plain);
                tx.execute(
                    "UPDATE sealed_secrets SET sealed = $2 WHERE name = $1",
                    &[&name, &sealed],
                )
                .await?;
                n += 1;
            }
            for r in tx
                .query("SELECT kid, sealed FROM signing_keys FOR UPDATE", &[])
                .await?
            {
                let kid: i32 = r.get(0);
                let purpose = format!("signing-key/{kid}");
                let plain = self
                    .kek
                    .open(&purpose, &r.get::<_, Vec<u8>>(1), "signing key")?;
                let sealed = self.kek.seal(&purpose, &plain);
                tx.execute(
                    "UPDATE signing_keys SET sealed = $2 WHERE kid = $1",
                    &[&kid, &sealed],
                )
                .await?;
                n += 1;
            }
            n
        })
    }

    /// Every key row with its opened record, by kid.
    pub(super) async fn key_records(&self) -> Result<Vec<(u32, KeyRecord)>, StoreError> {
        let conn = self.connection().await?;
        let rows = conn
            .query(
                "SELECT kid, sealed, created_at, signs_from, superseded_at, retired_at \
                 FROM signing_keys ORDER BY kid",
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let kid =
                    u32::try_from(r.get::<_, i32>(0)).map_err(|_| StoreError::Corrupt("keys"))?;
                let secret = self.kek.open(
                    &format!("signing-key/{kid}"),
                    &r.get::<_, Vec<u8>>(1),
                    "signing key",
                )?;
                Ok((kid, key_record(r, 2, hex::encode(secret.as_slice()))))
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl SigningKeys for PgStore {
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        let ttl = self.access_ttl().await?;
        Ok(self
            .key_records()
            .await?
            .iter()
            .map(|(kid, rec)| rec.info(*kid, now, ttl))
            .collect())
    }

    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        let ttl = self.access_ttl().await?;
        let mut keys = Vec::new();
        let mut signing = None;
        for (kid, rec) in self.key_records().await? {
            match rec.state(now, ttl) {
                KeyState::Retired => continue,
                KeyState::Signing => signing = Some(kid),
                KeyState::Pending | KeyState::Held | KeyState::Verifying => {}
            }
            let secret =
                Zeroizing::new(hex::decode(&rec.secret).map_err(|_| StoreError::Corrupt("keys"))?);
            keys.push(Key::from_slice(kid, &secret).ok_or(StoreError::Corrupt("keys"))?);
        }
        KeyRing::new(keys, signing).ok_or(StoreError::Corrupt("keys"))
    }

    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError> {
        let ttl = self.access_ttl().await?;
        let secret = secrets::random32();
        serializable!(self, |tx| {
            let records = locked_keys(&tx).await?;
            let plan = RotationPlan::of(records.iter().map(|(k, r)| (*k, r)), now, delay, ttl);
            match plan {
                None => None,
                Some(plan) => {
                    let switch_at = int(plan.signs_from);
                    for kid in &plan.supersede {
                        tx.execute(
                            "UPDATE signing_keys SET superseded_at = $2 WHERE kid = $1",
                            &[&i32::try_from(*kid).unwrap_or(i32::MAX), &switch_at],
                        )
                        .await?;
                    }
                    for kid in &plan.drop_pending {
                        tx.execute(
                            "UPDATE signing_keys SET retired_at = $2 WHERE kid = $1",
                            &[&i32::try_from(*kid).unwrap_or(i32::MAX), &int(now)],
                        )
                        .await?;
                    }
                    let kid = records.last().map_or(0, |(k, _)| *k) + 1;
                    let row_kid = i32::try_from(kid).map_err(|_| StoreError::Corrupt("keys"))?;
                    let sealed = self
                        .kek
                        .seal(&format!("signing-key/{kid}"), secret.as_slice());
                    tx.execute(
                        "INSERT INTO signing_keys (kid, sealed, created_at, signs_from) \
                         VALUES ($1, $2, $3, $4)",
                        &[&row_kid, &sealed, &int(now), &switch_at],
                    )
                    .await?;
                    Some(Rotated {
                        kid,
                        dropped: plan.drop_pending.clone(),
                    })
                }
            }
        })
    }

    async fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError> {
        let ttl = self.access_ttl().await?;
        serializable!(self, |tx| {
            let records = locked_keys(&tx).await?;
            let held = records.iter().find(|(k, _)| *k == kid).map(|(_, r)| r);
            match Promotion::of(kid, held, now, ttl) {
                Err(outcome) => outcome,
                Ok(promotion) => {
                    for (k, mut rec) in records {
                        if promotion.apply(k, &mut rec, now) {
                            tx.execute(
                                "UPDATE signing_keys SET signs_from = $2, superseded_at = $3 \
                                 WHERE kid = $1",
                                &[
                                    &i32::try_from(k).unwrap_or(i32::MAX),
                                    &int(rec.signs_from),
                                    &rec.superseded_at.map(int),
                                ],
                            )
                            .await?;
                        }
                    }
                    PromoteOutcome::Promoted
                }
            }
        })
    }

    async fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError> {
        let ttl = self.access_ttl().await?;
        let kid = i32::try_from(kid).map_err(|_| StoreError::Corrupt("keys"))?;
        serializable!(self, |tx| {
            let row = tx
                .query_opt(
                    "SELECT created_at, signs_from, superseded_at, retired_at FROM signing_keys \
                     WHERE kid = $1 FOR UPDATE",
                    &[&kid],
                )
                .await?;
            match row {
                None => RetireOutcome::Unknown,
                Some(r) => {
                    let rec = key_record(&r, 0, String::new());
                    let outcome = RetireOutcome::of(&rec, now, ttl);
                    if outcome == RetireOutcome::Retired {
                        tx.execute(
                            "UPDATE signing_keys SET retired_at = $2 WHERE kid = $1",
                            &[&kid, &int(now)],
                        )
                        .await?;
                    }
                    outcome
                }
            }
        })
    }
}
