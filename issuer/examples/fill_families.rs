//! Benchmark fixture, not part of the product: fills an embedded store with live refresh token
//! families, as if that many users had signed in, so that `cargo xtask bench` can measure
//! rotations on a store that big beside one that is empty.
//!
//! `cargo run --release -p issuer --example fill_families -- DATA_DIR COUNT`

use issuer::store::redb::{FamilyDone, FamilyOp, RedbFile};
use issuer::store::RefreshPolicy;
use std::time::{Instant, SystemTime};

/// Families written per transaction.
const BATCH: u64 = 100_000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(count)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: fill_families DATA_DIR COUNT");
    };
    let count: u64 = count.parse()?;
    let now = shared::time::unix_seconds(SystemTime::now());
    let store = RedbFile::open(std::path::Path::new(&dir), now)?;
    let policy = RefreshPolicy::default();
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let n = BATCH.min(count - done);
        let ops: Vec<_> = (done..done + n)
            .map(|i| {
                let op = FamilyOp::Start {
                    client: "fill".into(),
                    user: format!("user{}", i % 100_000),
                    jkt: None,
                };
                (op, now)
            })
            .collect();
        for outcome in store.apply_refresh_ops(&ops, &policy)? {
            if !matches!(outcome?, FamilyDone::Started(_)) {
                anyhow::bail!("a family was not issued");
            }
        }
        store.merge()?;
        done += n;
    }
    println!(
        "{} families in {:.1} s",
        store.family_count()?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
