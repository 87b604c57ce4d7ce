//! The whole database as [`Contents`] (`issuer backup --store URL`), read in one REPEATABLE READ,
//! read-only transaction: one consistent snapshot, whatever the issuers serving on it write
//! meanwhile.
//!
//! Sealed secrets are opened with the key-encryption key (the signing keys and the hash key leave
//! in the clear, as a data dir's backup holds them); a client or user record whose MAC does not
//! verify stops the backup ([`StoreError::Tampered`]) rather than being left out of it.

use super::records::{RecordKey, Table};
use super::revocations::from_column;
use super::schema::{hash_key_of, HASH_KEY};
use super::{keys::key_record, uint, PgStore};
use crate::store::contents::{Contents, MOVED_SETTINGS};
use crate::store::family::Family;
use crate::store::revocation::Revocation;
use crate::store::{ClientRecord, StoreError, UserRecord};
use tokio_postgres::Transaction;
use zeroize::Zeroizing;

impl PgStore {
    /// Every record of the database, as of one snapshot (see the module's documentation).
    pub async fn export(&self) -> Result<Contents, StoreError> {
        let mut conn = self.connection().await?;
        let tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let mut out = Contents::default();
        self.secrets(&tx, &mut out).await?;
        let records = RecordKey::derive(&hash_key_of(out.hash_key.as_slice())?);
        out.clients = genuine::<ClientRecord>(&tx, &records, Table::Clients).await?;
        out.users = genuine::<UserRecord>(&tx, &records, Table::Users).await?;
        out.families = families(&tx).await?;
        rest(&tx, &mut out).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// The hash key and the signing keys, opened with the KEK.
    async fn secrets(&self, tx: &Transaction<'_>, out: &mut Contents) -> Result<(), StoreError> {
        let sealed: Vec<u8> = tx
            .query_opt(
                "SELECT sealed FROM sealed_secrets WHERE name = $1",
                &[&HASH_KEY],
            )
            .await?
            .ok_or(StoreError::Corrupt("sealed_secrets"))?
            .get(0);
        let plain = self.kek.open(HASH_KEY, &sealed, "hash key")?;
        out.hash_key = Zeroizing::new(
            plain
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt("sealed hash key"))?,
        );
        let rows = tx
            .query(
                "SELECT kid, sealed, created_at, signs_from, superseded_at, retired_at \
                 FROM signing_keys ORDER BY kid",
                &[],
            )
            .await?;
        for r in &rows {
            let kid = u32::try_from(r.get::<_, i32>(0)).map_err(|_| StoreError::Corrupt("keys"))?;
            let secret = self.kek.open(
                &format!("signing-key/{kid}"),
                &r.get::<_, Vec<u8>>(1),
                "signing key",
            )?;
            out.keys
                .push((kid, key_record(r, 2, hex::encode(secret.as_slice()))));
        }
        Ok(())
    }
}

/// Every row of `table`, its record as stored, once its MAC verifies and it decodes as a `T`.
async fn genuine<T: serde::de::DeserializeOwned>(
    tx: &Transaction<'_>,
    records: &RecordKey,
    table: Table,
) -> Result<Vec<(String, Zeroizing<String>)>, StoreError> {
    let sql = match table {
        Table::Clients => "SELECT id, record, mac FROM clients ORDER BY id",
        Table::Users => "SELECT name, record, mac FROM users ORDER BY name",
    };
    let mut out = Vec::new();
    for r in tx.query(sql, &[]).await? {
        let (id, record): (String, String) = (r.get(0), r.get(1));
        let record = Zeroizing::new(record);
        match records.open::<T>(table, &id, &record, r.get(2))? {
            Some(_) => out.push((id, record)),
            None => return Err(StoreError::Tampered(table.name())),
        }
    }
    Ok(out)
}

async fn families(tx: &Transaction<'_>) -> Result<Vec<([u8; 16], Family)>, StoreError> {
    let rows = tx
        .query(
            "SELECT id, client, username, created_at, absolute_expires_at, expires_at, \
             generation, rotated_at, revoked_at, jkt FROM refresh_family_records ORDER BY id",
            &[],
        )
        .await?;
    let corrupt = || StoreError::Corrupt("refresh_family_records");
    rows.iter()
        .map(|r| {
            let id: [u8; 16] = r.get::<_, &[u8]>(0).try_into().map_err(|_| corrupt())?;
            let fam = Family {
                client: r.get(1),
                user: r.get(2),
                created_at: uint(r.get(3)),
                absolute_expires_at: uint(r.get(4)),
                expires_at: uint(r.get(5)),
                generation: u32::try_from(r.get::<_, i64>(6)).map_err(|_| corrupt())?,
                rotated_at: r.get::<_, Option<i64>>(7).map(uint),
                revoked_at: r.get::<_, Option<i64>>(8).map(uint),
                jkt: match r.get::<_, Option<&[u8]>>(9) {
                    None => None,
                    Some(b) => Some(<[u8; 32]>::try_from(b).map_err(|_| corrupt())?),
                },
            };
            Ok((id, fam))
        })
        .collect()
}

/// The revocations, the edges' reports, the audit trail and the settings.
async fn rest(tx: &Transaction<'_>, out: &mut Contents) -> Result<(), StoreError> {
    for r in tx
        .query("SELECT entry, stamp FROM revocations ORDER BY seq", &[])
        .await?
    {
        let entry: Revocation =
            serde_json::from_str(r.get(0)).map_err(|_| StoreError::Corrupt("revocations"))?;
        let stamp = r.get::<_, Option<i64>>(1).map(from_column);
        out.revocations.push(Revocation { stamp, ..entry });
    }
    for r in tx
        .query("SELECT key, report FROM edges ORDER BY key", &[])
        .await?
    {
        let report = serde_json::from_str(r.get(1)).map_err(|_| StoreError::Corrupt("edges"))?;
        out.edges.push((r.get(0), report));
    }
    for r in tx
        .query("SELECT at, record FROM audit ORDER BY at, id", &[])
        .await?
    {
        out.audit.push((uint(r.get(0)), r.get(1)));
    }
    let names: Vec<&str> = MOVED_SETTINGS.to_vec();
    for r in tx
        .query(
            "SELECT name, value FROM settings WHERE name = ANY($1) ORDER BY name",
            &[&names],
        )
        .await?
    {
        out.settings.push((r.get(0), uint(r.get(1))));
    }
    Ok(())
}
