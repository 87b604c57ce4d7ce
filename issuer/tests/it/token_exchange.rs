//! Token exchange (RFC 8693) through the real binary: a chain of three services acting for a
//! user, each token bounded by its subject's, introspected with its nested `act`; every hostile
//! input refused with its OAuth error and nothing issued (no `token.exchange` in the audit
//! trail); the revocation of an actor refusing what was exchanged through it.

use super::*;
use shared::dpop::sign::{ProofClaims, ProofKey};
use shared::grant::{ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE};

/// The services of the chain and a few to refuse, each with its secret.
struct Services {
    f: Fixture,
    secrets: std::collections::HashMap<&'static str, String>,
}

impl Services {
    fn new() -> Self {
        let f = fixture();
        let mut secrets = std::collections::HashMap::new();
        for (id, args) in [
            (
                "uploader",
                &[
                    "--exchange-from",
                    "app,transcoder",
                    "--exchange-audience",
                    "media",
                ][..],
            ),
            ("transcoder", &["--exchange-from", "uploader"][..]),
            ("media", &["--exchange-from", "transcoder"][..]),
            (
                "shallow",
                &["--exchange-from", "transcoder", "--exchange-max-depth", "2"][..],
            ),
            (
                "admins_only",
                &["--exchange-from", "app", "--exchange-subject-role", "admin"][..],
            ),
            (
                "news_editors",
                &[
                    "--exchange-from",
                    "app",
                    "--exchange-subject-role",
                    "editor",
                    "--exchange-subject-claim",
                    "email=alice@example.com",
                ][..],
            ),
            ("plain", &[][..]),
        ] {
            secrets.insert(id, add_client(&f.dir, id, args));
        }
        Self { f, secrets }
    }

    fn auth(&self, id: &'static str) -> Option<(&'static str, &str)> {
        Some((id, self.secrets[id].as_str()))
    }
}

/// A token exchange by `client` of `subject` with `extra` form fields.
async fn exchange(
    s: &Server,
    client: Option<(&str, &str)>,
    subject: &str,
    extra: &[(&str, &str)],
) -> Answer {
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token", subject),
        ("subject_token_type", ACCESS_TOKEN_TYPE),
    ];
    form.extend_from_slice(extra);
    post(&s.token_url(), client, &form).await
}

fn access(a: &Answer) -> String {
    assert_eq!(a.status, 200, "{}", a.json);
    a.json["access_token"].as_str().unwrap().to_owned()
}

fn body_of(ring: &KeyRing, token: &str) -> token::TokenBody {
    token::verify_any_with(
        ring,
        token,
        now(),
        token::Limits {
            skew: 0,
            max_lifetime: u64::MAX,
        },
    )
    .unwrap()
    .into_body()
}

/// How many audit events of `action` the trail holds.
fn audited(dir: &Path, action: &str) -> usize {
    admin(dir, &["audit", "--json"], None)
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["action"] == action)
        .count()
}

/// Waits until the trail holds at least `n` events of `action` (the issuer writes them in the
/// background); panics if it never does.
async fn audited_at_least(dir: &Path, action: &str, n: usize) {
    let held = e2e::wait::until(e2e::wait::LONG, async || audited(dir, action) >= n).await;
    assert!(
        held,
        "fewer than {n} {action} events: {}",
        audited(dir, action)
    );
}

