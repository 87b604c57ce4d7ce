//! PostgreSQL's [`Backups`]: none here, the database is backed up with its own tools
//! (`docs/deploy-postgres.md`).

use super::PgStore;
use crate::store::backup::{Backup, Backups};

impl Backups for PgStore {
    fn backups(&self) -> Option<&dyn Backup> {
        None
    }
}
