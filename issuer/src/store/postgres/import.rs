//! [`Contents`] loaded into an empty database (`issuer restore --store URL`), in one
//! SERIALIZABLE transaction: all of it, or nothing.
//!
//! Empty means as a new database is once an issuer has opened it: its schema, its hash key and
//! its first signing key, and nothing else (no client, user, family, revocation, edge report,
//! audit event, second key); that hash key and key are replaced by the backup's. A database that
//! holds more is refused, naming what it holds, and so is one an issuer serves on (its readiness
//! probe wrote within [`SERVING_WINDOW`] seconds): a serving issuer keeps the hash key it opened.
//!
//! Secrets are sealed under the key-encryption key before the transaction begins, and the client
//! and user records get their MACs under the backup's hash key ([`super::records`]).

use super::records::{RecordKey, Table};
use super::revocations::to_column;
use super::schema::HASH_KEY;
use super::{int, serializable, to_json, PgStore};
use crate::secrets::HashKey;
use crate::store::backup::BackupError;
use crate::store::contents::{describe_counts, Contents, MOVED_SETTINGS};
use crate::store::revocation::Revocation;
use crate::store::StoreError;
use tokio_postgres::Transaction;
use zeroize::Zeroizing;

/// Seconds since an issuer's readiness probe last wrote within which it counts as serving.
pub const SERVING_WINDOW: u64 = 15;

/// The rows to insert, column by column, secrets sealed and records MACed.
#[derive(Default)]
struct Rows {
    hash_key: Vec<u8>,
    keys: (Vec<i32>, Vec<Vec<u8>>, Vec<i64>, Vec<i64>),
    key_ends: (Vec<Option<i64>>, Vec<Option<i64>>),
    clients: (Vec<String>, Vec<String>, Vec<Vec<u8>>),
    users: (Vec<String>, Vec<String>, Vec<Vec<u8>>),
    families: Families,
    revocations: (Vec<i64>, Vec<String>, Vec<i64>, Vec<Option<i64>>),
    edges: (Vec<String>, Vec<String>, Vec<i64>, Vec<String>),
    audit: (Vec<i64>, Vec<i64>, Vec<String>),
    settings: (Vec<String>, Vec<i64>),
}

/// The columns of `refresh_family_records`.
#[derive(Default)]
struct Families {
    id: Vec<Vec<u8>>,
    client: Vec<String>,
    user: Vec<String>,
    times: [Vec<i64>; 4],
    ends: [Vec<Option<i64>>; 2],
    jkt: Vec<Option<Vec<u8>>>,
}

impl Drop for Rows {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for record in self.clients.1.iter_mut().chain(self.users.1.iter_mut()) {
            record.zeroize();
        }
    }
}

impl Rows {
    fn of(c: &Contents, store: &PgStore) -> Result<Self, BackupError> {
        let mut rows = Rows::default();
        rows.hash_key = store.kek.seal(HASH_KEY, c.hash_key.as_slice());
        for (kid, rec) in &c.keys {
            let secret = Zeroizing::new(hex::decode(&rec.secret).map_err(|_| {
                BackupError::Damaged(format!("signing key {kid} is not a hex secret"))
            })?);
            let kid = i32::try_from(*kid)
                .map_err(|_| BackupError::Damaged(format!("signing key id {kid}")))?;
            rows.keys.0.push(kid);
            rows.keys
                .1
                .push(store.kek.seal(&format!("signing-key/{kid}"), &secret));
            rows.keys.2.push(int(rec.created_at));
            rows.keys.3.push(int(rec.signs_from));
            rows.key_ends.0.push(rec.superseded_at.map(int));
            rows.key_ends.1.push(rec.retired_at.map(int));
        }
        let macs = RecordKey::derive(&HashKey::new(c.hash_key.clone()));
        for (table, records, cols) in [
            (Table::Clients, &c.clients, &mut rows.clients),
            (Table::Users, &c.users, &mut rows.users),
        ] {
            for (id, record) in records {
                cols.2.push(macs.tag(table, id, record));
                cols.0.push(id.clone());
                cols.1.push(record.as_str().to_owned());
            }
        }
        rows.add_families(c);
        rows.add_rest(c);
        Ok(rows)
    }

