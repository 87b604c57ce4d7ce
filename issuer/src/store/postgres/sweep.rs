//! [`Sweep`] for [`PgStore`]: deletes the refresh token families ([`super::refresh`]) and
//! revocations ([`super::revocations`]) whose time has passed, then the retired signing keys and
//! the login throttle rows nobody needs any more.

use super::{int, refresh, revocations, serializable, PgStore};
use crate::store::throttle::FORGET_AFTER;
use crate::store::{AccessLifetime, StoreError, Sweep, KEY_RETIRE_MARGIN};

#[async_trait::async_trait]
impl Sweep for PgStore {
    async fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let families = refresh::sweep(self, now).await? + revocations::sweep(self, now).await?;
        let ttl = self.access_ttl().await?;
        let retired_before = int(now.saturating_sub(ttl + KEY_RETIRE_MARGIN));
        let rest = serializable!(self, |tx| {
            let t = int(now);
            let keys = tx
                .execute(
                    "DELETE FROM signing_keys WHERE (superseded_at IS NOT NULL \
                     AND superseded_at <= $1) OR retired_at <= $2",
                    &[&retired_before, &t],
                )
                .await?;
            let throttle = tx
                .execute(
                    "DELETE FROM login_throttle WHERE blocked_until <= $1 AND last_failure <= $2",
                    &[&t, &int(now.saturating_sub(FORGET_AFTER))],
                )
                .await?;
            let proofs = tx
                .execute("DELETE FROM dpop_proofs WHERE expires <= $1", &[&t])
                .await?;
            keys + throttle + proofs
        })?;
        Ok(families + rest)
    }
}
