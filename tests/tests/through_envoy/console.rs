//! The web console in Debian's Chromium, driven by Playwright (the specs in `tests/console/`):
//! this test starts the stack (issuer with its admin listener, Envoy with the filter of
//! `MMS_FILTER` and edge sync on two workers, the media upstream), makes the users of each role
//! and a client registered with a vendor statement, and runs the specs in order, checking
//! through Envoy between them what the console did: the activated client's token passes, and
//! once deactivated it is refused at every worker. Then the other pages (users, sessions, keys
//! and edges, audit), the roles, the sign-in failure, the expired session, the lost network and
//! the stale write.

use crate::edge::{call, password, refused_everywhere, token_request, wait_for_sync};
use e2e::{demo, Filter, Options, Stack, Tools};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Seconds an admin token is accepted (`token_max_age` of `[admin_http]`): short, so the expired
/// session is seen within the test.
const TOKEN_MAX_AGE: u64 = 30;
/// The id of the client the vendor's statement is for.
const VENDOR_CLIENT: &str = "console-test-app";
/// Longest run of one set of specs.
const SPEC_LIMIT: Duration = Duration::from_secs(300);
/// Every admin role.
const ALL_ROLES: [&str; 5] = [
    "admin:clients",
    "admin:users",
    "admin:sessions",
    "admin:keys",
    "admin:audit",
];
/// The users the specs sign in as, and their roles (`carol` is the one disabled and enabled).
const USERS: [(&str, &[&str]); 9] = [
    ("root", &ALL_ROLES),
    ("clerk", &["admin:clients"]),
    ("people", &["admin:users"]),
    ("porter", &["admin:sessions"]),
    ("keeper", &["admin:keys"]),
    ("auditor", &["admin:audit"]),
    ("reader", &["admin:read"]),
    ("nobody", &["viewer"]),
    ("carol", &["viewer"]),
];

/// What the specs are given.
struct Console {
    /// The console's URL on the admin listener.
    url: String,
    /// `MMS_CONSOLE_USERS`: name → password and roles.
    users: Value,
    /// The output folders under `target/`, one per filter (both runs may go on at once).
    shots: PathBuf,
    results: PathBuf,
    native: bool,
}

