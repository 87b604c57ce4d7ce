//! The findings of the outside probe of the shipped stack, each replayed through the
//! real stack as the probe sent it. Every test here failed before its fix; `docs/threat-model.md`
//! says what each finding was and what is true now.

use crate::edge::client_token;
use crate::stack;
use e2e::raw::http_get;
use e2e::{demo, Stack, Tools, ADMIN_SOCKET};
use reqwest::StatusCode;
use serde_json::Value;
use shared::token::{self, Identity, SubjectKind, TokenBody};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;

/// A password grant through Envoy from `client`: the status.
async fn sign_in(s: &Stack, client: &reqwest::Client, user: &str, password: &str) -> StatusCode {
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

/// Finding 1 (high): `/apiv2/oauth/*` reached the media service without a token through
/// `envoy/minimal.yaml`, and `..;` slipped past the filter's own path parser.
#[tokio::test]
async fn no_path_reaches_the_media_service_without_a_token() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let (_minimal, port) = s.start_minimal_envoy().unwrap();
    let paths = [
        "/apiv2/oauth/anything",
        "/apiv2/oauth/token",
        "/apiv2/oauth/%2e%2e;/MediaService/Find",
        "/apiv2/oauth/..;/MediaService/Find",
        "/apiv2/oauth/%2e%2e/MediaService/Find",
    ];
    for path in paths {
        let a = http_get(port, path, &[]).await.unwrap();
        assert!(
            matches!(a.status, 400 | 401) && !a.from_media(),
            "minimal.yaml let {path} through: {a:?}"
        );
    }
    // It is checked, not closed: with a token the same paths reach the media service.
    let token = client_token(&s).await;
    let bearer = format!("Authorization: Bearer {token}");
    let a = http_get(port, "/apiv2/oauth/anything", &[&bearer])
        .await
        .unwrap();
    assert!(a.status == 200 && a.from_media(), "{a:?}");
    // The full stack routes /apiv2/oauth/ to the issuer, whatever follows; never to the media
    // service, and the filter is off on that route because Envoy's router chose it.
    for path in paths {
        let a = s.raw_get(path, &[]).await.unwrap();
        assert!(!a.from_media(), "{path} reached the media service: {a:?}");
    }
    let c = s.counters().await.unwrap();
    assert_eq!(c.get("exempt"), Some(&0), "{c:?}");
    assert!(s.stop());
}

/// The TCP ports process `pid` listens on, from `/proc`.
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut ports: Vec<u16> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, state 0A = LISTEN, inode.
            let listening =
                f.get(3) == Some(&"0A") && inodes.iter().any(|i| f.get(9) == Some(&i.as_str()));
            let port = f.get(1)?.rsplit(':').next()?;
            listening.then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Finding 2 (medium): the admin interface on TCP served the key to any local user, the demo's
/// configuration was world-readable, and a token claiming ten years was accepted.
#[tokio::test]
async fn the_key_stays_private_and_long_lived_forgeries_are_refused() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let (_, envoy) = s.pids();
    assert_eq!(
        listening_ports(envoy),
        vec![s.ports.listener],
        "Envoy listens on TCP for its listener only"
    );
    assert_eq!(mode(&s.dir.join(ADMIN_SOCKET)), 0o600, "admin socket");
    assert_eq!(mode(&s.dir.join("envoy.yaml")), 0o600, "envoy.yaml");
    let (status, dump) = s.envoy_admin("/config_dump").unwrap();
    assert_eq!(status, 200, "the owner still has the admin interface");
    assert!(dump.contains("mms_auth"));

    // A token minted with the real key, for an identity of the forger's choosing, claiming ten
    // years: refused by the maximum lifetime although its tag verifies.
    let cfg: Value =
        serde_json::from_str(&s.admin(&["keys", "filter-config"], None).unwrap()).unwrap();
    assert_eq!(cfg["max_token_lifetime_seconds"], 3600);
    let key = {
        use base64::Engine as _;
        let k = &cfg["keys"][0];
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(k["secret"].as_str().unwrap())
            .unwrap();
        shared::Key::from_slice(k["kid"].as_u64().unwrap() as u32, &secret).unwrap()
    };
    let now = e2e::unix_now();
    let forge = |lifetime: u64| {
        let body = TokenBody {
            kid: key.id(),
            jti: [0x42; 16],
            iat: now - 10,
            exp: now - 10 + lifetime,
            client: "root".into(),
            identity: Identity {
                kind: SubjectKind::User,
                subject: "admin".into(),
                roles: vec!["admin".into()],
                claims: vec![],
            },
        };
        token::mint(&key, &body).unwrap()
    };
    let call = |t: String| {
        s.client()
            .post(format!("{}/apiv2/MediaService/Find", s.url()))
            .bearer_auth(t)
            .body("{}")
            .send()
    };
    let r = call(forge(10 * 365 * 86_400)).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    // The same key within the issuer's lifetime passes: the refusal is the lifetime's.
    assert_eq!(call(forge(3600)).await.unwrap().status(), 200);
    assert!(s.stop());
}

