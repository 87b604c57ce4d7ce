//! [`ThrottleBook`] for [`PgStore`].
//!
//! The password back-off in the database, so that every issuer counts the same failures: guesses
//! spread over N issuers meet the back-off of one. Each update is one SERIALIZABLE transaction over
//! the few keys of one sign-in attempt, their rows locked.

use super::{int, serializable, uint, PgStore};
use crate::store::throttle::{Entry, ThrottleBook};
use crate::store::StoreError;
use std::collections::HashMap;

#[async_trait::async_trait]
impl ThrottleBook for PgStore {
    async fn update(
        &self,
        keys: &[String],
        _now: u64,
        f: &mut (dyn for<'m> FnMut(&'m mut HashMap<String, Entry>) + Send),
    ) -> Result<(), StoreError> {
        let keys: Vec<String> = keys.to_vec();
        serializable!(self, |tx| {
            let rows = tx
                .query(
                    "SELECT key, failures, blocked_until, last_failure FROM login_throttle \
                     WHERE key = ANY($1) FOR UPDATE",
                    &[&keys],
                )
                .await?;
            let before: HashMap<String, Entry> = rows
                .iter()
                .map(|r| {
                    let entry = Entry {
                        failures: u32::try_from(r.get::<_, i32>(1)).unwrap_or(0),
                        blocked_until: uint(r.get(2)),
                        last_failure: uint(r.get(3)),
                    };
                    (r.get(0), entry)
                })
                .collect();
            let mut after = before.clone();
            f(&mut after);
            for key in &keys {
                match (before.get(key), after.get(key)) {
                    (old, Some(new)) if old != Some(new) => {
                        let failures = i32::try_from(new.failures).unwrap_or(i32::MAX);
                        tx.execute(
                            "INSERT INTO login_throttle (key, failures, blocked_until, last_failure) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO UPDATE SET \
                             failures = excluded.failures, blocked_until = excluded.blocked_until, \
                             last_failure = excluded.last_failure",
                            &[key, &failures, &int(new.blocked_until), &int(new.last_failure)],
                        )
                        .await?;
                    }
                    (Some(_), None) => {
                        tx.execute("DELETE FROM login_throttle WHERE key = $1", &[key])
                            .await?;
                    }
                    _ => {}
                }
            }
        })
    }
}