#[tokio::test]
async fn a_chain_of_three_services_acts_for_a_user() {
    let sv = Services::new();
    let s = Server::start(&sv.f.dir, &[]);
    let ring = ring(&sv.f.dir);
    let user = access(&password_grant(&s, &sv.f).await);
    let t0 = body_of(&ring, &user);

    let a1 = exchange(&s, sv.auth("uploader"), &user, &[("audience", "media")]).await;
    assert_eq!(a1.json["token_type"], "Bearer");
    assert_eq!(a1.json["issued_token_type"], ACCESS_TOKEN_TYPE);
    assert!(a1.json.get("refresh_token").is_none(), "{}", a1.json);
    let t1 = access(&a1);
    let b1 = body_of(&ring, &t1);
    assert_eq!(
        (b1.client.as_str(), b1.identity.subject.as_str()),
        ("uploader", "alice")
    );
    assert_eq!(b1.identity.kind, SubjectKind::User);
    assert_eq!(b1.identity.roles, t0.identity.roles);
    let chain = b1.act.as_ref().unwrap();
    assert_eq!(
        (chain.origin.as_str(), chain.actors.clone()),
        ("app", vec!["uploader".to_owned()])
    );
    assert_eq!(
        b1.jti[..8],
        t0.jti[..8],
        "the subject's family tag carried over"
    );
    assert!(b1.exp <= t0.exp);
    assert_eq!(a1.json["expires_in"].as_u64().unwrap(), b1.exp - b1.iat);

    let t2 = access(&exchange(&s, sv.auth("transcoder"), &t1, &[]).await);
    // The last actor proves itself with its own token, which bounds the expiry too.
    let own = access(
        &post(
            &s.token_url(),
            sv.auth("media"),
            &[("grant_type", "client_credentials")],
        )
        .await,
    );
    let actor = [
        ("actor_token", own.as_str()),
        ("actor_token_type", ACCESS_TOKEN_TYPE),
    ];
    let t3 = access(&exchange(&s, sv.auth("media"), &t2, &actor).await);
    let b3 = body_of(&ring, &t3);
    assert_eq!(
        b3.act.as_ref().unwrap().actors,
        ["media", "transcoder", "uploader"]
    );
    assert!(b3.exp <= b1.exp && b3.exp <= body_of(&ring, &own).exp);

    let intro = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        sv.auth("plain"),
        &[("token", &t3)],
    )
    .await;
    assert_eq!(intro.json["active"], true, "{}", intro.json);
    assert_eq!(intro.json["sub"], "alice");
    assert_eq!(intro.json["client_id"], "media");
    assert_eq!(
        intro.json["act"],
        serde_json::json!({"sub": "media", "act": {"sub": "transcoder", "act": {"sub": "uploader"}}})
    );
    audited_at_least(&sv.f.dir, "token.exchange", 3).await;
    assert_eq!(audited(&sv.f.dir, "token.exchange"), 3);

    // Revoking the middle actor refuses what was exchanged through it, at any depth.
    admin(&sv.f.dir, &["client", "deactivate", "transcoder"], None);
    let introspect = |t: String| {
        let s = &s;
        let sv = &sv;
        async move {
            post(
                &format!("{}/apiv2/oauth/introspect", s.url),
                sv.auth("plain"),
                &[("token", &t)],
            )
            .await
            .json["active"]
                .clone()
        }
    };
    assert_eq!(introspect(t3.clone()).await, false);
    assert_eq!(introspect(t2.clone()).await, false);
    assert_eq!(
        introspect(t1.clone()).await,
        true,
        "made before the middle actor"
    );
    let refused = exchange(&s, sv.auth("media"), &t2, &[]).await;
    assert_error(&refused, 400, "invalid_request");
}

/// A hostile case: its name, the client, the subject token, the other fields, the status and
/// the error it must get.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    u16,
    &'a str,
);

