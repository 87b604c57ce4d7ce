//! The embedded store on its own: lifetimes, the sweep, reopening, key rotation, group commit,
//! damaged records.

use super::refresh::{FamilyDone, FamilyOp};
use super::*;
use crate::store::{
    ClientRecord, GrantKind, RefreshPolicy, RefreshRejection, RotateOutcome, Rotation, UserRecord,
    KEY_RETIRE_MARGIN,
};
use redb::ReadableTable;
use shared::Key;

const POLICY: RefreshPolicy = RefreshPolicy {
    idle_ttl: 100,
    absolute_ttl: 250,
    retry_window: 10,
};

fn issue(s: &RedbFile, now: u64) -> Zeroizing<String> {
    let op = FamilyOp::Start {
        client: "app".into(),
        user: "alice".into(),
        jkt: None,
    };
    match s.apply_refresh_op(op, now, &POLICY).unwrap() {
        FamilyDone::Started(t) => t,
        _ => panic!("not issued"),
    }
}

fn rotate_op(token: &str) -> FamilyOp {
    FamilyOp::Rotate {
        presented: Zeroizing::new(token.into()),
        client: "app".into(),
        proof: None,
    }
}

fn rotate(s: &RedbFile, token: &str, now: u64) -> Result<Rotation, RefreshRejection> {
    match s.apply_refresh_op(rotate_op(token), now, &POLICY).unwrap() {
        FamilyDone::Rotated(RotateOutcome::Rotated(r)) => Ok(r),
        FamilyDone::Rotated(RotateOutcome::Refused(why)) => Err(why),
        _ => panic!("not a rotation"),
    }
}

fn store_with_user(dir: &Path) -> RedbFile {
    let s = RedbFile::open(dir, 1_000).unwrap();
    let client = ClientRecord {
        secret_hash: hex::encode([0u8; 32]),
        active: true,
        grants: vec![GrantKind::Password],
        impersonate: false,
        impersonate_claim_types: vec![],
        edge: false,
        dpop: Default::default(),
        created_at: 0,
        deactivated_at: None,
        vendor: None,
        exchange: None,
    };
    assert!(s.add_client("app", &client).unwrap());
    let user = UserRecord {
        password_hash: String::new(),
        disabled: false,
        roles: vec!["r".into()],
        claims: vec![],
        created_at: 0,
        password_changed_at: None,
        disabled_at: None,
        directory: None,
    };
    assert!(s.add_user("alice", &user).unwrap());
    s
}

#[test]
fn idle_and_absolute_lifetimes_and_the_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    let rt = issue(&s, 1_000);
    let idle = issue(&s, 1_000);
    // Idle: unused for 100 s, it expires.
    assert_eq!(
        rotate(&s, &idle, 1_100).err(),
        Some(RefreshRejection::Expired)
    );
    // Used in time, it rotates; each successor's idle expiry is capped by the absolute one.
    let mut current = rotate(&s, &rt, 1_090).unwrap().successor;
    for t in [1_150, 1_220] {
        current = rotate(&s, &current, t).unwrap().successor;
    }
    assert_eq!(
        rotate(&s, &current, 1_250).err(),
        Some(RefreshRejection::Expired)
    );
    // One record per family, whatever the number of rotations; each goes when it expires.
    assert_eq!(s.family_count().unwrap(), 2);
    assert_eq!(s.sweep(1_100).unwrap(), 1, "the idle family goes first");
    assert_eq!(s.sweep(1_249).unwrap(), 0);
    assert_eq!(s.sweep(1_250).unwrap(), 1);
    assert_eq!(s.family_count().unwrap(), 0);
    assert_eq!(
        rotate(&s, &current, 1_240).err(),
        Some(RefreshRejection::Unknown)
    );
}

#[test]
fn state_survives_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = {
        let s = store_with_user(tmp.path());
        issue(&s, 1_000)
    };
    let s = RedbFile::open(tmp.path(), 1_001).unwrap();
    assert!(s.client("app").unwrap().is_some());
    let next = rotate(&s, &rt, 1_001).unwrap();
    assert!(!next.retried);
    assert_eq!(next.user_name, "alice");
    assert!(matches!(
        RedbFile::open(tmp.path(), 1_002),
        Err(OpenError::Locked)
    ));
}

