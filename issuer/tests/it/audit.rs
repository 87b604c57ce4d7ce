//! The audit trail end to end: every admin command and every security event a running issuer
//! decides, read back with `issuer audit --json` (and as text, and `--since`), with its actor,
//! target, before and after, and no secret anywhere. On the embedded store through the admin
//! socket (and on the stopped data dir), and on PostgreSQL.

use super::{admin, admin_output, assert_no_forging, now, post, Server, FORGER};
use e2e::postgres::PgCluster;
use serde_json::{json, Value};
use std::path::Path;

/// Where the commands run: the data dir, and the store's arguments (none for the data dir).
struct On<'a> {
    dir: &'a Path,
    store: Vec<String>,
}

impl On<'_> {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(self.store.iter().map(String::as_str));
        admin(self.dir, &all, stdin)
    }

    /// `issuer audit --json` with `extra`, one object per line.
    fn audit(&self, extra: &[&str]) -> (String, Vec<Value>) {
        let mut args = vec!["audit", "--json"];
        args.extend_from_slice(extra);
        let out = self.run(&args, None);
        let events = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (out, events)
    }
}

/// The operating-system user running the tests.
fn me() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn secret_of(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned()
}

/// Every admin command; returns the client secrets and the passwords it used.
fn admin_commands(on: &On<'_>) -> Vec<String> {
    let app = on.run(
        &[
            "client",
            "add",
            "app",
            "--grants",
            "password,client_credentials",
            "--impersonate",
        ],
        None,
    );
    on.run(&["client", "activate", "app"], None);
    let tmp = on.run(&["client", "add", "tmp"], None);
    on.run(&["client", "activate", "tmp"], None);
    on.run(&["client", "deactivate", "tmp"], None);
    on.run(&["client", "remove", "tmp"], None);
    on.run(
        &["user", "add", "alice", "--role", "editor"],
        Some("alice-pw-1f3e"),
    );
    on.run(&["user", "add", "bob"], Some("bob-pw-9c2a"));
    on.run(&["user", "disable", "bob"], None);
    on.run(&["user", "enable", "bob"], None);
    on.run(&["user", "passwd", "bob"], Some("bob-new-pw-77d1"));
    on.run(&["user", "remove", "bob"], None);
    on.run(&["keys", "rotate", "--delay", "0"], None);
    on.run(&["keys", "retire", "1"], None);
    let mut secrets = vec![secret_of(&app), secret_of(&tmp)];
    secrets.extend(["alice-pw-1f3e", "bob-pw-9c2a", "bob-new-pw-77d1"].map(String::from));
    secrets
}

/// Each security event: refresh reuse, impersonation, RFC 7009 revocations of an access token
/// and a refresh token family, a back-off engaged. Returns the tokens and passwords it used.
async fn security_events(s: &Server, secret: &str) -> Vec<String> {
    let app = Some(("app", secret));
    let token = s.token_url();
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    let sign_in = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "alice-pw-1f3e"),
    ];
    let first = post(&token, app, &sign_in).await.json;
    let rt1 = first["refresh_token"].as_str().unwrap().to_owned();
    let refresh = [
        ("grant_type", "refresh_token"),
        ("refresh_token", rt1.as_str()),
    ];
    let second = post(&token, app, &refresh).await;
    assert_eq!(second.status, 200, "{}", second.json);
    // The retry window is 0: presenting the rotated token again a second later is reuse.
    e2e::wait::next_second().await;
    let reuse = post(&token, app, &refresh).await;
    assert_eq!(reuse.json["error"], "invalid_grant");
    let imp = [
        ("grant_type", "client_credentials"),
        ("impersonate_as", "carol"),
        ("roles", "ops"),
    ];
    let imp = post(&token, app, &imp).await;
    assert_eq!(imp.status, 200, "{}", imp.json);
    let third = post(&token, app, &sign_in).await.json;
    let (at3, rt3) = (
        third["access_token"].as_str().unwrap(),
        third["refresh_token"].as_str().unwrap(),
    );
    assert_eq!(post(&revoke, app, &[("token", at3)]).await.status, 200);
    assert_eq!(post(&revoke, app, &[("token", rt3)]).await.status, 200);
    // Five failures are free; the sixth blocks dave from this address.
    let guess = [
        ("grant_type", "password"),
        ("username", "dave"),
        ("password", "guess-5b8d"),
    ];
    for _ in 0..6 {
        assert_eq!(
            post(&token, app, &guess).await.json["error"],
            "invalid_grant"
        );
    }
    assert_eq!(post(&token, app, &guess).await.status, 429);
    let mut used = vec![rt1, "guess-5b8d".to_owned(), at3.to_owned(), rt3.to_owned()];
    for t in [&first, &second.json, &imp.json] {
        used.extend(
            ["access_token", "refresh_token"]
                .iter()
                .filter_map(|k| t[*k].as_str().map(String::from)),
        );
    }
    used
}

