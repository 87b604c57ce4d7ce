//! The embedded store on its own: lifetimes, the sweep, reopening, key rotation, group commit.

use super::*;
use crate::store::{GrantKind, RefreshRejection, KEY_RETIRE_MARGIN};
use shared::Key;

const POLICY: RefreshPolicy = RefreshPolicy {
    idle_ttl: 100,
    absolute_ttl: 250,
    retry_window: 10,
};

fn store_with_user(dir: &Path) -> RedbFile {
    let s = RedbFile::open(dir, 1_000).unwrap();
    let client = ClientRecord {
        secret_hash: hex::encode([0u8; 32]),
        active: true,
        grants: vec![GrantKind::Password],
        impersonate: false,
        impersonate_claim_types: vec![],
        created_at: 0,
    };
    assert!(s.add_client("app", &client).unwrap());
    let user = UserRecord {
        password_hash: String::new(),
        disabled: false,
        roles: vec!["r".into()],
        claims: vec![],
        created_at: 0,
    };
    assert!(s.add_user("alice", &user).unwrap());
    s
}

#[test]
fn idle_and_absolute_lifetimes_and_the_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with_user(tmp.path());
    let rt = s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap();
    // Idle: unused for 100 s, it expires.
    assert_eq!(
        s.rotate_refresh(&rt, "app", 1_100, &POLICY).unwrap().err(),
        Some(RefreshRejection::Expired)
    );
    // Used in time, it rotates; each successor's idle expiry is capped by the absolute one.
    let mut current = s
        .rotate_refresh(&rt, "app", 1_090, &POLICY)
        .unwrap()
        .unwrap()
        .successor;
    for t in [1_150, 1_220] {
        current = s
            .rotate_refresh(&current, "app", t, &POLICY)
            .unwrap()
            .unwrap()
            .successor;
    }
    assert_eq!(
        s.rotate_refresh(&current, "app", 1_250, &POLICY)
            .unwrap()
            .err(),
        Some(RefreshRejection::Expired)
    );
    // The sweep deletes the family and all its tokens once the absolute lifetime is over.
    assert_eq!(
        s.sweep(1_249).unwrap(),
        2,
        "only the two idle-expired tokens go early"
    );
    assert_eq!(s.sweep(1_400).unwrap(), 3);
    assert_eq!(
        s.rotate_refresh(&current, "app", 1_240, &POLICY)
            .unwrap()
            .err(),
        Some(RefreshRejection::Unknown)
    );
}

#[test]
fn state_survives_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = {
        let s = store_with_user(tmp.path());
        s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap()
    };
    let s = RedbFile::open(tmp.path(), 1_001).unwrap();
    assert!(s.client("app").unwrap().is_some());
    let next = s
        .rotate_refresh(&rt, "app", 1_001, &POLICY)
        .unwrap()
        .unwrap();
    assert!(!next.retried);
    assert_eq!(next.user_name, "alice");
    assert!(matches!(
        RedbFile::open(tmp.path(), 1_002),
        Err(StoreError::Locked)
    ));
}

#[test]
fn superseded_keys_verify_until_they_retire() {
    let tmp = tempfile::tempdir().unwrap();
    let s = RedbFile::open(tmp.path(), 1_000).unwrap();
    s.set_access_ttl(600).unwrap();
    assert_eq!(s.rotate_key(2_000, 0).unwrap(), Some(2));
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
    assert_eq!(s.rotate_key(1_000, 300).unwrap(), Some(2));
    assert_eq!(
        s.rotate_key(1_100, 0).unwrap(),
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
    let rt = s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap();
    let rotate = |t: &str| RefreshOp::Rotate {
        presented: Zeroizing::new(t.into()),
        client: "app".into(),
    };
    let out = s
        .apply_refresh_ops(
            &[
                (rotate(&rt), 1_001),
                (rotate(&rt), 1_001),
                (
                    RefreshOp::Issue {
                        client: "app".into(),
                        user: "alice".into(),
                    },
                    1_001,
                ),
            ],
            &POLICY,
        )
        .unwrap();
    let successors: Vec<(String, bool)> = out[..2]
        .iter()
        .map(|o| match o {
            RefreshOutcome::Rotated(Ok(r)) => (r.successor.to_string(), r.retried),
            _ => panic!("rotation failed"),
        })
        .collect();
    assert_eq!(successors[0].0, successors[1].0, "one successor");
    assert_eq!((successors[0].1, successors[1].1), (false, true));
    assert!(matches!(out[2], RefreshOutcome::Issued(_)));
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
        RefreshOutcome::Rotated(Err(RefreshRejection::ReuseDetected))
    ));
    assert!(matches!(
        out[1],
        RefreshOutcome::Rotated(Err(RefreshRejection::Revoked))
    ));
    // A batch that writes nothing commits nothing, and says so.
    let out = s
        .apply_refresh_ops(&[(rotate("mmrt1.nonsense"), 1_101)], &POLICY)
        .unwrap();
    assert!(matches!(
        out[0],
        RefreshOutcome::Rotated(Err(RefreshRejection::Unknown))
    ));
}
