//! [`ProofIds`] for [`PgStore`]: the `dpop_proofs` table, shared by every issuer of the
//! database, so a proof is accepted once by all of them. One statement: an insert that takes
//! over an expired row and returns nothing for a live one (swept with the rest).

use super::{int, retrying, PgStore};
use crate::store::{ProofIds, StoreError};
use shared::dpop::replay::{Accepted, Replay};

#[async_trait::async_trait]
impl ProofIds for PgStore {
    async fn first_use(
        &self,
        proof: &Accepted,
        now: u64,
    ) -> Result<Result<(), Replay>, StoreError> {
        let (id, expires) = (proof.id.as_slice(), proof.expires);
        retrying!(self, |conn| {
            let row = conn
                .query_opt(
                    "INSERT INTO dpop_proofs (id, expires) VALUES ($1, $2) \
                     ON CONFLICT (id) DO UPDATE SET expires = excluded.expires \
                     WHERE dpop_proofs.expires <= $3 RETURNING expires",
                    &[&id, &int(expires), &int(now)],
                )
                .await?;
            row.map(|_| ()).ok_or(Replay::Replayed)
        })
    }
}
