//! [`Families`] for [`PgStore`].
//!
//! Refresh token families on PostgreSQL, one row per family, under the same rules as the
//! embedded store ([`Family::step`]): rotation on every use, the identical successor for a retry
//! inside the window, reuse outside it revokes that family only.
//!
//! The common case, the current token presented by its active client for an enabled user, is one
//! conditional `UPDATE ... RETURNING` ([`ROTATE_CURRENT`]): one round trip and one statement.
//! Everything else (a retry, reuse, a refusal, or the loser of a race on one token) is one
//! SERIALIZABLE transaction that reads the family row `FOR UPDATE` with the client and user
//! records, decides with [`Family::step`], and updates the row in place. A race the database still
//! refuses is retried, bounded, and the loser then sees the winner's rotation (a retry, answered
//! with the same successor).
//!
//! The table has no index besides its key, so an update touches no index entry that changes (and
//! PostgreSQL can keep it on its page, a heap-only update). The sweep therefore scans; it runs once
//! a minute, in batches.

use super::records::Table;
use super::revocations::revoke_in;
use super::{int, retrying, serializable, uint, PgStore};
use crate::secrets::RefreshToken;
use crate::store::family::{admit, Family, Step};
use crate::store::{
    ClientRecord, Families, FamilyFilter, FamilyRevocation, Owners, RefreshInfo, RefreshRejection,
    RotateOutcome, Rotation, StoreError, UserRecord,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use zeroize::Zeroizing;

/// Rows deleted per statement by the sweep.
const SWEEP_BATCH: i64 = 10_000;

/// The columns [`family_from`] reads, in its order.
macro_rules! family_columns {
    () => {
        "client, username, created_at, absolute_expires_at, expires_at, generation, rotated_at, \
         revoked_at, jkt"
    };
}

/// A family with the records of the client and of its user, locked for a rotation.
const SELECT_FOR_ROTATION: &str = concat!(
    "SELECT ",
    family_columns!(),
    ", (SELECT record FROM clients WHERE id = $2), (SELECT mac FROM clients WHERE id = $2), \
     (SELECT record FROM users WHERE name = f.username), \
     (SELECT mac FROM users WHERE name = f.username) \
     FROM refresh_family_records f WHERE id = $1 FOR UPDATE OF f"
);
/// The common case of a rotation in one statement: the presented generation is the current one,
/// the family is the client's, neither revoked nor expired, the client active and the user
/// enabled; then the family advances and the user's record comes back. These are exactly the
/// conditions under which [`Family::step`] says [`Step::Rotate`] and [`admit`] admits (the flags
/// compared as JSON values, as serde reads them), and the update is [`Family::rotated`]; anything
/// else updates nothing and goes the long way. Records the issuer wrote always decode; one
/// damaged by hand fails the statement (not JSON) or, after the commit, the request (JSON of
/// another shape), which a retry inside the window then meets again on the long way. The user's
/// record comes back with its MAC and is checked before anything is answered: the family may
/// have advanced over a tampered record, but nothing is minted from it.
const ROTATE_CURRENT: &str = "UPDATE refresh_family_records f \
     SET generation = generation + 1, rotated_at = $3, expires_at = LEAST($4, absolute_expires_at) \
     WHERE id = $1 AND generation = $2 AND client = $5 AND revoked_at IS NULL \
       AND expires_at > $3 AND generation < 4294967295 AND (f.jkt IS NULL OR f.jkt = $6) \
       AND EXISTS (SELECT 1 FROM clients c WHERE c.id = $5 \
                   AND c.record::jsonb -> 'active' = 'true'::jsonb) \
       AND EXISTS (SELECT 1 FROM users u WHERE u.name = f.username \
                   AND u.record::jsonb -> 'disabled' = 'false'::jsonb \
                   AND COALESCE((u.record::jsonb ->> 'password_changed_at')::bigint, -1) \
                       < f.created_at \
                   AND COALESCE((u.record::jsonb ->> 'disabled_at')::bigint, -1) \
                       < f.created_at) \
     RETURNING f.username, (SELECT record FROM users u WHERE u.name = f.username), \
       (SELECT mac FROM users u WHERE u.name = f.username)";
const ADVANCE: &str = "UPDATE refresh_family_records \
                       SET generation = $2, rotated_at = $3, expires_at = $4 WHERE id = $1";
const REVOKE: &str = "UPDATE refresh_family_records SET revoked_at = $2 WHERE id = $1";
const SELECT_FAMILY: &str = concat!(
    "SELECT ",
    family_columns!(),
    " FROM refresh_family_records WHERE id = $1"
);

const SELECT_FAMILY_FOR_UPDATE: &str = concat!(
    "SELECT ",
    family_columns!(),
    " FROM refresh_family_records WHERE id = $1 FOR UPDATE"
);
/// The live families at `$3` after `($1, $2)` in the order of user and id (`COLLATE "C"`: byte
/// for byte, the index's order, so a page is a walk of the index from the cursor), at most `$4`.
macro_rules! select_live {
    ($owners:literal) => {
        concat!(
            "SELECT ",
            family_columns!(),
            ", id FROM refresh_family_records \
             WHERE (username COLLATE \"C\", id) > ($1, $2) ",
            $owners,
            " AND revoked_at IS NULL AND expires_at > $3 \
             ORDER BY username COLLATE \"C\", id LIMIT $4"
        )
    };
}
/// Of every user.
const SELECT_LIVE: &str = select_live!("");
/// Of the users whose names lie below `$5` ([`names_below`]).
const SELECT_LIVE_BELOW: &str = select_live!("AND username COLLATE \"C\" < $5");

fn family_from(row: &Row) -> Result<Family, StoreError> {
    Ok(Family {
        client: row.get(0),
        user: row.get(1),
        created_at: uint(row.get(2)),
        absolute_expires_at: uint(row.get(3)),
        expires_at: uint(row.get(4)),
        generation: u32::try_from(row.get::<_, i64>(5))
            .map_err(|_| StoreError::Corrupt("refresh_family_records"))?,
        rotated_at: row.get::<_, Option<i64>>(6).map(uint),
        revoked_at: row.get::<_, Option<i64>>(7).map(uint),
        jkt: match row.get::<_, Option<&[u8]>>(8) {
            None => None,
            Some(b) => Some(
                <[u8; 32]>::try_from(b)
                    .map_err(|_| StoreError::Corrupt("refresh_family_records"))?,
            ),
        },
    })
}

/// Starts a family (see [`crate::store::Families::start_family`]).
pub(super) async fn start(
    store: &PgStore,
    client: &str,
    user: &str,
    now: u64,
    jkt: Option<[u8; 32]>,
) -> Result<zeroize::Zeroizing<String>, StoreError> {
    let first = RefreshToken::new_family();
    let fam = Family::new(client, user, now, &store.policy, jkt);
    let id = first.family.to_vec();
    let jkt = jkt.map(|k| k.to_vec());
    serializable!(store, |tx| {
        tx.execute(
            "INSERT INTO refresh_family_records (id, client, username, created_at, \
             absolute_expires_at, expires_at, generation, jkt) \
             VALUES ($1, $2, $3, $4, $5, $6, 0, $7)",
            &[
                &id,
                &client,
                &user,
                &int(fam.created_at),
                &int(fam.absolute_expires_at),
                &int(fam.expires_at),
                &jkt,
            ],
        )
        .await?;
    })?;
    Ok(store.hash_key.encode_refresh(first))
}

/// [`ROTATE_CURRENT`], one statement in a transaction of its own (the session's isolation is
/// SERIALIZABLE), retried while the database reports contention. `None`: not the common case.
async fn rotate_current(
    store: &PgStore,
    token: RefreshToken,
    client: &str,
    (now, proof): (u64, Option<[u8; 32]>),
) -> Result<Option<(String, UserRecord)>, StoreError> {
    let id = token.family.to_vec();
    let proof = proof.map(|k| k.to_vec());
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
        &id,
        &i64::from(token.generation),
        &int(now),
        &int(now.saturating_add(store.policy.idle_ttl)),
        &client,
        &proof,
    ];
    let row = retrying!(store, |conn| {
        let statement = conn.prepare_cached(ROTATE_CURRENT).await?;
        conn.query_opt(&statement, &params).await?
    })?;
    let Some(r) = row else {
        return Ok(None);
    };
    let name: String = r.get(0);
    let user = r
        .get::<_, Option<&str>>(1)
        .ok_or(StoreError::Corrupt("users"))?;
    match store.records.open(Table::Users, &name, user, r.get(2))? {
        Some(user) => Ok(Some((name, user))),
        None => Err(StoreError::Tampered("users")),
    }
}