    fn add_families(&mut self, c: &Contents) {
        let f = &mut self.families;
        for (id, fam) in &c.families {
            f.id.push(id.to_vec());
            f.client.push(fam.client.clone());
            f.user.push(fam.user.clone());
            let times = [
                fam.created_at,
                fam.absolute_expires_at,
                fam.expires_at,
                u64::from(fam.generation),
            ];
            for (col, v) in f.times.iter_mut().zip(times) {
                col.push(int(v));
            }
            f.ends[0].push(fam.rotated_at.map(int));
            f.ends[1].push(fam.revoked_at.map(int));
            f.jkt.push(fam.jkt.map(|k| k.to_vec()));
        }
    }

    fn add_rest(&mut self, c: &Contents) {
        for r in &c.revocations {
            // The stamp is its own column; the entry's JSON is as the store writes it.
            let entry = Revocation {
                stamp: None,
                ..r.clone()
            };
            self.revocations.0.push(int(r.seq));
            self.revocations.1.push(to_json(&entry));
            self.revocations.2.push(int(r.until));
            self.revocations.3.push(r.stamp.map(to_column));
        }
        for (key, report) in &c.edges {
            self.edges.0.push(key.clone());
            self.edges.1.push(report.client.clone());
            self.edges.2.push(int(report.last_seen));
            self.edges.3.push(to_json(report));
        }
        // Numbered in order, so that events of one second keep the order they had.
        for (seq, (at, record)) in (1i64..).zip(&c.audit) {
            self.audit.0.push(int(*at));
            self.audit.1.push(seq);
            self.audit.2.push(record.clone());
        }
        for (name, value) in &c.settings {
            self.settings.0.push(name.clone());
            self.settings.1.push(int(*value));
        }
    }
}

