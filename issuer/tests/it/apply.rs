//! `issuer apply`: clients and users declared in a file, applied to a running issuer's store (the
//! embedded one through its admin socket, and PostgreSQL), and users moved in with bcrypt, PBKDF2
//! and Argon2id hashes signing in over HTTP and having their hash upgraded to Argon2id.

use super::{admin_output, assert_error, assert_no_forging, post, Server, FORGER};
use argon2::password_hash::{PasswordHasher, SaltString};
use e2e::postgres::PgCluster;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// An admin command on the store given by `store` (empty: the data dir `dir`).
fn run(dir: &Path, store: &[String], args: &[&str]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(store.iter().map(String::as_str));
    admin_output(dir, &all, None)
}

/// Like [`run`], for a command that must succeed: its stdout and stderr.
fn ok(dir: &Path, store: &[String], args: &[&str]) -> (String, String) {
    let out = run(dir, store, args);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "issuer {args:?}: {stderr}");
    (stdout, stderr)
}

/// `client list --json` and `user list --json`.
fn state(dir: &Path, store: &[String]) -> (Value, Value) {
    let json = |what| serde_json::from_str(&ok(dir, store, &[what, "list", "--json"]).0).unwrap();
    (json("client"), json("user"))
}

fn find<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == name)
        .unwrap_or_else(|| panic!("{name} not in {list}"))
}

fn names(list: &Value, key: &str) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[key].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

fn pbkdf2_hash(password: &str) -> String {
    let salt = SaltString::encode_b64(b"salt-of-16-bytes").unwrap();
    let params = pbkdf2::Params {
        rounds: 100_000,
        output_length: 32,
    };
    pbkdf2::Pbkdf2
        .hash_password_customized(
            password.as_bytes(),
            Some(pbkdf2::Algorithm::Pbkdf2Sha256.ident()),
            None,
            params,
            &salt,
        )
        .unwrap()
        .to_string()
}

/// Writes `text` to a new file at `path` with mode 0600, as a secret file must be.
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The first file: two clients (one with its secret in a file), users with each hash kind and
/// one without a password.
fn first_file(tmp: &Path) -> String {
    let secret_file = tmp.join("svc.secret");
    write_private(&secret_file, "svc-secret-from-file\n");
    let bcrypt = bcrypt::hash("bob-pw", 10).unwrap();
    assert!(bcrypt.starts_with("$2b$10$"));
    let argon = issuer::passwords::hash_password("dave-pw");
    format!(
        r#"
[[client]]
id = "media-app"
grants = ["password", "client_credentials"]
impersonate = true
impersonate_claim_types = ["upn"]
active = true

[[client]]
id = "svc"
grants = ["client_credentials"]
secret_file = "svc.secret"

[[user]]
name = "alice"
roles = ["editor"]
claims = {{ upn = "alice@example.org" }}

[[user]]
name = "bob"
password_hash = "{bcrypt}"

[[user]]
name = "carol"
roles = ["viewer"]
password_hash = "{}"

[[user]]
name = "dave"
password_hash = "{argon}"
"#,
        pbkdf2_hash("carol-pw"),
    )
}

async fn sign_in(s: &Server, secret: &str, user: &str, password: &str) -> super::Answer {
    let form = [
        ("grant_type", "password"),
        ("username", user),
        ("password", password),
    ];
    post(&s.token_url(), Some(("media-app", secret)), &form).await
}

/// The whole story on one store: `dir` is the admin commands' data dir, `store` their store
/// arguments, `s` the issuer serving that store. A step each.
async fn story(dir: &Path, store: &[String], s: &Server, tmp: &Path) {
    let file = tmp.join("accounts.toml");
    let path = file.to_str().unwrap();
    std::fs::write(&file, first_file(tmp)).unwrap();
    step_a_dry_run_changes_nothing(dir, store, path);
    let secret = step_applied_with_the_generated_secret_printed_once(dir, store, path);
    step_applied_again_changes_nothing(dir, store, path);
    step_imported_users_sign_in_and_are_upgraded(dir, store, s, &secret).await;
    // Without a password no password signs in; the file's secret works for its client.
    assert_error(
        &sign_in(s, &secret, "alice", "x").await,
        400,
        "invalid_grant",
    );
    let cc = [("grant_type", "client_credentials")];
    let svc = post(&s.token_url(), Some(("svc", "svc-secret-from-file")), &cc).await;
    assert_eq!(svc.status, 200, "{}", svc.json);

    changed_then_pruned(dir, store, s, &file, &secret).await;
    broken_files(dir, store, tmp);
}

