//! The store conformance suite: the same behaviour asserted against every backend behind
//! `issuer::store::Store`, the embedded redb file and a real PostgreSQL (a throwaway cluster on a
//! free loopback port, SERIALIZABLE by default; see `e2e::postgres`).

use crate::store_proofs::proof_ids_are_accepted_once_until_they_expire;
use issuer::store::kek::Kek;
use issuer::store::postgres::PgStore;
use issuer::store::redb::RedbStore;
use issuer::store::revocation::Revoked;
use issuer::store::{
    ClientChange, FamilyRevocation, KeyState, RefreshPolicy, RefreshRejection, RetireOutcome,
    RotateOutcome, Rotation, Store, UserChange, KEY_RETIRE_MARGIN,
};
use std::sync::Arc;

mod audit;
mod edges;
mod pages;
mod records;
mod restore;
mod revocations;
mod sessions;
mod vendor;
use audit::audit_is_recorded_read_since_and_swept;
use edges::{
    a_held_key_signs_once_promoted, an_edge_is_its_client_node_and_vm,
    edges_are_kept_merged_and_forgotten, the_edges_of_one_client_are_bounded,
};
use pages::{clients_and_users_are_read_by_page, one_users_families_are_read_by_page};
pub(crate) use records::{client, user};
use restore::revocation_cursors_prove_the_history_they_belong_to;
use revocations::{
    revocations_are_numbered_kept_and_swept, the_latest_revocation_is_the_pages_latest,
};
use sessions::families_are_listed_by_page_and_user_and_revoked_by_id;
use vendor::vendor_clients_are_kept_pending_activated_restated_and_revoked;

pub(crate) const POLICY: RefreshPolicy = RefreshPolicy {
    idle_ttl: 100,
    absolute_ttl: 250,
    retry_window: 10,
};

pub(crate) const KEK: [u8; 32] = [7; 32];

/// A backend under test and how to (re)open it.
pub(crate) enum Backend {
    Redb(tempfile::TempDir),
    Postgres(e2e::postgres::PgCluster),
}

impl Backend {
    pub(crate) async fn open(&self, now: u64) -> Arc<dyn Store> {
        match self {
            // A 1 MiB page cache: the behaviour must not depend on the cache size.
            Self::Redb(dir) => Arc::new(
                RedbStore::open_with_cache(dir.path(), now, POLICY, Some(1 << 20)).unwrap(),
            ),
            Self::Postgres(pg) => Arc::new(
                PgStore::connect(&pg.url(), Kek::derive(&KEK), now, POLICY)
                    .await
                    .unwrap_or_else(|e| panic!("{e}\n{}", pg.log())),
            ),
        }
    }
}

pub(crate) async fn with_user(b: &Backend) -> Arc<dyn Store> {
    let s = b.open(1_000).await;
    assert!(s.add_client("app", &client(true)).await.unwrap());
    assert!(s.add_client("other", &client(true)).await.unwrap());
    assert!(s.add_user("alice", &user()).await.unwrap());
    s
}

async fn issue(s: &dyn Store, now: u64) -> String {
    s.start_family("app", "alice", now, None)
        .await
        .unwrap()
        .to_string()
}

async fn rotate(
    s: &dyn Store,
    t: &str,
    client: &str,
    now: u64,
) -> Result<Rotation, RefreshRejection> {
    match s.rotate_family(t, client, now, None).await.unwrap() {
        RotateOutcome::Rotated(r) => Ok(r),
        RotateOutcome::Refused(why) => Err(why),
    }
}