impl PgStore {
    /// Loads `contents` into this database, which must be empty (see the module's
    /// documentation), in one transaction; `now` tells a serving issuer's probe from an old one.
    pub async fn import(&self, contents: &Contents, now: u64) -> Result<(), BackupError> {
        let rows = Rows::of(contents, self)?;
        // A restore of a large store takes as long as it takes: no bound.
        let refused = serializable!(self, within None, |tx| {
            match refusal(&tx, now).await? {
                Some(refused) => Some(refused),
                None => {
                    insert(&tx, &rows).await?;
                    None
                }
            }
        })?;
        if let Some(refused) = refused {
            return Err(refused);
        }
        // The planner's statistics of the tables just filled, so the first queries use their
        // indexes (a page of families walks the key's index rather than sorting the table).
        // Autovacuum would take them later; without them nothing is wrong, only slower.
        let analyzed = match self.connection().await {
            Ok(conn) => conn
                .batch_execute("ANALYZE clients; ANALYZE users; ANALYZE refresh_family_records")
                .await
                .map_err(StoreError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = analyzed {
            tracing::warn!(error = %e, "the restored tables were not analyzed");
        }
        Ok(())
    }
}

/// Why the database cannot take a restore, if it cannot.
async fn refusal(tx: &Transaction<'_>, now: u64) -> Result<Option<BackupError>, StoreError> {
    let r = tx
        .query_one(
            "SELECT (SELECT count(*) FROM clients), (SELECT count(*) FROM users), \
             (SELECT count(*) FROM signing_keys), (SELECT count(*) FROM refresh_family_records), \
             (SELECT count(*) FROM revocations), (SELECT count(*) FROM edges), \
             (SELECT count(*) FROM audit), \
             (SELECT max(value) FROM settings WHERE name = 'revocation_seq'), \
             (SELECT max(at) FROM liveness)",
            &[],
        )
        .await?;
    let count = |i: usize| usize::try_from(r.get::<_, i64>(i)).unwrap_or(usize::MAX);
    let keys = count(2);
    let held: Vec<(usize, &str)> = [
        (count(0), "client"),
        (count(1), "user"),
        (if keys > 1 { keys } else { 0 }, "signing key"),
        (count(3), "refresh family"),
        (count(4), "revocation"),
        (count(5), "edge report"),
        (count(6), "audit event"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .collect();
    let numbered = r.get::<_, Option<i64>>(7).unwrap_or(0) > 0;
    if !held.is_empty() || numbered {
        let mut what = describe_counts(&held);
        if numbered {
            what.push_str(if what.is_empty() { "" } else { ", " });
            what.push_str("revocation numbers given out");
        }
        return Ok(Some(BackupError::DatabaseNotEmpty(what)));
    }
    if let Some(at) = r.get::<_, Option<i64>>(8) {
        let ago = now.saturating_sub(super::uint(at));
        if ago < SERVING_WINDOW {
            return Ok(Some(BackupError::Serving(ago)));
        }
    }
    Ok(None)
}

/// Replaces the new database's secrets and settings with the backup's, and inserts the rest.
async fn insert(tx: &Transaction<'_>, rows: &Rows) -> Result<(), StoreError> {
    let moved: Vec<&str> = MOVED_SETTINGS.to_vec();
    tx.execute("DELETE FROM signing_keys", &[]).await?;
    tx.execute("DELETE FROM sealed_secrets", &[]).await?;
    tx.execute("DELETE FROM settings WHERE name = ANY($1)", &[&moved])
        .await?;
    tx.execute(
        "INSERT INTO sealed_secrets (name, sealed) VALUES ($1, $2)",
        &[&HASH_KEY, &rows.hash_key],
    )
    .await?;
    let k = &rows.keys;
    tx.execute(
        "INSERT INTO signing_keys (kid, sealed, created_at, signs_from, superseded_at, \
         retired_at) SELECT * FROM unnest($1::int[], $2::bytea[], $3::bigint[], $4::bigint[], \
         $5::bigint[], $6::bigint[])",
        &[&k.0, &k.1, &k.2, &k.3, &rows.key_ends.0, &rows.key_ends.1],
    )
    .await?;
    for (table, id, cols) in [
        ("clients", "id", &rows.clients),
        ("users", "name", &rows.users),
    ] {
        let sql = format!(
            "INSERT INTO {table} ({id}, record, mac) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])"
        );
        tx.execute(sql.as_str(), &[&cols.0, &cols.1, &cols.2])
            .await?;
    }
    let f = &rows.families;
    tx.execute(
        "INSERT INTO refresh_family_records (id, client, username, created_at, \
         absolute_expires_at, expires_at, generation, rotated_at, revoked_at, jkt) \
         SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bytea[])",
        &[
            &f.id,
            &f.client,
            &f.user,
            &f.times[0],
            &f.times[1],
            &f.times[2],
            &f.times[3],
            &f.ends[0],
            &f.ends[1],
            &f.jkt,
        ],
    )
    .await?;
    insert_rest(tx, rows).await
}

async fn insert_rest(tx: &Transaction<'_>, rows: &Rows) -> Result<(), StoreError> {
    let r = &rows.revocations;
    tx.execute(
        "INSERT INTO revocations (seq, entry, until, stamp) \
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[])",
        &[&r.0, &r.1, &r.2, &r.3],
    )
    .await?;
    let e = &rows.edges;
    tx.execute(
        "INSERT INTO edges (key, client, last_seen, report) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])",
        &[&e.0, &e.1, &e.2, &e.3],
    )
    .await?;
    let a = &rows.audit;
    tx.execute(
        "INSERT INTO audit (at, id, record) \
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[])",
        &[&a.0, &a.1, &a.2],
    )
    .await?;
    let s = &rows.settings;
    tx.execute(
        "INSERT INTO settings (name, value) SELECT * FROM unnest($1::text[], $2::bigint[])",
        &[&s.0, &s.1],
    )
    .await?;
    Ok(())
}
