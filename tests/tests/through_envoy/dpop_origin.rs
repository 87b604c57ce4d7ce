//! The origin of a proof's `htu` at the edge: the configuration's (`dpop.public_origin`), never
//! what the client says in `Host`, `X-Forwarded-Proto` or `:scheme`. Each refused case carries a
//! good proof for the origin its request claims, as a proof captured at another origin that
//! accepts the same tokens would be; each must be refused, with each filter (this binary runs
//! with both).

use crate::dpop::{bound_token, es, proof};
use crate::stack;
use e2e::raw::exchange;
use e2e::Stack;
use shared::dpop::sign::ProofKey;
use tokio::io::{AsyncRead, AsyncWrite};

const FIND: &str = "/apiv2/MediaService/Find";

/// What a case ended with: the status and `WWW-Authenticate`.
type Answer = (u16, String);

/// `GET FIND` over HTTP/1.1 on `conn` with `Host: host`, the token and the proof, and `extra`
/// header lines.
async fn http1(
    conn: impl AsyncRead + AsyncWrite + Unpin,
    host: &str,
    token: &str,
    proof: &str,
    extra: &[&str],
) -> Answer {
    let mut request = format!(
        "GET {FIND} HTTP/1.1\r\nHost: {host}\r\nAuthorization: DPoP {token}\r\nDPoP: {proof}\r\n\
         Connection: close\r\n"
    );
    for line in extra {
        request += &format!("{line}\r\n");
    }
    let answer = exchange(conn, &(request + "\r\n")).await.unwrap();
    let www = answer
        .text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("www-authenticate")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    (answer.status, www)
}

/// `GET FIND` over HTTP/2 without TLS (prior knowledge) to 127.0.0.1:`port`, with this
/// `:scheme` and `:authority`.
async fn h2c(port: u16, (scheme, authority): (&str, &str), token: &str, proof: &str) -> Answer {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("{scheme}://{authority}{FIND}"))
        .header("authorization", format!("DPoP {token}"))
        .header("dpop", proof)
        .body(())
        .unwrap();
    let (answer, _) = client.send_request(request, true).unwrap();
    let answer = answer.await.unwrap();
    let www = answer
        .headers()
        .get("www-authenticate")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    (answer.status().as_u16(), www)
}

/// A fresh proof of `key` for `GET origin FIND` with the token's hash.
fn proof_for(key: &ProofKey, origin: &str, token: &str) -> String {
    proof(key, "GET", &format!("{origin}{FIND}"), Some(token), None)
}

/// The probe's cases on the minimal Envoy (plain HTTP on 127.0.0.1:`port`, its origin
/// `http://127.0.0.1:PORT`), each with a proof of its own: (what, expected status, answer).
async fn plain_listener(port: u16, key: &ProofKey, t: &str) -> Vec<(&'static str, u16, Answer)> {
    let own = format!("127.0.0.1:{port}");
    let conn = || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap()
    };
    let http = || proof_for(key, &format!("http://{own}"), t);
    let https = || proof_for(key, &format!("https://{own}"), t);
    let evil = proof_for(key, "http://evil.example", t);
    let xfp = ["X-Forwarded-Proto: https"];
    vec![
        (
            "its own origin, HTTP/1.1",
            200,
            http1(conn().await, &own, t, &http(), &[]).await,
        ),
        (
            "Host: evil.example",
            401,
            http1(conn().await, "evil.example", t, &evil, &[]).await,
        ),
        (
            "X-Forwarded-Proto: https",
            401,
            http1(conn().await, &own, t, &https(), &xfp).await,
        ),
        (
            "its own origin, h2c",
            200,
            h2c(port, ("http", &own), t, &http()).await,
        ),
        (
            ":scheme https over h2c",
            401,
            h2c(port, ("https", &own), t, &https()).await,
        ),
    ]
}

/// On the full stack's TLS listener (origin `https://localhost:PORT`).
async fn tls_listener(s: &Stack, key: &ProofKey, t: &str) -> Vec<(&'static str, u16, Answer)> {
    let own = format!("localhost:{}", s.ports.listener);
    let evil = proof_for(key, "https://evil.example", t);
    let good = proof_for(key, &format!("https://{own}"), t);
    vec![
        (
            "its own origin, TLS",
            200,
            http1(s.tls_connect().await.unwrap(), &own, t, &good, &[]).await,
        ),
        (
            "Host: evil.example over TLS",
            401,
            http1(
                s.tls_connect().await.unwrap(),
                "evil.example",
                t,
                &evil,
                &[],
            )
            .await,
        ),
    ]
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_proof_for_the_origin_a_client_claims_is_refused() {
    let (_tmp, s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = es();
    let t = bound_token(&s, &key).await;
    let (_minimal, port) = s.start_minimal_envoy().unwrap();
    e2e::proof_memory_ready(e2e::unix_now() + shared::dpop::MAX_AHEAD_SECONDS).await;
    let mut cases = plain_listener(port, &key, &t).await;
    cases.extend(tls_listener(&s, &key, &t).await);
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(_, expected, (status, www))| {
            status != expected
                || (*expected == 401 && !www.contains("error=\"invalid_dpop_proof\""))
        })
        .map(|(what, expected, (status, www))| {
            format!("{what}: {status} (expected {expected}) {www}")
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", s.logs());
    assert!(s.stop());
}

/// Without `dpop.public_origin` the filter never loads (so never takes the origin from a
/// request): Envoy refuses the configuration, naming the setting, with either filter.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_configuration_without_a_public_origin_never_loads() {
    let (_tmp, mut s) = stack(&[]).await;
    let refused = s.restart_envoy_edited(|cfg| {
        cfg.as_object_mut().unwrap().remove("dpop");
    });
    let err = format!(
        "{:#}",
        refused.expect_err("Envoy ran without public_origin")
    );
    assert!(err.contains("dpop.public_origin is required"), "{err}");
}

/// The token endpoint checks `htu` against the issuer's `--public-url` only: a proof for the
/// `Host` a request names, or for the address it came to, is refused.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn the_token_endpoint_never_takes_its_origin_from_the_request() {
    let (_tmp, s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = es();
    let direct = format!("{}/apiv2/oauth/token", s.issuer_url());
    let evil = "http://evil.example/apiv2/oauth/token";
    let http1 = reqwest::Client::builder().http1_only().build().unwrap();
    for (url, host) in [(evil, Some("evil.example")), (direct.as_str(), None)] {
        let mut request = http1
            .post(&direct)
            .basic_auth(e2e::demo::CLIENT, Some(&s.secret))
            .header("dpop", proof(&key, "POST", url, None, None))
            .form(&[("grant_type", "client_credentials")]);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        assert_eq!(status, 400, "{url}: {body}");
        assert_eq!(body["error"], "invalid_dpop_proof", "{url}: {body}");
    }
}
