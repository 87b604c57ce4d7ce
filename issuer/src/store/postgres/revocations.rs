//! [`Revocations`] for [`PgStore`].
//!
//! Revocations on PostgreSQL: numbered rows (`revocations`), numbered from a counter in the
//! settings (`revocation_seq`) that is only ever raised, in the transaction of the change that
//! causes them. Revocations are rare (an admin change, a revoke request), so the counter row is
//! not a hot spot. Each row carries a random stamp (`stamp`, NULL for rows an issuer without
//! stamps recorded), the proof of the history a reader's cursor belongs to
//! (`shared::revocation`); the sweep never deletes the newest row.

use super::{int, retrying, serializable, uint, PgStore};
use crate::store::revocation::REVOCATION_MARGIN;
use crate::store::revocation::{Cursor, Revocation, RevocationPage, Revoked};
use crate::store::{Revocations, StoreError, DEFAULT_ACCESS_TTL};

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
    // The stamp is its own column; the entry's JSON is as issuers without stamps write it.
    let entry = Revocation {
        seq: uint(seq),
        what,
        at: now,
        until: until.unwrap_or(now + ttl + REVOCATION_MARGIN),
        stamp: None,
    };
    let stamp = to_column(rand::random());
    tx.execute(
        "INSERT INTO revocations (seq, entry, until, stamp) VALUES ($1, $2, $3, $4)",
        &[&seq, &super::to_json(&entry), &int(entry.until), &stamp],
    )
    .await?;
    Ok(entry.seq)
}

/// A stamp as the BIGINT column holds it: the same 64 bits.
pub(super) fn to_column(stamp: u64) -> i64 {
    i64::from_be_bytes(stamp.to_be_bytes())
}

pub(super) fn from_column(stamp: i64) -> u64 {
    u64::from_be_bytes(stamp.to_be_bytes())
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
/// given out and the stamps of that row and of row `since` (one transaction, so they agree).
pub(super) async fn revocations(
    store: &PgStore,
    since: u64,
    now: u64,
    limit: usize,
) -> Result<RevocationPage, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (rows, latest, stamps) = serializable!(store, |tx| {
        let latest = tx
            .query_opt(
                "SELECT value FROM settings WHERE name = 'revocation_seq'",
                &[],
            )
            .await?
            .map_or(0, |r| uint(r.get(0)));
        let rows = tx
            .query(
                "SELECT seq, entry, stamp FROM revocations WHERE seq > $1 AND until > $2 \
                 ORDER BY seq LIMIT $3",
                &[&int(since), &int(now), &limit],
            )
            .await?;
        let stamps = tx
            .query(
                "SELECT seq, stamp FROM revocations WHERE seq IN ($1, $2)",
                &[&int(since), &int(latest)],
            )
            .await?;
        (rows, latest, stamps)
    })?;
    let stamp_of = |seq: u64| {
        stamps
            .iter()
            .find(|r| r.get::<_, i64>(0) == int(seq))
            .and_then(|r| r.get::<_, Option<i64>>(1))
            .map(from_column)
    };
    let entries = rows
        .iter()
        .filter_map(|r| {
            let decoded = serde_json::from_str::<Revocation>(r.get(1)).ok();
            if decoded.is_none() {
                tracing::error!(seq = r.get::<_, i64>(0), "a revocation does not decode");
            }
            let stamp = r.get::<_, Option<i64>>(2).map(from_column);
            decoded.map(|e| Revocation { stamp, ..e })
        })
        .collect();
    Ok(RevocationPage {
        entries,
        latest,
        latest_stamp: stamp_of(latest),
        since_stamp: stamp_of(since),
    })
}

/// The highest number given out and its row's stamp, in one statement (no transaction of its
/// own: one snapshot), bounded in time as a request's read is.
pub(super) async fn latest_revocation(store: &PgStore) -> Result<Cursor, StoreError> {
    let row = retrying!(store, |conn| {
        conn.query_opt(
            "SELECT s.value, r.stamp FROM settings s LEFT JOIN revocations r ON r.seq = s.value \
             WHERE s.name = 'revocation_seq'",
            &[],
        )
        .await?
    })?;
    Ok(row.map_or(Cursor::default(), |r| Cursor {
        seq: uint(r.get(0)),
        stamp: r.get::<_, Option<i64>>(1).map(from_column),
    }))
}

/// Deletes revocations no longer in force, except the newest: it stays as the proof of the
/// cursor of every reader that is up to date.
pub(super) async fn sweep(store: &PgStore, now: u64) -> Result<u64, StoreError> {
    let conn = store.connection().await?;
    Ok(conn
        .execute(
            "DELETE FROM revocations WHERE until <= $1 AND seq < \
             (SELECT COALESCE(MAX(value), 0) FROM settings WHERE name = 'revocation_seq')",
            &[&int(now)],
        )
        .await?)
}

#[async_trait::async_trait]
impl Revocations for PgStore {
    async fn revoke(&self, what: Revoked, now: u64, until: Option<u64>) -> Result<u64, StoreError> {
        revoke(self, what, now, until).await
    }

    async fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<RevocationPage, StoreError> {
        revocations(self, since, now, limit).await
    }

    async fn latest_revocation(&self) -> Result<Cursor, StoreError> {
        latest_revocation(self).await
    }
}
