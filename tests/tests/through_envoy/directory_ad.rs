//! Directory sign-in against a real Active Directory: Samba's AD DC, provisioned for each test
//! (its LDAP ports are fixed, so these tests take turns). Users sign in by `sAMAccountName` and
//! by UPN over LDAPS with the test CA's certificate verified; nested groups count through
//! `LDAP_MATCHING_RULE_IN_CHAIN`; a disabled account (`userAccountControl`) is refused at sign-in,
//! at refresh, and through the recheck at Envoy.

use crate::directory::{
    call_ok, directory_stack, introspect, refresh, refused_at_envoy, sign_in, TIMEOUT_MS,
};
use e2e::samba::SambaDc;
use e2e::{DirectoryTable, Tools};
use serde_json::json;

fn ad_server(dc: &SambaDc, recheck_seconds: u64) -> DirectoryTable {
    DirectoryTable {
        timeout_ms: Some(TIMEOUT_MS),
        recheck_seconds: Some(recheck_seconds),
        ..DirectoryTable::samba(dc)
    }
    .role(dc.group_dn("editors"), "editor")
    .role(dc.group_dn("all-staff"), "staff")
    .role(dc.group_dn("viewers"), "viewer")
    .claim("upn", "userPrincipalName")
    .claim("email", "mail")
}

#[tokio::test]
#[ignore = "needs Envoy and Samba: `cargo xtask test` runs it"]
async fn active_directory_users_sign_in_and_disabled_ones_are_refused_everywhere() {
    let tools = Tools::for_test();
    let dc = SambaDc::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let recheck = 2;
    let s = directory_stack(tmp.path(), &tools, &ad_server(&dc, recheck)).await;

    for name in ["alice".to_owned(), dc.upn("alice")] {
        let (status, v) = sign_in(&s, &name, dc.password("alice")).await;
        assert_eq!(status, 200, "{name}: {v}");
        let seen = introspect(&s, &v).await;
        assert_eq!(seen["sub"], "alice", "the entry's sAMAccountName: {seen}");
        assert_eq!(
            seen["roles"],
            json!(["editor", "staff"]),
            "{name}: nested in chain: {seen}"
        );
        assert_eq!(
            seen["claims"],
            json!([{"type": "email", "value": "alice@media.test"}, {"type": "upn", "value": dc.upn("alice")}]),
            "{seen}"
        );
    }
    for (what, name, pw) in [
        ("wrong password", "alice", "Not-Alices-Passw0rd"),
        ("unknown user", "nobody", "Whatever-1"),
        ("a star", "*", dc.password("alice")),
    ] {
        let (status, v) = sign_in(&s, name, pw).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_grant")),
            "{what}: {v}"
        );
    }
    let (status, _) = sign_in(&s, "alice", "").await;
    assert_eq!(status, 400, "an empty password never reaches the directory");

    let (status, bob) = sign_in(&s, "bob", dc.password("bob")).await;
    assert_eq!(status, 200, "{bob}");
    let (status, carol) = sign_in(&s, "carol", dc.password("carol")).await;
    assert_eq!(status, 200, "{carol}");
    call_ok(&s, &carol).await;

    // Disabled and refreshing: refused at the refresh.
    dc.disable_user("bob").unwrap();
    let (status, v) = refresh(&s, &bob).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );
    let (status, v) = sign_in(&s, "bob", dc.password("bob")).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );

    // Disabled and idle: the recheck revokes the access token at every Envoy.
    dc.disable_user("carol").unwrap();
    refused_at_envoy(&s, &carol, "carol disabled").await;

    // Enabled again: signs in again (earlier tokens stay revoked).
    dc.enable_user("bob").unwrap();
    let (status, v) = sign_in(&s, "bob", dc.password("bob")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(refresh(&s, &bob).await.0, 400);
}
