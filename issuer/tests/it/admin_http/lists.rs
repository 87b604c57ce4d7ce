//! The admin API's lists read page by page from the store: users, clients by state, one user's
//! sessions and the sessions of the users whose name starts with a text followed by their cursor
//! to the end, each item once and in the order of its key, and a search.

use super::*;
use crate::store::{client, user};
use issuer::http::admin::audit::AUDIT_SCAN;
use issuer::store::redb::{FamilyOp, RedbFile};
use issuer::store::{AuditAction, AuditEvent, RefreshPolicy};

const PAGED_USERS: usize = 120;
const PAGED_CLIENTS: usize = 40;
/// The families of the user `page-007`.
const FAMILIES: usize = 7;
/// The families of the user `page-070`.
const LATER_FAMILIES: usize = 3;
/// Audit events `paged-audit-00`…, a second apart from 1,000 s before the test.
const AUDIT_EVENTS: usize = 30;
/// Audit events newer than those, that a search for them reads first: more than one request
/// reads, so the search goes on from a cursor.
const NEWER_EVENTS: usize = AUDIT_SCAN + 10;

/// Users `page-000`…, clients `paged-00`… (every third inactive), `page-007`'s families and
/// `page-070`'s,
/// written to the data dir before the issuer serves it.
fn fill(dir: &Path) {
    let store = RedbFile::open(dir, now()).unwrap();
    let user = user();
    for i in 0..PAGED_USERS {
        assert!(store.add_user(&format!("page-{i:03}"), &user).unwrap());
    }
    for i in 0..PAGED_CLIENTS {
        let rec = client(!i.is_multiple_of(3));
        assert!(store.add_client(&format!("paged-{i:02}"), &rec).unwrap());
    }
    let start = |user: &str| FamilyOp::Start {
        client: "app".into(),
        user: user.into(),
        jkt: None,
    };
    let ops: Vec<_> = (0..FAMILIES)
        .map(|_| (start("page-007"), now()))
        .chain((0..LATER_FAMILIES).map(|_| (start("page-070"), now())))
        .collect();
    let done = store
        .apply_refresh_ops(&ops, &RefreshPolicy::default())
        .unwrap();
    assert!(done.iter().all(Result::is_ok));
    store.merge().unwrap();
    let event = |at: u64, target: &str| {
        AuditEvent::new(
            at,
            "root",
            AuditAction::UserDisable,
            target,
            json!(1),
            json!(2),
        )
        .encode()
    };
    let events: Vec<_> = (0..AUDIT_EVENTS)
        .map(|i| event(now() - 1_000 + i as u64, &format!("paged-audit-{i:02}")))
        .chain((0..NEWER_EVENTS).map(|i| event(now() - 500, &format!("newer-{i}"))))
        .collect();
    store.record_audit(&events).unwrap();
}

/// Every item of `list` (a path with its query) as `caller` reads it, page by page; checks
/// each page holds at most `per`.
async fn every_page(s: &Admin, caller: &Caller, list: &str, per: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut after = String::new();
    loop {
        let page = s.get(caller, &format!("{list}&limit={per}{after}")).await;
        let got = page["items"].as_array().unwrap();
        assert!(got.len() <= per, "{list}: {page}");
        items.extend(got.iter().cloned());
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return items,
        }
    }
}

