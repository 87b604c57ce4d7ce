//! Pages of clients, users and one user's families on both backends, as the admin API reads
//! them: in the order of the keys' bytes, followed by their cursor to the end without a repeat
//! or a skip (a deletion between two pages included), searched by text, kept by a record's
//! state, and one user's families read through the index by user (a user whose name begins
//! another's, families in the journal and in the table, swept, and after reopening).

use super::{client, user, Backend};
use issuer::store::{
    ClientRecord, FamilyFilter, FamilyKey, Owners, RecordFilter, Store, UserRecord,
};

/// Every user `filter` selects, page by page of `per`, the last key the cursor.
async fn user_pages(
    s: &dyn Store,
    filter: RecordFilter<'_, UserRecord>,
    per: usize,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    loop {
        let after = seen.last().cloned();
        let f = RecordFilter {
            after: after.as_deref(),
            limit: per,
            ..filter
        };
        let page = s.users_page(&f).await.unwrap();
        assert!(page.len() <= per);
        let full = page.len() == per;
        seen.extend(page.into_iter().map(|(name, _)| name));
        if !full {
            return seen;
        }
    }
}

fn names(v: &[(String, ClientRecord)]) -> Vec<&str> {
    v.iter().map(|(id, _)| id.as_str()).collect()
}

pub(crate) async fn clients_and_users_are_read_by_page(b: Backend) {
    let s = b.open(1_000).await;
    let s = s.as_ref();
    let mut want: Vec<String> = (0..23).map(|i| format!("user-{i:02}")).collect();
    want.extend(["Zoe", "a", "zed", "émile"].map(String::from));
    for name in want.iter().rev() {
        assert!(s.add_user(name, &user()).await.unwrap());
    }
    // The order of the bytes: capitals first, a longer name after its prefix, UTF-8 last.
    want.sort_unstable();
    assert_eq!(want[0], "Zoe");
    assert_eq!(want.last().unwrap(), "émile");
    for per in [1, 2, 5, 100] {
        let got = user_pages(s, RecordFilter::first(per), per).await;
        assert_eq!(got, want, "pages of {per}");
    }
    let first = s.users_page(&RecordFilter::first(3)).await.unwrap();
    assert_eq!(first[0].1.roles, ["r"], "the record comes with its key");
    // Searched: lowercase text in the key, any case there.
    let text = |t| RecordFilter {
        text: Some(t),
        ..RecordFilter::first(0)
    };
    let ones = user_pages(s, text("user-1"), 4).await;
    assert_eq!(ones.len(), 10, "user-10 to user-19: {ones:?}");
    assert_eq!(user_pages(s, text("zo"), 4).await, ["Zoe"]);
    assert_eq!(user_pages(s, text("émi"), 4).await, ["émile"]);
    assert!(user_pages(s, text("nobody"), 4).await.is_empty());
    // A user removed between two pages: the rest without a repeat or a skip.
    let page = s.users_page(&RecordFilter::first(5)).await.unwrap();
    assert!(s.remove_user("user-00", 1_001).await.unwrap());
    assert!(s.remove_user(&want[5], 1_001).await.unwrap());
    let after = page.last().map(|(n, _)| n.clone());
    let rest = RecordFilter {
        after: after.as_deref(),
        ..RecordFilter::first(100)
    };
    let rest: Vec<String> = s
        .users_page(&rest)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        rest,
        want[6..],
        "the one removed after the cursor is not listed"
    );
    clients_by_state_and_vendor(s).await;
}