/// The one event of `action` on `target`.
fn one<'a>(events: &'a [Value], action: &str, target: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["action"] == action && e["target"] == target)
        .collect();
    assert_eq!(found.len(), 1, "{action} {target}: {events:#?}");
    found[0]
}

/// The events of the client `tmp`: added, activated, deactivated (only what changed), removed.
fn assert_client_events(events: &[Value]) {
    let add = one(events, "client.add", "tmp");
    assert_eq!(
        (add["before"].clone(), add["after"]["active"].clone()),
        (Value::Null, json!(false))
    );
    assert_eq!(
        one(events, "client.activate", "tmp")["after"]["active"],
        true
    );
    let off = one(events, "client.deactivate", "tmp");
    assert_eq!(off["before"], json!({"active": true}), "only what changed");
    assert_eq!(off["after"], json!({"active": false}), "only what changed");
    assert_eq!(
        (
            off["before"]["active"].clone(),
            off["after"]["active"].clone()
        ),
        (json!(true), json!(false))
    );
    let gone = one(events, "client.remove", "tmp");
    assert_eq!(
        (gone["before"]["active"].clone(), gone["after"].clone()),
        (json!(false), Value::Null)
    );
}

fn assert_admin_events(events: &[Value], actor: &str, kek: bool) {
    let by_admin = |e: &&Value| {
        let action = e["action"].as_str().unwrap();
        ["client.", "user.", "keys."]
            .iter()
            .any(|p| action.starts_with(p))
    };
    assert_eq!(
        events.iter().filter(by_admin).count(),
        if kek { 15 } else { 14 }
    );
    for e in events.iter().filter(by_admin) {
        assert_eq!(e["actor"], actor, "{e}");
    }
    assert_client_events(events);
    assert_eq!(
        one(events, "client.add", "app")["after"]["impersonate"],
        true
    );
    assert_eq!(
        one(events, "user.add", "alice")["after"]["roles"],
        json!(["editor"])
    );
    let dis = one(events, "user.disable", "bob");
    assert_eq!(
        (
            dis["before"]["disabled"].clone(),
            dis["after"]["disabled"].clone()
        ),
        (json!(false), json!(true))
    );
    assert_eq!(
        one(events, "user.enable", "bob")["after"]["disabled"],
        false
    );
    let pw = one(events, "user.passwd", "bob");
    assert_eq!(pw["before"]["password_changed_at"], Value::Null);
    assert!(
        pw["after"]["password_changed_at"].as_u64().is_some(),
        "{pw}"
    );
    assert_eq!(one(events, "user.remove", "bob")["after"], Value::Null);
    let rot = one(events, "keys.rotate", "keys");
    assert_eq!(rot["before"], json!([{"kid": 1, "state": "signing"}]));
    assert_eq!(
        rot["after"],
        json!([{"kid": 1, "state": "verifying"}, {"kid": 2, "state": "signing"}])
    );
    let ret = one(events, "keys.retire", "keys");
    assert_eq!(ret["before"], rot["after"]);
    assert_eq!(
        ret["after"],
        json!([{"kid": 1, "state": "retired"}, {"kid": 2, "state": "signing"}])
    );
    if kek {
        let k = one(events, "keys.rotate_kek", "kek");
        assert_eq!(k["after"]["sealed_under"], "current");
    }
}

