//! A vendor's client over time, through the real binary (docs/clients.md): deactivated at the
//! second its statement expires, with its tokens.

use super::vendor::{client_credentials, stdout_of, Vendor};
use super::*;

/// `secs` (seconds since the epoch) as RFC 3339, UTC, as `--expires` takes it.
pub(super) fn rfc3339(secs: u64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The password grant of the fixture's `alice` through the client `id`.
pub(super) async fn alice_signs_in(s: &Server, id: &str, secret: &str) -> Answer {
    post(
        &s.token_url(),
        Some((id, secret)),
        &[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ],
    )
    .await
}

/// The audit trail as JSON objects.
fn trail(dir: &Path) -> Vec<Value> {
    admin(dir, &["audit", "--json"], None)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Asserts that the client's `token` introspects inactive and that the trail holds `action` on
/// the client by `actor`, taking it from active to inactive; returns that event.
async fn ended_by(
    s: &Server,
    f: &Fixture,
    token: &str,
    (action, id): (&str, &str),
    actor: &str,
) -> Value {
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", token)],
    )
    .await;
    assert_eq!(i.json["active"], false, "{}", i.json);
    let events = trail(&f.dir);
    let event = events
        .iter()
        .find(|e| e["action"] == action && e["target"] == id)
        .unwrap_or_else(|| panic!("no {action}: {events:?}"))
        .clone();
    assert_eq!(event["actor"], actor, "{event}");
    assert_eq!(
        (&event["before"]["active"], &event["after"]["active"]),
        (&Value::Bool(true), &Value::Bool(false)),
        "{event}"
    );
    event
}

#[tokio::test]
async fn a_client_is_deactivated_at_the_second_its_statement_expires() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let s = Server::start(&f.dir, &[]);
    let exp = now() + 5;
    let set = v.issue(
        &v.key,
        &["--grants", "client_credentials", "--expires", &rfc3339(exp)],
    );
    let (id, secret) = (
        set["client_id"].as_str().unwrap(),
        set["client_secret"].as_str().unwrap(),
    );
    let file = v.file("short.jws", set["software_statement"].as_str().unwrap());
    stdout_of(&v.import(&f.dir, &file));
    admin(&f.dir, &["client", "activate", id], None);
    let a = client_credentials(&s, id, secret).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let token = a.json["access_token"].as_str().unwrap().to_owned();
    assert!(
        now() < exp,
        "the statement expired before the test could use it"
    );

    // Within the second it expires: refused, deactivated, its token inactive.
    while now() < exp {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The timer fires as the second begins; its work takes a fraction of it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_error(
        &client_credentials(&s, id, secret).await,
        401,
        "invalid_client",
    );
    let expired = ended_by(
        &s,
        &f,
        &token,
        ("client.deactivate", id),
        "statement expiry",
    )
    .await;
    assert_eq!(expired["at"], rfc3339(exp), "at the second: {expired}");
}

/// `issuer apply FILE --config …` on `dir`.
fn apply(v: &Vendor, dir: &Path, file: &str) -> std::process::Output {
    let config = v.config.to_str().unwrap();
    admin_output(dir, &["apply", file, "--config", config], None)
}

#[tokio::test]
async fn apply_imports_and_activates_the_statements_it_declares() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let s = Server::start(&f.dir, &[]);
    let all = "password,refresh_token,client_credentials";
    let set = v.issue(&v.key, &["--grants", all, "--impersonation", "claims"]);
    let (id, secret) = (
        set["client_id"].as_str().unwrap(),
        set["client_secret"].as_str().unwrap(),
    );
    v.file("uploader.jws", set["software_statement"].as_str().unwrap());
    let entry = format!(
        "[[client]]\nid = \"{id}\"\ngrants = [\"client_credentials\"]\nsoftware_statement_file = \"uploader.jws\"\n"
    );
    let file = v.file("clients.toml", &entry);
    let before = admin(&f.dir, &["client", "list", "--json"], None);
    let config = v.config.to_str().unwrap();
    let dry = stdout_of(&admin_output(
        &f.dir,
        &["apply", &file, "--dry-run", "--config", config],
        None,
    ));
    assert!(
        dry.contains(&format!("+ client {id}: statement of acme")) && dry.contains("activated"),
        "{dry}"
    );
    assert_eq!(admin(&f.dir, &["client", "list", "--json"], None), before);

    let out = stdout_of(&apply(&v, &f.dir, &file));
    assert!(out.contains("applied 2 changes"), "{out}");
    assert_eq!(client_credentials(&s, id, secret).await.status, 200);
    assert_error(
        &alice_signs_in(&s, id, secret).await,
        400,
        "unauthorized_client",
    );
    assert!(stdout_of(&apply(&v, &f.dir, &file)).contains("no change"));

    // A newer statement, written in the file: the secret rotated, both working.
    std::thread::sleep(Duration::from_millis(1100));
    let second = v.issue(&v.key, &["--grants", all, "--client-id", id]);
    let inline = format!(
        "[[client]]\nid = \"{id}\"\ngrants = [\"client_credentials\"]\nsoftware_statement = \"{}\"\n",
        second["software_statement"].as_str().unwrap()
    );
    let out = stdout_of(&apply(&v, &f.dir, &v.file("rotated.toml", &inline)));
    assert!(out.contains("(newer)"), "{out}");
    for secret in [secret, second["client_secret"].as_str().unwrap()] {
        assert_eq!(client_credentials(&s, id, secret).await.status, 200);
    }

    // Declared inactive: imported, pending.
    let waiting = v.issue(&v.key, &["--grants", "client_credentials"]);
    let wid = waiting["client_id"].as_str().unwrap();
    v.file(
        "waiting.jws",
        waiting["software_statement"].as_str().unwrap(),
    );
    let entry = format!(
        "[[client]]\nid = \"{wid}\"\ngrants = [\"client_credentials\"]\nactive = false\nsoftware_statement_file = \"waiting.jws\"\n"
    );
    stdout_of(&apply(&v, &f.dir, &v.file("waiting.toml", &entry)));
    let a = client_credentials(&s, wid, waiting["client_secret"].as_str().unwrap()).await;
    assert_error(&a, 400, "unauthorized_client");

    // Refused, changing nothing: an untrusted key (audited), wider than the statement, a
    // statement of another client id, a statement with a secret_file.
    let mallory = super::vendor::keygen(&f._tmp.path().join("mallory-keys"), "EdDSA");
    let untrusted = v.issue(&mallory, &["--grants", "client_credentials"]);
    let narrow = v.issue(&v.key, &["--grants", "client_credentials"]);
    let entry = |id: &Value, grants: &str, statement: &Value, extra: &str| {
        format!(
            "[[client]]\nid = {id}\ngrants = [{grants}]\nsoftware_statement = {statement}\n{extra}"
        )
    };
    let (cc, pw) = ("\"client_credentials\"", "\"password\"");
    let cases = [
        (
            entry(
                &untrusted["client_id"],
                cc,
                &untrusted["software_statement"],
                "",
            ),
            "unapproved_software_statement",
        ),
        (
            entry(&narrow["client_id"], pw, &narrow["software_statement"], ""),
            "never widens",
        ),
        (
            entry(&Value::from("other"), cc, &narrow["software_statement"], ""),
            "is of client",
        ),
        (
            entry(
                &narrow["client_id"],
                cc,
                &narrow["software_statement"],
                "secret_file = \"s\"\n",
            ),
            "no secret_file",
        ),
    ];
    let before = admin(&f.dir, &["client", "list", "--json"], None);
    for (n, (text, why)) in cases.iter().enumerate() {
        let out = apply(&v, &f.dir, &v.file(&format!("hostile{n}.toml"), text));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(why),
            "{n}: {stderr}"
        );
    }
    assert_eq!(admin(&f.dir, &["client", "list", "--json"], None), before);
    let events = trail(&f.dir);
    assert!(events.iter().any(|e| e["action"] == "client.refused"));
    // Each change of the client in the trail, with its state before and after.
    let changes: Vec<&Value> = events.iter().filter(|e| e["target"] == id).collect();
    let actions: Vec<&str> = changes
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        ["client.import", "client.activate", "client.import"],
        "{changes:?}"
    );
    assert_eq!(changes[0]["before"], Value::Null, "imported: none before");
    for e in changes {
        assert_ne!(e["before"], e["after"], "{e}");
    }
}

