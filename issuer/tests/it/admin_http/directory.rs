//! Directory users as administrators, against a real OpenLDAP (`slapd`): the groups
//! `[directory.roles]` maps to admin roles give a directory user the admin API's routes of those
//! roles, nested groups included, through the console's sign-in with the directory password;
//! a directory user of no mapped group is refused every route; the roles follow the directory
//! as the issuer's recheck reads it again.

use super::*;
use e2e::slapd::Slapd;
use e2e::DirectoryTable;
use std::time::Instant;

/// Seconds between the issuer's rechecks of its directory users.
const RECHECK_SECONDS: u64 = 2;

#[tokio::test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
async fn a_directory_user_of_a_mapped_group_administers_with_its_roles() {
    let ldap = Slapd::for_test();
    // alice is in `editors`, itself (through `media-staff`) in `all-staff`; bob is in `viewers`.
    let table = DirectoryTable {
        recheck_seconds: Some(RECHECK_SECONDS),
        ..DirectoryTable::slapd(&[&ldap])
    }
    .role(ldap.group_dn("editors"), "admin:users")
    .role(ldap.group_dn("all-staff"), "admin:read")
    .role(ldap.group_dn("viewers"), "viewer");
    let s = start_configured(60, &table.to_toml(), |_| {});
    let alice = s.sign_in_with("alice", ldap.password("alice")).await;
    let me = s.get(&alice, "/apiv2/admin/me").await;
    assert_eq!(me["roles"], json!(["admin:read", "admin:users"]), "{me}");
    let users = s.get(&alice, "/apiv2/admin/users?q=alice").await;
    assert_eq!(users["items"][0]["source"], "directory", "{users}");
    // admin:read reads clients; admin:users disables a user; neither imports.
    s.get(&alice, "/apiv2/admin/clients").await;
    let nobody = s.get(&alice, "/apiv2/admin/users?q=nobody").await["items"][0].clone();
    let a = s
        .call(
            &alice,
            "POST",
            "/apiv2/admin/users/nobody/disable",
            Some(json!({})),
            nobody["etag"].as_str(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_eq!(a.json["item"]["enabled"], false, "{}", a.json);
    let root = s.sign_in("root").await;
    let events = s.audit(&root).await;
    let e = event(&events, "user.disable", "nobody").expect("audited");
    assert_eq!(e["actor"], "alice", "{e}");
    let body = json!({"statement": "x"});
    let a = s
        .call(
            &alice,
            "POST",
            "/apiv2/admin/clients/import",
            Some(body),
            None,
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (403, &json!("insufficient_scope"))
    );
    // bob signs in (his password is right), and holds no admin role: every route is refused.
    let bob = s.sign_in_with("bob", ldap.password("bob")).await;
    let a = s.call(&bob, "GET", "/apiv2/admin/me", None, None).await;
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (403, &json!("insufficient_scope")),
        "{}",
        a.json
    );
    // alice leaves `editors` (bob takes her place, a group keeps a member): the recheck takes
    // admin:users away, and admin:read with it (`all-staff` held her through `editors`).
    ldap.modify(&format!(
        "dn: {}\nchangetype: modify\nadd: member\nmember: {}\n-\ndelete: member\nmember: {}\n",
        ldap.group_dn("editors"),
        ldap.user_dn("bob"),
        ldap.user_dn("alice")
    ))
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10 * RECHECK_SECONDS);
    let a = loop {
        let a = s
            .call(&alice, "GET", "/apiv2/admin/users", None, None)
            .await;
        if a.status != 200 || Instant::now() > until {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (403, &json!("insufficient_scope")),
        "{}",
        a.json
    );
    // bob, now in `editors`, holds its roles once the recheck has read him again.
    let until = Instant::now() + Duration::from_secs(10 * RECHECK_SECONDS);
    let me = loop {
        let a = s.call(&bob, "GET", "/apiv2/admin/me", None, None).await;
        if a.status == 200 || Instant::now() > until {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(me.status, 200, "{}", me.json);
    assert_eq!(
        me.json["roles"],
        json!(["admin:read", "admin:users", "viewer"])
    );
}