#[tokio::test]
async fn hostile_exchanges_are_refused_and_nothing_is_issued() {
    let sv = Services::new();
    let s = Server::start(&sv.f.dir, &[]);
    let ring = ring(&sv.f.dir);
    let user = access(&password_grant(&s, &sv.f).await);
    let t1 = access(&exchange(&s, sv.auth("uploader"), &user, &[]).await);
    let t2 = access(&exchange(&s, sv.auth("transcoder"), &t1, &[]).await);
    // A policy narrowed to alice's role and claim takes her token.
    access(&exchange(&s, sv.auth("news_editors"), &user, &[]).await);
    audited_at_least(&sv.f.dir, "token.exchange", 3).await;
    let issued = audited(&sv.f.dir, "token.exchange");
    let tt = ACCESS_TOKEN_TYPE;

    let expired = {
        let mut b = body_of(&ring, &user);
        (b.iat, b.exp) = (now() - 120, now() - 60);
        token::mint(ring.get(b.kid).unwrap(), &b).unwrap()
    };
    let foreign = {
        let b = body_of(&ring, &user);
        token::mint(&Key::new(b.kid, [9; 32]), &b).unwrap()
    };
    let theirs = access(
        &post(
            &s.token_url(),
            sv.auth("media"),
            &[("grant_type", "client_credentials")],
        )
        .await,
    );
    let huge = "A".repeat(5_000);
    let cases: Vec<Case> = vec![
        (
            "no policy",
            "plain",
            &user,
            vec![],
            400,
            "unauthorized_client",
        ),
        (
            "expired subject",
            "uploader",
            &expired,
            vec![],
            400,
            "invalid_request",
        ),
        (
            "foreign subject",
            "uploader",
            &foreign,
            vec![],
            400,
            "invalid_request",
        ),
        (
            "oversized subject",
            "uploader",
            &huge,
            vec![],
            400,
            "invalid_request",
        ),
        (
            "subject of a client not allowed",
            "media",
            &t1,
            vec![],
            400,
            "invalid_request",
        ),
        (
            "actor token of another client",
            "transcoder",
            &t1,
            vec![("actor_token", &theirs), ("actor_token_type", tt)],
            400,
            "invalid_request",
        ),
        (
            "actor token without its type",
            "transcoder",
            &t1,
            vec![("actor_token", &theirs)],
            400,
            "invalid_request",
        ),
        (
            "chain past the client's depth",
            "shallow",
            &t2,
            vec![],
            400,
            "invalid_request",
        ),
        ("cycle", "uploader", &t2, vec![], 400, "invalid_request"),
        (
            "subject without the role the policy names",
            "admins_only",
            &user,
            vec![],
            400,
            "invalid_request",
        ),
        (
            "audience not declared",
            "uploader",
            &user,
            vec![("audience", "billing")],
            400,
            "invalid_target",
        ),
        (
            "audience and resource differ",
            "uploader",
            &user,
            vec![("audience", "media"), ("resource", "https://billing")],
            400,
            "invalid_request",
        ),
        (
            "repeated audience",
            "uploader",
            &user,
            vec![("audience", "media"), ("audience", "media")],
            400,
            "invalid_request",
        ),
        (
            "repeated subject_token",
            "uploader",
            &user,
            vec![("subject_token", &user)],
            400,
            "invalid_request",
        ),
        (
            "refresh token requested",
            "uploader",
            &user,
            vec![(
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:refresh_token",
            )],
            400,
            "invalid_request",
        ),
        (
            "wrong client secret",
            "uploader",
            &user,
            vec![],
            401,
            "invalid_client",
        ),
    ];
    for (name, client, subject, extra, status, error) in cases {
        let auth = if name == "wrong client secret" {
            Some((client, "mmcs1.wrong"))
        } else {
            sv.auth(match client {
                "plain" => "plain",
                "uploader" => "uploader",
                "media" => "media",
                "transcoder" => "transcoder",
                _ => "shallow",
            })
        };
        let a = exchange(&s, auth, subject, &extra).await;
        assert!(a.json.get("access_token").is_none(), "{name}: {}", a.json);
        assert_eq!(a.status.as_u16(), status, "{name}: {}", a.json);
        assert_error(&a, status, error);
    }
    let form = [
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token", user.as_str()),
        ("subject_token_type", "urn:x"),
    ];
    assert_error(
        &post(&s.token_url(), sv.auth("uploader"), &form).await,
        400,
        "invalid_request",
    );

    // A revoked subject token (revoked by the client it was issued to).
    let revoke = post(
        &format!("{}/apiv2/oauth/revoke", s.url),
        sv.f.app(),
        &[("token", &user)],
    )
    .await;
    assert_eq!(revoke.status, 200);
    assert_error(
        &exchange(&s, sv.auth("uploader"), &user, &[]).await,
        400,
        "invalid_request",
    );

    // Every refusal after authentication and parsing is audited; then nothing was issued.
    audited_at_least(&sv.f.dir, "token.exchange_refused", 9).await;
    assert_eq!(
        audited(&sv.f.dir, "token.exchange"),
        issued,
        "nothing issued"
    );
}

