//! Each kind of refusal of an admin command through real HTTP, with the status and `error` code
//! of `docs/admin-api.md` (Errors): 404 for what is not there, 400 for an id that breaks the
//! rules or a change wider than a statement allows, 409 for what the item's state forbids, 412
//! for a stale ETag; none of them writes or audits anything.

use super::*;
use issuer::admin::sessions::SESSION_ID_RULE;

/// A refusal: method, path, body, If-Match; then status, error code, and the start of its
/// description.
type Case<'a> = (
    &'a str,
    String,
    Option<Value>,
    Option<&'a str>,
    (u16, &'a str, &'a str),
);

#[tokio::test]
async fn each_kind_of_refusal_has_its_status() {
    let s = start();
    let root = s.sign_in("root").await;
    let clients = s.get(&root, "/apiv2/admin/clients").await;
    let users = s.get(&root, "/apiv2/admin/users").await;
    let audit = s.audit(&root).await.len();
    let idle = s.get(&root, "/apiv2/admin/clients/idle").await["etag"]
        .as_str()
        .unwrap()
        .to_owned();
    let reserved = issue(
        &s,
        &[
            "--grants",
            "client_credentials",
            "--client-id",
            "admin-console",
        ],
    );
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/apiv2/admin/clients/ghost".into(),
            None,
            None,
            (404, "not_found", "no such client"),
        ),
        (
            "POST",
            "/apiv2/admin/clients/ghost/deactivate".into(),
            Some(json!({})),
            Some(&idle),
            (404, "not_found", "no such client"),
        ),
        (
            "GET",
            "/apiv2/admin/clients/a%3Ab".into(),
            None,
            None,
            (400, "invalid_request", "a client id is 1 to 255 characters"),
        ),
        (
            "POST",
            "/apiv2/admin/users/a%01b/disable".into(),
            Some(json!({})),
            Some(&idle),
            (400, "invalid_request", "a user name is 1 to 255 characters"),
        ),
        (
            "POST",
            "/apiv2/admin/sessions/xyz/revoke".into(),
            Some(json!({})),
            Some(&idle),
            (400, "invalid_request", SESSION_ID_RULE),
        ),
        (
            "POST",
            "/apiv2/admin/clients/import".into(),
            Some(json!({"statement": reserved["software_statement"]})),
            None,
            (
                400,
                "invalid_request",
                "the client id \"admin-console\" is reserved",
            ),
        ),
        (
            "POST",
            "/apiv2/admin/clients/idle/activate".into(),
            Some(json!({"grants": ["client_credentials"]})),
            Some(&idle),
            (409, "conflict", "client \"idle\" is not a vendor's"),
        ),
        (
            "POST",
            "/apiv2/admin/clients/idle/deactivate".into(),
            Some(json!({})),
            Some("\"0000\""),
            (412, "stale", "the item changed since it was read"),
        ),
    ];
    for (method, path, body, if_match, (status, code, why)) in cases {
        let a = s.call(&root, method, &path, body, if_match).await;
        let what = format!("{method} {path}: {}", a.json);
        assert_eq!(a.status, status, "{what}");
        assert_eq!(a.json["error"], code, "{what}");
        let description = a.json["error_description"].as_str().unwrap();
        assert!(description.starts_with(why), "{what}");
    }
    assert_eq!(s.get(&root, "/apiv2/admin/clients").await, clients);
    assert_eq!(s.get(&root, "/apiv2/admin/users").await, users);
    assert_eq!(s.audit(&root).await.len(), audit, "nothing audited");
}

#[tokio::test]
async fn an_activation_wider_than_the_statement_is_400_and_changes_nothing() {
    let s = start();
    let root = s.sign_in("root").await;
    let set = issue(&s, &["--grants", "client_credentials"]);
    let id = set["client_id"].as_str().unwrap();
    let body = json!({"statement": set["software_statement"]});
    let a = s
        .call(
            &root,
            "POST",
            "/apiv2/admin/clients/import",
            Some(body),
            None,
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.json);
    let path = format!("/apiv2/admin/clients/{id}");
    let before = s.get(&root, &path).await;
    let audit = s.audit(&root).await.len();
    let wider = json!({"grants": ["password"]});
    let tag = before["etag"].as_str().unwrap();
    let a = s
        .call(
            &root,
            "POST",
            &format!("{path}/activate"),
            Some(wider),
            Some(tag),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.json);
    assert_eq!(a.json["error"], "invalid_request");
    let description = a.json["error_description"].as_str().unwrap();
    assert!(description.contains("never widens"), "{description}");
    assert_eq!(s.get(&root, &path).await, before, "still pending");
    assert_eq!(s.audit(&root).await.len(), audit, "nothing audited");
}
