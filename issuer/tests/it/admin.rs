//! Durability across restarts and administration of a running issuer.

use super::*;

#[tokio::test]
async fn kill_9_and_restart_keeps_everything_a_client_received() {
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    let a = password_grant(&s, &f).await;
    let access = a.json["access_token"].as_str().unwrap().to_owned();
    let rt1 = a.json["refresh_token"].as_str().unwrap().to_owned();
    let rt2 = refresh(&s, &f, &rt1).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let fresh = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.kill9_and_restart();
    // Keys survived: the access token still introspects as active.
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", &access)],
    )
    .await;
    assert_eq!(i.json["active"], true, "{}", i.json);
    // Clients and users survived; every refresh token the client holds works.
    assert_eq!(refresh(&s, &f, &fresh).await.status, 200);
    let rt3 = refresh(&s, &f, &rt2).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // The rotated rt1 is still known as rotated: reuse revokes its family.
    s.kill9_and_restart();
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt3).await, 400, "invalid_grant");
}

#[tokio::test]
async fn admin_commands_take_effect_on_a_running_server() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let secret = step_a_client_added_and_activated_works_at_once(&s, &f).await;
    step_users_and_passwords_change_at_once(&s, &f).await;
    let (old, new) = step_a_rotation_signs_with_the_new_key(&s, &f).await;
    step_a_retired_key_verifies_nothing(&s, &f, &old).await;
    // Refusals come back as errors from the server.
    let out = admin_output(&f.dir, &["client", "activate", "ghost"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ghost"));
    // The log carries an audit line per change and never a secret.
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    let changes: Vec<&str> = log.lines().filter(|l| l.contains("admin change")).collect();
    let logged = |action: &str, subject: &str| {
        changes
            .iter()
            .any(|l| l.contains(action) && l.contains(subject))
    };
    assert!(
        logged("client.activate", "late")
            && logged("keys.rotate", "keys")
            && logged("keys.retire", "keys"),
        "{changes:#?}"
    );
    assert!(!log.contains(&secret) && !log.contains(&f.secret) && !log.contains("erin-new"));
    assert!(!log.contains(&new) && !log.contains(&old));
}

/// Step: a client added and activated while the server runs works at once. Its secret.
async fn step_a_client_added_and_activated_works_at_once(s: &Server, f: &Fixture) -> String {
    let out = admin(
        &f.dir,
        &["client", "add", "late", "--grants", "client_credentials"],
        None,
    );
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .unwrap()
        .to_owned();
    let form = [("grant_type", "client_credentials")];
    assert_error(
        &post(&s.token_url(), Some(("late", &secret)), &form).await,
        401,
        "invalid_client",
    );
    admin(&f.dir, &["client", "activate", "late"], None);
    assert_eq!(
        post(&s.token_url(), Some(("late", &secret)), &form)
            .await
            .status,
        200
    );
    assert!(admin(&f.dir, &["client", "list"], None).contains("late"));
    secret
}

/// Step: a user added, given a new password and removed: each change holds at once.
async fn step_users_and_passwords_change_at_once(s: &Server, f: &Fixture) {
    add_user(&f.dir, "erin", "erin-pw", &[]);
    let login = |pw: &'static str| {
        [
            ("grant_type", "password"),
            ("username", "erin"),
            ("password", pw),
        ]
    };
    assert_eq!(
        post(&s.token_url(), f.app(), &login("erin-pw"))
            .await
            .status,
        200
    );
    admin(&f.dir, &["user", "passwd", "erin"], Some("erin-new"));
    assert_eq!(
        post(&s.token_url(), f.app(), &login("erin-new"))
            .await
            .status,
        200
    );
    assert!(admin(&f.dir, &["user", "list"], None).contains("erin"));
    admin(&f.dir, &["user", "remove", "erin"], None);
    assert_error(
        &post(&s.token_url(), f.app(), &login("erin-new")).await,
        400,
        "invalid_grant",
    );
}