#[test]
fn superseded_keys_verify_until_they_retire() {
    let tmp = tempfile::tempdir().unwrap();
    let s = RedbFile::open(tmp.path(), 1_000).unwrap();
    s.set_access_ttl(600).unwrap();
    assert_eq!(s.rotate_key(2_000, 0).unwrap().map(|r| r.kid), Some(2));
    let ring = s.key_ring(2_000).unwrap();
    assert_eq!(ring.signing_key().map(Key::id), Some(2));
    assert!(ring.get(1).is_some());
    let retire = 2_000 + 600 + KEY_RETIRE_MARGIN;
    assert!(s.key_ring(retire - 1).unwrap().get(1).is_some());
    assert!(s.key_ring(retire).unwrap().get(1).is_none());
    let states: Vec<_> = s
        .key_infos(retire)
        .unwrap()
        .iter()
        .map(|k| k.state.as_str())
        .collect();
    assert_eq!(states, ["retired", "signing"]);
    assert_eq!(s.sweep(retire).unwrap(), 1);
    assert_eq!(s.key_infos(retire).unwrap().len(), 1);
}

#[test]
fn a_delayed_rotation_publishes_the_key_before_it_signs() {
    let tmp = tempfile::tempdir().unwrap();
    let s = RedbFile::open(tmp.path(), 1_000).unwrap();
    assert_eq!(s.rotate_key(1_000, 300).unwrap().map(|r| r.kid), Some(2));
    assert_eq!(
        s.rotate_key(1_100, 60).unwrap(),
        None,
        "one pending rotation at a time"
    );
    let before = s.key_ring(1_299).unwrap();
    assert_eq!(before.signing_key().map(Key::id), Some(1));
    assert!(before.get(2).is_some(), "the pending key is published");
    let states: Vec<_> = s
        .key_infos(1_299)
        .unwrap()
        .iter()
        .map(|k| k.state.as_str())
        .collect();
    assert_eq!(states, ["signing", "pending"]);
    let after = s.key_ring(1_300).unwrap();
    assert_eq!(after.signing_key().map(Key::id), Some(2));
    assert!(after.get(1).is_some(), "the old key still verifies");
}

#[test]
fn one_batch_applies_in_order_and_never_forks() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    let rt = issue(&s, 1_000);
    let rotate = rotate_op;
    let out: Vec<FamilyDone> = s
        .apply_refresh_ops(
            &[
                (rotate(&rt), 1_001),
                (rotate(&rt), 1_001),
                (
                    FamilyOp::Start {
                        client: "app".into(),
                        user: "alice".into(),
                        jkt: None,
                    },
                    1_001,
                ),
            ],
            &POLICY,
        )
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let successors: Vec<(String, bool)> = out[..2]
        .iter()
        .map(|o| match o {
            FamilyDone::Rotated(RotateOutcome::Rotated(r)) => (r.successor.to_string(), r.retried),
            _ => panic!("rotation failed"),
        })
        .collect();
    assert_eq!(successors[0].0, successors[1].0, "one successor");
    assert_eq!((successors[0].1, successors[1].1), (false, true));
    assert!(matches!(out[2], FamilyDone::Started(_)));
    // The batch was committed: the successor rotates on after reopening.
    drop(s);
    let s = RedbFile::open(tmp.path(), 1_002).unwrap();
    let next = &successors[0].0;
    // Reuse of the stale token and a use of the successor in one batch: the reuse comes first
    // and revokes the family, so the successor is refused too.
    let out = s
        .apply_refresh_ops(&[(rotate(&rt), 1_050), (rotate(next), 1_050)], &POLICY)
        .unwrap();
    assert!(matches!(
        out[0],
        Ok(FamilyDone::Rotated(RotateOutcome::Refused(
            RefreshRejection::ReuseDetected
        )))
    ));
    assert!(matches!(
        out[1],
        Ok(FamilyDone::Rotated(RotateOutcome::Refused(
            RefreshRejection::Revoked
        )))
    ));
    for junk in [
        "mmrt1.nonsense",
        "mmrt2.nonsense",
        "",
        &next[..next.len() - 1],
    ] {
        assert_eq!(
            rotate_one(&s, junk),
            Some(RefreshRejection::Unknown),
            "{junk:?}"
        );
    }
}

