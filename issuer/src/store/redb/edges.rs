//! The edges' reports in the redb file: one JSON record per edge, by node and VM
//! ([`crate::store::edges`]).

use super::{dec, enc, RedbFile, EDGES};
use crate::store::edges::{retained, EdgeReport};
use crate::store::StoreError;
use redb::ReadableTable;

impl RedbFile {
    /// See [`crate::store::Edges::record_edges`].
    pub fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<(), StoreError> {
        let tx = self.begin_write()?;
        {
            let mut t = tx.open_table(EDGES)?;
            for report in reports {
                let key = report.key();
                let stored = t.get(key.as_str())?.map(|v| dec(v.value(), "edges"));
                let report = match stored {
                    Some(Ok(older)) => report.merged_over(&older),
                    _ => report,
                };
                t.insert(key.as_str(), enc(&report).as_slice())?;
            }
            let mut all = Vec::new();
            let mut damaged = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                match dec::<EdgeReport>(v.value(), "edges") {
                    Ok(e) => all.push(e),
                    Err(_) => damaged.push(k.value().to_owned()),
                }
            }
            if !damaged.is_empty() {
                tracing::error!(
                    count = damaged.len(),
                    "edge reports that do not decode, dropped"
                );
            }
            for key in retained(&mut all, forget_before).into_iter().chain(damaged) {
                t.remove(key.as_str())?;
            }
        }
        tx.commit()?;
        Ok(())
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
        retained(&mut all, 0);
        Ok(all)
    }
}
