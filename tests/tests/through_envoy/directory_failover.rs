//! Directory servers dying and coming back, through the real stack: a dead server costs one
//! timeout and is used again once back, the issuer's own probes find a dead server and put one
//! that came back to use at once, and with every server down sign-ins answer 503 and charge
//! nothing.

use crate::directory::{directory_stack, ldap_server, metrics, sign_in, TIMEOUT_MS};
use e2e::slapd::Slapd;
use e2e::{demo, DirectoryTable, Stack, Tools};
use serde_json::Value;
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn a_dead_ldap_server_costs_one_timeout_and_is_used_again_once_back() {
    let tools = Tools::for_test();
    let mut first = Slapd::for_test();
    let second = first.start_another().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = directory_stack(tmp.path(), &tools, &ldap_server(&[&first, &second], 60)).await;
    let bound = Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(1);

    let users: Vec<(String, String)> = ["alice", "bob", "carol"]
        .iter()
        .map(|u| (u.to_string(), first.password(u).to_owned()))
        .collect();
    let first_url = first.ldaps_url();
    let signed_in = std::sync::atomic::AtomicUsize::new(0);
    let load = |rounds: usize| {
        let users = users.clone();
        let (s, signed_in) = (&s, &signed_in);
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
                        signed_in.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

    // Killed while the load runs: once it has signed in a few more.
    let killer = async {
        let from = signed_in.load(std::sync::atomic::Ordering::Relaxed);
        let running = e2e::wait::until(e2e::wait::LONG, async || {
            signed_in.load(std::sync::atomic::Ordering::Relaxed) >= from + 8
        });
        assert!(running.await, "the load stalled");
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
    let failback = e2e::wait::until(e2e::wait::LONG, async || {
        load(1).await;
        answered(&metrics(&s).await, &first_url.clone()) > before
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
