//! Local sign-ins through the real stack: what a refused sign-in tells a guesser, and that guesses
//! from one address never hold a user signing in from another.

use crate::stack;
use e2e::{demo, Stack};
use reqwest::StatusCode;
use std::net::IpAddr;

/// A password grant through Envoy from `client`: the status.
pub(crate) async fn sign_in(
    s: &Stack,
    client: &reqwest::Client,
    user: &str,
    password: &str,
) -> StatusCode {
    client
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[
            ("grant_type", "password"),
            ("username", user),
            ("password", password),
        ])
        .send()
        .await
        .unwrap()
        .status()
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// The first outside probe's finding 5 (low): after the free failures, a right password for a disabled user reset the
/// throttle, so the next answer (400 or 429) told whether the guess was right.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_disabled_user_answers_like_a_wrong_password() {
    // A long first wait, so that the answer after the sixth guess cannot outlive it.
    let (_tmp, s) = stack(&["--login-backoff-base", "60"]).await;
    for user in ["gone-right", "gone-wrong"] {
        s.admin(&["user", "add", user], Some("right-password"))
            .unwrap();
        s.admin(&["user", "disable", user], None).unwrap();
    }
    let http = s.client();
    let mut next = Vec::new();
    for (user, sixth) in [
        ("gone-right", "right-password"),
        ("gone-wrong", "wrong-password"),
    ] {
        for _ in 0..5 {
            let st = sign_in(&s, &http, user, "wrong-password").await;
            assert_eq!(st, 400);
        }
        assert_eq!(sign_in(&s, &http, user, sixth).await, 400);
        next.push(sign_in(&s, &http, user, "right-password").await);
    }
    assert_eq!(
        next,
        [StatusCode::TOO_MANY_REQUESTS, StatusCode::TOO_MANY_REQUESTS],
        "a right guess for a disabled user must not be told apart"
    );
    assert!(s.stop());
}

/// The first outside probe's finding 7 (low): anyone could keep a user's right password answered 429 by guessing wrong for
/// that user, and `X-Forwarded-For` was believed from any peer.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_guesser_cannot_lock_out_a_user_signing_in_elsewhere() {
    let (_tmp, s) = stack(&["--login-backoff-base", "60"]).await;
    let attacker = s.client_from(loopback(2));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(sign_in(&s, &attacker, demo::USER, "guess").await.as_u16());
    }
    assert_eq!(statuses, [400, 400, 400, 400, 400, 400, 429, 429]);
    // The user, from another host, signs in; the attacker still waits, even with the password.
    assert_eq!(
        sign_in(&s, &s.client_from(loopback(3)), demo::USER, demo::PASSWORD).await,
        200
    );
    assert_eq!(
        sign_in(&s, &attacker, demo::USER, demo::PASSWORD).await,
        429
    );

    // Straight to the issuer from a peer that is not a trusted proxy: its X-Forwarded-For is not
    // believed, so a new spoofed address per guess does not escape the per-address back-off.
    let direct = reqwest::Client::builder()
        .local_address(loopback(4))
        .build()
        .unwrap();
    let mut throttled = 0;
    for i in 0..30 {
        let st = direct
            .post(format!("{}/apiv2/oauth/token", s.issuer_url()))
            .basic_auth(demo::CLIENT, Some(&s.secret))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .form(&[
                ("grant_type", "password"),
                ("username", &format!("nobody{i}")),
                ("password", "guess"),
            ])
            .send()
            .await
            .unwrap()
            .status();
        throttled += usize::from(st == 429);
    }
    assert_eq!(throttled, 9, "20 free failures per address, then a wait");
    assert!(s.stop());
}

/// Behind the shipped Envoy, whose `use_remote_address` appends the caller's address to
/// `X-Forwarded-For`, the issuer run as the docs say (`--trust-x-forwarded-for`, the loopback
/// Envoy a trusted proxy by default) counts and audits each caller by its own address: two
/// loopback callers are two addresses, and neither is Envoy's own 127.0.0.1.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn each_caller_behind_envoy_is_throttled_and_audited_by_its_own_address() {
    let (_tmp, s) = stack(&["--login-backoff-base", "60"]).await;
    for last in [2, 3] {
        let caller = s.client_from(loopback(last));
        // 20 failures from one address are free; the 21st blocks the address.
        let mut statuses = Vec::new();
        for i in 0..21 {
            let user = format!("nobody-{last}-{i}");
            statuses.push(sign_in(&s, &caller, &user, "guess").await.as_u16());
        }
        assert_eq!(statuses, [400; 21], "from 127.0.0.{last}");
    }
    // The audit trail is written from a queue (every 100 ms): read it until both are there.
    let blocked = || {
        let audit = s.admin(&["audit", "--json"], None).unwrap();
        let mut blocked: Vec<String> = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["action"] == "login.backoff")
            .filter_map(|e| e["after"]["subject"]["address"].as_str().map(str::to_owned))
            .collect();
        blocked.sort();
        (blocked, audit)
    };
    e2e::wait::until(e2e::wait::LONG, async || blocked().0.len() >= 2).await;
    let (blocked, audit) = blocked();
    assert_eq!(blocked, ["127.0.0.2", "127.0.0.3"], "{audit}");
    // Each address is held on its own: the other one still gets a free failure.
    let third = s.client_from(loopback(4));
    assert_eq!(sign_in(&s, &third, "nobody-4", "guess").await, 400);
    assert_eq!(
        sign_in(&s, &s.client_from(loopback(2)), "nobody-2-x", "guess").await,
        429
    );
    assert!(s.stop());
}