/// The password scheme of the user `name` in the listing `users`.
fn scheme(users: &Value, name: &str) -> Value {
    find(users, "name", name)["password_scheme"].clone()
}

/// Step: a dry run on the empty store prints the plan and changes nothing.
fn step_a_dry_run_changes_nothing(dir: &Path, store: &[String], path: &str) {
    let empty = state(dir, store);
    assert_eq!(empty, (Value::Array(vec![]), Value::Array(vec![])));
    let (plan, _) = ok(dir, store, &["apply", path, "--dry-run"]);
    assert!(plan.contains("+ client media-app: grants=[password,client_credentials] impersonate=true impersonate_claim_types=[upn] active=true"), "{plan}");
    assert!(plan.contains("+ user bob: roles=[] claims=[] enabled=true password=bcrypt"));
    assert!(plan.contains("dry run: 6 changes planned"), "{plan}");
    assert!(!plan.contains("secret"), "{plan}");
    assert_eq!(state(dir, store), empty);
}

/// Step: applied, the generated secret is printed once, the file's never; the store holds the
/// file's clients and users. The generated secret.
fn step_applied_with_the_generated_secret_printed_once(
    dir: &Path,
    store: &[String],
    path: &str,
) -> String {
    let (out, err) = ok(dir, store, &["apply", path]);
    assert!(out.contains("applied 6 changes"), "{out}");
    assert!(
        !err.contains("changes"),
        "no progress for a small file: {err}"
    );
    let secrets: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("secret of media-app: "))
        .collect();
    assert_eq!(secrets.len(), 1, "{out}");
    assert!(!out.contains("svc-secret-from-file") && !out.contains("secret of svc"));
    let (clients, users) = state(dir, store);
    let app = find(&clients, "id", "media-app");
    assert_eq!(
        app["grants"],
        serde_json::json!(["password", "client_credentials"])
    );
    assert_eq!(app["impersonate_claim_types"], serde_json::json!(["upn"]));
    assert_eq!(
        (app["active"].clone(), app["edge"].clone()),
        (true.into(), false.into())
    );
    assert_eq!(find(&clients, "id", "svc")["active"], true);
    let alice = find(&users, "name", "alice");
    assert_eq!(
        alice["claims"],
        serde_json::json!([["upn", "alice@example.org"]])
    );
    assert_eq!(alice["password_scheme"], Value::Null);
    assert_eq!(scheme(&users, "bob"), "bcrypt");
    assert_eq!(scheme(&users, "carol"), "pbkdf2-sha256");
    assert_eq!(scheme(&users, "dave"), "argon2id");
    secrets[0].to_owned()
}

/// Step: applied again, nothing to do and nothing written.
fn step_applied_again_changes_nothing(dir: &Path, store: &[String], path: &str) {
    let before = state(dir, store);
    let (again, _) = ok(dir, store, &["apply", path]);
    assert!(again.starts_with("no change: the store matches"), "{again}");
    assert_eq!(state(dir, store), before);
}

/// The imported users and their passwords.
const IMPORTED: [(&str, &str); 3] = [
    ("bob", "bob-pw"),
    ("carol", "carol-pw"),
    ("dave", "dave-pw"),
];

