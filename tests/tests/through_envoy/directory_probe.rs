//! The third outside probe's findings in directory sign-in, through the real stack against a
//! real OpenLDAP whose password policy locks an entry after
//! [`e2e::slapd::LOCKOUT_FAILURES`] refused binds: a user is the directory entry whatever
//! spelling signs in (a disable, a revocation and Envoy act on it); guesses for the directory
//! never hold a local user; binds of one entry are counted before they are sent, whatever the
//! spelling and however many at once; a held entry answers like any refusal; and a name the
//! store lacks costs the same password check as one it holds.

use crate::directory::{call_ok, directory_stack, introspect, metrics, refused_at_envoy};
use crate::directory::{sign_in, TIMEOUT_MS};
use e2e::slapd::Slapd;
use e2e::{DirectoryTable, Stack, Tools};
use serde_json::Value;

/// Spellings of `name` that OpenLDAP's `uid` matching (`caseIgnoreMatch`) finds the entry by.
fn spellings(name: &str) -> Vec<String> {
    let fullwidth: String = name
        .chars()
        .map(|c| char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap())
        .collect();
    vec![
        name.to_owned(),
        name.to_uppercase(),
        format!("{}{}", name[..1].to_uppercase(), &name[1..]),
        format!("{name} "),
        format!(" {name}"),
        fullwidth,
        format!("{name}\u{00A0}"),
        format!("{name}\u{3000}"),
    ]
}

