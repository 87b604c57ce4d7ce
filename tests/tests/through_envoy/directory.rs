//! Directory sign-in against a real OpenLDAP (`slapd`, two of them for failover) behind the real
//! stack: users the issuer's store does not hold sign in with their directory password; roles
//! come from nested groups, claims from attributes; every refusal is the same `invalid_grant`;
//! a dead server costs at most one timeout and is used again once back; a directory outage is
//! 503 and never charged to the back-off; a user removed from the directory is refused at refresh
//! and, through the recheck, at Envoy. The Active Directory tests are in `directory_ad`.

use crate::edge::{call, token_request, wait_for_sync};
use e2e::slapd::Slapd;
use e2e::{demo, DirectoryTable, Options, Stack, Tools};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// `timeout_ms` of these tests.
pub(crate) const TIMEOUT_MS: u64 = 1000;

/// The `[directory]` of `servers` (same entries), `ldaps://` to each, with the test timeout.
pub(crate) fn ldap_server(servers: &[&Slapd], recheck_seconds: u64) -> DirectoryTable {
    let first = servers[0];
    DirectoryTable {
        timeout_ms: Some(TIMEOUT_MS),
        recheck_seconds: Some(recheck_seconds),
        ..DirectoryTable::slapd(servers)
    }
    .role(first.group_dn("editors"), "editor")
    .role(first.group_dn("all-staff"), "staff")
    .role(first.group_dn("viewers"), "viewer")
    .role(first.group_dn("loop-b"), "looped")
    .claim("email", "mail")
}

/// A stack (edge sync on) whose issuer signs in with this `[directory]`.
pub(crate) async fn directory_stack(tmp: &Path, tools: &Tools, d: &DirectoryTable) -> Stack {
    let config = d.write(tmp).unwrap();
    let opts = Options {
        issuer_args: vec!["--config".into(), config.display().to_string()],
        edge_sync: true,
        ..Options::default()
    };
    let stack = Stack::start(&tmp.join("stack"), tools, &opts)
        .await
        .unwrap();
    wait_for_sync(&stack).await;
    stack
}

/// A password grant by the demo client: status and answer.
pub(crate) async fn sign_in(s: &Stack, user: &str, pw: &str) -> (u16, Value) {
    let form = [
        ("grant_type", "password"),
        ("username", user),
        ("password", pw),
    ];
    let (status, answer) = token_request(s, (demo::CLIENT, &s.secret), &form).await;
    if status == 503 {
        // Shown only if the test fails: the stack's log lines about the directory (why the
        // issuer found it unavailable).
        let logs = s.logs();
        let why: Vec<&str> = logs.lines().filter(|l| l.contains("directory")).collect();
        eprintln!(
            "{user}: 503; the stack's log lines about the directory:\n{}",
            why.join("\n")
        );
    }
    (status, answer)
}

/// A refresh by the demo client: status and answer.
pub(crate) async fn refresh(s: &Stack, token: &Value) -> (u16, Value) {
    let form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", token["refresh_token"].as_str().unwrap()),
    ];
    token_request(s, (demo::CLIENT, &s.secret), &form).await
}

