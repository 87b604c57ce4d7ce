//! The OpenLDAP `[directory]` example of `docs/directory.md`, run as written against a throwaway
//! OpenLDAP server ([`Slapd`]): only the server's address, the password file, the CA and the
//! suffix are put in place of the example's, over `ldaps://` and over StartTLS. The example
//! names the fixture's own entries (`cn=svc-issuer,ou=services`, the `editors` and `all-staff`
//! groups, `mail`), so a page that drifts from what works fails here.

use e2e::{root, Slapd, Tools};
use serde_json::Value;
use std::path::Path;

/// The example's suffix, files and first server, which the test replaces.
const EXAMPLE_BASE_DN: &str = "dc=example,dc=org";
const EXAMPLE_PASSWORD_FILE: &str = "/etc/issuer/directory-password";
const EXAMPLE_CA_FILE: &str = "/etc/issuer/directory-ca.pem";

/// The ```toml block of `docs/directory.md` with `kind = "ldap"`.
fn documented_table() -> String {
    let doc = std::fs::read_to_string(root().join("docs/directory.md")).unwrap();
    doc.split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block.to_owned()))
        .find(|block| block.contains("kind = \"ldap\""))
        .expect("docs/directory.md shows an OpenLDAP [directory] table")
}

/// `table` for the test server `ldap`: its `url` alone in `urls` (StartTLS on it if `starttls`),
/// its password file, CA and suffix.
fn for_server(table: &str, ldap: &Slapd, url: &str, starttls: bool) -> String {
    let mut out = String::new();
    for line in table.lines() {
        if line.starts_with("urls =") {
            out.push_str(&format!("urls = [\"{url}\"]\n"));
            if starttls {
                out.push_str("starttls = true\n");
            }
            continue;
        }
        let line = line
            .replace(EXAMPLE_BASE_DN, ldap.base_dn())
            .replace(
                EXAMPLE_PASSWORD_FILE,
                &ldap.bind_password_file().display().to_string(),
            )
            .replace(EXAMPLE_CA_FILE, &ldap.ca_file().display().to_string());
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `issuer ARGS --config CONFIG` with `stdin`: whether it succeeded, and what it printed.
fn issuer(tools: &Tools, config: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    e2e::issuer::run_with_config(tools, config, args, stdin).unwrap()
}

#[test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
fn the_documented_openldap_table_signs_users_in() {
    let tools = Tools::for_test();
    let ldap = Slapd::for_test();
    let documented = documented_table();
    let service = ldap.bind_dn().replace(ldap.base_dn(), EXAMPLE_BASE_DN);
    assert!(documented.contains(&service), "{documented}");
    let tmp = tempfile::tempdir().unwrap();
    for (url, starttls) in [(ldap.ldaps_url(), false), (ldap.ldap_url(), true)] {
        let table = for_server(&documented, &ldap, &url, starttls);
        let config = tmp.path().join(format!("issuer-{starttls}.toml"));
        e2e::write_private(&config, table.as_bytes()).unwrap();
        let (ok, out) = issuer(&tools, &config, &["directory", "check"], "");
        assert!(ok && out.contains("tls:            ok"), "{table}\n{out}");
        let password = format!("{}\n", ldap.password("alice"));
        let (ok, out) = issuer(&tools, &config, &["directory", "test", "alice"], &password);
        assert!(ok, "{table}\n{out}");
        let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(v["name"], "alice", "{v}");
        assert_eq!(v["dn"], ldap.user_dn("alice"), "{v}");
        assert!(
            v["id"].as_str().unwrap().starts_with("id:"),
            "entryUUID: {v}"
        );
        assert_eq!(v["roles"], serde_json::json!(["editor", "staff"]), "{v}");
        assert_eq!(
            v["claims"],
            serde_json::json!([{"type": "email", "value": "alice@media.test"}]),
            "{v}"
        );
        assert_eq!(v["server"], url, "{v}");
    }
}