async fn clients_and_users(b: Backend) {
    let s = b.open(1_000).await;
    assert!(s.add_client("app", &client(false)).await.unwrap());
    assert!(
        !s.add_client("app", &client(true)).await.unwrap(),
        "ids are unique"
    );
    assert!(s
        .update_client("app", ClientChange::SetActive(true), 1_000)
        .await
        .unwrap());
    assert!(!s
        .update_client("nobody", ClientChange::SetActive(true), 1_000)
        .await
        .unwrap());
    assert!(s.client("app").await.unwrap().unwrap().active);
    // A token exchange policy is kept with the client, set and cleared.
    let policy = issuer::store::ExchangePolicy::new(vec!["web".into()], 3, vec!["media".into()]);
    let mut rec = s.client("app").await.unwrap().unwrap();
    for exchange in [Some(policy.unwrap()), None] {
        let change = ClientChange::SetAccess {
            grants: rec.grants.clone(),
            impersonate: rec.impersonate,
            claim_types: rec.impersonate_claim_types.clone(),
            dpop: rec.dpop,
            exchange: exchange.clone(),
        };
        assert!(s.update_client("app", change, 1_000).await.unwrap());
        rec = s.client("app").await.unwrap().unwrap();
        assert_eq!(rec.exchange, exchange);
    }
    assert_eq!(s.clients().await.unwrap().len(), 1);
    assert!(s.add_user("zoë", &user()).await.unwrap());
    assert!(!s.add_user("zoë", &user()).await.unwrap());
    let change = UserChange::SetPassword {
        hash: "new".into(),
        at: 1_000,
    };
    assert!(s.update_user("zoë", &change, 1_000).await.unwrap());
    assert!(s
        .update_user("zoë", &UserChange::Disable { at: 1_000 }, 1_000)
        .await
        .unwrap());
    let u = s.user("zoë").await.unwrap().unwrap();
    assert_eq!((u.password_hash.as_str(), u.disabled), ("new", true));
    assert!(s.remove_user("zoë", 1_000).await.unwrap());
    assert!(!s.remove_user("zoë", 1_000).await.unwrap());
    assert!(s.remove_client("app", 1_000).await.unwrap());
    assert!(s.client("app").await.unwrap().is_none());
    assert!(s.users().await.unwrap().is_empty());
    s.set_access_ttl(600).await.unwrap();
    assert_eq!(s.access_ttl().await.unwrap(), 600);
}

async fn keys_rotate_publish_and_retire(b: Backend) {
    let s = b.open(1_000).await;
    s.set_access_ttl(600).await.unwrap();
    let first = s.key_ring(1_000).await.unwrap();
    assert_eq!(first.signing_key().map(|k| k.id()), Some(1));
    assert_eq!(
        s.rotate_key(2_000, 300).await.unwrap().map(|r| r.kid),
        Some(2)
    );
    assert_eq!(
        s.rotate_key(2_100, 60).await.unwrap(),
        None,
        "one scheduled rotation at a time"
    );
    let before = s.key_ring(2_299).await.unwrap();
    assert_eq!(before.signing_key().map(|k| k.id()), Some(1));
    assert!(before.get(2).is_some(), "published before it signs");
    let after = s.key_ring(2_300).await.unwrap();
    assert_eq!(after.signing_key().map(|k| k.id()), Some(2));
    assert_eq!(
        after.get(1).map(|k| *k.secret()),
        first.get(1).map(|k| *k.secret()),
        "the old key still verifies, unchanged"
    );
    // Retired by hand, key 1 leaves the ring at once; the signing key cannot be retired.
    assert_eq!(
        s.retire_key(2, 2_400).await.unwrap(),
        RetireOutcome::InUse(KeyState::Signing)
    );
    assert_eq!(
        s.retire_key(7, 2_400).await.unwrap(),
        RetireOutcome::Unknown
    );
    assert!(s.key_ring(2_399).await.unwrap().get(1).is_some());
    assert_eq!(
        s.retire_key(1, 2_400).await.unwrap(),
        RetireOutcome::Retired
    );
    assert_eq!(
        s.retire_key(1, 2_401).await.unwrap(),
        RetireOutcome::AlreadyRetired
    );
    assert!(s.key_ring(2_400).await.unwrap().get(1).is_none());
    assert_eq!(s.key_infos(2_400).await.unwrap()[0].retires_at, Some(2_400));
    let retire = 2_300 + 600 + KEY_RETIRE_MARGIN;
    assert!(s.key_ring(retire).await.unwrap().get(1).is_none());
    let states: Vec<KeyState> = s
        .key_infos(retire)
        .await
        .unwrap()
        .iter()
        .map(|k| k.state)
        .collect();
    assert_eq!(states, [KeyState::Retired, KeyState::Signing]);
    assert_eq!(s.sweep(retire).await.unwrap(), 1);
    // Keys survive reopening (sealed under the KEK on PostgreSQL).
    drop(s);
    let s = b.open(retire).await;
    assert_eq!(
        s.key_ring(retire)
            .await
            .unwrap()
            .get(2)
            .map(|k| *k.secret()),
        after.get(2).map(|k| *k.secret())
    );
}

