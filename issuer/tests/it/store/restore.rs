//! The store's proof of the history of a revocation cursor (`shared::revocation`), on both
//! backends: a backup and a restore of the revocations, and what a reader's cursor tells after.

use super::{with_user, Backend};
use issuer::store::revocation::{RevocationPage, Revoked};
use issuer::store::Store;

impl Backend {
    /// Backs up the revocations (and the numbering) of a store no longer open: the redb files,
    /// or PostgreSQL's `revocations` and `settings` tables, into a copy kept beside them.
    fn backup(&self) -> Option<tempfile::TempDir> {
        match self {
            Self::Redb(dir) => {
                let copy = tempfile::tempdir().unwrap();
                copy_files(dir.path(), copy.path());
                Some(copy)
            }
            Self::Postgres(pg) => {
                pg.psql(
                    "DROP TABLE IF EXISTS backup_revocations, backup_settings; \
                     CREATE TABLE backup_revocations AS SELECT * FROM revocations; \
                     CREATE TABLE backup_settings AS SELECT * FROM settings",
                )
                .unwrap();
                None
            }
        }
    }

    /// Restores what [`Backend::backup`] kept, over a store no longer open.
    fn restore(&self, copy: Option<&tempfile::TempDir>) {
        match self {
            Self::Redb(dir) => {
                for entry in std::fs::read_dir(dir.path()).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_file() {
                        std::fs::remove_file(path).unwrap();
                    }
                }
                copy_files(copy.unwrap().path(), dir.path());
            }
            Self::Postgres(pg) => {
                pg.psql(
                    "DELETE FROM revocations; INSERT INTO revocations SELECT * FROM backup_revocations; \
                     DELETE FROM settings; INSERT INTO settings SELECT * FROM backup_settings",
                )
                .unwrap();
            }
        }
    }
}

/// Copies the files of `from` into `to` (a redb data dir has no subdirectory).
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Finding 6 of the outside probe: a store restored from a backup numbers its revocations again
/// from the backup's last one, so a reader's number alone may name an entry of another history.
/// Each entry's stamp proves which one the reader saw.
pub(super) async fn revocation_cursors_prove_the_history_they_belong_to(b: Backend) {
    let s = with_user(&b).await;
    let (stamps, backed_up) = step_each_revocation_carries_a_stamp(s.as_ref()).await;
    // The backup, then five more revocations a reader takes in.
    drop(s);
    let copy = b.backup();
    let s = b.open(1_001).await;
    for i in 0..5 {
        s.revoke(user(format!("b{i}")), 1_001, Some(5_000))
            .await
            .unwrap();
    }
    let read = s.revocations(backed_up, 1_002, usize::MAX).await.unwrap();
    let ahead = read.entries.last().unwrap();
    let (cursor, stamp) = (ahead.seq, ahead.stamp);
    assert!(read.continues(backed_up, Some(stamps[1])));
    assert_eq!(cursor, backed_up + 5);

    // The restore, and six new revocations: the numbers pass the reader's cursor, which the
    // number alone would take for its own.
    drop(s);
    b.restore(copy.as_ref());
    let s = b.open(1_002).await;
    for i in 0..6 {
        s.revoke(user(format!("c{i}")), 1_002, Some(5_000))
            .await
            .unwrap();
    }
    let after = s.revocations(cursor, 1_003, usize::MAX).await.unwrap();
    assert!(after.latest > cursor && after.continues(cursor, None));
    assert!(
        !after.continues(cursor, stamp),
        "entry {cursor} of another history"
    );
    assert_eq!(
        s.revocations(0, 1_003, usize::MAX)
            .await
            .unwrap()
            .entries
            .len(),
        8,
        "the backup's two and the six new ones; the five lost with the restore"
    );

    step_the_newest_survives_the_sweep(s.as_ref(), after).await;
}

/// A user revoked by name.
fn user(name: String) -> Revoked {
    Revoked::User { name }
}

/// Step: two revocations carry random stamps; a cursor with the stamp of its entry continues
/// from it, one with another stamp does not. The stamps, and the latest number.
async fn step_each_revocation_carries_a_stamp(s: &dyn Store) -> (Vec<u64>, u64) {
    for i in 0..2 {
        s.revoke(user(format!("a{i}")), 1_000, Some(5_000))
            .await
            .unwrap();
    }
    let page = s.revocations(0, 1_001, usize::MAX).await.unwrap();
    let stamps: Vec<u64> = page.entries.iter().map(|e| e.stamp.unwrap()).collect();
    assert_ne!(stamps[0], stamps[1], "random stamps");
    let (first, backed_up) = (page.entries[0].seq, page.latest);
    assert_eq!(page.latest_stamp, Some(stamps[1]));
    let at_first = s.revocations(first, 1_001, usize::MAX).await.unwrap();
    assert_eq!(at_first.since_stamp, Some(stamps[0]));
    assert!(at_first.continues(first, Some(stamps[0])));
    assert!(!at_first.continues(first, Some(stamps[0] ^ 1)));
    assert!(
        at_first.continues(first, None),
        "a cursor without a stamp: by its number"
    );

    (stamps, backed_up)
}

/// Step: swept when out of force, all but the newest: a reader that is up to date stays
/// provably so, however long nothing new is recorded; one at a swept entry reads everything
/// again. The next revocation continues the numbering, with a stamp of its own.
async fn step_the_newest_survives_the_sweep(s: &dyn Store, after: RevocationPage) {
    let latest = after.latest;
    let latest_stamp = after.latest_stamp;
    assert!(latest_stamp.is_some());
    let whole = s.revocations(0, 1_003, usize::MAX).await.unwrap();
    let behind_stamp = whole
        .entries
        .iter()
        .find(|e| e.seq == latest - 1)
        .unwrap()
        .stamp;
    assert!(s.sweep(6_000).await.unwrap() >= 7);
    let quiet = s.revocations(latest, 9_000, usize::MAX).await.unwrap();
    assert!(quiet.entries.is_empty());
    assert!(quiet.continues(latest, latest_stamp));
    assert_eq!(quiet.latest_stamp, latest_stamp);
    let behind = s.revocations(latest - 1, 9_000, usize::MAX).await.unwrap();
    assert!(!behind.continues(latest - 1, behind_stamp));
    // The next revocation continues the numbering, with a stamp of its own.
    let next = s.revoke(user("d".into()), 9_000, None).await.unwrap();
    assert_eq!(next, latest + 1);
    let page = s.revocations(latest, 9_000, usize::MAX).await.unwrap();
    assert!(page.continues(latest, latest_stamp));
    assert_eq!(page.entries[0].seq, next);
    assert_eq!(page.latest_stamp, page.entries[0].stamp);
}