/// Clients kept by their state, and searched by a vendor's names.
async fn clients_by_state_and_vendor(s: &dyn Store) {
    for i in 0..7 {
        assert!(s
            .add_client(&format!("c{i}"), &client(i % 2 == 0))
            .await
            .unwrap());
    }
    let mut vendor = client(false);
    vendor.vendor = Some(Box::new(issuer::store::vendor::VendorClient {
        vendor: "Acme".into(),
        client_name: "Photo Tool".into(),
        software_id: "sw".into(),
        grants: vec![],
        impersonation: issuer::vendor::Impersonation::None,
        pending: true,
        revoked: false,
        secrets: vec![],
    }));
    assert!(s.add_client("v1", &vendor).await.unwrap());
    let active = RecordFilter {
        keep: |c: &ClientRecord| c.active,
        ..RecordFilter::first(2)
    };
    let page = s.clients_page(&active).await.unwrap();
    assert_eq!(names(&page), ["c0", "c2"]);
    let next = RecordFilter {
        after: Some("c2"),
        ..active
    };
    assert_eq!(names(&s.clients_page(&next).await.unwrap()), ["c4", "c6"]);
    for text in ["acme", "photo t", "v1"] {
        let f = RecordFilter {
            text: Some(text),
            ..RecordFilter::first(10)
        };
        assert_eq!(names(&s.clients_page(&f).await.unwrap()), ["v1"], "{text}");
    }
    let all = s.clients_page(&RecordFilter::first(100)).await.unwrap();
    assert_eq!(all.len(), 8);
}

async fn ids_of(s: &dyn Store, user: &str, per: usize, now: u64) -> Vec<[u8; 16]> {
    let mut seen: Vec<[u8; 16]> = Vec::new();
    loop {
        let f = FamilyFilter {
            owners: Owners::Named(user),
            after: seen.last().map(|id| FamilyKey { user, id: *id }),
            limit: per,
        };
        let page = s.live_families(&f, now).await.unwrap();
        assert!(page.iter().all(|(_, fam)| fam.user == user));
        let full = page.len() == per;
        seen.extend(page.into_iter().map(|(id, _)| id));
        if !full {
            return seen;
        }
    }
}

fn family(s: &dyn Store, token: &str) -> [u8; 16] {
    s.hash_key().verify_refresh(token).unwrap().family
}

pub(crate) async fn one_users_families_are_read_by_page(b: Backend) {
    let s = b.open(1_000).await;
    assert!(s.add_client("app", &client(true)).await.unwrap());
    for name in ["al", "alice", "bob"] {
        assert!(s.add_user(name, &user()).await.unwrap());
    }
    let (mut al, mut alice) = (Vec::new(), Vec::new());
    for at in 1_000..1_006 {
        let t = s.start_family("app", "alice", at, None).await.unwrap();
        alice.push(family(s.as_ref(), &t));
        s.start_family("app", "bob", at, None).await.unwrap();
    }
    // On redb, families merged into the table (and the index) and families still in the
    // journal's overlay.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    for at in 1_050..1_053 {
        let t = s.start_family("app", "al", at, None).await.unwrap();
        al.push(family(s.as_ref(), &t));
        let t = s.start_family("app", "alice", at, None).await.unwrap();
        alice.push(family(s.as_ref(), &t));
    }
    al.sort_unstable();
    alice.sort_unstable();
    for per in [1, 2, 4, 100] {
        assert_eq!(ids_of(s.as_ref(), "al", per, 1_060).await, al, "{per}");
        assert_eq!(
            ids_of(s.as_ref(), "alice", per, 1_060).await,
            alice,
            "{per}"
        );
    }
    assert!(ids_of(s.as_ref(), "a", 10, 1_060).await.is_empty());
    // Past the idle lifetime of the first six (the policy's 100 s), and swept.
    let live_late: Vec<[u8; 16]> = ids_of(s.as_ref(), "alice", 2, 1_120).await;
    assert_eq!(live_late.len(), 3, "only the later three");
    s.sweep(1_120).await.unwrap();
    assert_eq!(ids_of(s.as_ref(), "alice", 2, 1_120).await, live_late);
    assert!(s
        .family(&alice_first_expired(&alice, &live_late))
        .await
        .unwrap()
        .is_none());
    // Reopened: the index is the store's, not the process's.
    drop(s);
    let s = b.open(1_121).await;
    assert_eq!(ids_of(s.as_ref(), "alice", 2, 1_121).await, live_late);
    assert_eq!(ids_of(s.as_ref(), "al", 2, 1_121).await, al);
}

/// One of alice's families that expired (not among the live ones).
fn alice_first_expired(alice: &[[u8; 16]], live: &[[u8; 16]]) -> [u8; 16] {
    *alice.iter().find(|id| !live.contains(id)).unwrap()
}