/// A compromised key is cut at once whatever is pending (a finding of the second outside probe):
/// a rotation without delay retires the pending key and signs with a new one; the old signing key
/// then retires.
async fn an_emergency_rotation_replaces_a_pending_one(b: Backend) {
    let s = b.open(1_000).await;
    s.set_access_ttl(600).await.unwrap();
    assert_eq!(
        s.rotate_key(2_000, 86_400).await.unwrap().map(|r| r.kid),
        Some(2)
    );
    assert_eq!(
        s.retire_key(1, 2_050).await.unwrap(),
        RetireOutcome::InUse(KeyState::Signing)
    );
    let rotated = s
        .rotate_key(2_100, 0)
        .await
        .unwrap()
        .expect("never refused");
    assert_eq!((rotated.kid, rotated.dropped.as_slice()), (3, &[2][..]));
    let ring = s.key_ring(2_100).await.unwrap();
    assert_eq!(ring.signing_key().map(|k| k.id()), Some(3));
    assert!(
        ring.get(2).is_none(),
        "the dropped pending key verifies nothing"
    );
    assert!(ring.get(1).is_some(), "the old key verifies until retired");
    assert_eq!(
        s.retire_key(1, 2_101).await.unwrap(),
        RetireOutcome::Retired
    );
    let ring = s.key_ring(2_101).await.unwrap();
    let kids: Vec<u32> = ring.keys().iter().map(|k| k.id()).collect();
    assert_eq!(kids, [3]);
    // Key 2 never takes over at the time it was scheduled for.
    let later = s.key_ring(2_000 + 86_400).await.unwrap();
    assert_eq!(later.signing_key().map(|k| k.id()), Some(3));
    let states: Vec<KeyState> = s
        .key_infos(2_101)
        .await
        .unwrap()
        .iter()
        .map(|k| k.state)
        .collect();
    assert_eq!(
        states,
        [KeyState::Retired, KeyState::Retired, KeyState::Signing]
    );
}

/// The family revocations in force at `now`, as (tag, time recorded).
async fn family_revocations(s: &dyn Store, now: u64) -> Vec<(String, u64)> {
    let page = s.revocations(0, now, usize::MAX).await.unwrap();
    let family = |e: issuer::store::revocation::Revocation| match e.what {
        Revoked::Family { tag } => Some((tag, e.at)),
        _ => None,
    };
    page.entries.into_iter().filter_map(family).collect()
}

/// The tag a family revocation of `refresh_token`'s family names.
fn tag_of(s: &dyn Store, refresh_token: &str) -> String {
    hex::encode(s.hash_key().family_tag_of(refresh_token).unwrap())
}

