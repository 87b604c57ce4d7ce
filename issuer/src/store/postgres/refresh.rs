//! Refresh token families on PostgreSQL, with the same rules as the embedded store: rotation on
//! every use, the identical successor for a retry inside the window, reuse outside it revokes that
//! family only. Each operation is one SERIALIZABLE transaction that locks the token and its family
//! (`FOR UPDATE`), so issuers racing on one token queue instead of failing; a race the database
//! still refuses is retried by [`serializable!`], and the loser then sees the winner's rotation
//! (a retry, answered with the same successor).

use super::{int, serializable, uint, PgStore};
use crate::secrets;
use crate::store::{
    ClientRecord, RefreshInfo, RefreshOp, RefreshOutcome, RefreshRejection, Rotation, StoreError,
    UserRecord,
};

/// Applies one operation durably.
pub(super) async fn apply(
    store: &PgStore,
    op: RefreshOp,
    now: u64,
) -> Result<RefreshOutcome, StoreError> {
    match op {
        RefreshOp::Issue { client, user } => issue(store, &client, &user, now)
            .await
            .map(RefreshOutcome::Issued),
        RefreshOp::Rotate { presented, client } => rotate(store, &presented, &client, now)
            .await
            .map(RefreshOutcome::Rotated),
        RefreshOp::Revoke { token, client } => revoke(store, &token, &client, now)
            .await
            .map(RefreshOutcome::Revoked),
    }
}

async fn issue(
    store: &PgStore,
    client: &str,
    user: &str,
    now: u64,
) -> Result<zeroize::Zeroizing<String>, StoreError> {
    let token = secrets::new_refresh_token();
    let hash = store.hash_key.refresh_hash(&token).to_vec();
    let family = secrets::random16().to_vec();
    let expires = now + store.policy.absolute_ttl;
    let idle = (now + store.policy.idle_ttl).min(expires);
    serializable!(store, |tx| {
        tx.execute(
            "INSERT INTO refresh_families \
             (id, client, username, created_at, expires_at, current_hash) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[&family, &client, &user, &int(now), &int(expires), &hash],
        )
        .await?;
        tx.execute(
            "INSERT INTO refresh_tokens (hash, family, client, username, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&hash, &family, &client, &user, &int(idle)],
        )
        .await?;
    })?;
    Ok(token)
}

