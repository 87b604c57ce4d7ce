//! A store moved from the embedded backend to PostgreSQL and back, at the store's level
//! (`issuer::store::contents`): a data dir's backup imported into an empty database holds every
//! record it had, and behaves as it did (the hash key, the key ring, the families, the
//! revocations with their stamps); exported again and restored into a data dir, the same. An
//! import while an issuer serves, and a second import, are refused and change nothing, and a
//! tampered record stops an export.

use crate::store::{client, user, KEK, POLICY};
use issuer::store::backup::{Backup, BackupError};
use issuer::store::contents::Contents;
use issuer::store::kek::Kek;
use issuer::store::postgres::PgStore;
use issuer::store::prelude::*;
use issuer::store::redb::{backup as redb_backup, contents as redb_contents, RedbStore};
use issuer::store::revocation::Revoked;
use issuer::store::{
    AuditAction, AuditEvent, EdgeReport, RefreshRejection, RotateOutcome, Store, StoreError,
};
use serde_json::{json, Value};
use std::path::Path;

/// Every record of `c` as JSON, each list sorted, to compare.
fn view(c: &Contents) -> Value {
    fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
        v.sort();
        v
    }
    let records = |r: &[(String, zeroize::Zeroizing<String>)]| {
        sorted(r.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
    };
    fn json_of<T: serde::Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap()
    }
    json!({
        "hash_key": hex::encode(*c.hash_key),
        "clients": records(&c.clients),
        "users": records(&c.users),
        "keys": c.keys.iter().map(|(k, r)| (k, json_of(r))).collect::<Vec<_>>(),
        "families": c.families.iter().map(|(id, f)| (hex::encode(id), json_of(f))).collect::<Vec<_>>(),
        "revocations": c.revocations.iter().map(json_of).collect::<Vec<_>>(),
        "edges": sorted(c.edges.iter().map(|(k, e)| (k.clone(), json_of(e))).collect()),
        "audit": c.audit,
        "settings": c.settings,
    })
}

/// A new file only its owner may read or write, as a backup must be.
fn new_private(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap()
}

/// A backup of `s` in `file`, read back.
fn backed_up(s: &RedbStore, file: &Path, now: u64) -> Contents {
    let snapshot = Backup::snapshot(s).unwrap();
    let mut out = new_private(file);
    snapshot.write_to(&mut out, now).unwrap();
    redb_contents::read_backup(file).unwrap()
}

/// A data dir with something of everything; the refresh token at the head of a live family.
async fn filled(dir: &Path) -> (RedbStore, String) {
    let s = RedbStore::open(dir, 1_000, POLICY).unwrap();
    s.set_access_ttl(600).await.unwrap();
    assert!(s.add_client("app", &client(true)).await.unwrap());
    assert!(s.add_user("alice", &user()).await.unwrap());
    assert!(s.add_user("bob", &user()).await.unwrap());
    assert!(s.rotate_key(1_000, 60).await.unwrap().is_some());
    let live = s.start_family("app", "alice", 1_000, KEY).await.unwrap();
    let gone = s.start_family("app", "bob", 1_001, None).await.unwrap();
    let RotateOutcome::Rotated(r) = s.rotate_family(&live, "app", 1_002, KEY).await.unwrap() else {
        panic!("not rotated")
    };
    s.revoke_family(&gone, "app", 1_003).await.unwrap();
    let carol = Revoked::User {
        name: "carol".into(),
    };
    s.revoke(carol, 1_003, None).await.unwrap();
    let edge = EdgeReport {
        node: "envoy-a".into(),
        vm: "1".into(),
        client: "edge".into(),
        first_seen: 1_000,
        last_seen: 1_003,
        keys_version: Some("v1".into()),
        kids: vec![1, 2],
        cursor: 1,
        latest: 2,
        synced_at: None,
    };
    s.record_edges(vec![edge], 0).await.unwrap();
    let audit = |at, target| {
        AuditEvent::new(
            at,
            "root",
            AuditAction::UserDisable,
            target,
            json!({}),
            json!({}),
        )
    };
    let events = [audit(1_003, "b"), audit(1_003, "a"), audit(1_001, "c")];
    s.record_audit(events.iter().map(AuditEvent::encode).collect())
        .await
        .unwrap();
    (s, r.successor.to_string())
}