fn field(items: &[Value], name: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[name].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn lists_are_read_page_by_page_to_their_end() {
    let s = start_configured(60, "", fill);
    let root = s.sign_in("root").await;
    // Users: every one once, in the order of the names' bytes.
    let users = field(
        &every_page(&s, &root, "/apiv2/admin/users?q=", 7).await,
        "name",
    );
    let mut want: Vec<String> = (0..PAGED_USERS).map(|i| format!("page-{i:03}")).collect();
    want.extend(Role::ALL.map(|r| user_of(Some(r))));
    want.extend(["nobody".to_owned(), "root".to_owned()]);
    want.sort_unstable();
    assert_eq!(users, want);
    let found = every_page(&s, &root, "/apiv2/admin/users?q=PAGE-01", 4).await;
    let tens: Vec<String> = (10..20).map(|i| format!("page-{i:03}")).collect();
    assert_eq!(field(&found, "name"), tens);
    // Clients: the inactive ones, as the whole list says.
    let all = every_page(&s, &root, "/apiv2/admin/clients?state=all", 9).await;
    let inactive: Vec<String> = all
        .iter()
        .filter(|c| c["state"] == "inactive")
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        inactive.len(),
        PAGED_CLIENTS.div_ceil(3) + 1,
        "{inactive:?}"
    );
    let listed = every_page(&s, &root, "/apiv2/admin/clients?state=inactive", 5).await;
    assert_eq!(field(&listed, "id"), inactive);
    assert!(listed.iter().all(|c| c["etag"].is_string()));
    // One user's sessions, by id.
    let sessions = every_page(&s, &root, "/apiv2/admin/sessions?user=page-007", 3).await;
    let ids = field(&sessions, "id");
    assert_eq!(ids.len(), FAMILIES);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(sessions.iter().all(|x| x["user"] == "page-007"));
    let none = s.get(&root, "/apiv2/admin/sessions?user=page-00").await;
    assert_eq!(none["items"], json!([]));
    // The sessions of the users whose name starts with a text: by user, then id.
    let both = every_page(&s, &root, "/apiv2/admin/sessions?q=page-0", 4).await;
    let users = field(&both, "user");
    assert_eq!(users.len(), FAMILIES + LATER_FAMILIES, "{users:?}");
    assert!(users[..FAMILIES].iter().all(|u| u == "page-007"));
    assert!(users[FAMILIES..].iter().all(|u| u == "page-070"));
    assert_eq!(field(&both[..FAMILIES], "id"), ids);
    let one = every_page(&s, &root, "/apiv2/admin/sessions?q=page-07", 2).await;
    assert_eq!(field(&one, "user"), ["page-070"; LATER_FAMILIES]);
    // The audit trail, newest first, searched in any case; the first request reads only newer
    // events, and answers none with a cursor to go on from.
    let first = s
        .get(&root, "/apiv2/admin/audit?q=Paged-Audit&limit=7")
        .await;
    assert_eq!(first["items"], json!([]), "{first}");
    assert!(first["next"].is_string(), "{first}");
    let audit = every_page(&s, &root, "/apiv2/admin/audit?q=Paged-Audit", 7).await;
    let newest_first: Vec<String> = (0..AUDIT_EVENTS)
        .rev()
        .map(|i| format!("paged-audit-{i:02}"))
        .collect();
    assert_eq!(field(&audit, "target"), newest_first);
    let since = audit[4]["at"].as_u64().unwrap();
    let late = every_page(
        &s,
        &root,
        &format!("/apiv2/admin/audit?q=paged-audit&since={since}"),
        2,
    )
    .await;
    assert_eq!(field(&late, "target"), newest_first[..5]);
    let bad = s.call(
        &root,
        "GET",
        "/apiv2/admin/audit?after=bm90LWEta2V5",
        None,
        None,
    );
    assert_eq!(bad.await.status, 400, "a cursor of another list");
    for nul in [
        "sessions?q=a%00",
        "sessions?user=%00",
        "audit?q=%00",
        "users?q=%00",
    ] {
        let path = format!("/apiv2/admin/{nul}");
        let a = s.call(&root, "GET", &path, None, None).await;
        assert_eq!(a.status, 400, "{nul}: the same on both stores");
    }
    for text in ["PAGE-0", "page-0070", "age"] {
        let none = s
            .get(&root, &format!("/apiv2/admin/sessions?q={text}"))
            .await;
        assert_eq!(none["items"], json!([]), "{text}");
    }
}