/// Rotates a token (see [`crate::store::Families::rotate_family`]).
pub(super) async fn rotate(
    store: &PgStore,
    presented: &str,
    client: &str,
    (now, proof): (u64, Option<[u8; 32]>),
) -> Result<RotateOutcome, StoreError> {
    let Some(token) = store.hash_key.verify_refresh(presented) else {
        return Ok(RotateOutcome::Refused(RefreshRejection::Unknown));
    };
    let fast = match rotate_current(store, token, client, (now, proof)).await {
        // Logged as tampered; refused like a disabled user.
        Err(StoreError::Tampered(_)) => {
            return Ok(RotateOutcome::Refused(RefreshRejection::Inactive))
        }
        other => other?,
    };
    if let Some((user_name, user)) = fast {
        let next = token.successor().ok_or(StoreError::Corrupt("generation"))?;
        return Ok(RotateOutcome::Rotated(Rotation {
            successor: store.hash_key.encode_refresh(next),
            user_name,
            user,
            retried: false,
        }));
    }
    rotate_in_full(store, token, client, (now, proof)).await
}

/// Every other case than [`ROTATE_CURRENT`]'s, read and decided in full: a retry, reuse, or a
/// refusal.
async fn rotate_in_full(
    store: &PgStore,
    token: RefreshToken,
    client: &str,
    (now, proof): (u64, Option<[u8; 32]>),
) -> Result<RotateOutcome, StoreError> {
    let policy = store.policy;
    let id = token.family.to_vec();
    let tokens = store.hash_key.family_revocation(&token.family);
    let outcome = serializable!(store, |tx| {
        'outcome: {
            let select = tx.prepare_cached(SELECT_FOR_ROTATION).await?;
            let Some(row) = tx.query_opt(&select, &[&id, &client]).await? else {
                break 'outcome Err(RefreshRejection::Unknown);
            };
            let fam = family_from(&row)?;
            let next = match fam.step(token, client, now, &policy, proof) {
                Step::Refuse(why) => break 'outcome Err(why),
                Step::RevokeForReuse => {
                    let revoke = tx.prepare_cached(REVOKE).await?;
                    tx.execute(&revoke, &[&id, &int(now)]).await?;
                    revoke_in(&tx, tokens.clone(), now, None).await?;
                    break 'outcome Err(RefreshRejection::ReuseDetected);
                }
                Step::Retry => None,
                Step::Rotate => Some(fam.rotated(now, &policy)),
            };
            // A tampered record counts as none.
            let client_active = match row.get::<_, Option<&str>>(9) {
                Some(r) => store
                    .records
                    .open::<ClientRecord>(Table::Clients, client, r, row.get(10))?
                    .is_some_and(|c| c.active),
                None => false,
            };
            let user = match row.get::<_, Option<&str>>(11) {
                Some(r) => {
                    store
                        .records
                        .open::<UserRecord>(Table::Users, &fam.user, r, row.get(12))?
                }
                None => None,
            };
            let user = match admit(client_active, user, fam.created_at) {
                Ok(user) => user,
                Err(why) => break 'outcome Err(why),
            };
            if let Some(next) = &next {
                let advance = tx.prepare_cached(ADVANCE).await?;
                tx.execute(
                    &advance,
                    &[
                        &id,
                        &i64::from(next.generation),
                        &int(now),
                        &int(next.expires_at),
                    ],
                )
                .await?;
            }
            let current = next.as_ref().unwrap_or(&fam).current(token.family);
            Ok((current, fam.user.clone(), user, next.is_none()))
        }
    })?;
    Ok(match outcome {
        Ok((current, user_name, user, retried)) => RotateOutcome::Rotated(Rotation {
            successor: store.hash_key.encode_refresh(current),
            user_name,
            user,
            retried,
        }),
        Err(why) => RotateOutcome::Refused(why),
    })
}