async fn rotate(
    store: &PgStore,
    presented: &str,
    client: &str,
    now: u64,
) -> Result<Result<Rotation, RefreshRejection>, StoreError> {
    if !secrets::looks_like_refresh_token(presented) {
        return Ok(Err(RefreshRejection::Unknown));
    }
    let policy = store.policy;
    let hash = store.hash_key.refresh_hash(presented).to_vec();
    let successor = store.hash_key.refresh_successor(presented);
    let successor_hash = store.hash_key.refresh_hash(&successor).to_vec();
    serializable!(store, |tx| {
        'outcome: {
            let Some(token) = tx
                .query_opt(
                    "SELECT family, client, username, expires_at, rotated_at \
                     FROM refresh_tokens WHERE hash = $1 FOR UPDATE",
                    &[&hash],
                )
                .await?
            else {
                break 'outcome Err(RefreshRejection::Unknown);
            };
            let family: Vec<u8> = token.get(0);
            let Some(fam) = tx
                .query_opt(
                    "SELECT expires_at, revoked_at, current_hash FROM refresh_families \
                     WHERE id = $1 FOR UPDATE",
                    &[&family],
                )
                .await?
            else {
                break 'outcome Err(RefreshRejection::Unknown);
            };
            let owner: String = token.get(1);
            let user_name: String = token.get(2);
            let expires_at = uint(token.get(3));
            let rotated_at: Option<i64> = token.get(4);
            let family_expires = uint(fam.get(0));
            let revoked_at: Option<i64> = fam.get(1);
            let current: Vec<u8> = fam.get(2);
            if owner != client {
                break 'outcome Err(RefreshRejection::OtherClient);
            }
            if revoked_at.is_some() {
                break 'outcome Err(RefreshRejection::Revoked);
            }
            if now >= expires_at || now >= family_expires {
                break 'outcome Err(RefreshRejection::Expired);
            }
            let retried = match rotated_at.map(uint) {
                None => false,
                Some(at)
                    if now.saturating_sub(at) <= policy.retry_window
                        && current == successor_hash =>
                {
                    true
                }
                Some(_) => {
                    tx.execute(
                        "UPDATE refresh_families SET revoked_at = $2 WHERE id = $1",
                        &[&family, &int(now)],
                    )
                    .await?;
                    break 'outcome Err(RefreshRejection::ReuseDetected);
                }
            };
            let client_rec = tx
                .query_opt("SELECT record FROM clients WHERE id = $1", &[&client])
                .await?;
            let client_active = match client_rec {
                Some(r) => super::from_json::<ClientRecord>(r.get(0), "clients")?.active,
                None => false,
            };
            let user_rec = tx
                .query_opt("SELECT record FROM users WHERE name = $1", &[&user_name])
                .await?;
            let user = match user_rec {
                Some(r) => Some(super::from_json::<UserRecord>(r.get(0), "users")?),
                None => None,
            };
            let user = match user {
                Some(u) if client_active && !u.disabled => u,
                _ => break 'outcome Err(RefreshRejection::Inactive),
            };
            if !retried {
                let idle = (now + policy.idle_ttl).min(family_expires);
                tx.execute(
                    "INSERT INTO refresh_tokens (hash, family, client, username, expires_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[&successor_hash, &family, &client, &user_name, &int(idle)],
                )
                .await?;
                tx.execute(
                    "UPDATE refresh_tokens SET rotated_at = $2 WHERE hash = $1",
                    &[&hash, &int(now)],
                )
                .await?;
                tx.execute(
                    "UPDATE refresh_families SET current_hash = $2 WHERE id = $1",
                    &[&family, &successor_hash],
                )
                .await?;
            }
            Ok(Rotation {
                successor: successor.clone(),
                user_name,
                user,
                retried,
            })
        }
    })
}

async fn revoke(
    store: &PgStore,
    token: &str,
    client: &str,
    now: u64,
) -> Result<Option<bool>, StoreError> {
    if !secrets::looks_like_refresh_token(token) {
        return Ok(None);
    }
    let hash = store.hash_key.refresh_hash(token).to_vec();
    serializable!(store, |tx| {
        match tx
            .query_opt(
                "SELECT family, client FROM refresh_tokens WHERE hash = $1",
                &[&hash],
            )
            .await?
        {
            None => None,
            Some(row) if row.get::<_, String>(1) != client => Some(false),
            Some(row) => {
                let family: Vec<u8> = row.get(0);
                tx.execute(
                    "UPDATE refresh_families SET revoked_at = $2 \
                     WHERE id = $1 AND revoked_at IS NULL",
                    &[&family, &int(now)],
                )
                .await?;
                Some(true)
            }
        }
    })
}

/// What introspection may reveal about a usable refresh token.
pub(super) async fn info(
    store: &PgStore,
    token: &str,
    now: u64,
) -> Result<Option<RefreshInfo>, StoreError> {
    if !secrets::looks_like_refresh_token(token) {
        return Ok(None);
    }
    let hash = store.hash_key.refresh_hash(token).to_vec();
    let conn = store.connection().await?;
    let row = conn
        .query_opt(
            "SELECT t.client, t.username, t.expires_at, f.expires_at \
             FROM refresh_tokens t JOIN refresh_families f ON f.id = t.family \
             WHERE t.hash = $1 AND t.rotated_at IS NULL AND f.revoked_at IS NULL",
            &[&hash],
        )
        .await?;
    Ok(row.and_then(|r| {
        let expires_at = uint(r.get::<_, i64>(2)).min(uint(r.get::<_, i64>(3)));
        (now < expires_at).then(|| RefreshInfo {
            client: r.get(0),
            user: r.get(1),
            expires_at,
        })
    }))
}
