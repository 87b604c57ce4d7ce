//! Benchmark fixture, not part of the product: records live access token revocations in an
//! embedded store, as if that many tokens had been revoked in the last hour, so that
//! `cargo xtask bench` can measure the filter holding them.
//!
//! `cargo run --release -p issuer --example fill_revocations -- DATA_DIR COUNT`

use issuer::store::redb::RedbFile;
use issuer::store::revocation::Revoked;
use std::time::{Instant, SystemTime};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(count)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: fill_revocations DATA_DIR COUNT");
    };
    let count: u64 = count.parse()?;
    let now = shared::time::unix_seconds(SystemTime::now());
    let store = RedbFile::open(std::path::Path::new(&dir), now)?;
    let started = Instant::now();
    // Distinct ids no token of the run has: a counter in the last bytes of a fixed prefix.
    let what = (0..count).map(|i| Revoked::Token {
        jti: format!("f111{i:028x}"),
    });
    let last = store.revoke_many(what, now, Some(now + 3_600))?;
    println!(
        "{count} revocations (the last numbered {last}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