fn assert_security_events(events: &[Value]) {
    let reuse: Vec<&Value> = events
        .iter()
        .filter(|e| e["action"] == "refresh.reuse")
        .collect();
    assert_eq!(reuse.len(), 1, "{events:#?}");
    assert_eq!(reuse[0]["actor"], "app");
    let family = reuse[0]["after"]["family"].as_str().unwrap();
    assert_eq!(reuse[0]["target"], format!("family:{family}"));
    assert_eq!(
        (
            reuse[0]["before"]["revoked"].clone(),
            reuse[0]["after"]["revoked"].clone()
        ),
        (json!(false), json!(true))
    );
    let imp = one(events, "token.impersonate", "carol");
    assert_eq!(
        (imp["actor"].clone(), imp["before"].clone()),
        (json!("app"), Value::Null)
    );
    assert_eq!(imp["after"]["roles"], json!(["ops"]));
    let revoked: Vec<&Value> = events
        .iter()
        .filter(|e| e["action"] == "token.revoke")
        .collect();
    assert_eq!(revoked.len(), 2, "{events:#?}");
    for r in &revoked {
        assert_eq!(
            (r["actor"].clone(), r["target"].clone()),
            (json!("app"), json!("alice"))
        );
        assert_eq!(
            (
                r["before"]["revoked"].clone(),
                r["after"]["revoked"].clone()
            ),
            (json!(false), json!(true))
        );
    }
    let kinds: Vec<&Value> = revoked.iter().map(|r| &r["after"]["token"]).collect();
    assert!(
        kinds.contains(&&json!("access")) && kinds.contains(&&json!("refresh")),
        "{kinds:?}"
    );
    let blocked = one(events, "login.backoff", "dave");
    assert_eq!(blocked["actor"], "app");
    assert_eq!(blocked["after"]["subject"]["user"], "dave");
    assert_eq!(
        (
            blocked["before"]["blocked"].clone(),
            blocked["after"]["blocked"].clone()
        ),
        (json!(false), json!(true))
    );
    assert_eq!(blocked["after"]["failures"], 6);
}

/// Runs everything on `on` with `server` serving it; `kek`: also `keys rotate-kek`.
async fn scenario(on: &On<'_>, server: &Server, kek: bool) -> Vec<String> {
    let mut secrets = admin_commands(on);
    if kek {
        on.run(&["keys", "rotate-kek"], None);
    }
    // Every admin change is in an earlier second than `mid`, every security event not.
    e2e::wait::next_second().await;
    let mid = now();
    secrets.extend(security_events(server, &secrets[0]).await);
    let events_wanted = if kek { 20 } else { 19 };
    // The security events are written from a queue: read until they are all there.
    e2e::wait::until(e2e::wait::LONG, async || {
        on.audit(&[]).1.len() >= events_wanted
    })
    .await;
    let (out, events) = on.audit(&[]);
    assert_eq!(events.len(), events_wanted, "{out}");
    for e in &events {
        let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 6, "{e}");
        assert!(e["at"].as_str().unwrap().ends_with('Z'), "{e}");
    }
    assert_admin_events(&events, &me(), kek);
    assert_security_events(&events);
    for s in &secrets {
        assert!(
            !out.contains(s.as_str()),
            "a secret in the audit trail: {s}"
        );
    }
    assert!(
        !out.contains("$argon2"),
        "a password hash in the audit trail"
    );
    // --since: as Unix seconds, as RFC 3339, as an age; as text.
    let (_, late) = on.audit(&["--since", &mid.to_string()]);
    assert_eq!(late.len(), 5, "{late:#?}");
    assert!(late.iter().all(|e| e["actor"] == "app"), "{late:#?}");
    assert_eq!(late[..], events[events.len() - 5..]);
    // RFC 3339 as `issuer audit` prints it: the first event's time gives them all.
    let first_at = events[0]["at"].as_str().unwrap();
    assert_eq!(on.audit(&["--since", first_at]).1, events);
    let late_at = late[0]["at"].as_str().unwrap();
    assert_eq!(on.audit(&["--since", late_at]).1, late);
    assert_eq!(on.audit(&["--since", "1h"]).1, events);
    assert!(on
        .audit(&["--since", &(now() + 3600).to_string()])
        .1
        .is_empty());
    let text = on.run(&["audit", "--since", &mid.to_string()], None);
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" app refresh.reuse family:")),
        "{text}"
    );
    let bad = admin_output(on.dir, &["audit", "--since", "yesterday"], None);
    assert!(!bad.status.success());
    secrets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_and_security_event_is_audited_on_the_embedded_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let server = Server::start(&dir, &["--refresh-retry-window", "0"]);
    let on = On {
        dir: &dir,
        store: vec![],
    };
    // Through the server's admin socket: the actor is the socket's peer.
    let secrets = scenario(&on, &server, false).await;
    let (through_socket, _) = on.audit(&[]);
    drop(server);
    // The stopped data dir reads the same.
    let (direct, _) = on.audit(&[]);
    assert_eq!(direct, through_socket);
    assert!(!secrets.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn every_change_and_security_event_is_audited_on_postgres() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let kek = super::multi::kek_file(tmp.path());
    let store: Vec<String> = [
        "--store",
        &pg.url(),
        "--kek-file",
        &kek,
        "--previous-kek-file",
        &kek,
    ]
    .map(String::from)
    .to_vec();
    let dir = tmp.path().join("a");
    let mut args: Vec<&str> = store.iter().map(String::as_str).collect();
    args.extend(["--refresh-retry-window", "0"]);
    let server = Server::start(&dir, &args);
    let on = On {
        dir: &dir,
        store: store.clone(),
    };
    scenario(&on, &server, true).await;
}