/// Introspection of an access token by the demo client.
pub(crate) async fn introspect(s: &Stack, token: &Value) -> Value {
    s.client()
        .post(format!("{}/apiv2/oauth/introspect", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("token", token["access_token"].as_str().unwrap())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Until the access token of `token` is refused at Envoy, 8 calls in a row (the change reached
/// every worker); the test fails if it never is, within [`e2e::wait::LONG`].
pub(crate) async fn refused_at_envoy(s: &Stack, token: &Value, what: &str) {
    let access = token["access_token"].as_str().unwrap();
    let start = Instant::now();
    let refused = e2e::wait::until(e2e::wait::LONG, async || {
        for _ in 0..8 {
            if call(s, access).await.0 != 401 {
                return false;
            }
        }
        true
    });
    assert!(refused.await, "{what}: still accepted\n{}", s.logs());
    eprintln!("{what}: refused at Envoy {:?} after", start.elapsed());
}

/// The access token of `token` is accepted at Envoy.
pub(crate) async fn call_ok(s: &Stack, token: &Value) {
    assert_eq!(
        call(s, token["access_token"].as_str().unwrap()).await.0,
        200
    );
}

/// The issuer's `/metrics` text.
pub(crate) async fn metrics(s: &Stack) -> String {
    s.client()
        .get(format!("{}/metrics", s.issuer_url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Every refusal of a sign-in is the same answer: 400 `invalid_grant`, same description.
fn refused_alike(answers: &[(&str, (u16, Value))]) {
    let (_, (_, first)) = &answers[0];
    for (what, (status, v)) in answers {
        assert_eq!(*status, 400, "{what}: {v}");
        assert_eq!(v, first, "{what}: answered unlike the others");
    }
    assert_eq!(first["error"], "invalid_grant");
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn ldap_users_sign_in_with_nested_roles_and_claims_and_are_refused_alike() {
    let tools = Tools::for_test();
    let ldap = Slapd::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], 60)).await;
    step_a_directory_user_signs_in_with_nested_roles_and_claims(&s, &ldap).await;
    // A cycle of groups ends; the local demo user beside the directory still signs in.
    let (status, carol) = sign_in(&s, "carol", ldap.password("carol")).await;
    assert_eq!(status, 200, "{carol}");
    assert_eq!(
        introspect(&s, &carol).await["roles"],
        serde_json::json!(["looped"])
    );
    let (status, local) = sign_in(&s, demo::USER, demo::PASSWORD).await;
    assert_eq!(status, 200, "the local user: {local}");

    step_every_refusal_is_alike(&s, &ldap).await;
    let logs = s.logs();
    assert!(
        !logs.contains('\0') && !logs.contains(&"a".repeat(1024)),
        "raw input in the log"
    );
    for secret in [
        ldap.password("alice"),
        ldap.password("bob"),
        ldap.fixture().service_password(),
    ] {
        assert!(!logs.contains(secret), "a password in the log");
    }
}

/// Step: alice signs in with the roles of two levels of nested groups and her claims; her token
/// passes at Envoy, and its refresh keeps the roles.
async fn step_a_directory_user_signs_in_with_nested_roles_and_claims(s: &Stack, ldap: &Slapd) {
    let (status, alice) = sign_in(s, "alice", ldap.password("alice")).await;
    assert_eq!(status, 200, "{alice}");
    let seen = introspect(s, &alice).await;
    assert_eq!(seen["active"], true, "{seen}");
    assert_eq!(seen["sub"], "alice");
    assert_eq!(
        seen["roles"],
        serde_json::json!(["editor", "staff"]),
        "two levels of nesting: {seen}"
    );
    assert_eq!(
        seen["claims"],
        serde_json::json!([{"type": "email", "value": "alice@media.test"}])
    );
    assert_eq!(
        call(s, alice["access_token"].as_str().unwrap()).await.0,
        200
    );
    let (status, next) = refresh(s, &alice).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(
        introspect(s, &next).await["roles"],
        serde_json::json!(["editor", "staff"])
    );
}

/// Step: a wrong password, an unknown user, a name with two entries, a star, injections: all
/// refused alike; an empty password, a NUL, a name of 10 KiB refused.
async fn step_every_refusal_is_alike(s: &Stack, ldap: &Slapd) {
    refused_alike(&[
        (
            "wrong password",
            sign_in(s, "bob", "not-bobs-password").await,
        ),
        ("unknown user", sign_in(s, "nobody", "whatever").await),
        ("two entries", sign_in(s, "dup", ldap.password("dup")).await),
        ("a star", sign_in(s, "*", ldap.password("alice")).await),
        ("an injection", sign_in(s, "a)(|(cn=*", "x").await),
        (
            "an injection with alice's password",
            sign_in(s, "alice)(uid=*", ldap.password("alice")).await,
        ),
    ]);
    for (what, user, pw) in [
        ("empty password", "alice", ""),
        ("NUL", "al\0ice", "x"),
        ("10 KiB", &"a".repeat(10 * 1024)[..], "x"),
    ] {
        let (status, v) = sign_in(s, user, pw).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert!(
            v["error"] == "invalid_grant" || v["error"] == "invalid_request",
            "{what}: {v}"
        );
    }
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn sighup_puts_a_changed_directory_table_in_force() {
    let tools = Tools::for_test();
    let ldap = Slapd::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], 60)).await;
    let roles = |v: Value| v["roles"].clone();
    let (status, alice) = sign_in(&s, "alice", ldap.password("alice")).await;
    assert_eq!(status, 200, "{alice}");
    assert_eq!(
        roles(introspect(&s, &alice).await),
        json!(["editor", "staff"])
    );

    let changed = DirectoryTable {
        timeout_ms: Some(TIMEOUT_MS),
        ..DirectoryTable::slapd(&[&ldap])
    }
    .role(ldap.group_dn("editors"), "chief");
    changed.write(tmp.path()).unwrap();
    let pid = s.pids().0.to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let reloaded = e2e::wait::until(e2e::wait::LONG, async || {
        s.logs().contains("[directory] reloaded")
    });
    assert!(reloaded.await, "no reload:\n{}", s.logs());
    let (status, again) = sign_in(&s, "alice", ldap.password("alice")).await;
    assert_eq!(status, 200, "the issuer serves on after SIGHUP: {again}");
    assert_eq!(roles(introspect(&s, &again).await), json!(["chief"]));
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn directory_changes_reach_refresh_and_through_the_recheck_envoy() {
    let tools = Tools::for_test();
    let ldap = Slapd::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let recheck = 2;
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], recheck)).await;
    let (_, alice) = sign_in(&s, "alice", ldap.password("alice")).await;
    let (_, bob) = sign_in(&s, "bob", ldap.password("bob")).await;
    let (_, carol) = sign_in(&s, "carol", ldap.password("carol")).await;

    // Changed groups give the new roles at the next refresh (a group keeps one member).
    ldap.modify(&format!(
        "dn: {}\nchangetype: modify\nadd: member\nmember: {}\n-\ndelete: member\nmember: {}\n",
        ldap.group_dn("editors"),
        ldap.user_dn("bob"),
        ldap.user_dn("alice")
    ))
    .unwrap();
    let (status, next) = refresh(&s, &alice).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(introspect(&s, &next).await["roles"], serde_json::json!([]));

    // Removed: refused at refresh at once, the family revoked.
    ldap.delete(&ldap.user_dn("bob")).unwrap();
    let (status, v) = refresh(&s, &bob).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );
    let (status, _) = refresh(&s, &bob).await;
    assert_eq!(status, 400);

    // Removed, never refreshing: the recheck revokes the access token at every Envoy.
    assert_eq!(
        call(&s, carol["access_token"].as_str().unwrap()).await.0,
        200
    );
    ldap.delete(&ldap.user_dn("carol")).unwrap();
    refused_at_envoy(&s, &carol, "carol removed").await;
    assert_eq!(refresh(&s, &carol).await.0, 400);
    assert_eq!(introspect(&s, &carol).await["active"], false);
    // Both disables are in the audit trail, like an administrator's, by the directory.
    assert_disabled_by_directory(&s, &["bob", "carol"]).await;
}

