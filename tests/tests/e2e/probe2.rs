//! Findings of the second outside probe of the shipped stack that live in the issuer,
//! each replayed through the real stack as the probe sent it. Every test here failed before its
//! fix; `docs/threat-model.md` says what each finding was and what is true now.

use crate::edge::{
    access, call, counters, edge_stack, password, refused_everywhere, token_as, token_request,
};
use e2e::{demo, Options, Stack, Tools};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

/// GET the edge feed straight from the first issuer (a loopback peer) as `client`.
async fn feed_direct(s: &Stack, client: (&str, &str), headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(format!("{}/apiv2/oauth/edge", s.issuer_url()))
        .basic_auth(client.0, Some(client.1));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Finding 2 (medium): with write access to the database alone (no key-encryption key) a client
/// could be made an edge client or an impersonator, and one user's password hash copied into
/// another's record. Every such record is now refused as tampered, and the cluster asks for a
/// password even on loopback.
#[tokio::test]
async fn database_writes_alone_grant_no_power() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        postgres: true,
        ..Options::default()
    };
    let mut s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    let grants = ["--grants", "client_credentials"];
    let plain = e2e::issuer::add_client(&s.tools, &s.store, "plain-app", &grants).unwrap();
    s.admin(&["user", "add", "victim"], Some("victim-password"))
        .unwrap();
    // Everyone starts out fine.
    let (status, _) = token_request(
        &s,
        ("plain-app", &plain),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(feed_direct(&s, ("plain-app", &plain), &[]).await.0, 403);

    let pg = s.postgres().unwrap();
    // The probe's writes, as the database's owner.
    pg.psql(
        "UPDATE clients SET record = jsonb_set(record::jsonb, '{edge}', 'true')::text \
         WHERE id = 'plain-app'",
    )
    .unwrap();
    pg.psql(
        "UPDATE clients SET record = jsonb_set(record::jsonb, '{impersonate}', 'true')::text \
         WHERE id = 'plain-app'",
    )
    .unwrap();
    pg.psql(
        "UPDATE users SET record = jsonb_set(record::jsonb, '{password_hash}', \
         (SELECT record::jsonb -> 'password_hash' FROM users WHERE name = 'demo'))::text \
         WHERE name = 'victim'",
    )
    .unwrap();
    // Past the issuers' client cache.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let (status, body) = feed_direct(&s, ("plain-app", &plain), &[]).await;
    assert_ne!(status, 200, "a tampered client read the edge feed: {body}");
    assert!(!body.contains("\"keys\""), "{body}");
    let (status, v) = token_request(
        &s,
        ("plain-app", &plain),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", demo::USER),
            ("roles", "admin"),
        ],
    )
    .await;
    assert_ne!(status, 200, "a tampered client impersonated: {v}");
    assert_eq!(status, 401, "{v}");
    let victim = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[
            ("grant_type", "password"),
            ("username", "victim"),
            ("password", demo::PASSWORD),
        ])
        .send()
        .await
        .unwrap();
    let status = victim.status();
    let body = victim.text().await.unwrap();
    assert_eq!(status, 400, "signed in with a copied hash: {body}");
    assert!(body.contains("invalid_grant"), "{body}");
    // Both issuers' logs: Envoy sends a sign-in to either.
    let logs: String = ["issuer.log", "issuer2.log"]
        .iter()
        .map(|f| std::fs::read_to_string(s.dir.join(f)).unwrap_or_default())
        .collect();
    for name in ["plain-app", "victim"] {
        assert!(
            logs.lines()
                .any(|l| l.contains("tampered") && l.contains(name)),
            "tampering with {name} is logged:\n{logs}"
        );
    }
    // Untouched records still work. A change through the issuer never gives a tampered record a
    // valid MAC: it is refused, and the record can be removed and added again.
    password(&s, demo::USER, demo::PASSWORD).await;
    let e = s
        .admin(&["user", "passwd", "victim"], Some("victim-password-2"))
        .unwrap_err();
    assert!(format!("{e:#}").contains("tampered"), "{e:#}");
    s.admin(&["user", "remove", "victim"], None).unwrap();
    s.admin(&["user", "add", "victim"], Some("victim-password-2"))
        .unwrap();
    // The removal revokes the name's tokens of its whole second (revocations count in seconds):
    // the user added again signs in from the next one (`docs/issuer.md`, `user remove`).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    password(&s, "victim", "victim-password-2").await;
    let pg = s.postgres().unwrap();
    // The cluster refuses a connection without the password (its socket is in its 0700 dir).
    let no_password = std::process::Command::new(pg.bin_dir().join("psql"))
        .arg(format!("postgres://app@127.0.0.1:{}/postgres", pg.port()))
        .args(["-w", "-Atc", "SELECT 1"])
        .env_remove("PGPASSWORD")
        .output()
        .unwrap();
    assert!(
        !no_password.status.success(),
        "the cluster let a local user in without a password"
    );
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(pg.data_dir()), 0o700, "the cluster's files");
    assert!(s.stop());
}

