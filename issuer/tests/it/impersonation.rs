//! Impersonation with the client credentials grant: what a client may assert, and how.

use super::*;

#[tokio::test]
async fn impersonation_rules() {
    let f = fixture();
    let limited = add_client(
        &f.dir,
        "limited",
        &["--impersonate", "--impersonate-claim-types", "upn,name"],
    );
    let s = Server::start(&f.dir, &[]);
    let ring = ring(&f.dir);
    let identity = |a: &Answer| {
        token::verify(&ring, a.json["access_token"].as_str().unwrap(), now(), 0)
            .unwrap()
            .into_body()
    };

    // Claims supersede impersonate_as and roles, even malformed ones.
    let a = post(
        &s.token_url(),
        f.app(),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "ignored"),
            ("roles", ",,"),
            ("impersonate_claims", " upn = carol@corp , group=ops"),
        ],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert!(a.json.get("refresh_token").is_none());
    let b = identity(&a);
    assert_eq!(b.identity.kind, SubjectKind::Impersonation);
    assert_eq!(b.client, "app");
    assert_eq!(b.identity.subject, "");
    assert!(b.identity.roles.is_empty());
    let claims: Vec<_> = b
        .identity
        .claims
        .iter()
        .map(|c| (c.typ.as_str(), c.value.as_str()))
        .collect();
    assert_eq!(claims, [("upn", "carol@corp"), ("group", "ops")]);

    // The obsolete pair still works.
    let a = post(
        &s.token_url(),
        f.app(),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "dave"),
            ("roles", "admin, auditor"),
        ],
    )
    .await;
    let b = identity(&a);
    assert_eq!(
        (b.identity.subject.as_str(), b.identity.roles.clone()),
        ("dave", vec!["admin".to_string(), "auditor".to_string()])
    );

    // Malformed lists.
    for (k, v) in [
        ("impersonate_claims", "a=b,,c=d"),
        ("impersonate_claims", "=x"),
        ("impersonate_claims", "k=v=w"),
        ("roles", "a,,b"),
    ] {
        let a = post(
            &s.token_url(),
            f.app(),
            &[("grant_type", "client_credentials"), (k, v)],
        )
        .await;
        assert_error(&a, 400, "invalid_request");
    }
    let huge = vec!["t=v"; 65].join(",");
    assert_error(
        &post(
            &s.token_url(),
            f.app(),
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", &huge),
            ],
        )
        .await,
        400,
        "invalid_request",
    );

    // Limited to claim types.
    let lim = Some(("limited", limited.as_str()));
    assert_eq!(
        post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "upn=x")
            ]
        )
        .await
        .status,
        200
    );
    assert_eq!(
        post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_as", "x")
            ]
        )
        .await
        .status,
        200
    );
    assert_error(
        &post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "upn=x,group=y"),
            ],
        )
        .await,
        400,
        "unauthorized_client",
    );
    assert_error(
        &post(
            &s.token_url(),
            lim,
            &[("grant_type", "client_credentials"), ("roles", "admin")],
        )
        .await,
        400,
        "unauthorized_client",
    );
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    assert!(
        log.contains("impersonation") && log.contains("upn=carol@corp"),
        "audit log line missing"
    );
}
