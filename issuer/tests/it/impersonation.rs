//! Impersonation with the client credentials grant: what a client may assert, and how.

use super::*;

/// A client credentials grant of `client` with `extra` form fields.
async fn impersonate(s: &Server, client: Option<(&str, &str)>, extra: &[(&str, &str)]) -> Answer {
    let mut form = vec![("grant_type", "client_credentials")];
    form.extend_from_slice(extra);
    post(&s.token_url(), client, &form).await
}

/// The body of the access token of `a`, verified with `ring`.
fn body(ring: &KeyRing, a: &Answer) -> token::TokenBody {
    token::verify(ring, a.json["access_token"].as_str().unwrap(), now(), 0)
        .unwrap()
        .into_body()
}

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
    step_claims_supersede_impersonate_as_and_roles(&s, &f, &ring).await;
    step_the_obsolete_pair_still_works(&s, &f, &ring).await;
    step_malformed_lists_are_invalid_requests(&s, &f).await;
    step_a_client_is_held_to_its_claim_types(&s, ("limited", &limited)).await;
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    assert!(
        log.contains("impersonation") && log.contains("upn=carol@corp"),
        "audit log line missing"
    );
}

/// Step: claims supersede `impersonate_as` and `roles`, even malformed ones; no refresh token.
async fn step_claims_supersede_impersonate_as_and_roles(s: &Server, f: &Fixture, ring: &KeyRing) {
    let extra = [
        ("impersonate_as", "ignored"),
        ("roles", ",,"),
        ("impersonate_claims", " upn = carol@corp , group=ops"),
    ];
    let a = impersonate(s, f.app(), &extra).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert!(a.json.get("refresh_token").is_none());
    let b = body(ring, &a);
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
}

/// Step: the obsolete pair `impersonate_as` and `roles` still works.
async fn step_the_obsolete_pair_still_works(s: &Server, f: &Fixture, ring: &KeyRing) {
    let extra = [("impersonate_as", "dave"), ("roles", "admin, auditor")];
    let b = body(ring, &impersonate(s, f.app(), &extra).await);
    assert_eq!(
        (b.identity.subject.as_str(), b.identity.roles.clone()),
        ("dave", vec!["admin".to_string(), "auditor".to_string()])
    );
}

/// Step: malformed lists, and too many claims, are `invalid_request`.
async fn step_malformed_lists_are_invalid_requests(s: &Server, f: &Fixture) {
    let huge = vec!["t=v"; 65].join(",");
    for (k, v) in [
        ("impersonate_claims", "a=b,,c=d"),
        ("impersonate_claims", "=x"),
        ("impersonate_claims", "k=v=w"),
        ("roles", "a,,b"),
        ("impersonate_claims", &huge),
    ] {
        let a = impersonate(s, f.app(), &[(k, v)]).await;
        assert_error(&a, 400, "invalid_request");
    }
}

/// Step: a client limited to claim types asserts those alone: not others, nor roles.
async fn step_a_client_is_held_to_its_claim_types(s: &Server, limited: (&str, &str)) {
    let lim = Some(limited);
    let a = impersonate(s, lim, &[("impersonate_claims", "upn=x")]).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let a = impersonate(s, lim, &[("impersonate_as", "x")]).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let a = impersonate(s, lim, &[("impersonate_claims", "upn=x,group=y")]).await;
    assert_error(&a, 400, "unauthorized_client");
    let a = impersonate(s, lim, &[("roles", "admin")]).await;
    assert_error(&a, 400, "unauthorized_client");
}