/// Revokes a family (see [`crate::store::Families::revoke_family`]).
pub(super) async fn revoke(
    store: &PgStore,
    presented: &str,
    client: &str,
    now: u64,
) -> Result<FamilyRevocation, StoreError> {
    let Some(token) = store.hash_key.verify_refresh(presented) else {
        return Ok(FamilyRevocation::Unknown);
    };
    let id = token.family.to_vec();
    let tokens = store.hash_key.family_revocation(&token.family);
    serializable!(store, |tx| {
        match tx
            .query_opt(
                "SELECT client FROM refresh_family_records WHERE id = $1",
                &[&id],
            )
            .await?
        {
            None => FamilyRevocation::Unknown,
            Some(row) if row.get::<_, &str>(0) != client => FamilyRevocation::OtherClient,
            Some(_) => {
                let newly = tx
                    .execute(
                        "UPDATE refresh_family_records SET revoked_at = $2 \
                         WHERE id = $1 AND revoked_at IS NULL",
                        &[&id, &int(now)],
                    )
                    .await?;
                if newly == 1 {
                    revoke_in(&tx, tokens.clone(), now, None).await?;
                }
                FamilyRevocation::Revoked
            }
        }
    })
}

/// What introspection may reveal about a usable refresh token.
pub(super) async fn info(
    store: &PgStore,
    presented: &str,
    now: u64,
) -> Result<Option<RefreshInfo>, StoreError> {
    let Some(token) = store.hash_key.verify_refresh(presented) else {
        return Ok(None);
    };
    let conn = store.connection().await?;
    let select = conn.prepare_cached(SELECT_FAMILY).await?;
    let row = conn.query_opt(&select, &[&token.family.to_vec()]).await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let fam = family_from(&row)?;
    if !fam.usable(token, now) {
        return Ok(None);
    }
    Ok(Some(RefreshInfo {
        client: fam.client,
        user: fam.user,
        expires_at: fam.expires_at,
    }))
}