fn issuer(tools: &Tools, args: &[&str]) -> String {
    let out = std::process::Command::new(&tools.issuer)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "issuer {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A vendor key and a credential set of it for [`VENDOR_CLIENT`] (client credentials and
/// password), and the issuer's configuration file trusting the vendor, with registration and the
/// admin listener on `admin_port`. Returns the file and the credential set.
fn vendor_and_config(tools: &Tools, dir: &Path, admin_port: u16) -> (PathBuf, Value) {
    let keys = dir.join("vendor");
    issuer(
        tools,
        &["vendor", "keygen", "--out", keys.to_str().unwrap()],
    );
    let key = keys.join("vendor-key.jwk");
    let set = issuer(
        tools,
        &[
            "vendor",
            "issue",
            "--key",
            key.to_str().unwrap(),
            "--name",
            "Console Test App",
            "--grants",
            "client_credentials,password",
            "--expires",
            "30d",
            "--client-id",
            VENDOR_CLIENT,
        ],
    );
    let config = dir.join("issuer.toml");
    let text = format!(
        "registration = true\n\n[[vendor]]\nname = \"acme\"\nkeys = \"{}\"\n\n[admin_http]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken_max_age = {TOKEN_MAX_AGE}\n",
        keys.join("vendor-keys.json").display()
    );
    e2e::write_private(&config, text.as_bytes()).unwrap();
    (config, serde_json::from_str(&set).unwrap())
}

/// The users of [`USERS`], each with a password of its own; their JSON for the specs.
fn add_users(s: &Stack) -> Value {
    let mut users = serde_json::Map::new();
    for (name, roles) in USERS {
        let password = format!("{name}-console-password");
        let mut args = vec!["user", "add", name];
        for role in roles {
            args.extend(["--role", role]);
        }
        s.admin(&args, Some(&password)).unwrap();
        users.insert(name.into(), json!({ "password": password, "roles": roles }));
    }
    Value::Object(users)
}

/// Runs the Playwright specs `specs` of `tests/console/` (each name a pattern Playwright looks
/// for in the specs' paths, so no name may be part of another's) against the console, with Debian's
/// Chromium; fails unless they all pass. Playwright and its browser are stopped when it ends
/// (or, past [`SPEC_LIMIT`], killed with the whole process group).
async fn playwright(c: &Console, specs: &[&str]) {
    let dir = e2e::root().join("tests/console");
    let bin = dir.join("node_modules/.bin/playwright");
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci` in tests/console (`cargo xtask test` does)",
        bin.display()
    );
    let chromium = e2e::needed_for_test(e2e::env_path("MMS_CHROMIUM"));
    let mut cmd = tokio::process::Command::new(bin);
    cmd.current_dir(&dir)
        .arg("test")
        .args(specs)
        .env("MMS_CHROMIUM", chromium)
        .env("MMS_CONSOLE_URL", &c.url)
        .env("MMS_CONSOLE_USERS", c.users.to_string())
        .env("MMS_VENDOR_CLIENT", VENDOR_CLIENT)
        .env("MMS_TOKEN_MAX_AGE", TOKEN_MAX_AGE.to_string())
        .env("MMS_SHOTS_DIR", &c.shots)
        .env("MMS_CONSOLE_OUT", &c.results)
        .env_remove("CI")
        .process_group(0)
        .kill_on_drop(true);
    if c.native {
        // Both filters' runs take the same pictures: the Wasm run alone updates the docs.
        cmd.env_remove("MMS_UPDATE_SHOTS");
    }
    let mut child = cmd.spawn().expect("starting playwright");
    let status = match tokio::time::timeout(SPEC_LIMIT, child.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: signals the process group of the child started above.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.wait().await;
            panic!("playwright {specs:?} ran past {SPEC_LIMIT:?}");
        }
    };
    assert!(status.success(), "playwright {specs:?}: {status}");
}

/// The console's page and its headers on the admin listener; nothing of it on the main one.
async fn served_only_on_the_admin_listener(s: &Stack, url: &str) {
    let http = reqwest::Client::new();
    let page = http
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", s.logs()));
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["cache-control"], "no-store");
    assert!(page.headers().get("set-cookie").is_none());
    assert!(page.text().await.unwrap().contains("./app.js"));
    let main = http
        .get(format!("{}/admin/", s.issuer_url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", s.logs()));
    assert_eq!(main.status(), 404, "the main listener serves no console");
}

/// The vendor's client registers itself through Envoy with its statement: pending.
async fn register(s: &Stack, set: &Value) {
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/register", s.url()))
        .json(&json!({ "software_statement": set["software_statement"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
}

/// The main scenario and the rest of the console's specs, with the filter of `MMS_FILTER`.
#[tokio::test]
#[ignore = "needs Envoy, Chromium and tests/console/node_modules: `cargo xtask test` runs it"]
async fn console_in_chromium() {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let admin_port = e2e::free_port();
    let (config, set) = vendor_and_config(&tools, tmp.path(), admin_port);
    let opts = Options {
        edge_sync: true,
        issuer_args: vec!["--config".into(), config.display().to_string()],
        ..Options::default()
    };
    let dir = tmp.path().join("stack");
    let s = Stack::start(&dir, &tools, &opts).await.unwrap_or_else(|e| {
        let log = std::fs::read_to_string(dir.join("issuer.log")).unwrap_or_default();
        panic!("{e:#}\n--- issuer.log\n{log}")
    });
    wait_for_sync(&s).await;
    let url = format!("http://127.0.0.1:{admin_port}/admin/");
    served_only_on_the_admin_listener(&s, &url).await;
    let native = matches!(tools.filter, Filter::Native(_));
    let name = if native { "native" } else { "wasm" };
    let c = Console {
        url,
        users: add_users(&s),
        shots: e2e::root().join("target/console-shots").join(name),
        results: e2e::root().join("target/console-results").join(name),
        native,
    };
    register(&s, &set).await;
    let client = (VENDOR_CLIENT, set["client_secret"].as_str().unwrap());
    let cc = [("grant_type", "client_credentials")];
    let (status, _) = token_request(&s, client, &cc).await;
    assert_ne!(status, 200, "a pending client gets no token");

    playwright(&c, &["main_activate.spec.js"]).await;
    let (status, answer) = token_request(&s, client, &cc).await;
    assert_eq!(status, 200, "{answer}\n{}", s.logs());
    let token = answer["access_token"].as_str().unwrap().to_owned();
    assert_eq!(
        call(&s, &token).await.0,
        200,
        "the activated client's token passes"
    );
    let form = [
        ("grant_type", "password"),
        ("username", demo::USER),
        ("password", demo::PASSWORD),
    ];
    let (status, answer) = token_request(&s, client, &form).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("unauthorized_client")),
        "activated narrowed: no password grant; {answer}"
    );

    // Sessions for the console to list and revoke.
    password(&s, demo::USER, demo::PASSWORD).await;
    password(&s, demo::USER, demo::PASSWORD).await;
    playwright(&c, &["main_deactivate.spec.js"]).await;
    refused_everywhere(&s, &token, "client deactivated in the console").await;

    playwright(&c, &["pages.spec.js", "roles.spec.js", "failures.spec.js"]).await;
    assert!(s.stop(), "the stack stopped cleanly");
}
