//! Revocations on PostgreSQL: numbered rows (`revocations`), numbered from a counter in the
//! settings (`revocation_seq`) that is only ever raised, in the transaction of the change that
//! causes them. Revocations are rare (an admin change, a revoke request), so the counter row is
//! not a hot spot.

use super::{int, serializable, uint, PgStore};
use crate::store::revocation::REVOCATION_MARGIN;
use crate::store::revocation::{Revocation, RevocationPage, Revoked};
use crate::store::{StoreError, DEFAULT_ACCESS_TTL};

/// Records `what` as revoked at `now` inside `tx` (see [`crate::store::Store::revoke`]).
pub(super) async fn revoke_in(
    tx: &deadpool_postgres::Transaction<'_>,
    what: Revoked,
    now: u64,
    until: Option<u64>,
) -> Result<u64, StoreError> {
    let ttl = tx
        .query_opt("SELECT value FROM settings WHERE name = 'access_ttl'", &[])
        .await?
        .map_or(DEFAULT_ACCESS_TTL, |r| uint(r.get(0)));
    let seq: i64 = tx
        .query_one(
            "INSERT INTO settings (name, value) VALUES ('revocation_seq', 1) \
             ON CONFLICT (name) DO UPDATE SET value = settings.value + 1 RETURNING value",
            &[],
        )
        .await?
        .get(0);
    let entry = Revocation {
        seq: uint(seq),
        what,
        at: now,
        until: until.unwrap_or(now + ttl + REVOCATION_MARGIN),
    };
    tx.execute(
        "INSERT INTO revocations (seq, entry, until) VALUES ($1, $2, $3)",
        &[&seq, &super::to_json(&entry), &int(entry.until)],
    )
    .await?;
    Ok(entry.seq)
}

/// Records one revocation in a transaction of its own.
pub(super) async fn revoke(
    store: &PgStore,
    what: Revoked,
    now: u64,
    until: Option<u64>,
) -> Result<u64, StoreError> {
    serializable!(store, |tx| {
        revoke_in(&tx, what.clone(), now, until).await?
    })
}

/// Revocations numbered after `since` and in force at `now`, in order, with the highest number
/// given out (one transaction, so the two agree).
pub(super) async fn revocations(
    store: &PgStore,
    since: u64,
    now: u64,
    limit: usize,
) -> Result<RevocationPage, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (rows, latest) = serializable!(store, |tx| {
        let latest = tx
            .query_opt(
                "SELECT value FROM settings WHERE name = 'revocation_seq'",
                &[],
            )
            .await?
            .map_or(0, |r| uint(r.get(0)));
        let rows = tx
            .query(
                "SELECT seq, entry FROM revocations WHERE seq > $1 AND until > $2 \
                 ORDER BY seq LIMIT $3",
                &[&int(since), &int(now), &limit],
            )
            .await?;
        (rows, latest)
    })?;
    let entries = rows
        .iter()
        .filter_map(|r| {
            let decoded = serde_json::from_str::<Revocation>(r.get(1)).ok();
            if decoded.is_none() {
                tracing::error!(seq = r.get::<_, i64>(0), "a revocation does not decode");
            }
            decoded
        })
        .collect();
    Ok(RevocationPage { entries, latest })
}

/// Deletes revocations no longer in force.
pub(super) async fn sweep(store: &PgStore, now: u64) -> Result<u64, StoreError> {
    let conn = store.connection().await?;
    Ok(conn
        .execute("DELETE FROM revocations WHERE until <= $1", &[&int(now)])
        .await?)
}