/// The live families a filter selects (see [`crate::store::Families::live_families`]): a walk
/// of the index by user and id from the filter's start (`(username COLLATE "C", id)`), bounded
/// by the owners' names.
pub(super) async fn live(
    store: &PgStore,
    filter: &FamilyFilter<'_>,
    now: u64,
) -> Result<Vec<([u8; 16], Family)>, StoreError> {
    let start = filter.start();
    // The empty id is before every id: a start that is no cursor leaves none of its user out.
    let after = match filter.after {
        Some(cursor) if cursor == start => start.id.to_vec(),
        _ => Vec::new(),
    };
    let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
    let conn = store.connection().await?;
    let now = int(now);
    let head: [&(dyn ToSql + Sync); 4] = [&start.user, &after, &now, &limit];
    let rows = match names_below(filter.owners) {
        None => {
            let select = conn.prepare_cached(SELECT_LIVE).await?;
            conn.query(&select, &head).await?
        }
        Some(below) => {
            let select = conn.prepare_cached(SELECT_LIVE_BELOW).await?;
            conn.query(&select, &[head[0], head[1], head[2], head[3], &below])
                .await?
        }
    };
    rows.iter()
        .map(|row| {
            let id = <[u8; 16]>::try_from(row.get::<_, &[u8]>(9))
                .map_err(|_| StoreError::Corrupt("refresh_family_records"))?;
            Ok((id, family_from(row)?))
        })
        .collect()
}