fn rotate_one(s: &RedbFile, token: &str) -> Option<RefreshRejection> {
    rotate(s, token, 1_101).err()
}

#[test]
fn a_damaged_family_record_fails_its_own_request_only() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    let damaged = issue(&s, 1_000);
    let sound = issue(&s, 1_000);
    let family = s.hash_key().verify_refresh(&damaged).unwrap().family;
    assert_eq!(
        s.merge().unwrap(),
        2,
        "both families move from the journal to the table"
    );
    let tx = s.begin_write().unwrap();
    tx.open_table(FAMILY_RECORDS)
        .unwrap()
        .insert(family.as_slice(), b"{not json".as_slice())
        .unwrap();
    tx.commit().unwrap();
    let out = s
        .apply_refresh_ops(
            &[(rotate_op(&damaged), 1_001), (rotate_op(&sound), 1_001)],
            &POLICY,
        )
        .unwrap();
    assert!(matches!(out[0], Err(StoreError::Corrupt(_))));
    let FamilyDone::Rotated(RotateOutcome::Rotated(next)) = out[1].as_ref().unwrap() else {
        panic!("the sound family did not rotate");
    };
    // The batch was committed for the sound family.
    assert!(rotate(&s, &next.successor, 1_002).is_ok());
}

#[test]
fn committed_families_survive_a_crash_before_their_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let (rt, next) = {
        let s = store_with_user(tmp.path());
        let rt = issue(&s, 1_000);
        let next = rotate(&s, &rt, 1_001).unwrap().successor;
        // Dropped without a merge: only the journal has these families.
        (rt, next)
    };
    let s = RedbFile::open(tmp.path(), 1_002).unwrap();
    let again = rotate(&s, &rt, 1_003).unwrap();
    assert!(again.retried, "the journal was read back");
    assert_eq!(again.successor, next);
    assert_eq!(s.merge().unwrap(), 1);
    let tx = s.begin_read().unwrap();
    use redb::ReadableTableMetadata as _;
    assert_eq!(tx.open_table(FAMILY_JOURNAL).unwrap().len().unwrap(), 0);
    assert_eq!(tx.open_table(FAMILY_RECORDS).unwrap().len().unwrap(), 1);
    drop(tx);
    assert!(rotate(&s, &next, 1_004).is_ok(), "merged state rotates on");
}

/// The index's keys and the family table's count, as the store holds them.
fn indexed(s: &RedbFile) -> (Vec<(String, Vec<u8>)>, u64) {
    use redb::ReadableTableMetadata as _;
    let tx = s.begin_read().unwrap();
    let index = tx.open_table(by_user::FAMILIES_BY_USER).unwrap();
    let keys = index
        .iter()
        .unwrap()
        .map(|r| {
            let (k, _) = r.unwrap();
            let (user, id) = k.value();
            (user.to_owned(), id.to_vec())
        })
        .collect();
    let families = tx.open_table(FAMILY_RECORDS).unwrap().len().unwrap();
    (keys, families)
}

#[test]
fn an_index_an_earlier_version_left_behind_is_built_again_when_the_store_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    issue(&s, 1_000);
    issue(&s, 1_001);
    assert_eq!(s.merge().unwrap(), 2);
    let (whole, families) = indexed(&s);
    assert_eq!((whole.len(), families), (2, 2));
    // An earlier version merged the second family: into the table, not into the index.
    let tx = s.begin_write().unwrap();
    {
        let mut index = tx.open_table(by_user::FAMILIES_BY_USER).unwrap();
        let (user, id) = &whole[1];
        index.remove((user.as_str(), id.as_slice())).unwrap();
    }
    tx.commit().unwrap();
    assert_eq!(indexed(&s).0.len(), 1);
    drop(s);

    let s = RedbFile::open(tmp.path(), 1_002).unwrap();
    assert_eq!(
        indexed(&s),
        (whole.clone(), 2),
        "the index again has every family"
    );
    // An earlier version merged one family and swept another, which stayed in the index: as
    // many keys as families, not the same ones.
    let tx = s.begin_write().unwrap();
    {
        let mut index = tx.open_table(by_user::FAMILIES_BY_USER).unwrap();
        let (user, id) = &whole[0];
        index.remove((user.as_str(), id.as_slice())).unwrap();
        index.insert(("alice", [9u8; 16].as_slice()), ()).unwrap();
    }
    tx.commit().unwrap();
    assert_eq!(indexed(&s).0.len(), 2);
    drop(s);
    let s = RedbFile::open(tmp.path(), 1_003).unwrap();
    assert_eq!(
        indexed(&s),
        (whole.clone(), 2),
        "built again from the families"
    );
    drop(s);
    let s = RedbFile::open(tmp.path(), 1_004).unwrap();
    assert_eq!(indexed(&s), (whole, 2), "a whole index is kept as it is");
}