#[tokio::test]
async fn a_list_written_into_the_watched_file_ends_the_client_at_once() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let mut text = std::fs::read_to_string(&v.config).unwrap();
    text.push_str("revocations = \"lists/acme-revoked.jws\"\n");
    std::fs::write(&v.config, &text).unwrap();
    std::fs::create_dir(f._tmp.path().join("lists")).unwrap();
    let set = v.issue(&v.key, &["--grants", "client_credentials"]);
    let (id, secret) = (
        set["client_id"].as_str().unwrap(),
        set["client_secret"].as_str().unwrap(),
    );
    let s = Server::start(&f.dir, &["--config", v.config.to_str().unwrap()]);
    let file = v.file("set.jws", set["software_statement"].as_str().unwrap());
    stdout_of(&v.import(&f.dir, &file));
    admin(&f.dir, &["client", "activate", id], None);
    let a = client_credentials(&s, id, secret).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let token = a.json["access_token"].as_str().unwrap().to_owned();

    // Written in place, no SIGHUP: the file is read within the settling time, far sooner than
    // the minute the sweep reads it in.
    let list = super::vendor::issuer(&["vendor", "revoke", "--key", v.key.to_str().unwrap(), id]);
    let written = std::time::Instant::now();
    v.file("lists/acme-revoked.jws", &list);
    let mut ended = false;
    while written.elapsed() < Duration::from_secs(20) && !ended {
        tokio::time::sleep(Duration::from_millis(50)).await;
        ended = client_credentials(&s, id, secret).await.status == 401;
    }
    assert!(
        ended,
        "still served {:?} after the list was written",
        written.elapsed()
    );
    ended_by(
        &s,
        &f,
        &token,
        ("client.vendor_revoke", id),
        "revocation file",
    )
    .await;
}