/// Finding 4 (low): a token revoked after its `exp` but inside the edges' clock skew answered 200
/// and recorded nothing, and kept passing Envoy until the skew ran out.
#[tokio::test]
async fn revoking_inside_the_clock_skew_is_recorded() {
    let Some(tools) = Tools::for_test() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        issuer_args: vec!["--access-ttl".into(), "2".into()],
        ..Options::default()
    };
    let s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    crate::edge::wait_for_sync(&s).await;
    let token = access(
        &token_as(
            &s,
            (demo::CLIENT, &s.secret),
            &[("grant_type", "client_credentials")],
        )
        .await,
    );
    // Past its expiry, inside the filter's 30 s skew: still accepted, as configured.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(call(&s, &token).await.0, 200);
    let start = Instant::now();
    crate::edge::revoke(&s, &token).await;
    refused_everywhere(&s, &token, start, "a token revoked inside the skew").await;
    assert!(s.stop());
}

/// Finding 5 (low): the edge feed, with every key, answered through Envoy's public listener, where
/// the issuer saw Envoy's loopback address. The shipped configuration no longer routes it, and the
/// issuer refuses a feed request that came through a proxy, while the edges' own polls go on.
#[tokio::test]
async fn the_edge_feed_is_not_served_through_a_proxy() {
    let Some((_tmp, s)) = edge_stack().await else {
        return;
    };
    let secret = s.edge_secret.clone().unwrap();
    let through_envoy = s
        .client()
        .get(format!("{}/apiv2/oauth/edge", s.url()))
        .basic_auth(demo::EDGE_CLIENT, Some(&secret))
        .send()
        .await
        .unwrap();
    let status = through_envoy.status();
    let body = through_envoy.text().await.unwrap();
    assert_ne!(status, 200, "the feed answered through Envoy: {body}");
    assert!(!body.contains("\"keys\""), "{body}");
    for header in [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("via", "1.1 envoy"),
        ("x-forwarded-proto", "https"),
    ] {
        let (status, body) = feed_direct(&s, (demo::EDGE_CLIENT, &secret), &[header]).await;
        assert_eq!(status, 403, "{header:?}: {body}");
        assert!(body.contains("proxy"), "{body}");
    }
    // What Envoy's own HTTP client adds to a native module's poll, had the feed's cluster
    // (`issuer_feed`) not stripped it: refused as well.
    let envoys_own = [
        ("x-envoy-internal", "true"),
        ("x-forwarded-for", "127.0.0.1"),
    ];
    let (status, body) = feed_direct(&s, (demo::EDGE_CLIENT, &secret), &envoys_own).await;
    assert_eq!(status, 403, "{body}");
    // The edges' own polls, through the `issuer_feed` cluster, still succeed.
    let before = counters(&s).await.get("edge_sync_ok").copied().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = counters(&s).await.get("edge_sync_ok").copied().unwrap_or(0);
    assert!(after > before, "edge sync stopped: {before} -> {after}");
    assert_eq!(
        feed_direct(&s, (demo::EDGE_CLIENT, &secret), &[]).await.0,
        200
    );
    // The logs name users and clients: only the stack's owner reads them (an info finding).
    for log in ["issuer.log", "envoy.log"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(s.dir.join(log)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{log}");
    }
    assert!(s.stop());
}

/// Finding 7 (low): one client recorded 613 revocations a second, each growing every snapshot and
/// every filter VM. A client's revocations are now bounded in rate: beyond its burst the revoke
/// endpoint answers 429 with `Retry-After` and records nothing.
#[tokio::test]
async fn one_client_cannot_record_revocations_without_bound() {
    let Some((_tmp, s)) = edge_stack().await else {
        return;
    };
    let app = ("flood-app", crate::edge::add_client(&s, "flood-app"));
    let mut tokens = Vec::new();
    for _ in 0..80 {
        let (status, v) =
            token_request(&s, (app.0, &app.1), &[("grant_type", "client_credentials")]).await;
        assert_eq!(status, 200, "{v}");
        tokens.push(access(&v));
    }
    let http = s.client();
    let (mut recorded, mut throttled) = (0, 0);
    let mut last_refused = None;
    for t in &tokens {
        let r = http
            .post(format!("{}/apiv2/oauth/revoke", s.url()))
            .basic_auth(app.0, Some(&app.1))
            .form(&[("token", t.as_str())])
            .send()
            .await
            .unwrap();
        match r.status() {
            StatusCode::OK => recorded += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(r.headers().contains_key("retry-after"));
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"], "slow_down", "{v}");
                throttled += 1;
                last_refused = Some(t.clone());
            }
            other => panic!("revoke answered {other}"),
        }
    }
    assert!(throttled > 0, "80 revocations in a burst, none refused");
    assert!((1..=70).contains(&recorded), "{recorded} recorded");
    // What was refused was not recorded: that token still passes the edge.
    let refused = last_refused.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(call(&s, &refused).await.0, 200);
    // Another client is not held back by this one.
    let token = access(
        &token_as(
            &s,
            (demo::CLIENT, &s.secret),
            &[("grant_type", "client_credentials")],
        )
        .await,
    );
    let start = Instant::now();
    crate::edge::revoke(&s, &token).await;
    refused_everywhere(&s, &token, start, "another client's revocation").await;
    assert!(s.stop());
}

