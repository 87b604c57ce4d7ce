//! The edges' reports and held keys, on both backends: what `issuer edges` and `issuer keys
//! rotate --when-edges-ready` rely on.

use super::Backend;
use issuer::store::{EdgeReport, KeyState, PromoteOutcome, HELD};

fn report(vm: &str, last_seen: u64, kids: &[u32]) -> EdgeReport {
    EdgeReport {
        node: "envoy-a".into(),
        vm: vm.into(),
        client: "edge".into(),
        first_seen: last_seen,
        last_seen,
        keys_version: Some("v1".into()),
        kids: kids.to_vec(),
        cursor: 4,
        latest: 4,
        synced_at: Some(last_seen),
    }
}

/// Reports are merged per edge (never moving it back), kept across a reopen (so every issuer
/// on one database sees them) and dropped once unseen.
pub(super) async fn edges_are_kept_merged_and_forgotten(b: Backend) {
    let s = b.open(1_000).await;
    assert!(s.edges().await.unwrap().is_empty());
    s.record_edges(vec![report("1", 1_000, &[1]), report("2", 1_001, &[1])], 0)
        .await
        .unwrap();
    // A late report of edge 2 (written by a slower issuer) does not move it back, but an
    // earlier first sighting is kept.
    s.record_edges(vec![report("1", 1_010, &[1, 2]), report("2", 990, &[])], 0)
        .await
        .unwrap();
    drop(s);
    let s = b.open(1_020).await;
    let edges = s.edges().await.unwrap();
    let seen: Vec<_> = edges
        .iter()
        .map(|e| (e.vm.as_str(), e.first_seen, e.last_seen, e.kids.clone()))
        .collect();
    assert_eq!(
        seen,
        [("1", 1_000, 1_010, vec![1, 2]), ("2", 990, 1_001, vec![1])]
    );
    // Edge 2, last seen at 1_001, is forgotten by a write that forgets before 1_005.
    s.record_edges(vec![], 1_005).await.unwrap();
    let left: Vec<_> = s.edges().await.unwrap().into_iter().map(|e| e.vm).collect();
    assert_eq!(left, ["1"]);
}

/// A key published held signs only once promoted: it is in the ring meanwhile, whatever the time.
pub(super) async fn a_held_key_signs_once_promoted(b: Backend) {
    let s = b.open(1_000).await;
    s.set_access_ttl(600).await.unwrap();
    let held = s.rotate_key(1_100, HELD).await.unwrap().unwrap().kid;
    assert_eq!(held, 2);
    let ring = s.key_ring(1_000_000).await.unwrap();
    assert_eq!(
        ring.signing_key().map(|k| k.id()),
        Some(1),
        "held, not signing"
    );
    assert!(ring.get(2).is_some(), "published");
    let states = |infos: Vec<issuer::store::KeyInfo>| -> Vec<KeyState> {
        infos.iter().map(|k| k.state).collect()
    };
    assert_eq!(
        states(s.key_infos(1_200).await.unwrap()),
        [KeyState::Signing, KeyState::Held]
    );
    assert!(
        s.rotate_key(1_200, 5).await.unwrap().is_none(),
        "one at a time"
    );
    assert_eq!(
        s.promote_key(1, 1_200).await.unwrap(),
        PromoteOutcome::NotHeld(KeyState::Signing)
    );
    assert_eq!(
        s.promote_key(9, 1_200).await.unwrap(),
        PromoteOutcome::Unknown
    );
    assert_eq!(
        s.promote_key(2, 1_300).await.unwrap(),
        PromoteOutcome::Promoted
    );
    let ring = s.key_ring(1_300).await.unwrap();
    assert_eq!(ring.signing_key().map(|k| k.id()), Some(2));
    let infos = s.key_infos(1_300).await.unwrap();
    assert_eq!(
        states(infos.clone()),
        [KeyState::Verifying, KeyState::Signing]
    );
    assert_eq!(infos[0].superseded_at, Some(1_300));
    assert_eq!(
        s.promote_key(2, 1_301).await.unwrap(),
        PromoteOutcome::NotHeld(KeyState::Signing)
    );
    // The old key retires on the usual schedule from the promotion.
    let retire = 1_300 + 600 + issuer::store::KEY_RETIRE_MARGIN;
    assert!(s.key_ring(retire).await.unwrap().get(1).is_none());
}
