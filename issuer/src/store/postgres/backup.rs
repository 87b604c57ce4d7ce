//! PostgreSQL's [`Backups`]: none here. No issuer owns the database that several serve on, so
//! none writes its snapshot through an admin socket: the command line reads it whole with the
//! KEK instead ([`PgStore::export`], and [`PgStore::import`] into an empty database; the
//! backup format is the data dir's), and the database's own tools back it up as well
//! (`docs/deploy-postgres.md`).

use super::PgStore;
use crate::store::backup::{Backup, Backups};

impl Backups for PgStore {
    fn backups(&self) -> Option<&dyn Backup> {
        None
    }
}
