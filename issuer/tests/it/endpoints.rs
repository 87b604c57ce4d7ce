//! Revocation, introspection, metadata, health and metrics; HTTPS; the routes without sockets.

use super::*;

#[tokio::test]
async fn revocation_and_introspection() {
    let f = fixture();
    let other = add_client(&f.dir, "other", &["--grants", "password"]);
    let s = Server::start(&f.dir, &[]);
    let a = password_grant(&s, &f).await;
    let rt = a.json["refresh_token"].as_str().unwrap().to_owned();
    let introspect = format!("{}/apiv2/oauth/introspect", s.url);
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    let i = post(&introspect, f.app(), &[("token", &rt)]).await;
    assert_eq!(
        (i.json["active"].clone(), i.json["username"].clone()),
        (Value::Bool(true), Value::from("alice"))
    );
    assert_eq!(
        post(&introspect, Some(("other", &other)), &[("token", &rt)])
            .await
            .json["active"],
        false
    );
    assert_eq!(
        post(&introspect, f.app(), &[("token", "garbage")])
            .await
            .json,
        serde_json::json!({"active": false})
    );
    assert_error(
        &post(&introspect, None, &[("token", &rt)]).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&revoke, Some(("other", &other)), &[("token", &rt)]).await,
        400,
        "unauthorized_client",
    );
    let r = post(&revoke, f.app(), &[("token", &rt)]).await;
    assert_eq!(r.status, 200);
    assert_oauth_headers(&r);
    assert_error(&refresh(&s, &f, &rt).await, 400, "invalid_grant");
    assert_eq!(
        post(&introspect, f.app(), &[("token", &rt)]).await.json["active"],
        false
    );
    assert_eq!(
        post(&revoke, f.app(), &[("token", "unknown")]).await.status,
        200
    );
    assert_error(&post(&revoke, f.app(), &[]).await, 400, "invalid_request");

    // A token made with the issuer's own key but a lifetime it never grants (a stolen key) is not
    // active; within the access token lifetime it is.
    let ring = ring(&f.dir);
    let forged = |lifetime: u64| {
        let body = token::TokenBody {
            kid: ring.keys()[0].id(),
            jti: [9; 16],
            iat: now() - 5,
            exp: now() - 5 + lifetime,
            client: "app".into(),
            identity: token::Identity {
                kind: SubjectKind::User,
                subject: "root".into(),
                roles: vec!["admin".into()],
                claims: vec![],
            },
            cnf: None,
            act: None,
        };
        token::mint(&ring.keys()[0], &body).unwrap()
    };
    for (lifetime, active) in [(10 * 365 * 86_400, false), (3600, true)] {
        let t = forged(lifetime);
        let i = post(&introspect, f.app(), &[("token", &t)]).await;
        assert_eq!(i.json["active"], active, "lifetime {lifetime}");
    }
}

/// Waits until the next whole second: a revocation covers tokens issued in its own second.
async fn next_second() {
    e2e::wait::next_second().await;
}

