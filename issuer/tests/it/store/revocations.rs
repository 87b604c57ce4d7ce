//! Revocations on both backends: numbered in order, read after a cursor and by page, in force
//! until what they cover has expired, recorded by the changes that take tokens away, and swept
//! but the newest, whose number and stamp a point read gives.

use super::{with_user, Backend};
use issuer::store::revocation::{Cursor, Revocation, RevocationPage, Revoked, REVOCATION_MARGIN};
use issuer::store::{ClientChange, Store, UserChange};

fn seqs(p: RevocationPage) -> Vec<u64> {
    p.entries.iter().map(|e| e.seq).collect()
}

pub(crate) async fn revocations_are_numbered_kept_and_swept(b: Backend) {
    let s = with_user(&b).await;
    let token = Revoked::Token {
        jti: "ab".repeat(16),
    };
    let second = step_revocations_are_numbered_and_paged(s.as_ref(), &token).await;
    let (recorded, t) = step_changes_that_take_tokens_away_record_one(s.as_ref(), second).await;
    // The sweep deletes what is out of force but the newest (the proof of an up-to-date
    // reader's cursor); numbers are never given out again.
    let ttl = s.access_ttl().await.unwrap();
    let last = recorded.last().unwrap().seq;
    let later = t + ttl + REVOCATION_MARGIN + 10;
    assert!(s.sweep(later).await.unwrap() >= 6);
    let swept = s.revocations(0, 0, usize::MAX).await.unwrap();
    assert_eq!(seqs(swept.clone()), [last], "only the newest stays");
    assert!(s
        .revocations(0, later, usize::MAX)
        .await
        .unwrap()
        .entries
        .is_empty());
    assert_eq!(swept.latest, last, "the highest number given out stays");
    let next = s.revoke(token, later, None).await.unwrap();
    assert!(next > last, "{next} after {last}");
}

/// What a reader of every revocation knows it has read through: the latest number and its
/// stamp, as a page says them.
fn through(p: &RevocationPage) -> Cursor {
    Cursor {
        seq: p.latest,
        stamp: p.latest_stamp,
    }
}

pub(crate) async fn the_latest_revocation_is_the_pages_latest(b: Backend) {
    let s = with_user(&b).await;
    let page = s.revocations(0, 1_000, usize::MAX).await.unwrap();
    assert_eq!(s.latest_revocation().await.unwrap(), through(&page));
    let user = Revoked::User { name: "x".into() };
    let mut last = page.latest;
    for at in [1_000, 1_001] {
        let seq = s.revoke(user.clone(), at, Some(at + 10)).await.unwrap();
        assert!(seq > last, "{seq} after {last}");
        last = seq;
        let latest = s.latest_revocation().await.unwrap();
        let page = s.revocations(0, at, usize::MAX).await.unwrap();
        assert_eq!(latest, through(&page));
        assert_eq!(latest.seq, seq);
        assert!(latest.stamp.is_some(), "a new entry has a stamp");
    }
    // Out of force and swept, the newest still names the latest with its stamp; a reader held
    // through it has nothing to read.
    let before = s.latest_revocation().await.unwrap();
    s.sweep(5_000).await.unwrap();
    assert!(s
        .revocations(0, 5_000, usize::MAX)
        .await
        .unwrap()
        .entries
        .is_empty());
    assert_eq!(s.latest_revocation().await.unwrap(), before);
    let next = s.revoke(user, 5_000, None).await.unwrap();
    let after = s.latest_revocation().await.unwrap();
    assert_eq!(after.seq, next);
    assert_ne!(after, before);
}

/// Step: two revocations get rising numbers, read after a cursor, by page, and in force until
/// what they cover has expired. The second's number.
async fn step_revocations_are_numbered_and_paged(s: &dyn Store, token: &Revoked) -> u64 {
    let first = s.revoke(token.clone(), 1_000, Some(2_000)).await.unwrap();
    let client = Revoked::Client { id: "x".into() };
    let second = s.revoke(client, 1_000, Some(1_500)).await.unwrap();
    assert!(second > first);
    assert_eq!(
        seqs(s.revocations(0, 1_001, usize::MAX).await.unwrap()),
        [first, second]
    );
    assert_eq!(
        seqs(s.revocations(first, 1_001, usize::MAX).await.unwrap()),
        [second]
    );
    assert_eq!(
        seqs(s.revocations(0, 1_001, 1).await.unwrap()),
        [first],
        "a page of one"
    );
    assert_eq!(
        seqs(s.revocations(0, 1_500, usize::MAX).await.unwrap()),
        [first],
        "out of force once what it covers has expired"
    );
    let page = s.revocations(0, 1_001, usize::MAX).await.unwrap();
    assert_eq!(page.latest, second);
    let entry = &page.entries[0];
    assert_eq!((&entry.what, entry.at, entry.until), (token, 1_000, 2_000));
    second
}

/// Step: the changes that take tokens away (a user disabled, given a new password or removed, a
/// client deactivated or removed) record their revocation after `after`; the others do not.
/// What they recorded, and when they began.
async fn step_changes_that_take_tokens_away_record_one(
    s: &dyn Store,
    after: u64,
) -> (Vec<Revocation>, u64) {
    let t = issuer::app::now();
    let disable = UserChange::Disable { at: t };
    assert!(s.update_user("alice", &disable, t).await.unwrap());
    assert!(s
        .update_user("alice", &UserChange::Enable, t)
        .await
        .unwrap());
    let new_password = UserChange::SetPassword {
        hash: "x".into(),
        at: t,
    };
    assert!(s.update_user("alice", &new_password, t).await.unwrap());
    let active = |on| ClientChange::SetActive(on);
    assert!(s.update_client("app", active(true), t).await.unwrap());
    assert!(s.update_client("app", active(false), t).await.unwrap());
    assert!(s.remove_client("app", t).await.unwrap());
    assert!(s.remove_user("alice", t).await.unwrap());
    assert!(!s.remove_user("alice", t).await.unwrap());
    let recorded = s.revocations(after, t, usize::MAX).await.unwrap().entries;
    let alice = Revoked::User {
        name: "alice".into(),
    };
    let app = Revoked::Client { id: "app".into() };
    let what: Vec<_> = recorded.iter().map(|e| e.what.clone()).collect();
    assert_eq!(
        what,
        [alice.clone(), alice.clone(), app.clone(), app, alice]
    );
    let ttl = s.access_ttl().await.unwrap();
    for e in &recorded {
        assert!(e.at >= t && e.at <= issuer::app::now());
        assert_eq!(e.until, e.at + ttl + REVOCATION_MARGIN);
    }
    (recorded, t)
}