/// The first name in byte order past the names of `owners` (`None`: past every name). A name
/// never holds NUL (PostgreSQL's text cannot), so the one after `name` alone is `name` + U+0001;
/// the one after those that start with a prefix is the prefix with its last char that has a
/// successor raised.
fn names_below(owners: Owners<'_>) -> Option<String> {
    let prefix = match owners {
        Owners::All => return None,
        Owners::Named(name) => return Some(format!("{name}\u{1}")),
        Owners::Prefixed(prefix) => prefix,
    };
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The family `id` as stored.
pub(super) async fn by_id(store: &PgStore, id: &[u8; 16]) -> Result<Option<Family>, StoreError> {
    let conn = store.connection().await?;
    let select = conn.prepare_cached(SELECT_FAMILY).await?;
    let row = conn.query_opt(&select, &[&id.to_vec()]).await?;
    row.as_ref().map(family_from).transpose()
}

/// Revokes the family `id` whoever owns it (see
/// [`crate::store::Families::revoke_family_id`]): the family as it was before.
pub(super) async fn revoke_id(
    store: &PgStore,
    id: &[u8; 16],
    now: u64,
) -> Result<Option<Family>, StoreError> {
    let key = id.to_vec();
    let tokens = store.hash_key.family_revocation(id);
    serializable!(store, |tx| {
        let select = tx.prepare_cached(SELECT_FAMILY_FOR_UPDATE).await?;
        match tx.query_opt(&select, &[&key]).await? {
            None => None,
            Some(row) => {
                let before = family_from(&row)?;
                if before.revoked_at.is_none() {
                    let revoke = tx.prepare_cached(REVOKE).await?;
                    tx.execute(&revoke, &[&key, &int(now)]).await?;
                    revoke_in(&tx, tokens.clone(), now, None).await?;
                }
                Some(before)
            }
        }
    })
}

/// Deletes families past their lifetime, in batches of single statements, so no long transaction
/// holds the table. The outer condition is checked again on the row it deletes, so a family
/// rotated (its expiry moved on) between the inner select and the delete stays, whatever the
/// session's isolation.
pub(super) async fn sweep(store: &PgStore, now: u64) -> Result<u64, StoreError> {
    let conn = store.connection().await?;
    let mut removed = 0;
    loop {
        let n = conn
            .execute(
                "DELETE FROM refresh_family_records WHERE expires_at <= $1 AND id IN \
                 (SELECT id FROM refresh_family_records WHERE expires_at <= $1 LIMIT $2)",
                &[&int(now), &SWEEP_BATCH],
            )
            .await?;
        removed += n;
        if n < SWEEP_BATCH.unsigned_abs() {
            return Ok(removed);
        }
    }
}

#[async_trait::async_trait]
impl Families for PgStore {
    async fn start_family(
        &self,
        client: &str,
        user: &str,
        now: u64,
        jkt: Option<[u8; 32]>,
    ) -> Result<Zeroizing<String>, StoreError> {
        start(self, client, user, now, jkt).await
    }

    async fn rotate_family(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        proof: Option<[u8; 32]>,
    ) -> Result<RotateOutcome, StoreError> {
        rotate(self, presented, client, (now, proof)).await
    }

    async fn revoke_family(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError> {
        revoke(self, token, client, now).await
    }

    async fn family_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        info(self, token, now).await
    }

    async fn live_families(
        &self,
        filter: &FamilyFilter<'_>,
        now: u64,
    ) -> Result<Vec<([u8; 16], Family)>, StoreError> {
        live(self, filter, now).await
    }

    async fn family(&self, id: &[u8; 16]) -> Result<Option<Family>, StoreError> {
        by_id(self, id).await
    }

    async fn revoke_family_id(
        &self,
        id: &[u8; 16],
        now: u64,
    ) -> Result<Option<Family>, StoreError> {
        revoke_id(self, id, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_below_a_prefix_are_all_those_that_start_with_it() {
        assert_eq!(names_below(Owners::All), None);
        assert_eq!(names_below(Owners::Prefixed("")), None);
        assert_eq!(names_below(Owners::Named("al")).as_deref(), Some("al\u{1}"));
        assert_eq!(names_below(Owners::Prefixed("al")).as_deref(), Some("am"));
        let max = char::MAX.to_string();
        assert_eq!(
            names_below(Owners::Prefixed(&format!("a{max}"))).as_deref(),
            Some("b")
        );
        assert_eq!(names_below(Owners::Prefixed(&max)), None);
        // The successor of the last char before the surrogates is the first after them.
        assert_eq!(
            names_below(Owners::Prefixed("\u{d7ff}")).as_deref(),
            Some("\u{e000}")
        );
    }
}
