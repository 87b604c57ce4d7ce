//! What the admin listener refuses: tokens (401 with a DPoP challenge), a token older than
//! `token_max_age`, the console's sign-in anywhere but its own listener and origin, and bad
//! input, which changes nothing.

use super::*;

#[tokio::test]
async fn refused_tokens_get_401_with_a_dpop_challenge() {
    let s = start();
    let root = s.sign_in("root").await;
    let me = format!("{}/apiv2/admin/me", s.url);
    let unauthorized = |a: &Answer, why: &str| {
        assert_eq!(a.status, 401, "{why}: {}", a.json);
        assert_eq!(a.json["error"], "invalid_token", "{why}");
        let challenge = a.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("DPoP error="), "{why}: {challenge}");
        assert_admin_headers(a);
    };
    // No Authorization; the Bearer scheme, even with a proof.
    let a = answer(s.http.get(&me).send().await.unwrap()).await;
    unauthorized(&a, "missing");
    let a = answer(
        s.http
            .get(&me)
            .header("authorization", format!("Bearer {}", root.token))
            .header("dpop", proof(&root.key, "GET", &me, Some(&root.token)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    unauthorized(&a, "bearer");
    // A replayed proof: the same proof twice.
    let p = proof(&root.key, "GET", &me, Some(&root.token));
    let send = |p: String| {
        s.http
            .get(&me)
            .header("authorization", format!("DPoP {}", root.token))
            .header("dpop", p)
            .send()
    };
    assert_eq!(send(p.clone()).await.unwrap().status(), 200);
    unauthorized(&answer(send(p).await.unwrap()).await, "replayed");
    // A proof by another key than the token's.
    let other = key();
    let a = answer(
        s.http
            .get(&me)
            .header("authorization", format!("DPoP {}", root.token))
            .header("dpop", proof(&other, "GET", &me, Some(&root.token)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    unauthorized(&a, "another key");
    // Unbound: a Bearer token of `ops` (a client in `clients`), sent with a proof.
    let unbound = Caller {
        token: password_token(&s, "ops", "root", None).await,
        key: key(),
    };
    let a = s.call(&unbound, "GET", "/apiv2/admin/me", None, None).await;
    unauthorized(&a, "unbound");
    // Bound, of `ops` (accepted), and of `other` (not in `clients`).
    let ops = bound_caller(&s, "ops", "root").await;
    assert_eq!(
        s.call(&ops, "GET", "/apiv2/admin/me", None, None)
            .await
            .status,
        200
    );
    let other = bound_caller(&s, "other", "root").await;
    unauthorized(
        &s.call(&other, "GET", "/apiv2/admin/me", None, None).await,
        "client",
    );
    // Revoked (RFC 7009 at the main listener), and a disabled user.
    let a = post(
        &format!("{}/apiv2/oauth/revoke", s.main),
        Some(("ops", &s.secrets["ops"])),
        &[("token", &ops.token)],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    unauthorized(
        &s.call(&ops, "GET", "/apiv2/admin/me", None, None).await,
        "revoked",
    );
    let alice = s.sign_in("admin-read").await;
    admin(&s.dir, &["user", "disable", "admin-read"], None);
    unauthorized(
        &s.call(&alice, "GET", "/apiv2/admin/me", None, None).await,
        "disabled",
    );
}

#[tokio::test]
async fn a_token_older_than_token_max_age_is_refused() {
    let s = start_with(3);
    // A token of `ops` lives the main listener's access_ttl, longer than token_max_age.
    let ops = bound_caller(&s, "ops", "root").await;
    assert_eq!(
        s.call(&ops, "GET", "/apiv2/admin/me", None, None)
            .await
            .status,
        200
    );
    std::thread::sleep(Duration::from_secs(5));
    let a = s.call(&ops, "GET", "/apiv2/admin/me", None, None).await;
    assert_eq!(a.status, 401, "{}", a.json);
    assert!(
        a.json["error_description"]
            .as_str()
            .unwrap()
            .contains("too old"),
        "{}",
        a.json
    );
}

#[tokio::test]
async fn the_console_signs_in_on_the_admin_listener_only() {
    let s = start();
    let k = key();
    // Good: a bound token, no refresh token, token_max_age.
    let a = s.sign_in_raw("root", PW, Some(&s.url), Some(&k)).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_eq!(a.json["token_type"], "DPoP");
    assert_eq!(a.json["expires_in"], 60);
    assert!(a.json["access_token"]
        .as_str()
        .unwrap()
        .starts_with("mmat2"));
    assert!(a.json.get("refresh_token").is_none(), "{}", a.json);
    assert_admin_headers(&a);
    // Wrong password, wrong Origin, no proof.
    let a = s.sign_in_raw("root", "wrong", Some(&s.url), Some(&k)).await;
    assert_error(&a, 400, "invalid_grant");
    let a = s
        .sign_in_raw("root", PW, Some("https://evil.example"), Some(&k))
        .await;
    assert_eq!(a.status, 403, "{}", a.json);
    assert_eq!(a.json["error"], "forbidden_origin");
    let a = s.sign_in_raw("root", PW, Some(&s.url), None).await;
    assert_error(&a, 400, "invalid_dpop_proof");
    // A user without an admin role signs in, and every route refuses it.
    let nobody = s.sign_in("nobody").await;
    let a = s.call(&nobody, "GET", "/apiv2/admin/me", None, None).await;
    assert_eq!(a.status, 403, "{}", a.json);
    // The main listener knows no `admin-console`, and serves no admin route.
    let url = format!("{}/apiv2/oauth/token", s.main);
    let a = post(
        &url,
        None,
        &[
            ("grant_type", "password"),
            ("client_id", "admin-console"),
            ("username", "root"),
            ("password", PW),
        ],
    )
    .await;
    assert_error(&a, 401, "invalid_client");
    for path in ["/apiv2/admin/me", "/admin/"] {
        let r = s
            .http
            .get(format!("{}{path}", s.main))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    // And no stored client may take its id.
    let out = admin_output(&s.dir, &["client", "add", "admin-console"], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("reserved"),
        "{out:?}"
    );
}

/// A refused change: status, path, body, If-Match, error.
type Case<'a> = (u16, &'a str, Option<Value>, Option<&'a str>, &'a str);

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let s = start();
    let root = s.sign_in("root").await;
    let second = s.sign_in("admin-clients").await;
    let clients = s.get(&root, "/apiv2/admin/clients").await;
    let audit = s.audit(&root).await.len();
    let tag = s.get(&root, "/apiv2/admin/clients/app").await["etag"]
        .as_str()
        .unwrap()
        .to_owned();
    let deactivate = "/apiv2/admin/clients/app/deactivate";
    let cases: Vec<Case> = vec![
        (
            400,
            deactivate,
            Some(json!({"force": true})),
            Some(&tag),
            "invalid_request",
        ),
        (
            400,
            "/apiv2/admin/clients/app/activate",
            Some(json!({"grants": ["nope"]})),
            Some(&tag),
            "invalid_request",
        ),
        (
            404,
            "/apiv2/admin/clients/no%20such/deactivate",
            Some(json!({})),
            Some(&tag),
            "not_found",
        ),
        (
            428,
            deactivate,
            Some(json!({})),
            None,
            "precondition_required",
        ),
        (412, deactivate, Some(json!({})), Some("\"0000\""), "stale"),
    ];
    for (status, path, body, if_match, code) in cases {
        let a = s.call(&root, "POST", path, body, if_match).await;
        assert_eq!(a.status, status, "{path}: {}", a.json);
        assert_eq!(a.json["error"], code, "{path}");
    }
    // Oversized, not JSON, a forged Origin.
    let url = format!("{}{deactivate}", s.url);
    let send = |body: Vec<u8>, ct: &'static str, origin: Option<&'static str>| {
        let mut req = s
            .http
            .post(&url)
            .header("authorization", format!("DPoP {}", root.token))
            .header("dpop", proof(&root.key, "POST", &url, Some(&root.token)))
            .header("content-type", ct)
            .header("if-match", &tag)
            .body(body);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let big = format!("{{\"x\": \"{}\"}}", "a".repeat(70 * 1024)).into_bytes();
    let a = answer(send(big, "application/json", None).await.unwrap()).await;
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (413, &json!("too_large"))
    );
    let a = answer(send(b"{}".to_vec(), "text/plain", None).await.unwrap()).await;
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (415, &json!("unsupported_media_type"))
    );
    let a = answer(
        send(
            b"{}".to_vec(),
            "application/json",
            Some("https://evil.example"),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (a.status.as_u16(), &a.json["error"]),
        (403, &json!("forbidden_origin"))
    );
    assert_eq!(
        s.get(&root, "/apiv2/admin/clients").await,
        clients,
        "nothing written"
    );
    assert_eq!(s.audit(&root).await.len(), audit, "nothing audited");
    // Two administrators: the first's change stands, the second is told.
    let a = s
        .call(&root, "POST", deactivate, Some(json!({})), Some(&tag))
        .await;
    assert_eq!(a.status, 200, "{}", a.json);
    let after = s.get(&root, "/apiv2/admin/clients").await;
    let b = s
        .call(&second, "POST", deactivate, Some(json!({})), Some(&tag))
        .await;
    assert_eq!(
        (b.status.as_u16(), &b.json["error"]),
        (412, &json!("stale"))
    );
    assert_eq!(s.get(&root, "/apiv2/admin/clients").await, after);
    assert_eq!(s.audit(&root).await.len(), audit + 1);
}
