//! Directory servers dying and coming back, through the real stack: a dead server costs one
//! timeout and is used again once back, the issuer's own probes find a dead server and put one
//! that came back to use at once, and with every server down sign-ins answer 503 and charge
//! nothing.

use crate::directory::{directory_stack, ldap_server, metrics, sign_in};
use e2e::slapd::Slapd;
use e2e::{demo, DirectoryTable, Stack, Tools};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Sign-ins through Envoy by 8 clients, each `rounds` times, of the users and passwords in
/// `users`; every one must pass. Each counts itself in `signed_in`.
async fn sign_in_load(
    s: &Stack,
    users: &[(String, String)],
    rounds: usize,
    signed_in: &AtomicUsize,
) {
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (user, pw) = &users[worker % users.len()];
        tasks.push(async move {
            for _ in 0..rounds {
                let (status, v) = sign_in(s, user, pw).await;
                if status != 200 {
                    let log = s.logs();
                    let lines: Vec<&str> =
                        log.lines().filter(|l| l.contains("directory")).collect();
                    panic!("{user}: {status} {v}\n{}", lines.join("\n"));
                }
                signed_in.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    futures_util::future::join_all(tasks).await;
}

/// The issuer's count of operations at the server `url` with `outcome` (answered, failed).
fn operations(m: &str, url: &str, outcome: &str) -> u64 {
    m.lines()
        .find(|l| {
            l.contains("directory_operations_total") && l.contains(url) && l.contains(outcome)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// The first of two servers killed under a sign-in load: the load goes on at the second, the
/// dead server tried only by the sign-ins under way when it died and by a probe after each
/// cool-down (each pays one timeout), not by every sign-in; once back, it is used again.
#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn a_dead_ldap_server_costs_one_timeout_and_is_used_again_once_back() {
    let tools = Tools::for_test();
    let mut first = Slapd::for_test();
    let second = first.start_another().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&first, &second], 60)).await;
    let users: Vec<(String, String)> = ["alice", "bob", "carol"]
        .iter()
        .map(|u| (u.to_string(), first.password(u).to_owned()))
        .collect();
    let first_url = first.ldaps_url();
    let signed_in = AtomicUsize::new(0);
    sign_in_load(&s, &users, 5, &signed_in).await;
    let answered = |m: &str| operations(m, &first_url, "answered");
    assert!(
        answered(&metrics(&s).await) > 0,
        "the first server answers first"
    );
    step_a_server_killed_under_load_is_skipped(&s, &mut first, &users, &signed_in).await;
    first.restart().unwrap();
    let before = answered(&metrics(&s).await);
    let failback = e2e::wait::until(e2e::wait::LONG, async || {
        sign_in_load(&s, &users, 1, &signed_in).await;
        answered(&metrics(&s).await) > before
    });
    assert!(
        failback.await,
        "no failback to the first server\n{}",
        s.logs()
    );
    assert!(
        s.logs().contains("directory server answers again"),
        "the failback is logged"
    );
    drop(second);
}

/// Step: the first server is killed while 8 clients sign in 20 times each: every sign-in
/// passes, the dead server is tried by far fewer of the 160 than all (it is skipped while it
/// cools down), and it is marked down, in the metrics and the log.
async fn step_a_server_killed_under_load_is_skipped(
    s: &Stack,
    first: &mut Slapd,
    users: &[(String, String)],
    signed_in: &AtomicUsize,
) {
    let url = first.ldaps_url();
    let failed_before = operations(&metrics(s).await, &url, "failed");
    // Killed while the load runs: once it has signed in a few more.
    let killer = async {
        let from = signed_in.load(Ordering::Relaxed);
        let running = e2e::wait::until(e2e::wait::LONG, async || {
            signed_in.load(Ordering::Relaxed) >= from + 8
        });
        assert!(running.await, "the load stalled");
        first.kill();
    };
    tokio::join!(sign_in_load(s, users, 20, signed_in), killer);
    let m = metrics(s).await;
    let failed = operations(&m, &url, "failed") - failed_before;
    assert!(
        (1..20).contains(&failed),
        "{failed} sign-ins of 160 tried the dead server\n{m}"
    );
    assert!(
        m.contains(&format!("directory_server_up{{server=\"{url}\"}} 0")),
        "{m}"
    );
    assert!(
        s.logs().contains("directory server failed"),
        "the failover is logged"
    );
}

/// Waits until the issuer's `directory_server_up` for `url` is `up`, with no sign-in meanwhile:
/// only the issuer's own probes can change it.
async fn until_server_up_is(s: &Stack, url: &str, up: u8) {
    let line = format!("_directory_server_up{{server=\"{url}\"}} {up}");
    let seen = e2e::wait::until(e2e::wait::LONG, async || {
        metrics(s).await.lines().any(|l| l.ends_with(&line))
    });
    assert!(seen.await, "never {line}\n{}", s.logs());
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn probes_find_a_dead_server_and_use_a_server_back_at_once() {
    let tools = Tools::for_test();
    let mut first = Slapd::for_test();
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
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn with_every_server_down_sign_ins_are_503_and_charge_nothing() {
    let tools = Tools::for_test();
    let mut ldap = Slapd::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&ldap], 60)).await;
    ldap.kill();
    for _ in 0..12 {
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
    }
    ldap.restart().unwrap();
    let (status, v) = sign_in(&s, "alice", ldap.password("alice")).await;
    assert_eq!(
        status, 200,
        "at once when the directory is back, no back-off: {v}"
    );
}