#[tokio::test]
async fn access_tokens_are_revoked_by_request_and_by_admin_changes() {
    let f = fixture();
    let other = add_client(&f.dir, "other", &["--grants", "client_credentials"]);
    let mut s = Server::start(&f.dir, &[]);
    let introspect = format!("{}/apiv2/oauth/introspect", s.url);
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    let as_other = Some(("other", other.as_str()));
    let active = |token: String| {
        let url = introspect.clone();
        async move { post(&url, as_other, &[("token", &token)]).await.json["active"] == true }
    };
    let access = |a: &Answer| a.json["access_token"].as_str().unwrap().to_owned();

    // RFC 7009 for an access token: only its client may revoke it; then it is inactive.
    let first = access(&password_grant(&s, &f).await);
    let kept = access(&password_grant(&s, &f).await);
    assert!(active(first.clone()).await);
    assert_error(
        &post(&revoke, as_other, &[("token", &first)]).await,
        400,
        "unauthorized_client",
    );
    assert!(active(first.clone()).await);
    let r = post(&revoke, f.app(), &[("token", &first)]).await;
    assert_eq!(r.status, 200);
    assert!(!active(first.clone()).await, "revoked");
    assert!(
        active(kept.clone()).await,
        "another token of the same user is not"
    );

    // Revoking a refresh token revokes the access tokens of its family, and only those.
    let grant = password_grant(&s, &f).await;
    let family_token = access(&grant);
    let refresh = grant.json["refresh_token"].as_str().unwrap().to_owned();
    assert!(active(family_token.clone()).await);
    let r = post(&revoke, f.app(), &[("token", &refresh)]).await;
    assert_eq!(r.status, 200);
    assert!(!active(family_token).await, "its family was revoked");
    assert!(active(kept.clone()).await, "another family's token is not");

    // Disabling the user revokes every token issued before; enabling does not bring them back,
    // and new ones work.
    admin(&f.dir, &["user", "disable", "alice"], None);
    assert!(!active(kept.clone()).await, "the user was disabled");
    admin(&f.dir, &["user", "enable", "alice"], None);
    assert!(!active(kept.clone()).await);
    next_second().await;
    let fresh = access(&password_grant(&s, &f).await);
    assert!(active(fresh.clone()).await);

    // A new password, then deactivating the client: the same.
    admin(&f.dir, &["user", "passwd", "alice"], Some("alice-pw"));
    assert!(!active(fresh).await, "a new password");
    next_second().await;
    let cc = post(
        &s.token_url(),
        f.app(),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let cc = access(&cc);
    assert!(active(cc.clone()).await);
    admin(&f.dir, &["client", "deactivate", "app"], None);
    assert!(!active(cc.clone()).await, "the client was deactivated");

    // Revocations are durable: a restarted issuer still refuses.
    s.kill9_and_restart();
    let introspect = format!("{}/apiv2/oauth/introspect", s.url);
    for t in [&first, &kept, &cc] {
        let i = post(&introspect, as_other, &[("token", t)]).await;
        assert_eq!(i.json["active"], false);
    }
}

async fn edge_feed(s: &Server, auth: Option<(&str, &str)>, query: &str) -> (Answer, usize) {
    let mut req = reqwest::Client::new().get(format!("{}/apiv2/oauth/edge{query}", s.url));
    if let Some((id, secret)) = auth {
        req = req.basic_auth(id, Some(secret));
    }
    let resp = req.send().await.unwrap();
    let len = resp.content_length().unwrap_or(0) as usize;
    (answer(resp).await, len)
}

#[tokio::test]
async fn the_edge_feed_serves_keys_and_revocations_to_edge_clients_only() {
    let f = fixture();
    let edge = add_client(&f.dir, "edge", &["--edge"]);
    let mut s = Server::start(&f.dir, &[]);
    let as_edge = Some(("edge", edge.as_str()));
    step_only_an_edge_client_reads_the_feed(&s, &f, &edge).await;
    let version = step_the_first_fetch_is_a_full_snapshot(&s, &f, as_edge).await;
    let jti = step_revocations_come_after_the_cursor(&s, &f, as_edge, &version).await;
    // A rotated key changes the version; the edge holding the old one gets the new ring.
    admin(&f.dir, &["keys", "rotate"], None);
    let (rotated, _) = edge_feed(&s, as_edge, &format!("?since=1&keys={version}")).await;
    assert_ne!(rotated.json["keys_version"], version.as_str());
    assert_eq!(rotated.json["keys"].as_array().unwrap().len(), 2);
    // The feed is the store's: the same after a restart.
    s.kill9_and_restart();
    let (after, _) = edge_feed(&s, as_edge, "?since=0").await;
    assert_eq!(after.json["revoked"][0]["jti"], jti.as_str());
    assert_eq!(after.json["keys_version"], rotated.json["keys_version"]);
    step_a_revoked_family_appears_once(&s, &f, as_edge).await;
}

/// Step: no credential is 401, a client without `--edge` 403, a request a proxy relayed 403
/// whatever its credential; an edge client gets no token.
async fn step_only_an_edge_client_reads_the_feed(s: &Server, f: &Fixture, edge: &str) {
    assert_error(&edge_feed(s, None, "").await.0, 401, "invalid_client");
    let (not_edge, _) = edge_feed(s, f.app(), "").await;
    assert_eq!(
        (not_edge.status.as_u16(), &not_edge.json["error"]),
        (403, &Value::from("access_denied"))
    );
    // A request a proxy relayed is refused whatever its credential and peer, for every header
    // that says so (any one of them), and the refusal is logged with the header's name.
    for name in shared::edge_feed::RELAY_HEADERS {
        let r = reqwest::Client::new()
            .get(format!("{}/apiv2/oauth/edge", s.url))
            .basic_auth("edge", Some(edge))
            .header(name, "203.0.113.9")
            .send()
            .await
            .unwrap();
        let refused = answer(r).await;
        assert_error(&refused, 403, "access_denied");
        let why = refused.json["error_description"].as_str().unwrap();
        assert!(why.contains("proxy"), "{name}: {why}");
    }
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    for name in shared::edge_feed::RELAY_HEADERS {
        assert!(
            log.lines()
                .any(|l| l.contains("came through a proxy") && l.contains(name)),
            "no refusal logged for {name}"
        );
    }
    // An edge client cannot get tokens: it has no grant.
    let t = post(
        &s.token_url(),
        Some(("edge", edge)),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_error(&t, 400, "unauthorized_client");
}

/// Step: the first fetch is a full snapshot: the key ring and every revocation in force. The
/// key ring's version.
async fn step_the_first_fetch_is_a_full_snapshot(
    s: &Server,
    f: &Fixture,
    as_edge: Option<(&str, &str)>,
) -> String {
    let (full, _) = edge_feed(s, as_edge, "").await;
    assert_eq!(full.status, 200, "{}", full.json);
    assert_oauth_headers(&full);
    let ring = ring(&f.dir);
    assert_eq!(full.json["keys"][0]["kid"], ring.keys()[0].id());
    assert_eq!(full.json["max_token_lifetime_seconds"], 3600);
    assert_eq!(full.json["cursor"], 0);
    assert_eq!(full.json["full"], true);
    assert_eq!(full.json["revoked"], serde_json::json!([]));
    full.json["keys_version"].as_str().unwrap().to_owned()
}

/// Step: a revocation appears after the cursor, without the unchanged keys; the cursor's stamp
/// proves its history; a bad cursor is refused. The revoked token's id.
async fn step_revocations_come_after_the_cursor(
    s: &Server,
    f: &Fixture,
    as_edge: Option<(&str, &str)>,
    version: &str,
) -> String {
    // A revocation appears after the cursor; the keys are not sent again while unchanged.
    let access = password_grant(s, f).await.json["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    assert_eq!(
        post(&revoke, f.app(), &[("token", &access)]).await.status,
        200
    );
    // A repeated revocation records nothing more.
    assert_eq!(
        post(&revoke, f.app(), &[("token", &access)]).await.status,
        200
    );
    let jti = token::inspect(&access).unwrap().jti_hex();
    let (next, _) = edge_feed(s, as_edge, &format!("?since=0&keys={version}")).await;
    assert_eq!(next.json["cursor"], 1);
    assert!(
        next.json.get("full").is_none(),
        "an answer after a cursor is not a snapshot"
    );
    assert_eq!(next.json["revoked"][0]["kind"], "token");
    assert_eq!(next.json["revoked"][0]["jti"], jti.as_str());
    assert_eq!(next.json["revoked"][0]["seq"], 1);
    assert!(next.json.get("keys").is_none());
    // Nothing new: a tiny answer.
    let (idle, len) = edge_feed(s, as_edge, &format!("?since=1&keys={version}")).await;
    assert_eq!(idle.json["revoked"], serde_json::json!([]));
    assert!(len < 200, "a poll with nothing new is {len} bytes");
    // The cursor's stamp proves its history: sent back, the answer goes on from it; another
    // stamp for the same number is another history (a restored store) and gets a snapshot.
    let stamp = next.json["cursor_stamp"].as_str().unwrap().to_owned();
    assert_eq!(idle.json["cursor_stamp"], stamp.as_str());
    assert!(stamp.len() == 16 && stamp.bytes().all(|c| c.is_ascii_hexdigit()));
    let (same, _) = edge_feed(s, as_edge, &format!("?since=1.{stamp}&keys={version}")).await;
    assert_eq!(
        (same.json["cursor"].as_u64(), same.json.get("full")),
        (Some(1), None)
    );
    let other = if stamp == "0000000000000000" {
        "0000000000000001"
    } else {
        "0000000000000000"
    };
    let (snapshot, _) = edge_feed(s, as_edge, &format!("?since=1.{other}&keys={version}")).await;
    assert_eq!(snapshot.json["full"], true);
    assert_eq!(snapshot.json["revoked"][0]["jti"], jti.as_str());
    assert_eq!(snapshot.json["cursor_stamp"], stamp.as_str());
    // A revocation number is ASCII digits: not `+5`, which Rust's integer parser would take.
    for bad in [
        "?since=one",
        "?since=%2B5",
        "?since=+5",
        "?since=%205",
        "?since=1.zz",
        "?since=1.",
    ] {
        assert_error(&edge_feed(s, as_edge, bad).await.0, 400, "invalid_request");
    }
    jti
}

/// Step: a revoked refresh token family appears once, however often it is revoked.
async fn step_a_revoked_family_appears_once(
    s: &Server,
    f: &Fixture,
    as_edge: Option<(&str, &str)>,
) {
    let grant = password_grant(s, f).await;
    let refresh = grant.json["refresh_token"].as_str().unwrap().to_owned();
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    for _ in 0..3 {
        assert_eq!(
            post(&revoke, f.app(), &[("token", &refresh)]).await.status,
            200
        );
    }
    let (snapshot, _) = edge_feed(s, as_edge, "").await;
    let families: Vec<_> = snapshot.json["revoked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "family")
        .collect();
    assert_eq!(families.len(), 1, "{}", snapshot.json);
    let access = grant.json["access_token"].as_str().unwrap();
    let tag = &token::inspect(access).unwrap().jti_hex()[..16];
    assert_eq!(
        families[0]["tag"], tag,
        "the access token's id begins with the tag"
    );
}

/// The issuer's `/metrics` page.
async fn metrics(s: &Server) -> String {
    reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The issuer's metrics once `pred` holds of its `issuer_feed_waiting`.
async fn feed_waiting_until(s: &Server, what: &str, pred: impl Fn(u64) -> bool) -> String {
    let waiting = |text: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix("issuer_feed_waiting ")?.trim().parse().ok())
    };
    let held = e2e::wait::until_some(e2e::wait::LONG, async || {
        let text = metrics(s).await;
        waiting(&text).is_some_and(&pred).then_some(text)
    });
    match held.await {
        Some(text) => text,
        None => panic!(
            "{what}: issuer_feed_waiting {:?}",
            waiting(&metrics(s).await)
        ),
    }
}

/// An edge feed request held for news gives its place back as soon as its edge closes the
/// connection, not when its wait (300 s here, far beyond how long the test waits) ends: the
/// issuer drops a request whose connection closed. With one place per edge client, the next request is held again at once, not busy.
#[tokio::test]
async fn a_held_feed_request_gives_its_place_back_when_its_connection_closes() {
    use base64::Engine as _;
    use tokio::io::AsyncWriteExt;
    let f = fixture();
    let edge = add_client(&f.dir, "edge", &["--edge"]);
    let s = Server::start(
        &f.dir,
        &[
            "--feed-max-wait-seconds",
            "300",
            "--feed-max-waiting-per-client",
            "1",
        ],
    );
    let (first, _) = edge_feed(&s, Some(("edge", &edge)), "").await;
    assert_eq!(first.status, 200, "{}", first.json);
    let held = format!(
        "GET /apiv2/oauth/edge?since={}&keys={}&wait=300 HTTP/1.1\r\nHost: issuer\r\n\
         Authorization: Basic {}\r\n\r\n",
        first.json["cursor"],
        first.json["keys_version"].as_str().unwrap(),
        base64::engine::general_purpose::STANDARD.encode(format!("edge:{edge}")),
    );
    let addr = s.url.trim_start_matches("http://").to_owned();
    for round in ["first", "second"] {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        conn.write_all(held.as_bytes()).await.unwrap();
        let m = feed_waiting_until(&s, round, |n| n == 1).await;
        assert!(
            !m.contains(r#"issuer_feed_waits_total{result="busy"}"#),
            "{round}: {m}"
        );
        drop(conn);
        feed_waiting_until(&s, round, |n| n == 0).await;
    }
}

#[tokio::test]
async fn metadata_health_and_metrics() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let m: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["issuer"], s.url.as_str());
    assert_eq!(m["token_endpoint"], format!("{}/apiv2/oauth/token", s.url));
    assert_eq!(
        m["revocation_endpoint"],
        format!("{}/apiv2/oauth/revoke", s.url)
    );
    assert_eq!(
        m["introspection_endpoint"],
        format!("{}/apiv2/oauth/introspect", s.url)
    );
    assert_eq!(
        m["grant_types_supported"],
        serde_json::json!([
            "password",
            "refresh_token",
            "client_credentials",
            "urn:ietf:params:oauth:grant-type:token-exchange"
        ])
    );
    let h = reqwest::get(format!("{}/healthz", s.url)).await.unwrap();
    assert_eq!(h.status(), 200);
    password_grant(&s, &f).await;
    post(&s.token_url(), None, &[("grant_type", "password")]).await;
    let text = metrics(&s).await;
    assert!(
        text.contains(
            r#"issuer_oauth_requests_total{endpoint="token",grant="password",outcome="ok"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"outcome="invalid_client""#), "{text}");
    assert!(
        text.contains("issuer_token_request_duration_seconds_count"),
        "{text}"
    );
}

#[tokio::test]
async fn serves_https_with_its_own_certificate() {
    let f = fixture();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_path = f.dir.with_extension("crt");
    let key_path = f.dir.with_extension("key");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    e2e::write_private(&key_path, cert.key_pair.serialize_pem().as_bytes()).unwrap();
    let s = Server::start(
        &f.dir,
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let port = s.url.rsplit(':').next().unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .resolve("localhost", format!("127.0.0.1:{port}").parse().unwrap())
        .build()
        .unwrap();
    let resp = client
        .post(format!("https://localhost:{port}/apiv2/oauth/token"))
        .basic_auth("app", Some(&f.secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    let a = answer(resp).await;
    assert_eq!(a.status, 200, "{}", a.json);
    // Plain HTTP on the TLS port is refused, not served.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

#[tokio::test]
async fn routes_without_sockets() {
    use issuer::store::RefreshPolicy;
    let tmp = tempfile::tempdir().unwrap();
    let refresh = RefreshPolicy {
        idle_ttl: 60,
        absolute_ttl: 600,
        retry_window: 5,
    };
    let app = super::socketless_app(tmp.path(), refresh).await;
    let routes = issuer::http::routes(app);
    let r = warp::test::request()
        .method("GET")
        .path("/.well-known/oauth-authorization-server")
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 200);
    let m: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(
        m["token_endpoint"],
        "https://issuer.example/apiv2/oauth/token"
    );
    let r = warp::test::request()
        .method("DELETE")
        .path("/apiv2/oauth/revoke")
        .reply(&routes)
        .await;
    assert_eq!(
        (r.status().as_u16(), r.headers()["allow"].to_str().unwrap()),
        (405, "POST")
    );
    let r = warp::test::request()
        .method("POST")
        .path("/apiv2/oauth/token")
        .body(vec![b'a'; 17 * 1024])
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 413);
    let r = warp::test::request()
        .method("POST")
        .path("/apiv2/oauth/token")
        .body("grant_type=client_credentials")
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["content-type"],
        "application/json;charset=UTF-8"
    );
    let r = warp::test::request().path("/nope").reply(&routes).await;
    assert_eq!(r.status(), 404);
    // The edge feed holds keys: over plain HTTP it answers loopback peers only, before it even
    // looks at the credential.
    for (peer, status) in [("10.0.0.7:5000", 403), ("127.0.0.1:5000", 401)] {
        let r = warp::test::request()
            .method("GET")
            .path("/apiv2/oauth/edge")
            .remote_addr(peer.parse().unwrap())
            .reply(&routes)
            .await;
        assert_eq!(r.status(), status, "from {peer}");
    }
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    assert_eq!(password_grant(&s, &f).await.status, 200);
    let mut child = s.take_child();
    assert!(f.dir.join("admin.sock").exists());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(!f.dir.join("admin.sock").exists(), "socket left behind");
    // The data dir is free again: an offline admin command opens it directly.
    assert!(admin(&f.dir, &["user", "list"], None).contains("alice"));
}
