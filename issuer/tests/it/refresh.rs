//! Refresh tokens: rotation, the retry window, reuse, binding to the client, lifetimes.

use super::*;

#[tokio::test]
async fn refresh_rotates_and_retry_inside_the_window_gets_the_same_successor() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let first = password_grant(&s, &f).await;
    let rt1 = first.json["refresh_token"].as_str().unwrap().to_owned();
    let a = refresh(&s, &f, &rt1).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    let rt2 = a.json["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(rt1, rt2);
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    assert_eq!(t.body().identity.subject, "alice");
    // A retry of rt1 (lost response) gets rt2 again, not a branch.
    let retry = refresh(&s, &f, &rt1).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.json["refresh_token"], rt2.as_str());
    // rt2 rotates on; now rt1 is stale even inside the window: the family is revoked.
    let rt3 = refresh(&s, &f, &rt2).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt3).await, 400, "invalid_grant");
    // Another sign-in's family is untouched.
    let other = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(refresh(&s, &f, &other).await.status, 200);
}

#[tokio::test]
async fn reuse_outside_the_window_revokes_the_family() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--refresh-retry-window", "0"]);
    let rt1 = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt2 = refresh(&s, &f, &rt1).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // A window of 0 s: the rotation's second has to pass.
    e2e::wait::next_second().await;
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt2).await, 400, "invalid_grant");
    let metrics = reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("result=\"reuse_detected\"") && metrics.contains("result=\"revoked\""),
        "{metrics}"
    );
}

#[tokio::test]
async fn refresh_tokens_are_bound_to_their_client_and_expire() {
    let f = fixture();
    let other = add_client(&f.dir, "other", &["--grants", "password"]);
    let s = Server::start(&f.dir, &["--refresh-idle-ttl", "2"]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = post(
        &s.token_url(),
        Some(("other", &other)),
        &[("grant_type", "refresh_token"), ("refresh_token", &rt)],
    )
    .await;
    assert_error(&a, 400, "invalid_grant");
    // The foreign attempt did not spend or revoke it.
    let rt2 = refresh(&s, &f, &rt).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // Rotated at or before this second, rt2 has expired by the issuer's clock 2 s later.
    e2e::wait::until_second(e2e::unix_now() + 2).await;
    assert_error(&refresh(&s, &f, &rt2).await, 400, "invalid_grant");
}

#[tokio::test]
async fn refresh_rechecks_client_and_user_and_takes_current_roles() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    admin(&f.dir, &["user", "disable", "alice"], None);
    assert_error(&refresh(&s, &f, &rt).await, 400, "invalid_grant");
    admin(&f.dir, &["user", "enable", "alice"], None);
    // Enabled again, the user signs in afresh: the disable ended the older family for good.
    assert_error(&refresh(&s, &f, &rt).await, 400, "invalid_grant");
    // (Families started in the second of the disable end with it: tokens carry whole seconds.)
    e2e::wait::next_second().await;
    let fresh = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = refresh(&s, &f, &fresh).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let rt2 = a.json["refresh_token"].as_str().unwrap().to_owned();
    admin(&f.dir, &["client", "deactivate", "app"], None);
    assert_error(&refresh(&s, &f, &rt2).await, 401, "invalid_client");
    admin(&f.dir, &["client", "activate", "app"], None);
    assert_eq!(refresh(&s, &f, &rt2).await.status, 200);
}

#[tokio::test]
async fn concurrent_refreshes_of_one_token_yield_exactly_one_successor() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let req = client
                .post(s.token_url())
                .basic_auth("app", Some(&f.secret))
                .form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", rt.as_str()),
                ]);
            tokio::spawn(async move { answer(req.send().await.unwrap()).await })
        })
        .collect();
    let mut successors = std::collections::HashSet::new();
    for t in tasks {
        let a = t.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.json);
        successors.insert(a.json["refresh_token"].as_str().unwrap().to_owned());
    }
    assert_eq!(successors.len(), 1, "the family forked: {successors:?}");
    let next = successors.into_iter().next().unwrap();
    assert_eq!(refresh(&s, &f, &next).await.status, 200);
}