/// A stack signing in with one OpenLDAP, edge sync on; users are found by `uid` or by `mail`.
/// `None` where the tools are missing outside CI (under `CI` a missing tool fails the test).
async fn ldap_stack() -> (tempfile::TempDir, Slapd, Stack) {
    let (tools, ldap) = (Tools::for_test(), Slapd::for_test());
    let tmp = tempfile::tempdir().unwrap();
    let by_uid_or_mail = "(&(objectClass=inetOrgPerson)(|(uid={username})(mail={username})))";
    let table = DirectoryTable {
        timeout_ms: Some(TIMEOUT_MS),
        user_filter: Some(by_uid_or_mail.into()),
        ..DirectoryTable::slapd(&[&ldap])
    }
    .role(ldap.group_dn("editors"), "editor");
    let s = directory_stack(tmp.path(), &tools, &table).await;
    (tmp, ldap, s)
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn a_directory_user_is_the_entry_whatever_spelling_signs_in() {
    let (_tmp, ldap, s) = ldap_stack().await;

    // Every spelling signs in as the entry's own name.
    let mut tokens = Vec::new();
    for spelling in spellings("alice").iter().take(3) {
        let (status, token) = sign_in(&s, spelling, ldap.password("alice")).await;
        assert_eq!(status, 200, "{spelling:?}: {token}");
        let seen = introspect(&s, &token).await;
        assert_eq!(seen["sub"], "alice", "{spelling:?}: {seen}");
        assert_eq!(seen["roles"], serde_json::json!(["editor"]));
        tokens.push(token);
    }
    let users = s.admin(&["user", "list"], None).unwrap();
    assert!(
        !users.contains("ALICE") && !users.contains("Alice"),
        "{users}"
    );

    // One disable ends them all, at the issuer and at every Envoy.
    s.admin(&["user", "disable", "alice"], None).unwrap();
    for token in &tokens {
        assert_eq!(introspect(&s, token).await["active"], false);
        refused_at_envoy(&s, token, "alice").await;
    }
    // And no spelling gets a new token: refused, alike.
    for spelling in spellings("alice") {
        let (status, v) = sign_in(&s, &spelling, ldap.password("alice")).await;
        assert!(
            status == 400 || status == 429,
            "{spelling:?} signed in after the disable: {status} {v}"
        );
    }
    // Another user's tokens are untouched.
    let (status, carol) = sign_in(&s, "CAROL", ldap.password("carol")).await;
    assert_eq!(status, 200, "{carol}");
    assert_eq!(introspect(&s, &carol).await["sub"], "carol");
    call_ok(&s, &carol).await;
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn guesses_for_the_directory_never_hold_a_local_user() {
    let (_tmp, _ldap, s) = ldap_stack().await;
    let password = "break-glass-password-long-enough";
    s.admin(&["user", "add", "breakglass"], Some(password))
        .unwrap();
    for _ in 0..8 {
        let (status, v) = sign_in(&s, "BREAKGLASS", "wrong").await;
        assert!(status == 400 || status == 429, "{status} {v}");
    }
    let (status, v) = sign_in(&s, "breakglass", password).await;
    assert_eq!(
        status, 200,
        "the local user is held by guesses at another name: {v}"
    );
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn concurrent_guesses_in_every_spelling_never_lock_the_entry_at_the_directory() {
    let (_tmp, ldap, s) = ldap_stack().await;
    let names: Vec<String> = spellings("bob").into_iter().cycle().take(20).collect();
    let guesses = names.iter().map(|n| sign_in(&s, n, "not-bobs-password"));
    let answers = futures_util::future::join_all(guesses).await;
    for (status, v) in &answers {
        assert!(*status == 400 || *status == 429, "{status} {v}");
    }
    let failures = ldap.failures("bob").unwrap();
    assert!(
        failures <= 4,
        "{failures} refused binds reached the directory"
    );
    assert!(!ldap.locked_out("bob").unwrap(), "bob is locked out");
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn a_held_entry_answers_like_a_name_without_one() {
    let (_tmp, _ldap, s) = ldap_stack().await;
    let after = |name: &'static str| {
        let s = &s;
        async move {
            for _ in 0..4 {
                sign_in(s, name, "wrong-password").await;
            }
            let mut answers: Vec<(u16, Value)> = Vec::new();
            // The mail address finds the same entry under a name that folds otherwise.
            let mail = format!("{name}@media.test");
            for spelling in spellings(name).into_iter().skip(1).chain([mail]) {
                answers.push(sign_in(s, &spelling, "wrong-password").await);
            }
            answers
        }
    };
    let real = after("bob").await;
    let unknown = after("zed").await;
    assert_eq!(real, unknown, "an entry that exists answers otherwise");
    assert!(s.stop());
}

/// The time of a refusal must not tell local names from the others: a local user's wrong password
/// costs a password check, so a refusal of a name the store lacks (asked of the directory, which
/// answers within milliseconds) lasts at least the check's typical time, which the issuer
/// publishes as `issuer_password_check_typical_seconds`. A wait, not the work: directory sign-ins
/// keep their throughput.
#[tokio::test]
#[ignore = "needs Envoy and slapd: `cargo xtask test` runs it"]
async fn a_refusal_for_the_directory_lasts_as_long_as_a_password_check() {
    let (_tmp, _ldap, s) = ldap_stack().await;
    s.admin(
        &["user", "add", "svc-local"],
        Some("svc-local-password-long"),
    )
    .unwrap();
    sign_in(&s, "svc-local", "wrong").await;
    let m = metrics(&s).await;
    let typical: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("issuer_password_check_typical_seconds "))
        .unwrap_or_else(|| panic!("no typical check time:\n{m}"))
        .trim()
        .parse()
        .unwrap();
    assert!(typical > 0.0, "{m}");
    for (name, password) in [
        ("nobody-here", "wrong"),
        ("bob", "wrong"),
        ("ALICE", "wrong"),
    ] {
        let started = std::time::Instant::now();
        let (status, v) = sign_in(&s, name, password).await;
        let took = started.elapsed().as_secs_f64();
        assert_eq!(status, 400, "{name}: {v}");
        assert!(
            took >= typical,
            "{name}: refused in {took:.4} s, a password check takes {typical:.4} s"
        );
    }
    assert!(s.stop());
}
