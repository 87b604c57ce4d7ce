//! A backup file as [`Contents`], and [`Contents`] as a backup file: the embedded store's side of
//! a move to or from PostgreSQL ([`crate::store::contents`]).
//!
//! [`read_backup`] reads a backup whole and checks it as a restore does (its digest, its tables,
//! each record well formed) before it decodes anything; the refresh journal's entries are applied
//! over the family table, as the store does when it opens. [`write_backup`] writes the records
//! the embedded store would hold, every table in the order a backup of a data dir has them, so
//! that `issuer restore` makes a data dir of it as of any other backup.

use super::backup::{open_backup, walk, Sink, TableCopy};
use super::{
    enc, AUDIT, CLIENTS, EDGES, FAMILY_JOURNAL, FAMILY_RECORDS, KEYS, REVOCATIONS, SETTINGS, USERS,
};
use crate::store::backup::{BackupError, BackupWriter, Header, Summary};
use crate::store::contents::{Contents, MOVED_SETTINGS};
use crate::store::{ClientRecord, UserRecord};
use redb::{TableHandle, Value};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use zeroize::Zeroizing;

/// The records of one table of a backup.
type Records = Vec<(Vec<u8>, Zeroizing<Vec<u8>>)>;

/// Keeps every record, by table.
#[derive(Default)]
struct Collect {
    tables: BTreeMap<String, Records>,
    current: String,
}

impl Sink for Collect {
    fn table(&mut self, table: &TableCopy) -> Result<(), BackupError> {
        self.current.clone_from(&table.name);
        self.tables.entry(table.name.clone()).or_default();
        Ok(())
    }
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError> {
        self.tables
            .entry(self.current.clone())
            .or_default()
            .push((key.to_vec(), Zeroizing::new(value.to_vec())));
        Ok(())
    }
}

fn damaged(table: &str) -> BackupError {
    BackupError::Damaged(format!("a record of {table} does not decode"))
}

fn text(table: &str, bytes: &[u8]) -> Result<String, BackupError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| damaged(table))
}

fn json<T: DeserializeOwned>(table: &str, bytes: &[u8]) -> Result<T, BackupError> {
    serde_json::from_slice(bytes).map_err(|_| damaged(table))
}

/// A JSON record kept as its text, once it is known to decode as a `T`.
fn record<T: DeserializeOwned>(
    table: &str,
    bytes: &[u8],
) -> Result<Zeroizing<String>, BackupError> {
    json::<T>(table, bytes)?;
    Ok(Zeroizing::new(text(table, bytes)?))
}

fn family_id(table: &str, bytes: &[u8]) -> Result<[u8; 16], BackupError> {
    bytes.try_into().map_err(|_| damaged(table))
}

/// Reads the backup at `from` (checked whole first) into [`Contents`].
pub fn read_backup(from: &Path) -> Result<Contents, BackupError> {
    let mut reader = open_backup(from)?;
    let mut all = Collect::default();
    walk(&mut reader, &mut all)?;
    let mut tables = all.tables;
    let mut take = |name: &str| tables.remove(name).unwrap_or_default();
    let mut out = Contents::default();
    out.hash_key = Zeroizing::new(*reader.header.hash_key);
    for (k, v) in take(CLIENTS.name()) {
        out.clients
            .push((text("clients", &k)?, record::<ClientRecord>("clients", &v)?));
    }
    for (k, v) in take(USERS.name()) {
        out.users
            .push((text("users", &k)?, record::<UserRecord>("users", &v)?));
    }
    for (k, v) in take(KEYS.name()) {
        out.keys.push((u32::from_bytes(&k), json("keys", &v)?));
    }
    let mut families = BTreeMap::new();
    for (k, v) in take(FAMILY_RECORDS.name()) {
        let table = FAMILY_RECORDS.name();
        families.insert(family_id(table, &k)?, json(table, &v)?);
    }
    let mut journal = take(FAMILY_JOURNAL.name());
    journal.sort_by_key(|(k, _)| u64::from_bytes(k));
    for (_, v) in journal {
        // As the store reads its journal back: an entry that does not decode is skipped.
        let entry = v.get(..16).and_then(|id| {
            let fam = serde_json::from_slice(&v[16..]).ok()?;
            Some((<[u8; 16]>::try_from(id).ok()?, fam))
        });
        match entry {
            Some((id, fam)) => drop(families.insert(id, fam)),
            None => tracing::error!("a refresh journal entry does not decode; skipped"),
        }
    }
    out.families = families.into_iter().collect();
    for (k, v) in take(SETTINGS.name()) {
        let name = text("settings", &k)?;
        if MOVED_SETTINGS.contains(&name.as_str()) {
            out.settings.push((name, u64::from_bytes(&v)));
        }
    }
    for (_, v) in take(REVOCATIONS.name()) {
        out.revocations.push(json("revocations", &v)?);
    }
    for (k, v) in take(EDGES.name()) {
        out.edges.push((text("edges", &k)?, json("edges", &v)?));
    }
    for (k, v) in take(AUDIT.name()) {
        let (at, _) = <(u64, u64)>::from_bytes(&k);
        out.audit.push((at, text("audit", &v)?));
    }
    Ok(out)
}

/// Writes `contents` to `out` as a backup of a data dir taken at `taken_at`.
pub fn write_backup(
    contents: &Contents,
    out: &mut dyn Write,
    taken_at: u64,
) -> Result<Summary, BackupError> {
    let header = Header {
        taken_at,
        issuer_version: env!("CARGO_PKG_VERSION").to_owned(),
        hash_key: contents.hash_key.clone(),
    };
    let mut w = BackupWriter::start(out, &header)?;
    w.table(CLIENTS.name())?;
    for (id, rec) in &contents.clients {
        w.record(id.as_bytes(), rec.as_bytes())?;
    }
    w.table(USERS.name())?;
    for (name, rec) in &contents.users {
        w.record(name.as_bytes(), rec.as_bytes())?;
    }
    w.table(KEYS.name())?;
    for (kid, rec) in &contents.keys {
        w.record(&u32::as_bytes(kid), &Zeroizing::new(enc(rec)))?;
    }
    w.table(FAMILY_RECORDS.name())?;
    for (id, fam) in &contents.families {
        w.record(id, &enc(fam))?;
    }
    w.table(FAMILY_JOURNAL.name())?;
    w.table(SETTINGS.name())?;
    let mut settings = contents.settings.clone();
    if !contents.audit.is_empty() {
        settings.push(("audit_seq".into(), contents.audit.len() as u64));
    }
    for (name, value) in &settings {
        w.record(name.as_bytes(), &u64::as_bytes(value))?;
    }
    w.table(REVOCATIONS.name())?;
    for r in &contents.revocations {
        w.record(&u64::as_bytes(&r.seq), &enc(r))?;
    }
    w.table(EDGES.name())?;
    for (key, report) in &contents.edges {
        w.record(key.as_bytes(), &enc(report))?;
    }
    w.table(AUDIT.name())?;
    // Numbered in order, as the store numbers them (`audit_seq`).
    for (seq, (at, rec)) in (1u64..).zip(&contents.audit) {
        w.record(&<(u64, u64)>::as_bytes(&(*at, seq)), rec.as_bytes())?;
    }
    w.finish()
}