/// Step: imported users sign in; bcrypt and PBKDF2 become Argon2id, and still sign in. The
/// upgrade revokes nothing: the first sign-in's tokens keep working.
async fn step_imported_users_sign_in_and_are_upgraded(
    dir: &Path,
    store: &[String],
    s: &Server,
    secret: &str,
) {
    let mut first = Vec::new();
    for (user, pw) in IMPORTED {
        assert_error(
            &sign_in(s, secret, user, "wrong").await,
            400,
            "invalid_grant",
        );
        let a = sign_in(s, secret, user, pw).await;
        assert_eq!(a.status, 200, "{user}");
        first.push(a.json);
    }
    // In a later second than the upgrades (revocations count whole seconds).
    e2e::wait::next_second().await;
    for tokens in &first {
        let access = tokens["access_token"].as_str().unwrap();
        let introspect = format!("{}/apiv2/oauth/introspect", s.url);
        let i = post(
            &introspect,
            Some(("media-app", secret)),
            &[("token", access)],
        )
        .await;
        assert_eq!(i.json["active"], true, "{}", i.json);
        let rt = tokens["refresh_token"].as_str().unwrap();
        let form = [("grant_type", "refresh_token"), ("refresh_token", rt)];
        let r = post(&s.token_url(), Some(("media-app", secret)), &form).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let (_, users) = state(dir, store);
    for (user, pw) in IMPORTED {
        assert_eq!(scheme(&users, user), "argon2id", "{user}");
        assert_eq!(sign_in(s, secret, user, pw).await.status, 200, "{user}");
        assert_error(
            &sign_in(s, secret, user, "wrong").await,
            400,
            "invalid_grant",
        );
    }
}

/// A changed file: dry run (old and new values shown, nothing changed), then applied; then
/// `--prune`.
async fn changed_then_pruned(dir: &Path, store: &[String], s: &Server, file: &Path, secret: &str) {
    let path = file.to_str().unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let changed = text
        .replace(r#"roles = ["editor"]"#, r#"roles = ["editor", "admin"]"#)
        .replace(
            r#"grants = ["client_credentials"]"#,
            "grants = [\"client_credentials\"]\nactive = false",
        )
        + "\n[[user]]\nname = \"frank\"\nenabled = false\n";
    std::fs::write(file, &changed).unwrap();
    let before = state(dir, store);
    let (plan, _) = ok(dir, store, &["apply", path, "--dry-run"]);
    assert!(
        plan.contains("~ user alice: roles [editor] -> [admin,editor]"),
        "{plan}"
    );
    assert!(
        plan.contains("~ client svc: active true -> false"),
        "{plan}"
    );
    assert!(
        plan.contains("+ user frank: roles=[] claims=[] enabled=false"),
        "{plan}"
    );
    assert!(plan.contains("3 changes planned"), "{plan}");
    assert_eq!(state(dir, store), before);
    let (out, _) = ok(dir, store, &["apply", path]);
    assert!(out.contains("applied 3 changes"), "{out}");
    let (clients, users) = state(dir, store);
    assert_eq!(
        find(&users, "name", "alice")["roles"],
        serde_json::json!(["admin", "editor"])
    );
    assert_eq!(find(&users, "name", "frank")["enabled"], false);
    assert_eq!(find(&clients, "id", "svc")["active"], false);
    let token = sign_in(s, secret, "alice", "x").await;
    assert_error(&token, 400, "invalid_grant");

    // Without --prune nothing goes; with it, what the file no longer names goes.
    let pruned = changed
        .replace("[[client]]\nid = \"svc\"", "[[client]]\nid = \"svc-2\"")
        .replace("name = \"dave\"", "name = \"dave-2\"");
    std::fs::write(file, pruned).unwrap();
    let (out, err) = ok(dir, store, &["apply", path]);
    assert!(
        out.contains("+ client svc-2") && !out.contains("- "),
        "{out}"
    );
    assert!(err.contains("kept 1 clients and 1 users"), "{err}");
    let (out, _) = ok(dir, store, &["apply", path, "--prune"]);
    assert!(
        out.contains("- client svc\n") && out.contains("- user dave\n"),
        "{out}"
    );
    let (clients, users) = state(dir, store);
    assert_eq!(names(&clients, "id"), ["media-app", "svc-2"]);
    assert_eq!(
        names(&users, "name"),
        ["alice", "bob", "carol", "dave-2", "frank"]
    );
    assert_eq!(sign_in(s, secret, "bob", "bob-pw").await.status, 200);
    let (again, _) = ok(dir, store, &["apply", path, "--prune"]);
    assert!(again.starts_with("no change"), "{again}");
}

/// Files with an error: refused with the line named, and nothing changed.
fn broken_files(dir: &Path, store: &[String], tmp: &Path) {
    let before = state(dir, store);
    let good = "[[user]]\nname = \"new-one\"\n\n";
    let [short, repeated, open] = bad_secret_files(tmp);
    let weak = bcrypt::hash("pw", 4).unwrap();
    let weak = format!("[[user]]\nname = \"u\"\npassword_hash = \"{weak}\"\n");
    let secrets = [
        (short.as_str(), 4, "at least 16 bytes"),
        (&repeated, 4, "different characters"),
        (
            &open,
            4,
            "mode 0644 lets other users read it; run chmod 600",
        ),
    ];
    let file = tmp.join("broken.toml");
    for (body, line, why) in secrets.into_iter().chain(broken_declarations(&weak)) {
        std::fs::write(&file, format!("{good}{body}")).unwrap();
        let out = run(dir, store, &["apply", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body}");
        let at = format!("{}:{}: ", file.display(), line + 3);
        assert!(err.contains(&at) && err.contains(why), "{body}: {err}");
        assert_eq!(state(dir, store), before, "{body}");
    }
}

/// Client declarations naming a secret file that is too short, of one repeated character, or
/// long enough but readable by group and others.
fn bad_secret_files(tmp: &Path) -> [String; 3] {
    let short = tmp.join("short.secret");
    write_private(&short, "s3cret\n");
    let repeated = tmp.join("repeated.secret");
    write_private(&repeated, &format!("{}\n", "x".repeat(40)));
    let open = tmp.join("open.secret");
    write_private(&open, "a-long-enough-secret-from-a-file\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let secret_file = |p: &Path| {
        format!(
            "[[client]]\nid = \"c\"\ngrants = []\nsecret_file = \"{}\"\n",
            p.display()
        )
    };
    [
        secret_file(&short),
        secret_file(&repeated),
        secret_file(&open),
    ]
}

/// Declarations with an error: the file, the line of the error in it, and what the error says.
fn broken_declarations(weak: &str) -> Vec<(&str, usize, &'static str)> {
    vec![
        (
            "[[client]]\nid = \"x\"\ngrants = [\"implicit\"]\n",
            3,
            "unknown grant",
        ),
        (
            "[[user]]\nname = \"u\"\ncolour = \"red\"\n",
            3,
            "unknown field `colour`",
        ),
        (
            "[[user]]\nname = \"alice\"\n\n[[user]]\nname = \"alice\"\n",
            5,
            "declared twice",
        ),
        (
            "[[user]]\nname = \"u\"\nroles = [\"a,b\"]\n",
            3,
            "invalid role",
        ),
        (
            "[[user]]\nname = \"u\"\nclaims = { \"a=b\" = \"c\" }\n",
            3,
            "invalid claim",
        ),
        (weak, 3, "cost outside 10 to 14"),
        (
            "[[user]]\nname = \"u\"\npassword_hash = \"$1$md5$x\"\n",
            3,
            "must be a PHC string",
        ),
        (
            "[[client]]\nid = \"c\"\ngrants = []\nsecret_file = \"/nonexistent/s\"\n",
            4,
            "secret_file",
        ),
        ("[[user]\nname = \"u\"\n", 1, ""),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_on_redb_through_the_running_servers_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Server::start(&dir, &[]);
    story(&dir, &[], &s, tmp.path()).await;
    // The log never holds a secret.
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(!log.contains("svc-secret-from-file"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn apply_on_postgres() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let store = vec![
        "--store".to_owned(),
        pg.url(),
        "--kek-file".to_owned(),
        super::multi::kek_file(tmp.path()),
    ];
    let args: Vec<&str> = store.iter().map(String::as_str).collect();
    let s = Server::start(&tmp.path().join("issuer"), &args);
    story(&tmp.path().join("admin"), &store, &s, tmp.path()).await;
}

#[test]
fn a_large_file_goes_through_the_socket_with_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let _s = Server::start(&dir, &[]);
    let file = tmp.path().join("many.toml");
    // More than one admin line could hold, were the file sent whole.
    let users: String = (0..1200)
        .map(|i| {
            format!("[[user]]\nname = \"user-{i:04}\"\nroles = [\"role-{i:04}\", \"reader\"]\n\n")
        })
        .collect();
    assert!(users.len() > issuer::admin::MAX_LINE);
    std::fs::write(&file, users).unwrap();
    let (out, err) = ok(&dir, &[], &["apply", file.to_str().unwrap()]);
    assert!(out.contains("applied 1200 changes"), "{out}");
    assert!(err.contains("applied 1000 of 1200 changes"), "{err}");
    assert_eq!(state(&dir, &[]).1.as_array().unwrap().len(), 1200);
    let (again, err) = ok(&dir, &[], &["apply", file.to_str().unwrap()]);
    assert!(again.starts_with("no change") && !err.contains("applied"));
}

/// Names, roles and claims that carry line separators and bidi controls are printed escaped in
/// the plan of `apply --dry-run`, as a change and as a removal.
#[test]
fn a_plan_prints_names_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let file = tmp.path().join("odd.toml");
    let toml_text = |s: &str| serde_json::to_string(s).unwrap();
    std::fs::write(
        &file,
        format!(
            "[[user]]\nname = {n}\nroles = [{n}]\nclaims = {{ upn = {n} }}\n",
            n = toml_text(FORGER)
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (plan, err) = ok(&dir, &[], &["apply", path, "--dry-run"]);
    assert_no_forging("apply --dry-run", &plan);
    assert_no_forging("apply --dry-run (stderr)", &err);
    assert!(plan.contains("+ user eve\\u{2028}2026"), "{plan}");
    assert_eq!(plan.lines().count(), 2, "{plan}");
    ok(&dir, &[], &["apply", path]);
    std::fs::write(&file, "").unwrap();
    let (plan, _) = ok(&dir, &[], &["apply", path, "--dry-run", "--prune"]);
    assert_no_forging("apply --dry-run --prune", &plan);
    assert!(plan.contains("- user eve\\u{2028}2026"), "{plan}");
}

/// An edge client declared in the file (`edge = true`, no grants unless named): planned and
/// added as one, read the edge feed with the file's secret, then left alone; its name taken, a
/// `client add` says what to do; a file that would change its `edge` is refused whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_client_is_declared_in_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let none: &[String] = &[];
    let secret = "an-edge-secret-from-a-file-0123";
    write_private(&tmp.path().join("edge.secret"), &format!("{secret}\n"));
    let file = tmp.path().join("clients.toml");
    std::fs::write(
        &file,
        "[[client]]\nid = \"envoy-edge\"\nedge = true\nsecret_file = \"edge.secret\"\n\n\
         [[client]]\nid = \"app\"\ngrants = [\"client_credentials\"]\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (plan, _) = ok(&dir, none, &["apply", path, "--dry-run"]);
    assert!(plan.contains("+ client envoy-edge: grants=[] impersonate=false impersonate_claim_types=[] active=true edge=true\n"), "{plan}");
    assert!(plan.contains("+ client app: grants=[client_credentials] impersonate=false impersonate_claim_types=[] active=true\n"), "{plan}");
    let s = Server::start(&dir, &[]);
    let (out, _) = ok(&dir, none, &["apply", path]);
    assert!(out.contains("applied 2 changes"), "{out}");
    let (clients, _) = state(&dir, none);
    let edge = find(&clients, "id", "envoy-edge");
    assert_eq!(
        (&edge["edge"], &edge["grants"], &edge["active"]),
        (
            &Value::Bool(true),
            &serde_json::json!([]),
            &Value::Bool(true)
        )
    );
    assert_eq!(find(&clients, "id", "app")["edge"], false);
    let feed = reqwest::Client::new()
        .get(format!("{}/apiv2/oauth/edge", s.url))
        .basic_auth("envoy-edge", Some(secret))
        .send()
        .await
        .unwrap();
    assert_eq!(feed.status(), 200);
    let (out, _) = ok(&dir, none, &["apply", path]);
    assert!(out.contains("no change"), "{out}");

    let out = run(&dir, none, &["client", "add", "envoy-edge", "--edge"]);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("exists")
            && why.contains("issuer client remove envoy-edge")
            && why.contains("edge = true"),
        "{why}"
    );

    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("edge = true", "edge = false\ngrants = []")
        + "\n[[client]]\nid = \"later\"\ngrants = []\n";
    std::fs::write(&file, text).unwrap();
    let before = state(&dir, none);
    let out = run(&dir, none, &["apply", path]);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("envoy-edge (edge true -> false)") && why.contains("nothing was changed"),
        "{why}"
    );
    assert_eq!(state(&dir, none), before);
}