async fn refresh_rotation_retry_and_reuse(b: Backend) {
    let s = with_user(&b).await;
    let rt = issue(s.as_ref(), 1_000).await;
    assert_eq!(
        rotate(s.as_ref(), &rt, "other", 1_001).await.err(),
        Some(RefreshRejection::OtherClient)
    );
    let first = rotate(s.as_ref(), &rt, "app", 1_001).await.unwrap();
    assert!(!first.retried);
    assert_eq!(first.user_name, "alice");
    // A retry inside the window: the identical successor.
    let again = rotate(s.as_ref(), &rt, "app", 1_005).await.unwrap();
    assert!(again.retried);
    assert_eq!(again.successor, first.successor);
    let info = s
        .family_info(&first.successor, 1_006)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((info.client.as_str(), info.user.as_str()), ("app", "alice"));
    assert!(
        s.family_info(&rt, 1_006).await.unwrap().is_none(),
        "rotated"
    );
    // Reuse outside the window revokes the family, successor included; other families stay.
    let other = issue(s.as_ref(), 1_020).await;
    assert_eq!(
        rotate(s.as_ref(), &rt, "app", 1_030).await.err(),
        Some(RefreshRejection::ReuseDetected)
    );
    assert_eq!(
        rotate(s.as_ref(), &first.successor, "app", 1_031)
            .await
            .err(),
        Some(RefreshRejection::Revoked)
    );
    // The family's access tokens were revoked in the same transaction, once.
    let revoked = vec![(tag_of(s.as_ref(), &rt), 1_030)];
    assert_eq!(family_revocations(s.as_ref(), 1_031).await, revoked);
    assert!(rotate(s.as_ref(), &other, "app", 1_031).await.is_ok());
    // Unknown, malformed and altered tokens.
    let mut altered = other.clone().into_bytes();
    altered[20] = if altered[20] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for junk in [
        "mmrt1.nonsense",
        "mmrt2.nonsense",
        "",
        &other[..other.len() - 1],
        &altered,
    ] {
        assert_eq!(
            rotate(s.as_ref(), junk, "app", 1_031).await.err(),
            Some(RefreshRejection::Unknown),
            "{junk:?}"
        );
    }
}

async fn refresh_lifetimes_revocation_and_inactive(b: Backend) {
    let s = with_user(&b).await;
    step_a_family_expires_idle_or_at_its_end_and_is_swept(s.as_ref()).await;
    // Revocation by the owning client only.
    let rt = issue(s.as_ref(), 2_000).await;
    assert_eq!(
        s.revoke_family(&rt, "other", 2_001).await.unwrap(),
        FamilyRevocation::OtherClient
    );
    assert!(family_revocations(s.as_ref(), 2_001).await.is_empty());
    for again in [2_001, 2_005] {
        assert_eq!(
            s.revoke_family(&rt, "app", again).await.unwrap(),
            FamilyRevocation::Revoked
        );
    }
    // Its access tokens with it, in the same transaction; revoking it again adds nothing.
    let revoked = vec![(tag_of(s.as_ref(), &rt), 2_001)];
    assert_eq!(family_revocations(s.as_ref(), 2_005).await, revoked);
    assert_eq!(
        rotate(s.as_ref(), &rt, "app", 2_002).await.err(),
        Some(RefreshRejection::Revoked)
    );
    step_a_disabled_user_or_deactivated_client_stops_refreshing(s.as_ref()).await;
}

/// Step: a family expires once idle too long, or at its absolute end however often it rotated,
/// and is swept as one record.
async fn step_a_family_expires_idle_or_at_its_end_and_is_swept(s: &dyn Store) {
    let rt = issue(s, 1_000).await;
    assert_eq!(
        rotate(s, &rt, "app", 1_100).await.err(),
        Some(RefreshRejection::Expired),
        "idle"
    );
    let mut current = rotate(s, &rt, "app", 1_090)
        .await
        .unwrap()
        .successor
        .to_string();
    for t in [1_150, 1_220] {
        current = rotate(s, &current, "app", t)
            .await
            .unwrap()
            .successor
            .to_string();
    }
    assert_eq!(
        rotate(s, &current, "app", 1_250).await.err(),
        Some(RefreshRejection::Expired),
        "absolute"
    );
    assert_eq!(
        s.sweep(1_400).await.unwrap(),
        1,
        "one record per family, however often it rotated"
    );
    assert_eq!(
        rotate(s, &current, "app", 1_240).await.err(),
        Some(RefreshRejection::Unknown),
        "swept"
    );
}

