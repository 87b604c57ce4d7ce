//! The administrator's view of refresh token families on both backends: the live ones listed in
//! the order of their users and ids, by page, of every user, of one user or of the users whose
//! name starts with a text, and one revoked by its id with its access tokens, whoever owns it.

use super::{family_revocations, issue, rotate, with_user, Backend};
use issuer::store::{FamilyFilter, FamilyKey, Owners, RefreshRejection, Store};

fn id_of(s: &dyn Store, refresh_token: &str) -> [u8; 16] {
    s.hash_key().verify_refresh(refresh_token).unwrap().family
}

/// Every live family of `owners` at `now`, page by page of `per` (the last one the cursor).
async fn all_pages(s: &dyn Store, owners: Owners<'_>, per: usize, now: u64) -> Vec<[u8; 16]> {
    let mut seen = Vec::new();
    let mut last: Option<(String, [u8; 16])> = None;
    loop {
        let f = FamilyFilter {
            owners,
            after: last.as_ref().map(|(user, id)| FamilyKey { user, id: *id }),
            limit: per,
        };
        let page = s.live_families(&f, now).await.unwrap();
        assert!(page.len() <= per);
        seen.extend(page.iter().map(|(id, _)| *id));
        match page.last() {
            Some((id, fam)) if page.len() == per => last = Some((fam.user.clone(), *id)),
            _ => return seen,
        }
    }
}

pub(crate) async fn families_are_listed_by_page_and_user_and_revoked_by_id(b: Backend) {
    let s = with_user(&b).await;
    let s = s.as_ref();
    assert!(s.add_user("bob", &super::user()).await.unwrap());
    assert!(s.add_user("al", &super::user()).await.unwrap());
    let mut alice = Vec::new();
    for at in 1_000..1_004 {
        alice.push(issue(s, at).await);
    }
    // On redb, families merged into the table and families still in the journal's overlay.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    for at in 1_004..1_007 {
        alice.push(issue(s, at).await);
    }
    let bobs = s.start_family("other", "bob", 1_007, None).await.unwrap();
    // On redb still in the overlay, and before alice's merged families in the list.
    let als = s.start_family("other", "al", 1_007, None).await.unwrap();
    let rotated = rotate(s, &alice[0], "app", 1_010).await.unwrap();
    let mut alices: Vec<[u8; 16]> = alice.iter().map(|t| id_of(s, t)).collect();
    alices.sort_unstable();
    let (bob, al) = (id_of(s, &bobs), id_of(s, &als));
    let mut want = vec![al];
    want.extend(&alices);
    want.push(bob);
    for per in [1, 2, 3, 100] {
        let got = all_pages(s, Owners::All, per, 1_011).await;
        assert_eq!(got, want, "pages of {per}: al's, alice's by id, then bob's");
    }
    // What an item holds: the last use is the rotation.
    let all = FamilyFilter {
        limit: 100,
        ..FamilyFilter::default()
    };
    let page = s.live_families(&all, 1_011).await.unwrap();
    let first = page
        .iter()
        .find(|(id, _)| *id == id_of(s, &alice[0]))
        .unwrap();
    assert_eq!(
        (first.1.user.as_str(), first.1.client.as_str()),
        ("alice", "app")
    );
    assert_eq!((first.1.created_at, first.1.last_used()), (1_000, 1_010));
    // Of one user (by name, whole); of the users whose name starts with a text.
    assert_eq!(all_pages(s, Owners::Named("bob"), 1, 1_011).await, [bob]);
    assert!(all_pages(s, Owners::Named("bo"), 1, 1_011).await.is_empty());
    assert_eq!(all_pages(s, Owners::Named("alice"), 2, 1_011).await, alices);
    assert_eq!(all_pages(s, Owners::Named("al"), 2, 1_011).await, [al]);
    let als_and_alices = want[..want.len() - 1].to_vec();
    for (prefix, want) in [
        ("bo", vec![bob]),
        ("b", vec![bob]),
        ("al", als_and_alices),
        ("ali", alices.clone()),
    ] {
        for per in [1, 4, 100] {
            let got = all_pages(s, Owners::Prefixed(prefix), per, 1_011).await;
            assert_eq!(got, want, "{prefix:?} by pages of {per}");
        }
    }
    for prefix in ["Bo", "bob2", "c", "alicf"] {
        assert!(
            all_pages(s, Owners::Prefixed(prefix), 3, 1_011)
                .await
                .is_empty(),
            "{prefix:?}"
        );
    }
    assert_eq!(all_pages(s, Owners::Prefixed(""), 5, 1_011).await, want);
    // A cursor before the owners' names starts at their first; one past them ends the list.
    let early = FamilyFilter {
        owners: Owners::Prefixed("bo"),
        after: Some(FamilyKey {
            user: "alice",
            id: alices[0],
        }),
        limit: 10,
    };
    assert_eq!(s.live_families(&early, 1_011).await.unwrap().len(), 1);
    let late = FamilyFilter {
        after: Some(FamilyKey {
            user: "bob",
            id: bob,
        }),
        ..early
    };
    assert!(s.live_families(&late, 1_011).await.unwrap().is_empty());
    step_a_family_is_revoked_by_id(s, &alice, &rotated.successor, &want).await;
}

/// Revokes alice's second family by id: once, with its access tokens, gone from the list; an
/// unknown id changes nothing; expired families are not listed.
async fn step_a_family_is_revoked_by_id(
    s: &dyn Store,
    alice: &[String],
    successor: &str,
    live: &[[u8; 16]],
) {
    let id = id_of(s, &alice[1]);
    assert!(s.revoke_family_id(&[9; 16], 1_020).await.unwrap().is_none());
    let before = s.revoke_family_id(&id, 1_020).await.unwrap().unwrap();
    assert_eq!((before.user.as_str(), before.revoked_at), ("alice", None));
    let again = s.revoke_family_id(&id, 1_021).await.unwrap().unwrap();
    assert_eq!(again.revoked_at, Some(1_020), "revoked already: unchanged");
    assert_eq!(
        s.family(&id).await.unwrap().unwrap().revoked_at,
        Some(1_020)
    );
    assert!(s.family(&[9; 16]).await.unwrap().is_none());
    let tag = hex::encode(s.hash_key().family_tag_of(&alice[1]).unwrap());
    assert_eq!(family_revocations(s, 1_021).await, [(tag, 1_020)]);
    assert_eq!(
        rotate(s, &alice[1], "app", 1_022).await.err(),
        Some(RefreshRejection::Revoked)
    );
    assert!(rotate(s, successor, "app", 1_022).await.is_ok());
    let all = FamilyFilter {
        limit: 100,
        ..FamilyFilter::default()
    };
    let listed: Vec<[u8; 16]> = s
        .live_families(&all, 1_022)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let want: Vec<[u8; 16]> = live.iter().copied().filter(|l| *l != id).collect();
    assert_eq!(listed, want);
    // Past the idle lifetime (the policy's 100 s), nothing unrotated is live.
    let late = s.live_families(&all, 1_120).await.unwrap();
    assert_eq!(late.len(), 1, "only the family rotated at 1_022");
}