/// Findings 3 and 4 (medium, low): `X_Auth_Roles` and other spellings, and `x-auth-*` names
/// beyond the seven the filter sets, reached the upstream.
#[tokio::test]
async fn no_spelling_of_an_identity_header_reaches_the_upstream() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let token = client_token(&s).await;
    let spoofed = [
        ("X_Auth_Roles", "admin"),
        ("x_auth_subject", "root"),
        ("x-auth_subject", "root"),
        ("X-Auth-Admin", "true"),
        ("x-auth-user", "root"),
        ("X-Auth-Subject-", "root"),
        ("x-auth", "root"),
    ];
    // HTTP/2 (the client's choice over TLS) and HTTP/1.1 on the wire.
    let mut req = s
        .client()
        .post(format!("{}/apiv2/MediaService/Find", s.url()))
        .bearer_auth(&token)
        .body("{}");
    for (n, v) in spoofed {
        req = req.header(n, v);
    }
    let seen: Value = req.send().await.unwrap().json().await.unwrap();
    let mut raw_headers: Vec<String> = spoofed.iter().map(|(n, v)| format!("{n}: {v}")).collect();
    raw_headers.push(format!("Authorization: Bearer {token}"));
    let raw_headers: Vec<&str> = raw_headers.iter().map(String::as_str).collect();
    let raw = s
        .raw_get("/apiv2/MediaService/Find", &raw_headers)
        .await
        .unwrap();
    let body = raw.text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let raw_seen: Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| panic!("{raw:?}"));
    for seen in [seen, raw_seen] {
        let mut names: Vec<&str> = seen["identity"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "x-auth-client",
                "x-auth-expires",
                "x-auth-subject",
                "x-auth-subject-kind",
                "x-auth-token-id"
            ],
            "only the filter's own headers: {seen}"
        );
        assert_eq!(seen["identity"]["x-auth-subject"], demo::CLIENT);
    }
    assert!(s.stop());
}

/// Finding 5 (low): after the free failures, a right password for a disabled user reset the
/// throttle, so the next answer (400 or 429) told whether the guess was right.
#[tokio::test]
async fn a_disabled_user_answers_like_a_wrong_password() {
    // A long first wait, so that the answer after the sixth guess cannot outlive it.
    let Some((_tmp, s)) = stack(&["--login-backoff-base", "60"]).await else {
        return;
    };
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

/// Finding 7 (low): anyone could keep a user's right password answered 429 by guessing wrong for
/// that user, and `X-Forwarded-For` was believed from any peer.
#[tokio::test]
async fn a_guesser_cannot_lock_out_a_user_signing_in_elsewhere() {
    let Some((_tmp, s)) = stack(&["--login-backoff-base", "60"]).await else {
        return;
    };
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

/// Finding 6 (low): client ids and user names went to the log unquoted, so a client id could plant
/// fields, U+2028 was written raw, and a log file got ANSI colour codes.
#[tokio::test]
async fn client_values_cannot_plant_log_fields() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let evil = "evil\" client=demo-app user=demo admin=true";
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(evil, Some("x"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Control characters are refused before anything is logged; U+2028 is not a control.
    let line_breaker = "eve\u{2028}user=demo admin=true\"";
    assert_eq!(sign_in(&s, &s.client(), line_breaker, "x").await, 400);
    let log = std::fs::read_to_string(s.dir.join("issuer.log")).unwrap();
    assert!(
        log.contains(r#"client="evil\" client=demo-app user=demo admin=true""#),
        "{log}"
    );
    assert!(
        log.contains(r#"user="eve\u{2028}user=demo admin=true\"""#),
        "{log}"
    );
    assert!(
        !log.contains('\u{2028}') && !log.contains('\u{1b}'),
        "{log}"
    );
    assert!(s.stop());

    // JSON logs: one object per line, values as sent.
    let tools = Tools::for_test().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let secret = e2e::provision(&tools, tmp.path(), &data).unwrap();
    let log = tmp.path().join("issuer.log");
    let (mut issuer, url) = e2e::start_issuer(
        &tools,
        &data,
        e2e::free_port(),
        &["--log-format", "json"],
        &log,
    )
    .unwrap();
    let http = reqwest::Client::new();
    for (id, user) in [(evil, demo::USER), (demo::CLIENT, line_breaker)] {
        let secret = if id == demo::CLIENT {
            secret.as_str()
        } else {
            "x"
        };
        http.post(format!("{url}/apiv2/oauth/token"))
            .basic_auth(id, Some(secret))
            .form(&[
                ("grant_type", "password"),
                ("username", user),
                ("password", "x"),
            ])
            .send()
            .await
            .unwrap();
    }
    assert!(issuer.stop());
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.iter().any(|l| l["client"] == evil), "{lines:?}");
    assert!(lines.iter().any(|l| l["user"] == line_breaker), "{lines:?}");
}

/// Finding 8 (info): the metadata named the internal address as the issuer.
#[tokio::test]
async fn the_metadata_names_the_public_url() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let m: Value = s
        .client()
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            s.url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["issuer"], s.url());
    assert_eq!(
        m["token_endpoint"],
        format!("{}/apiv2/oauth/token", s.url())
    );
    assert!(s.stop());
}