/// A bound subject token is exchanged only with a proof by its own key, and the new token is
/// bound to that key.
#[tokio::test]
async fn a_bound_subject_token_needs_a_proof_by_its_key() {
    let sv = Services::new();
    let s = Server::start(&sv.f.dir, &[]);
    // Proofs made late enough after the issuer started for its memory of used proofs to vouch.
    e2e::wait::until_second(now() + shared::dpop::MAX_AHEAD_SECONDS + 1).await;
    let key = ProofKey::es256([0x31; 32]).unwrap();
    let other = ProofKey::ed25519([0x32; 32]);
    let url = s.token_url();
    let proof = |k: &ProofKey, n: u32| {
        k.proof(&ProofClaims {
            htm: "POST",
            htu: &url,
            jti: &format!("x-{n}"),
            iat: now(),
            access_token: None,
            nonce: None,
        })
    };
    let with_proof =
        |p: String, auth: Option<(&'static str, String)>, form: Vec<(&'static str, String)>| {
            let url = url.clone();
            async move {
                let mut req = reqwest::Client::new()
                    .post(url)
                    .form(&form)
                    .header("dpop", p);
                if let Some((id, secret)) = auth {
                    req = req.basic_auth(id, Some(secret));
                }
                answer(req.send().await.unwrap()).await
            }
        };
    let app = Some(("app", sv.f.secret.clone()));
    let bound = with_proof(
        proof(&key, 1),
        app,
        vec![("grant_type", "client_credentials".into())],
    )
    .await;
    let bound = access(&bound);
    assert!(bound.starts_with("mmat2."));
    let up = Some(("uploader", sv.secrets["uploader"].clone()));
    let form = vec![
        ("grant_type", TOKEN_EXCHANGE.to_owned()),
        ("subject_token", bound.clone()),
        ("subject_token_type", ACCESS_TOKEN_TYPE.to_owned()),
    ];
    assert_error(
        &exchange(&s, sv.auth("uploader"), &bound, &[]).await,
        400,
        "invalid_dpop_proof",
    );
    let wrong = with_proof(proof(&other, 2), up.clone(), form.clone()).await;
    assert_error(&wrong, 400, "invalid_dpop_proof");
    let good = with_proof(proof(&key, 3), up, form).await;
    assert_eq!(good.json["token_type"], "DPoP", "{}", good.json);
    let b = body_of(&ring(&sv.f.dir), &access(&good));
    assert_eq!(b.cnf, Some(key.jkt()));
    assert_eq!(b.identity.kind, SubjectKind::Client);
    assert_eq!(b.act.unwrap().origin, "app");
}

/// `issuer apply` declares an exchange policy, shows it in its plan and in `client list
/// --json`, changes it, and refuses a bad one naming the field.
#[test]
fn an_exchange_policy_is_declared_in_an_apply_file() {
    let f = fixture();
    let file = f.dir.with_extension("toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap();
    write(
        "[[client]]\nid = \"uploader\"\ngrants = []\nexchange_from = [\"app\"]\nexchange_audience = [\"media\"]\n",
    );
    let plan = admin(&f.dir, &["apply", path], None);
    assert!(
        plan.contains("exchange from=[app] max_depth=4 audience=[media]"),
        "{plan}"
    );
    let list: Value =
        serde_json::from_str(&admin(&f.dir, &["client", "list", "--json"], None)).unwrap();
    let up = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "uploader")
        .unwrap();
    assert_eq!(
        up["exchange"],
        serde_json::json!({"from": ["app"], "max_depth": 4, "audiences": ["media"]})
    );
    write("[[client]]\nid = \"uploader\"\ngrants = []\nexchange_from = [\"app\"]\nexchange_max_depth = 2\n");
    let plan = admin(&f.dir, &["apply", path], None);
    assert!(
        plan.contains("exchange from=[app] max_depth=4 audience=[media] -> from=[app] max_depth=2 audience=[]"),
        "{plan}"
    );
    write("[[client]]\nid = \"uploader\"\ngrants = []\nexchange_from = [\"app\"]\nexchange_max_depth = 2\nexchange_subject_roles = [\"editor\"]\nexchange_subject_claims = [\"dept=news\"]\n");
    let plan = admin(&f.dir, &["apply", path], None);
    assert!(
        plan.contains("-> from=[app] max_depth=2 audience=[] subject_roles=[editor] subject_claims=[dept=news]"),
        "{plan}"
    );
    write("[[client]]\nid = \"uploader\"\ngrants = []\nexchange_subject_roles = [\"editor\"]\n");
    let out = admin_output(&f.dir, &["apply", path], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("need exchange_from"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    write("[[client]]\nid = \"uploader\"\ngrants = []\nexchange_from = [\"app\"]\nexchange_max_depth = 9\n");
    let out = admin_output(&f.dir, &["apply", path], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exchange_max_depth is 1 to 8"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
