//! The administrator's view of refresh token families on both backends: the live ones listed in
//! the order of their ids, by page, of one user or holding a text, and one revoked by its id
//! with its access tokens, whoever owns it.

use super::{family_revocations, issue, rotate, with_user, Backend};
use issuer::store::{FamilyFilter, RefreshRejection, Store};

fn id_of(s: &dyn Store, refresh_token: &str) -> [u8; 16] {
    s.hash_key().verify_refresh(refresh_token).unwrap().family
}

/// Every live family `filter` selects at `now`, page by page of `per` (the last id the cursor).
async fn all_pages(s: &dyn Store, filter: FamilyFilter<'_>, per: usize, now: u64) -> Vec<[u8; 16]> {
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let f = FamilyFilter {
            after,
            limit: per,
            ..filter
        };
        let page = s.live_families(&f, now).await.unwrap();
        assert!(page.len() <= per);
        seen.extend(page.iter().map(|(id, _)| *id));
        match page.last() {
            Some((id, _)) if page.len() == per => after = Some(*id),
            _ => return seen,
        }
    }
}

pub(crate) async fn families_are_listed_by_page_and_user_and_revoked_by_id(b: Backend) {
    let s = with_user(&b).await;
    let s = s.as_ref();
    assert!(s.add_user("bob", &super::user()).await.unwrap());
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
    let rotated = rotate(s, &alice[0], "app", 1_010).await.unwrap();
    let mut want: Vec<[u8; 16]> = alice.iter().map(|t| id_of(s, t)).collect();
    want.push(id_of(s, &bobs));
    want.sort_unstable();
    for per in [1, 2, 3, 100] {
        let got = all_pages(s, FamilyFilter::default(), per, 1_011).await;
        assert_eq!(got, want, "pages of {per}");
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
    // Of one user; holding a text (user, client, or id in hex).
    let bob_only = FamilyFilter {
        user: Some("bob"),
        ..all
    };
    assert_eq!(all_pages(s, bob_only, 1, 1_011).await, [id_of(s, &bobs)]);
    let nobody = FamilyFilter {
        user: Some("bo"),
        ..all
    };
    assert!(s.live_families(&nobody, 1_011).await.unwrap().is_empty());
    let hex_part = hex::encode(id_of(s, &alice[3]))[4..20].to_owned();
    for (text, n) in [("bo", 1), ("oth", 1), ("app", 7), (hex_part.as_str(), 1)] {
        let f = FamilyFilter {
            text: Some(text),
            ..all
        };
        assert_eq!(s.live_families(&f, 1_011).await.unwrap().len(), n, "{text}");
    }
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
