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

/// The audit trail as JSON objects.
fn trail(dir: &Path) -> Vec<Value> {
    admin(dir, &["audit", "--json"], None)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
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
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", &token)],
    )
    .await;
    assert_eq!(i.json["active"], false, "{}", i.json);
    let events = trail(&f.dir);
    let expired = events
        .iter()
        .find(|e| e["action"] == "client.deactivate" && e["target"] == id)
        .unwrap_or_else(|| panic!("no deactivation: {events:?}"));
    assert_eq!(expired["actor"], "statement expiry", "{expired}");
    assert_eq!(expired["at"], rfc3339(exp), "at the second: {expired}");
    assert_eq!(
        (&expired["before"]["active"], &expired["after"]["active"]),
        (&Value::Bool(true), &Value::Bool(false)),
        "{expired}"
    );
}