/// Step: a disabled user or a deactivated client stops refreshing; enabled again, the user
/// signs in afresh, and a family from before the disable stays dead.
async fn step_a_disabled_user_or_deactivated_client_stops_refreshing(s: &dyn Store) {
    let rt = issue(s, 2_000).await;
    s.update_user("alice", &UserChange::Disable { at: 2_002 }, 2_002)
        .await
        .unwrap();
    assert_eq!(
        rotate(s, &rt, "app", 2_003).await.err(),
        Some(RefreshRejection::Inactive)
    );
    s.update_user("alice", &UserChange::Enable, 2_003)
        .await
        .unwrap();
    // Enabled again, the user signs in afresh; a family from before the disable stays dead.
    assert_eq!(
        rotate(s, &rt, "app", 2_003).await.err(),
        Some(RefreshRejection::Inactive)
    );
    let after = issue(s, 2_003).await;
    assert!(rotate(s, &after, "app", 2_003).await.is_ok());
    s.update_client("app", ClientChange::SetActive(false), 2_004)
        .await
        .unwrap();
    assert_eq!(
        rotate(s, &rt, "app", 2_004).await.err(),
        Some(RefreshRejection::Inactive)
    );
}

async fn concurrent_rotations_never_fork(b: Backend) {
    let s = with_user(&b).await;
    let rt = issue(s.as_ref(), 1_000).await;
    let racers: Vec<_> = (0..32)
        .map(|_| {
            let s = s.clone();
            let rt = rt.clone();
            tokio::spawn(async move { rotate(s.as_ref(), &rt, "app", 1_001).await })
        })
        .collect();
    let mut successors = std::collections::HashSet::new();
    let mut fresh = 0;
    for r in racers {
        let r = r.await.unwrap().expect("no racer fails");
        fresh += usize::from(!r.retried);
        successors.insert(r.successor.to_string());
    }
    assert_eq!(
        (successors.len(), fresh),
        (1, 1),
        "one successor, rotated once"
    );
    // The successor survives reopening: it was durable before anyone was answered.
    drop(s);
    let s = b.open(1_002).await;
    let next = successors.into_iter().next().unwrap();
    assert!(rotate(s.as_ref(), &next, "app", 1_002).await.is_ok());
}

async fn a_new_password_ends_older_families(b: Backend) {
    let s = with_user(&b).await;
    let before = issue(s.as_ref(), 1_000).await;
    let change = UserChange::SetPassword {
        hash: "new".into(),
        at: 1_000,
    };
    assert!(s.update_user("alice", &change, 1_000).await.unwrap());
    // Started in the second of the change: ended too (both stores, both rotation paths).
    assert_eq!(
        rotate(s.as_ref(), &before, "app", 1_010).await.err(),
        Some(RefreshRejection::Inactive)
    );
    let after = issue(s.as_ref(), 1_001).await;
    let next = rotate(s.as_ref(), &after, "app", 1_010).await.unwrap();
    assert_eq!(next.user.password_changed_at, Some(1_000));
}

/// One test per backend and behaviour.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod redb {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Backend::Redb(tempfile::tempdir().unwrap())).await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
            async fn $name() {
                let pg = e2e::postgres::PgCluster::for_test();
                super::$name(super::Backend::Postgres(pg)).await;
            })*
        }
    };
}

conformance!(
    clients_and_users,
    keys_rotate_publish_and_retire,
    an_emergency_rotation_replaces_a_pending_one,
    refresh_rotation_retry_and_reuse,
    refresh_lifetimes_revocation_and_inactive,
    concurrent_rotations_never_fork,
    revocations_are_numbered_kept_and_swept,
    the_latest_revocation_is_the_pages_latest,
    revocation_cursors_prove_the_history_they_belong_to,
    a_new_password_ends_older_families,
    edges_are_kept_merged_and_forgotten,
    an_edge_is_its_client_node_and_vm,
    the_edges_of_one_client_are_bounded,
    a_held_key_signs_once_promoted,
    audit_is_recorded_read_since_and_swept,
    proof_ids_are_accepted_once_until_they_expire,
    vendor_clients_are_kept_pending_activated_restated_and_revoked,
    families_are_listed_by_page_and_user_and_revoked_by_id,
    clients_and_users_are_read_by_page,
    one_users_families_are_read_by_page,
);
