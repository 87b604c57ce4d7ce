//! Signing keys on PostgreSQL: each sealed under the key-encryption key in its row, opened when
//! read; and re-sealing every secret, the second step of a KEK rotation.

use super::{serializable, uint, PgStore};
use crate::store::keys::KeyRecord;
use crate::store::StoreError;

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
                Ok((
                    kid,
                    KeyRecord {
                        secret: hex::encode(secret.as_slice()),
                        created_at: uint(r.get(2)),
                        signs_from: uint(r.get(3)),
                        superseded_at: r.get::<_, Option<i64>>(4).map(uint),
                        retired_at: r.get::<_, Option<i64>>(5).map(uint),
                    },
                ))
            })
            .collect()
    }
}
