//! A fixed defect: a client deactivated and activated again, a user disabled and enabled
//! again, or given a new password, and a token issued right after, in the same second as the
//! revocation or the next. The invariant, on both stores: a token the issuer answers with 200 is
//! accepted at the edge and by introspection until it expires or something revokes it after it
//! was issued. Before the fix such tokens were refused everywhere for their whole life.

use crate::directory::{introspect, refresh, sign_in};
use crate::edge::{call, wait_for_sync, PROPAGATION};
use e2e::{demo, Options, Stack, Tools};
use serde_json::Value;

/// A stack with edge sync, on redb or on PostgreSQL.
async fn stack(postgres: bool) -> Option<(tempfile::TempDir, Stack)> {
    let tools = Tools::for_test()?;
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        postgres,
        ..Options::default()
    };
    let s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&s).await;
    Some((tmp, s))
}

/// Sign-in and refresh right after `restore` (which revoked something and lifted it again): each
/// answered 200, and its access token still accepted once every revocation reached the edge.
async fn tokens_live_after(s: &Stack, what: &str, password: &str, restore: impl Fn()) {
    for round in 0..3 {
        restore();
        let (status, signed_in) = sign_in(s, demo::USER, password).await;
        assert_eq!(status, 200, "{what}, round {round}: {signed_in}");
        let (status, refreshed) = refresh(s, &signed_in).await;
        assert_eq!(status, 200, "{what}, round {round}: {refreshed}");
        tokio::time::sleep(PROPAGATION).await;
        for (which, token) in [("signed in", &signed_in), ("refreshed", &refreshed)] {
            let access = token["access_token"].as_str().unwrap();
            let (status, www) = call(s, access).await;
            assert_eq!(
                status, 200,
                "{what}, round {round}, {which}: refused at the edge: {www}"
            );
            let seen: Value = introspect(s, token).await;
            assert_eq!(
                seen["active"], true,
                "{what}, round {round}, {which}: {seen}"
            );
        }
    }
}

async fn revoked_and_restored(postgres: bool) {
    let Some((_tmp, s)) = stack(postgres).await else {
        return;
    };
    let admin = |args: &[&str], stdin: Option<&str>| {
        s.admin(args, stdin).unwrap();
    };
    tokens_live_after(
        &s,
        "client deactivated and activated",
        demo::PASSWORD,
        || {
            admin(&["client", "deactivate", demo::CLIENT], None);
            admin(&["client", "activate", demo::CLIENT], None);
        },
    )
    .await;
    tokens_live_after(&s, "user disabled and enabled", demo::PASSWORD, || {
        admin(&["user", "disable", demo::USER], None);
        admin(&["user", "enable", demo::USER], None);
    })
    .await;
    let new_password = "demo-password-2";
    tokens_live_after(&s, "a new password", new_password, || {
        admin(&["user", "passwd", demo::USER], Some(new_password));
    })
    .await;
}

#[tokio::test]
async fn tokens_issued_after_a_revocation_was_lifted_live_on_redb() {
    revoked_and_restored(false).await;
}

#[tokio::test]
async fn tokens_issued_after_a_revocation_was_lifted_live_on_postgres() {
    revoked_and_restored(true).await;
}
