//! Integrity of the records that grant power: a client's record (its secret hash, grants, edge and
//! impersonation flags, activation) and a user's (password hash, roles, claims, enabled state)
//! carry a MAC in their row's `mac` column, under a key derived from the hash key, which only the
//! key-encryption key opens. The MAC binds the table, the row's id and the whole record, so write
//! access to the database alone can neither change a record nor move one to another id. A record that fails it is refused, as if it did not exist, and logged as tampered.
//!
//! The store reads and writes these records only through the methods here.
//!
//! A row can still be put back to an earlier version of itself with the MAC it had then, or
//! deleted: the database's writers can undo and deny, not grant (`docs/deploy-postgres.md`).

use super::{revocations, serializable, to_json, PgStore};
use crate::secrets::HashKey;
use crate::store::revocation::Revoked;
use crate::store::storage::plain_search;
use crate::store::{Listed, RecordFilter, StoreError};
use hmac::{Hmac, KeyInit, Mac};
use serde::de::DeserializeOwned;
use sha2::Sha256;

/// The tables whose records carry a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    /// `clients`, by id.
    Clients,
    /// `users`, by name.
    Users,
}

impl Table {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Clients => "clients",
            Self::Users => "users",
        }
    }
}

/// The key records are MACed under.
pub(super) struct RecordKey(zeroize::Zeroizing<[u8; 32]>);

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordKey([redacted])")
    }
}

impl RecordKey {
    /// Derived from the hash key, so a KEK rotation (which re-seals the hash key) keeps it.
    pub(super) fn derive(hash_key: &HashKey) -> Self {
        Self(zeroize::Zeroizing::new(
            hash_key.derive(b"mms/record-mac/v1"),
        ))
    }

    fn mac(&self, table: Table, id: &str, record: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&*self.0).expect("HMAC takes any key");
        for part in [table.name().as_bytes(), id.as_bytes(), record.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// The MAC of `record` as row `id` of `table`.
    pub(super) fn tag(&self, table: Table, id: &str, record: &str) -> Vec<u8> {
        self.mac(table, id, record).finalize().into_bytes().to_vec()
    }

    /// `record` (row `id` of `table`, with the MAC it was read with) decoded, if its MAC is right
    /// (compared in constant time). A wrong or missing MAC is tampering: logged, and `None`.
    pub(super) fn open<T: DeserializeOwned>(
        &self,
        table: Table,
        id: &str,
        record: &str,
        tag: Option<&[u8]>,
    ) -> Result<Option<T>, StoreError> {
        let genuine = tag.is_some_and(|t| self.mac(table, id, record).verify_slice(t).is_ok());
        if !genuine {
            tracing::error!(
                table = table.name(),
                id,
                "record tampered: its integrity check failed, so it is refused (written to the \
                 database without the key-encryption key?)"
            );
            return Ok(None);
        }
        serde_json::from_str(record)
            .map(Some)
            .map_err(|_| StoreError::Corrupt(table.name()))
    }
}

/// Rows a page reads at a time when it must read past rows it does not choose.
const PAGE_BATCH: usize = 500;

impl PgStore {
    pub(super) async fn insert_record(
        &self,
        table: Table,
        name: &str,
        json: String,
    ) -> Result<bool, StoreError> {
        let sql = match table {
            Table::Clients => {
                "INSERT INTO clients (id, record, mac) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
            }
            Table::Users => {
                "INSERT INTO users (name, record, mac) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
            }
        };
        let tag = self.records.tag(table, name, &json);
        let inserted = serializable!(self, |tx| { tx.execute(sql, &[&name, &json, &tag]).await? })?;
        Ok(inserted == 1)
    }

    /// Row `id` of `table`, if it exists and is genuine ([`records`]).
    pub(super) async fn read_record<T: serde::de::DeserializeOwned>(
        &self,
        table: Table,
        id: &str,
    ) -> Result<Option<T>, StoreError> {
        let sql = match table {
            Table::Clients => "SELECT record, mac FROM clients WHERE id = $1",
            Table::Users => "SELECT record, mac FROM users WHERE name = $1",
        };
        let conn = self.connection().await?;
        match conn.query_opt(sql, &[&id]).await? {
            None => Ok(None),
            Some(r) => self.records.open(table, id, r.get(0), r.get(1)),
        }
    }

    /// Every genuine row of `table`, by id; tampered ones are logged and left out.
    pub(super) async fn read_records<T: serde::de::DeserializeOwned>(
        &self,
        table: Table,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let sql = match table {
            Table::Clients => "SELECT id, record, mac FROM clients ORDER BY id",
            Table::Users => "SELECT name, record, mac FROM users ORDER BY name",
        };
        let conn = self.connection().await?;
        let mut out = Vec::new();
        for r in conn.query(sql, &[]).await? {
            let id: String = r.get(0);
            if let Some(rec) = self.records.open(table, &id, r.get(1), r.get(2))? {
                out.push((id, rec));
            }
        }
        Ok(out)
    }

