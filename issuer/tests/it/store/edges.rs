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

fn of(client: &str, node: &str, vm: &str, last_seen: u64) -> EdgeReport {
    EdgeReport {
        client: client.into(),
        node: node.into(),
        ..report(vm, last_seen, &[])
    }
}

/// An edge is its client, node and VM, each apart: no two of them join into the same edge.
pub(super) async fn an_edge_is_its_client_node_and_vm(b: Backend) {
    let s = b.open(1_000).await;
    let edges = vec![
        of("edge", "a/b", "c", 1_000),
        of("edge", "a", "b/c", 1_000),
        of("edge", "a\nb", "c", 1_000),
        of("edge", "a", "b\nc", 1_000),
        of("other", "a/b", "c", 1_000),
    ];
    s.record_edges(edges.clone(), 0).await.unwrap();
    // A later report of one of them moves that one alone.
    s.record_edges(vec![of("other", "a/b", "c", 1_010)], 0)
        .await
        .unwrap();
    let mut stored: Vec<_> = s
        .edges()
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.client, e.node, e.vm, e.last_seen))
        .collect();
    stored.sort();
    let mut expected: Vec<_> = edges
        .into_iter()
        .map(|e| (e.client, e.node, e.vm, e.last_seen))
        .collect();
    expected[4].3 = 1_010;
    expected.sort();
    assert_eq!(stored, expected);
}

/// One edge client registers at most `MAX_EDGES_PER_CLIENT` edges at once: its new edges beyond
/// are not recorded, its known ones still are, and other clients' edges are unaffected.
pub(super) async fn the_edges_of_one_client_are_bounded(b: Backend) {
    const BOUND: usize = issuer::store::edges::MAX_EDGES_PER_CLIENT;
    let s = b.open(1_000).await;
    s.record_edges(vec![of("real", "envoy", "1", 1_000)], 0)
        .await
        .unwrap();
    let flood: Vec<_> = (0..BOUND + 50)
        .map(|i| of("flood", &format!("fake-{i}"), "vm", 1_001))
        .collect();
    let first = s.record_edges(flood[..BOUND - 10].to_vec(), 0).await;
    assert_eq!(first.unwrap(), 0, "none refused");
    let rest = s.record_edges(flood[BOUND - 10..].to_vec(), 0).await;
    assert_eq!(rest.unwrap(), 50, "refused beyond the bound");
    // A new edge of another client, and later reports of known edges.
    let later = vec![
        of("real", "envoy", "2", 1_002),
        of("flood", "fake-0", "vm", 1_003),
        of("flood", &format!("fake-{BOUND}"), "vm", 1_003),
    ];
    assert_eq!(s.record_edges(later, 0).await.unwrap(), 1);
    let edges = s.edges().await.unwrap();
    let count = |c: &str| edges.iter().filter(|e| e.client == c).count();
    assert_eq!((count("flood"), count("real")), (BOUND, 2));
    let seen = |node: &str| edges.iter().find(|e| e.node == node).map(|e| e.last_seen);
    assert_eq!(
        seen("fake-0"),
        Some(1_003),
        "a known edge is still recorded"
    );
    assert_eq!(seen(&format!("fake-{}", BOUND - 1)), Some(1_001));
    assert_eq!(seen(&format!("fake-{BOUND}")), None, "beyond the bound");
    // Once the flood is forgotten, the client registers new edges again.
    s.record_edges(vec![of("flood", "new", "vm", 1_700)], 1_100)
        .await
        .unwrap();
    let left: Vec<_> = s
        .edges()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.node)
        .collect();
    assert_eq!(left, ["new"]);
}