/// `issuer audit` shows a `user.disable` by the actor `directory` of each of `users` (the
/// security events are written every 100 ms: read again a few times).
async fn assert_disabled_by_directory(s: &Stack, users: &[&str]) {
    let disabled = |trail: &str, user: &str| {
        trail.lines().any(|l| {
            let e: Value = serde_json::from_str(l).unwrap_or_default();
            e["action"] == "user.disable"
                && e["actor"] == "directory"
                && e["target"] == user
                && e["after"]["disabled"] == true
                && e["after"]["reason"] == "no_such_user"
        })
    };
    let trail = e2e::wait::until_some(e2e::wait::LONG, async || {
        let trail = s.admin(&["audit", "--json"], None).unwrap();
        users.iter().all(|u| disabled(&trail, u)).then_some(trail)
    });
    if trail.await.is_none() {
        let trail = s.admin(&["audit", "--json"], None).unwrap();
        panic!("the directory's disables of {users:?} are not in the audit trail:\n{trail}");
    }
}

/// `issuer directory check` and `issuer directory test`, as an operator runs them.
#[test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
fn directory_check_and_test_name_the_failing_step() {
    let tools = Tools::for_test();
    let mut ldap = Slapd::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let config = ldap_server(&[&ldap], 60).write(tmp.path()).unwrap();
    let issuer = |args: &[&str], stdin: &str| issuer_with(&tools, &config, args, stdin);
    let (ok, out) = issuer(&["directory", "check"], "");
    assert!(ok, "{out}");
    for step in [
        "reachable:      ok",
        "tls:            ok",
        "service bind:   ok",
        "search base:    ok",
    ] {
        assert!(out.contains(step), "{step}: {out}");
    }
    // StartTLS on the ldap:// port, the certificate verified alike.
    let mut starttls = ldap_server(&[&ldap], 60);
    starttls.urls = vec![ldap.ldap_url()];
    starttls.starttls = true;
    let starttls_dir = tmp.path().join("starttls");
    std::fs::create_dir(&starttls_dir).unwrap();
    let starttls_config = starttls.write(&starttls_dir).unwrap();
    let (ok, out) = issuer_with(&tools, &starttls_config, &["directory", "check"], "");
    assert!(ok && out.contains("tls:            ok"), "{out}");
    let alice = format!("{}\n", ldap.password("alice"));
    let (ok, out) = issuer(&["directory", "test", "ALICE"], &alice);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["dn"], ldap.user_dn("alice"));
    assert_eq!(v["name"], "alice", "the entry's own name: {v}");
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("id:") && id.len() == 39, "entryUUID: {v}");
    assert_eq!(v["roles"], serde_json::json!(["editor", "staff"]));
    assert_eq!(v["server"], ldap.ldaps_url());
    let (ok, out) = issuer(&["directory", "test", "alice"], "wrong\n");
    assert!(!ok && out.contains("bind refused"), "{out}");
    assert!(!out.contains(ldap.password("alice")));
    let (ok, out) = issuer(&["directory", "test", "nobody"], "x\n");
    assert!(!ok && out.contains("no such user"), "{out}");
    ldap.kill();
    let (ok, out) = issuer(&["directory", "test", "alice"], &alice);
    assert!(!ok && out.contains("server down"), "{out}");
    let (ok, out) = issuer(&["directory", "check"], "");
    assert!(!ok && out.contains("reachable:      FAILED"), "{out}");
}

/// `issuer ARGS --config CONFIG` with `stdin`: whether it succeeded, and what it printed.
fn issuer_with(tools: &Tools, config: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    e2e::issuer::run_with_config(tools, config, args, stdin).unwrap()
}
