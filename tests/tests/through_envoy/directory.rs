//! Directory sign-in against a real OpenLDAP (`slapd`, two of them for failover) behind the real
//! stack: users the issuer's store does not hold sign in with their directory password; roles
//! come from nested groups, claims from attributes; every refusal is the same `invalid_grant`;
//! a dead server costs at most one timeout and is used again once back; a directory outage is
//! 503 and never charged to the back-off; a user removed from the directory is refused at refresh
//! and, through the recheck, at Envoy. The Active Directory tests are in `directory_ad`.

use crate::edge::{call, token_request, wait_for_sync};
use e2e::slapd::Slapd;
use e2e::{demo, DirectoryTable, Options, Stack, Tools};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// `timeout_ms` of these tests.
pub(crate) const TIMEOUT_MS: u64 = 1000;

/// The `[directory]` of `servers` (same entries), `ldaps://` to each, with the test timeout.
fn ldap_server(servers: &[&Slapd], recheck_seconds: u64) -> DirectoryTable {
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
    token_request(s, (demo::CLIENT, &s.secret), &form).await
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

/// The access token of `token` is refused at Envoy within `within`.
pub(crate) async fn refused_at_envoy_within(
    s: &Stack,
    token: &Value,
    within: Duration,
    what: &str,
) {
    let access = token["access_token"].as_str().unwrap();
    let start = Instant::now();
    loop {
        let mut refused = 0;
        for _ in 0..8 {
            if call(s, access).await.0 == 401 {
                refused += 1;
            }
        }
        if refused == 8 {
            eprintln!("{what}: refused at Envoy {:?} after", start.elapsed());
            return;
        }
        assert!(
            start.elapsed() < within,
            "{what}: still accepted after {within:?}\n{}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
async fn ldap_users_sign_in_with_nested_roles_and_claims_and_are_refused_alike() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(ldap) = Slapd::for_test() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], 60)).await;

    let (status, alice) = sign_in(&s, "alice", ldap.password("alice")).await;
    assert_eq!(status, 200, "{alice}");
    let seen = introspect(&s, &alice).await;
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
        call(&s, alice["access_token"].as_str().unwrap()).await.0,
        200
    );
    let (status, next) = refresh(&s, &alice).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(
        introspect(&s, &next).await["roles"],
        serde_json::json!(["editor", "staff"])
    );

    // A cycle of groups ends; the local demo user beside the directory still signs in.
    let (status, carol) = sign_in(&s, "carol", ldap.password("carol")).await;
    assert_eq!(status, 200, "{carol}");
    assert_eq!(
        introspect(&s, &carol).await["roles"],
        serde_json::json!(["looped"])
    );
    let (status, local) = sign_in(&s, demo::USER, demo::PASSWORD).await;
    assert_eq!(status, 200, "the local user: {local}");

    refused_alike(&[
        (
            "wrong password",
            sign_in(&s, "bob", "not-bobs-password").await,
        ),
        ("unknown user", sign_in(&s, "nobody", "whatever").await),
        (
            "two entries",
            sign_in(&s, "dup", ldap.password("dup")).await,
        ),
        ("a star", sign_in(&s, "*", ldap.password("alice")).await),
        ("an injection", sign_in(&s, "a)(|(cn=*", "x").await),
        (
            "an injection with alice's password",
            sign_in(&s, "alice)(uid=*", ldap.password("alice")).await,
        ),
    ]);
    for (what, user, pw) in [
        ("empty password", "alice", ""),
        ("NUL", "al\0ice", "x"),
        ("10 KiB", &"a".repeat(10 * 1024)[..], "x"),
    ] {
        let (status, v) = sign_in(&s, user, pw).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert!(
            v["error"] == "invalid_grant" || v["error"] == "invalid_request",
            "{what}: {v}"
        );
    }
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