/// Finding 8 (low): after `keys rotate --delay 86400`, neither `keys rotate --delay 0` nor
/// `keys retire` was accepted, so a compromised key kept verifying for up to a day. Now a new key
/// signs at once whatever is pending (the pending key is dropped), and the old one is retired at
/// every issuer and edge.
#[tokio::test]
async fn a_compromised_key_is_cut_at_once_while_a_rotation_is_pending() {
    let Some((_tmp, s)) = edge_stack().await else {
        return;
    };
    let old = access(&password(&s, demo::USER, demo::PASSWORD).await);
    assert_eq!(call(&s, &old).await.0, 200);
    let kid = |t: &str| shared::token::inspect(t).unwrap().kid;
    let old_kid = kid(&old);
    s.admin(&["keys", "rotate", "--delay", "86400"], None)
        .unwrap();
    let pending_kid = old_kid + 1;
    let out = s
        .admin(&["keys", "rotate", "--delay", "0"], None)
        .expect("an emergency rotation is accepted while one is pending");
    assert!(out.contains("now signs"), "{out}");
    let list = s.admin(&["keys", "list"], None).unwrap();
    let state_of = |list: &str, kid: u32| {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(&kid.to_string()))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(str::to_owned)
    };
    assert_ne!(
        state_of(&list, pending_kid).as_deref(),
        Some("pending"),
        "{list}"
    );
    // The new key signs at once.
    let fresh = access(&password(&s, demo::USER, demo::PASSWORD).await);
    assert!(kid(&fresh) > pending_kid, "{list}");
    // The old key is cut: refused at every issuer and edge.
    let start = Instant::now();
    s.admin(&["keys", "retire", &old_kid.to_string()], None)
        .expect("the superseded key retires");
    refused_everywhere(&s, &old, start, "a token of the retired key").await;
    assert_eq!(call(&s, &fresh).await.0, 200);
    // The dropped pending key never signs, and leaves the edges' ring.
    let later = s.admin(&["keys", "list"], None).unwrap();
    assert!(
        matches!(
            state_of(&later, pending_kid).as_deref(),
            None | Some("retired")
        ),
        "{later}"
    );
    assert!(s.stop());
}