    /// The genuine rows of `table` that `filter` selects, in the order of their ids' bytes (the
    /// `C` collation, whatever the database's, as the embedded store orders them): read from
    /// `filter.after` on in batches of [`PAGE_BATCH`] (or the page's size), each row decoded to
    /// be chosen and only a chosen one checked against its MAC. A plain search
    /// ([`plain_search`]) leaves the database the rows that cannot match.
    pub(super) async fn read_page<T: DeserializeOwned + Listed>(
        &self,
        table: Table,
        filter: &RecordFilter<'_, T>,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let sql = match table {
            Table::Clients => {
                "SELECT id, record, mac FROM clients WHERE id COLLATE \"C\" > $1 \
                 AND ($2::text IS NULL OR strpos(lower(id || ' ' || record), $2) > 0) \
                 ORDER BY id COLLATE \"C\" LIMIT $3"
            }
            Table::Users => {
                "SELECT name, record, mac FROM users WHERE name COLLATE \"C\" > $1 \
                 AND ($2::text IS NULL OR strpos(lower(name || ' ' || record), $2) > 0) \
                 ORDER BY name COLLATE \"C\" LIMIT $3"
            }
        };
        let mut page = Vec::new();
        if filter.limit == 0 {
            return Ok(page);
        }
        let batch = filter.limit.max(PAGE_BATCH);
        // The database looks for plain text in the row's id and JSON; the rest only here (its
        // `lower` may not lower other text as Rust does).
        let text = filter.text.filter(|t| plain_search(t));
        // Every key is after the empty one: the condition stays one the key's index answers.
        let mut after = filter.after.unwrap_or_default().to_owned();
        let conn = self.connection().await?;
        let select = conn.prepare_cached(sql).await?;
        loop {
            let limit = i64::try_from(batch).unwrap_or(i64::MAX);
            let rows = conn.query(&select, &[&after, &text, &limit]).await?;
            for r in &rows {
                let (id, record): (&str, &str) = (r.get(0), r.get(1));
                // One that does not decode is opened all the same: refused as tampered, or
                // reported as damaged.
                match serde_json::from_str::<T>(record) {
                    Ok(chosen) if !filter.selects(id, &chosen) => continue,
                    _ => {}
                }
                if let Some(rec) = self.records.open(table, id, record, r.get(2))? {
                    page.push((id.to_owned(), rec));
                    if page.len() >= filter.limit {
                        return Ok(page);
                    }
                }
            }
            match rows.last() {
                Some(last) if rows.len() >= batch => after = last.get(0),
                _ => return Ok(page),
            }
        }
    }

    /// Changes row `id` of `table` with `change` in a transaction that also records what it
    /// revokes. False if there is no such row; an error if the row is not genuine, so that a
    /// change through the issuer never gives a tampered record a valid MAC.
    pub(super) async fn update_record<T>(
        &self,
        table: Table,
        id: &str,
        change: impl Fn(&mut T),
        revokes: Option<Revoked>,
        now: u64,
    ) -> Result<bool, StoreError>
    where
        T: serde::de::DeserializeOwned + serde::Serialize,
    {
        let (select, update) = match table {
            Table::Clients => (
                "SELECT record, mac FROM clients WHERE id = $1 FOR UPDATE",
                "UPDATE clients SET record = $2, mac = $3 WHERE id = $1",
            ),
            Table::Users => (
                "SELECT record, mac FROM users WHERE name = $1 FOR UPDATE",
                "UPDATE users SET record = $2, mac = $3 WHERE name = $1",
            ),
        };
        serializable!(self, |tx| {
            match tx.query_opt(select, &[&id]).await? {
                None => false,
                Some(row) => {
                    let mut rec: T = self
                        .records
                        .open(table, id, row.get(0), row.get(1))?
                        .ok_or(StoreError::Tampered(table.name()))?;
                    change(&mut rec);
                    let json = to_json(&rec);
                    let tag = self.records.tag(table, id, &json);
                    tx.execute(update, &[&id, &json, &tag]).await?;
                    if let Some(what) = revokes.clone() {
                        revocations::revoke_in(&tx, what, now, None).await?;
                    }
                    true
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_looks_only_for_text_json_keeps_as_it_is() {
        assert!(plain_search("acme app-1"));
        assert!(!plain_search("a\"b"));
        assert!(!plain_search("a\\b"));
        assert!(!plain_search("émile"));
        assert!(!plain_search("tab\there"));
        let raw = br#"{"vendor":"Acme","client_name":"Photo Tool"}"#;
        assert!(crate::store::may_hold(raw, "photo t"));
        assert!(!crate::store::may_hold(raw, "video"));
        assert!(crate::store::may_hold(
            "{\"n\":\"émile\"}".as_bytes(),
            "video"
        ));
    }

    #[test]
    fn a_record_opens_only_unchanged_at_its_own_id() {
        let key = RecordKey::derive(&HashKey::new(zeroize::Zeroizing::new([7; 32])));
        let rec = r#"{"edge":false}"#;
        let tag = key.tag(Table::Clients, "app", rec);
        let open = |t: Table, id: &str, r: &str, tag: Option<&[u8]>| {
            key.open::<serde_json::Value>(t, id, r, tag).unwrap()
        };
        assert!(open(Table::Clients, "app", rec, Some(&tag)).is_some());
        assert!(open(Table::Clients, "app", r#"{"edge":true}"#, Some(&tag)).is_none());
        assert!(open(Table::Clients, "other", rec, Some(&tag)).is_none());
        assert!(open(Table::Users, "app", rec, Some(&tag)).is_none());
        assert!(open(Table::Clients, "app", rec, None).is_none());
        assert!(open(Table::Clients, "app", rec, Some(&tag[..31])).is_none());
        let other = RecordKey::derive(&HashKey::new(zeroize::Zeroizing::new([8; 32])));
        assert_ne!(other.tag(Table::Clients, "app", rec), tag);
        assert!(!format!("{key:?}").contains('7'));
    }
}