/// The DPoP key the live family is bound to: it moves with the family.
const KEY: Option<[u8; 32]> = Some([0x5a; 32]);

async fn rotates(s: &dyn Store, token: &str, now: u64) -> String {
    let without = s.rotate_family(token, "app", now, None).await.unwrap();
    assert!(
        matches!(without, RotateOutcome::Refused(RefreshRejection::DpopKey)),
        "still bound"
    );
    match s.rotate_family(token, "app", now, KEY).await.unwrap() {
        RotateOutcome::Rotated(r) => r.successor.to_string(),
        RotateOutcome::Refused(why) => panic!("refused: {why:?}"),
    }
}

/// The same hash key, key ring and revocations (with their stamps) in `a` and `b`.
async fn behave_alike(a: &dyn Store, b: &dyn Store, now: u64) {
    let hash = |s: &dyn Store| s.hash_key().client_secret_hash("app", "secret");
    assert_eq!(hash(a), hash(b));
    let ring = |r: shared::KeyRing| -> Vec<(u32, Vec<u8>)> {
        r.keys()
            .iter()
            .map(|k| (k.id(), k.secret().to_vec()))
            .collect()
    };
    let (ra, rb) = (
        a.key_ring(now).await.unwrap(),
        b.key_ring(now).await.unwrap(),
    );
    assert_eq!(
        ra.signing_key().map(|k| k.id()),
        rb.signing_key().map(|k| k.id())
    );
    assert_eq!(ring(ra), ring(rb));
    let (pa, pb) = (
        a.revocations(0, now, usize::MAX).await.unwrap(),
        b.revocations(0, now, usize::MAX).await.unwrap(),
    );
    assert_eq!((pa.latest, pa.latest_stamp), (pb.latest, pb.latest_stamp));
    assert_eq!(pa.entries, pb.entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn a_store_moves_to_postgres_and_back_record_for_record() {
    let pg = e2e::postgres::PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (s, head) = filled(&tmp.path().join("a")).await;
    let before = backed_up(&s, &tmp.path().join("a.backup"), 1_005);
    assert_eq!(before.families.len(), 2, "{before:?}");

    let kek = || Kek::derive(&KEK);
    let fresh = PgStore::connect(&pg.url(), kek(), 1_005, POLICY)
        .await
        .unwrap();
    // An issuer serving on it (its probe wrote 5 s ago) keeps its own hash key: refused.
    fresh.probe_write(1_000).await.unwrap();
    let serving = fresh.import(&before, 1_005).await.unwrap_err();
    assert!(matches!(serving, BackupError::Serving(5)), "{serving}");
    let quiet = 1_000 + issuer::store::postgres::SERVING_WINDOW;
    fresh.import(&before, quiet).await.unwrap();
    drop(fresh);
    let p = PgStore::connect(&pg.url(), kek(), 1_005, POLICY)
        .await
        .unwrap();
    assert_eq!(view(&p.export().await.unwrap()), view(&before));
    behave_alike(&s, &p, 1_005).await;
    let head = rotates(&p, &head, 1_006).await;

    let after = p.export().await.unwrap();
    let again = p.import(&before, 1_007).await.unwrap_err();
    assert!(matches!(again, BackupError::DatabaseNotEmpty(_)), "{again}");
    assert!(again.to_string().contains("1 client, 2 users"), "{again}");
    assert_eq!(view(&p.export().await.unwrap()), view(&after), "changed");

    let back = tmp.path().join("back.backup");
    let mut out = new_private(&back);
    redb_contents::write_backup(&after, &mut out, 1_007).unwrap();
    drop(out);
    redb_backup::restore(&back, &tmp.path().join("c")).unwrap();
    let c = RedbStore::open(&tmp.path().join("c"), 1_007, POLICY).unwrap();
    let restored = backed_up(&c, &tmp.path().join("c.backup"), 1_008);
    assert_eq!(view(&restored), view(&after));
    behave_alike(&c, &p, 1_008).await;
    rotates(&c, &head, 1_008).await;

    pg.psql("UPDATE users SET record = replace(record, '\"disabled\":false', '\"disabled\":true')")
        .unwrap();
    let tampered = p.export().await.unwrap_err();
    assert!(
        matches!(tampered, StoreError::Tampered("users")),
        "{tampered}"
    );
}