#[test]
fn a_family_record_that_does_not_decode_leaves_the_store_openable() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    issue(&s, 1_000);
    assert_eq!(s.merge().unwrap(), 1);
    let tx = s.begin_write().unwrap();
    {
        let mut families = tx.open_table(FAMILY_RECORDS).unwrap();
        families
            .insert([7u8; 16].as_slice(), b"not json".as_slice())
            .unwrap();
    }
    tx.commit().unwrap();
    drop(s);
    let s = RedbFile::open(tmp.path(), 1_001).unwrap();
    let (keys, families) = indexed(&s);
    assert_eq!(
        (keys.len(), families),
        (1, 2),
        "the record that decodes is indexed"
    );
}

#[test]
fn the_sweep_covers_a_big_table_in_bounded_slices() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    for _ in 0..7 {
        issue(&s, 1_000);
    }
    let live = issue(&s, 1_050);
    // Expired at 1_100, except the last; three records per pass.
    let mut removed = 0;
    for _ in 0..3 {
        removed += s.sweep_with(1_120, 3).unwrap();
    }
    assert_eq!(removed, 7);
    assert_eq!(s.family_count().unwrap(), 1);
    assert!(rotate(&s, &live, 1_121).is_ok());
}

/// A report an earlier version filed by node and VM alone is read as its edge's, and filed
/// again under the edge's key (client, node and VM) at the next write, merged with a newer one.
#[test]
fn edges_filed_by_node_and_vm_are_filed_again() {
    use crate::store::edges::EdgeReport;
    let tmp = tempfile::tempdir().unwrap();
    let s = RedbFile::open(tmp.path(), 1_000).unwrap();
    let report = |last_seen| EdgeReport {
        node: "envoy-a".into(),
        vm: "1".into(),
        client: "edge".into(),
        first_seen: 900,
        last_seen,
        keys_version: None,
        kids: vec![],
        cursor: 0,
        latest: 0,
        synced_at: None,
    };
    let tx = s.begin_write().unwrap();
    tx.open_table(EDGES)
        .unwrap()
        .insert("envoy-a\n1", enc(&report(1_000)).as_slice())
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(s.edges().unwrap(), [report(1_000)]);
    let newer = EdgeReport {
        first_seen: 1_010,
        ..report(1_010)
    };
    assert_eq!(s.record_edges(vec![newer], 0).unwrap(), 0);
    let keys: Vec<String> = s
        .begin_read()
        .unwrap()
        .open_table(EDGES)
        .unwrap()
        .iter()
        .unwrap()
        .map(|r| r.unwrap().0.value().to_owned())
        .collect();
    assert_eq!(keys, [report(0).key()]);
    assert_eq!(s.edges().unwrap(), [report(1_010)], "first seen at 900");
}

#[test]
fn a_redb_error_is_the_source_of_the_store_error() {
    use std::error::Error as _;
    // ENOSPC: the disk is full.
    let e = from_redb(redb::Error::Io(std::io::Error::from_raw_os_error(28)));
    assert!(e.is_transient(), "{e:?}");
    let fault = e.source().and_then(|c| c.downcast_ref::<DiskFault>());
    assert!(
        matches!(fault, Some(DiskFault::Io(io)) if io.raw_os_error() == Some(28)),
        "{fault:?}"
    );
    let other = from_redb(redb::Error::DatabaseAlreadyOpen);
    assert!(!other.is_transient());
    let source = other.source().expect("a source");
    assert!(
        matches!(
            source.downcast_ref::<redb::Error>(),
            Some(redb::Error::DatabaseAlreadyOpen)
        ),
        "{source:?}"
    );
}