/// A trail of many megabytes crosses the admin socket in its one reply line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_trail_crosses_the_admin_socket() {
    use issuer::store::prelude::*;
    use issuer::store::{AuditAction, AuditEvent, RefreshPolicy};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let events: Vec<AuditEvent> = (0..20_000u64)
        .map(|i| {
            let target = format!("{i:0>250}");
            let after = json!({ "claims": [["upn", "x".repeat(200)]] });
            AuditEvent::new(
                now() - 10,
                "app",
                AuditAction::Impersonate,
                &target,
                Value::Null,
                after,
            )
        })
        .collect();
    {
        let store =
            issuer::store::redb::RedbStore::open(&dir, now(), RefreshPolicy::default()).unwrap();
        let encoded = events.iter().map(AuditEvent::encode).collect();
        store.record_audit(encoded).await.unwrap();
    }
    // The server holds the database: `issuer audit` can only read through the socket.
    let _server = Server::start(&dir, &[]);
    let on = On {
        dir: &dir,
        store: vec![],
    };
    let (out, read) = on.audit(&[]);
    assert!(out.len() > 8 << 20, "{} bytes", out.len());
    assert_eq!(read.len(), events.len());
    assert_eq!(read[19_999]["target"], events[19_999].target);
}

/// A sign-in name, an impersonated subject, a user name and a client id that carry line and
/// paragraph separators and bidi controls are printed escaped by `issuer audit` (text and JSON
/// lines), `user list` and `client list`: no forged line for a reader that splits lines as
/// Python's `splitlines` or JavaScript does, every JSON line parses to the exact name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_cannot_forge_lines_in_the_audit_trail_or_the_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let server = Server::start(&dir, &[]);
    let on = On {
        dir: &dir,
        store: vec![],
    };
    let grants = ["--grants", "password,client_credentials", "--impersonate"];
    let secret = secret_of(&on.run(&[&["client", "add", "app"][..], &grants].concat(), None));
    on.run(&["client", "activate", "app"], None);
    let odd_client = "app\u{2028}x\u{202e}y";
    on.run(&["client", "add", odd_client], None);
    on.run(
        &["user", "add", FORGER, "--role", FORGER],
        Some("forger-pw-4e1a"),
    );
    let (token, app) = (server.token_url(), Some(("app", secret.as_str())));
    let guess = [
        ("grant_type", "password"),
        ("username", FORGER),
        ("password", "wrong"),
    ];
    for _ in 0..7 {
        post(&token, app, &guess).await;
    }
    let imp = [
        ("grant_type", "client_credentials"),
        ("impersonate_as", FORGER),
        ("roles", "ops"),
    ];
    assert_eq!(post(&token, app, &imp).await.status, 200);
    // user.add, login.backoff, token.impersonate
    let of_forger = |events: &[Value]| events.iter().filter(|e| e["target"] == FORGER).count();
    e2e::wait::until(e2e::wait::LONG, async || of_forger(&on.audit(&[]).1) >= 3).await;
    let (json, events) = on.audit(&[]);
    for action in ["user.add", "login.backoff", "token.impersonate"] {
        one(&events, action, FORGER);
    }
    assert_no_forging("audit --json", &json);
    let text = on.run(&["audit"], None);
    assert_no_forging("audit", &text);
    assert_eq!(text.lines().count(), events.len(), "{text}");
    assert!(
        text.contains(" token.impersonate eve\\u{2028}2026-11-26T00:00:00Z root "),
        "{text}"
    );
    for (cmd, key, name) in [("user", "name", FORGER), ("client", "id", odd_client)] {
        let list = on.run(&[cmd, "list"], None);
        assert_no_forging(&format!("{cmd} list"), &list);
        let json = on.run(&[cmd, "list", "--json"], None);
        assert_no_forging(&format!("{cmd} list --json"), &json);
        let list: Value = serde_json::from_str(&json).unwrap();
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[key].as_str().unwrap())
            .collect();
        assert!(names.contains(&name), "{names:?}");
    }
    assert!(on.run(&["user", "list"], None).contains("eve\\u{2028}2026"));
}