#[tokio::test]
async fn a_dead_ldap_server_costs_one_timeout_and_is_used_again_once_back() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(mut first) = Slapd::for_test() else {
        return;
    };
    let second = first.start_another().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&first, &second], 60)).await;
    let bound = Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(1);

    let users: Vec<(String, String)> = ["alice", "bob", "carol"]
        .iter()
        .map(|u| (u.to_string(), first.password(u).to_owned()))
        .collect();
    let first_url = first.ldaps_url();
    let load = |rounds: usize| {
        let users = users.clone();
        let s = &s;
        async move {
            let mut tasks = Vec::new();
            for worker in 0..8 {
                let (user, pw) = users[worker % users.len()].clone();
                tasks.push(async move {
                    let mut slowest = Duration::ZERO;
                    for _ in 0..rounds {
                        let t = Instant::now();
                        let (status, v) = sign_in(s, &user, &pw).await;
                        if status != 200 {
                            let log = s.logs();
                            let lines: Vec<&str> =
                                log.lines().filter(|l| l.contains("directory")).collect();
                            panic!("{user}: {status} {v}\n{}", lines.join("\n"));
                        }
                        slowest = slowest.max(t.elapsed());
                    }
                    slowest
                });
            }
            futures_util::future::join_all(tasks)
                .await
                .into_iter()
                .max()
                .unwrap()
        }
    };
    load(5).await;
    let answered = |m: &str, url: &str| -> u64 {
        m.lines()
            .find(|l| {
                l.contains("directory_operations_total")
                    && l.contains(url)
                    && l.contains("answered")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        answered(&metrics(&s).await, &first_url.clone()) > 0,
        "the first server answers first"
    );

    let killer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        first.kill();
    };
    let (slowest, ()) = tokio::join!(load(20), killer);
    assert!(
        slowest <= bound,
        "a sign-in took {slowest:?} with the first server dead"
    );
    let m = metrics(&s).await;
    assert!(
        m.contains(&format!(
            "directory_server_up{{server=\"{}\"}} 0",
            first_url.clone()
        )),
        "{m}"
    );
    assert!(
        s.logs().contains("directory server failed"),
        "the failover is logged"
    );

    first.restart().unwrap();
    let before = answered(&metrics(&s).await, &first_url.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered(&metrics(&s).await, &first_url.clone()) == before {
        assert!(
            Instant::now() < deadline,
            "no failback to the first server\n{}",
            s.logs()
        );
        load(1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        s.logs().contains("directory server answers again"),
        "the failback is logged"
    );
    drop(second);
}

/// Waits until the issuer's `directory_server_up` for `url` is `up`, with no sign-in meanwhile:
/// only the issuer's own probes can change it.
async fn until_server_up_is(s: &Stack, url: &str, up: u8) {
    let line = format!("_directory_server_up{{server=\"{url}\"}} {up}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !metrics(s).await.lines().any(|l| l.ends_with(&line)) {
        assert!(Instant::now() < deadline, "never {line}\n{}", s.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn probes_find_a_dead_server_and_use_a_server_back_at_once() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(mut first) = Slapd::for_test() else {
        return;
    };
    let mut second = first.start_another().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let table = DirectoryTable {
        probe_seconds: Some(1),
        ..ldap_server(&[&first, &second], 60)
    };
    let s = directory_stack(tmp.path(), &tools, &table).await;
    let (status, v) = sign_in(&s, "alice", first.password("alice")).await;
    assert_eq!(status, 200, "{v}");

    first.kill();
    until_server_up_is(&s, &first.ldaps_url(), 0).await;
    first.restart().unwrap();
    until_server_up_is(&s, &first.ldaps_url(), 1).await;
    assert!(s.logs().contains("directory server answers again"));
    // The first server came back within its cool-down; with the second dead now, sign-ins go to
    // the first at once.
    second.kill();
    for user in ["alice", "bob", "carol"] {
        let (status, v) = sign_in(&s, user, first.password(user)).await;
        assert_eq!(status, 200, "{user}: {v}\n{}", s.logs());
    }
    until_server_up_is(&s, &second.ldaps_url(), 0).await;
}

#[tokio::test]
async fn with_every_server_down_sign_ins_are_503_and_charge_nothing() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(mut ldap) = Slapd::for_test() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], 60)).await;
    ldap.kill();
    for _ in 0..12 {
        let t = Instant::now();
        let r = s
            .client()
            .post(format!("{}/apiv2/oauth/token", s.url()))
            .basic_auth(demo::CLIENT, Some(&s.secret))
            .form(&[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", ldap.password("alice")),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "temporarily_unavailable");
        assert!(t.elapsed() < Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(1));
    }
    ldap.restart().unwrap();
    let (status, v) = sign_in(&s, "alice", ldap.password("alice")).await;
    assert_eq!(
        status, 200,
        "at once when the directory is back, no back-off: {v}"
    );
}

#[tokio::test]
async fn directory_changes_reach_refresh_and_through_the_recheck_envoy() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(ldap) = Slapd::for_test() else {
        return;
    };
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
    let within = Duration::from_secs(recheck) + Duration::from_secs(2);
    refused_at_envoy_within(&s, &carol, within, "carol removed").await;
    assert_eq!(refresh(&s, &carol).await.0, 400);
    assert_eq!(introspect(&s, &carol).await["active"], false);
    // Both disables are in the audit trail, like an administrator's, by the directory.
    assert_disabled_by_directory(&s, &["bob", "carol"]).await;
}

/// `issuer audit` shows a `user.disable` by the actor `directory` of each of `users` (the
/// security events are written every 100 ms: read again a few times).
async fn assert_disabled_by_directory(s: &Stack, users: &[&str]) {
    let mut trail = String::new();
    for _ in 0..20 {
        trail = s.admin(&["audit", "--json"], None).unwrap();
        let disabled = |user: &str| {
            trail.lines().any(|l| {
                let e: Value = serde_json::from_str(l).unwrap_or_default();
                e["action"] == "user.disable"
                    && e["actor"] == "directory"
                    && e["target"] == user
                    && e["after"]["disabled"] == true
                    && e["after"]["reason"] == "no_such_user"
            })
        };
        if users.iter().all(|u| disabled(u)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the directory's disables of {users:?} are not in the audit trail:\n{trail}");
}

/// `issuer directory check` and `issuer directory test`, as an operator runs them.
#[test]
fn directory_check_and_test_name_the_failing_step() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let Some(mut ldap) = Slapd::for_test() else {
        return;
    };
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

/// Runs `issuer ARGS --config CONFIG` with `stdin`: whether it succeeded, and what it printed.
fn issuer_with(tools: &Tools, config: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(&tools.issuer)
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
