//! [`Edges`] for [`RedbStore`].
//!
//! The edges' reports in the redb file: one JSON record per edge, by edge client, node and VM
//! ([`crate::store::edges`]).

use super::{dec, enc, RedbFile, RedbStore, EDGES};
use crate::store::edges::{folded, Admission, EdgeReport};
use crate::store::{Edges, StoreError};
use redb::{ReadableTable, Table};
use std::collections::HashMap;

/// The edges `t` holds, by key, once the damaged and those last seen before `forget_before` are
/// dropped, and those filed under another key (by an earlier version, by node and VM alone) are
/// filed again under theirs.
fn live(
    t: &mut Table<'_, &str, &[u8]>,
    forget_before: u64,
) -> Result<HashMap<String, EdgeReport>, StoreError> {
    let (mut held, mut dropped, mut refiled, mut damaged) =
        (HashMap::new(), Vec::new(), Vec::new(), 0);
    for r in t.iter()? {
        let (k, v) = r?;
        let key = k.value().to_owned();
        let Ok(e) = dec::<EdgeReport>(v.value(), "edges") else {
            damaged += 1;
            dropped.push(key);
            continue;
        };
        if e.last_seen < forget_before || key != e.key() {
            dropped.push(key.clone());
        }
        if e.last_seen >= forget_before {
            if key != e.key() {
                refiled.push(e.key());
            }
            let e = match held.remove(&e.key()) {
                Some(other) => e.merged_over(&other),
                None => e,
            };
            held.insert(e.key(), e);
        }
    }
    if damaged > 0 {
        tracing::error!(count = damaged, "edge reports that do not decode, dropped");
    }
    for key in dropped {
        t.remove(key.as_str())?;
    }
    for key in refiled {
        if let Some(e) = held.get(&key) {
            t.insert(key.as_str(), enc(e).as_slice())?;
        }
    }
    Ok(held)
}

impl RedbFile {
    /// See [`crate::store::Edges::record_edges`].
    pub fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<usize, StoreError> {
        let tx = self.begin_write()?;
        let mut refused = 0;
        {
            let mut t = tx.open_table(EDGES)?;
            let mut held = live(&mut t, forget_before)?;
            let mut room = Admission::of(held.values().map(|e| e.client.as_str()));
            for report in reports {
                let key = report.key();
                let report = match held.get(&key) {
                    Some(older) => report.merged_over(older),
                    None if report.last_seen < forget_before => continue,
                    None if room.admit(&report.client) => report,
                    None => {
                        refused += 1;
                        continue;
                    }
                };
                t.insert(key.as_str(), enc(&report).as_slice())?;
                held.insert(key, report);
            }
        }
        tx.commit()?;
        Ok(refused)
    }

    /// See [`crate::store::Edges::edges`].
    pub fn edges(&self) -> Result<Vec<EdgeReport>, StoreError> {
        let tx = self.begin_read()?;
        let mut all = Vec::new();
        for r in tx.open_table(EDGES)?.iter()? {
            let (_, v) = r?;
            // One that does not decode is dropped by the next write.
            if let Ok(e) = dec::<EdgeReport>(v.value(), "edges") {
                all.push(e);
            }
        }
        Ok(folded(all))
    }
}

#[async_trait::async_trait]
impl Edges for RedbStore {
    async fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<usize, StoreError> {
        // A synchronous write with fsync: off the runtime's threads.
        let file = self.file.clone();
        let recorded =
            tokio::task::spawn_blocking(move || file.record_edges(reports, forget_before))
                .await
                .map_err(|_| StoreError::Stopped("edge report task"))?;
        self.watch(recorded)
    }

    async fn edges(&self) -> Result<Vec<EdgeReport>, StoreError> {
        self.watch(self.file.edges())
    }
}