/// Step: key rotation: new tokens use the new key; old tokens keep verifying. A token of each.
async fn step_a_rotation_signs_with_the_new_key(s: &Server, f: &Fixture) -> (String, String) {
    let form = [("grant_type", "client_credentials")];
    let old = post(&s.token_url(), f.app(), &form).await.json["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(admin(&f.dir, &["keys", "rotate", "--delay", "0"], None).contains("key 2"));
    let new = post(&s.token_url(), f.app(), &form).await.json["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let ring = ring(&f.dir);
    assert_eq!(token::verify(&ring, &new, now(), 0).unwrap().body().kid, 2);
    assert_eq!(token::verify(&ring, &old, now(), 0).unwrap().body().kid, 1);
    let list = admin(&f.dir, &["keys", "list"], None);
    assert!(
        list.contains("signing") && list.contains("verifying"),
        "{list}"
    );
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", &old)],
    )
    .await;
    assert_eq!(i.json["active"], true);
    (old, new)
}

/// Step: retiring key 1 ahead of time: its tokens stop verifying at once; the signing key and
/// unknown keys cannot be retired.
async fn step_a_retired_key_verifies_nothing(s: &Server, f: &Fixture, old: &str) {
    for (kid, why) in [("2", "is signing"), ("9", "no key 9")] {
        let out = admin_output(&f.dir, &["keys", "retire", kid], None);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why));
    }
    assert!(admin(&f.dir, &["keys", "retire", "1"], None).contains("key 1 is retired"));
    assert!(admin(&f.dir, &["keys", "retire", "1"], None).contains("retired already"));
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", old)],
    )
    .await;
    assert_eq!(i.json["active"], false, "a retired key verifies nothing");
    assert!(super::ring(&f.dir).get(1).is_none());
    assert!(admin(&f.dir, &["keys", "list"], None).contains("retired"));
}

#[test]
fn weak_client_secrets_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let cases = [
        ("x", "at least 16 bytes"),
        ("fifteen-bytes!!", "at least 16 bytes"),
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "different characters"),
        ("abababababababababababab", "different characters"),
    ];
    for (weak, why) in cases {
        let out = admin_output(&dir, &["client", "add", "c", "--secret-stdin"], Some(weak));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{weak:?} was taken");
        assert!(err.contains(why), "{weak:?}: {err}");
        assert!(
            weak.len() < 8 || !err.contains(weak),
            "the secret was echoed: {err}"
        );
    }
    let list = admin(&dir, &["client", "list", "--json"], None);
    assert_eq!(list.trim(), "[]", "a refused secret added a client");
    // Sixteen bytes of some variety are enough (generated secrets are far longer).
    admin(
        &dir,
        &["client", "add", "c", "--secret-stdin"],
        Some("sixteen-bytes-ok"),
    );
}

#[test]
fn data_dir_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f.dir), 0o700);
    assert_eq!(mode(&f.dir.join("issuer.redb")), 0o600);
    assert_eq!(mode(&f.dir.join("hash.key")), 0o600);
    let _s = Server::start(&f.dir, &[]);
    assert_eq!(mode(&f.dir.join("admin.sock")), 0o600);
}

/// Runs `issuer ARGS --data-dir DIR` as uid and gid 65534 (`nobody`, no groups) through
/// `setpriv`; the test fails where this process may not switch users (not root, or no
/// `setpriv`), saying so.
fn admin_as_nobody(dir: &Path, args: &[&str]) -> std::process::Output {
    if !nix::unistd::geteuid().is_root() {
        e2e::needed_for_test::<()>(Err(anyhow::anyhow!(
            "switching to uid 65534 needs root (CI runs `cargo xtask test` as root)"
        )));
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            BIN,
        ])
        .args(args)
        .arg("--data-dir")
        .arg(dir);
    e2e::needed_for_test(
        command
            .stdin(Stdio::null())
            .output()
            .map_err(|e| anyhow::anyhow!("setpriv: {e}")),
    )
}

/// The admin socket answers only the issuer's own user and root, by the socket's peer
/// credentials: with the data dir made traversable and the socket writable by all (for this test
/// only), a command from uid 65534 reaches the server and is refused there, unanswered and
/// logged with its uid, and changes nothing; root's commands are answered.
#[tokio::test]
#[ignore = "needs root: `cargo xtask test` runs it as root"]
async fn the_admin_socket_answers_only_its_own_user_and_root() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    assert!(admin(&f.dir, &["client", "list"], None).contains("app"));
    let open = |p: &Path, mode| std::fs::set_permissions(p, PermissionsExt::from_mode(mode));
    open(f._tmp.path(), 0o711).unwrap();
    open(&f.dir, 0o711).unwrap();
    open(&f.dir.join("admin.sock"), 0o666).unwrap();
    for args in [&["client", "list"][..], &["client", "deactivate", "app"]] {
        let out = admin_as_nobody(&f.dir, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} as uid 65534 succeeded");
        assert!(
            err.contains("without an answer") && err.contains("admin.sock"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed something");
    }
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    let refusals = log
        .lines()
        .filter(|l| l.contains("admin connection refused") && l.contains("uid=65534"))
        .count();
    assert_eq!(refusals, 2, "{log}");
    // The refused deactivation changed nothing; root is still answered.
    assert_eq!(password_grant(&s, &f).await.status, 200);
    let list: Value = serde_json::from_str(&admin(&f.dir, &["client", "list", "--json"], None))
        .expect("client list --json");
    assert_eq!(list[0]["id"], "app", "{list}");
    assert_eq!(list[0]["active"], true, "{list}");
}
