//! Runs the full stack for people and for CI (normally through `cargo xtask`):
//!
//! - `stack demo [--dir DIR] [--postgres]`: issuer, media upstream and Envoy with TLS on the shipped
//!   ports, a walk-through printed, until Ctrl-C. With `--postgres`: two issuers (8080 and 8082) on
//!   a throwaway PostgreSQL cluster, removed at the end.
//! - `stack smoke --dir DIR [--postgres]`: the same on free ports; runs the walk-through itself,
//!   then stops.
//! - `stack soak --dir DIR [--minutes N]`: a bounded mixed load through Envoy (see `e2e::soak`).
//! - `stack validate`: `envoy --mode validate` on every shipped configuration.

use anyhow::{bail, Context, Result};
use e2e::{demo, validate_shipped_configs, Options, Stack, Tools};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| e2e::root().join(".demo"), PathBuf::from);
    let tools = Tools::from_env()?;
    let postgres = args.iter().any(|a| a == "--postgres");
    match args.first().map(String::as_str) {
        Some("validate") => {
            for f in validate_shipped_configs(&tools)? {
                println!("{f}: OK");
            }
            Ok(())
        }
        Some("smoke") => smoke(&dir, &tools, postgres).await,
        Some("soak") => soak(&dir, &tools, &args).await,
        Some("demo") => demo(&dir, &tools, postgres).await,
        _ => {
            bail!("usage: stack <demo|smoke|soak [--minutes N]|validate> [--dir DIR] [--postgres]")
        }
    }
}

/// `stack smoke`: the demo's walk-through, automated.
async fn smoke(dir: &Path, tools: &Tools, postgres: bool) -> Result<()> {
    let opts = Options {
        postgres,
        edge_sync: true,
        ..Options::default()
    };
    let stack = Stack::start(dir, tools, &opts).await?;
    let result = walk_through(&stack).await;
    if let Err(e) = &result {
        eprintln!("{}", stack.logs());
        bail!("demo walk-through failed: {e:#}");
    }
    if !stack.stop() {
        bail!("a process did not stop cleanly");
    }
    println!("demo walk-through: token through Envoy, protected call allowed and refused, refresh, impersonation, revocation at the edge: all as expected");
    Ok(())
}

/// `stack soak [--minutes N]`: a bounded mixed load; the report on stdout.
async fn soak(dir: &Path, tools: &Tools, args: &[String]) -> Result<()> {
    let minutes = args
        .iter()
        .position(|a| a == "--minutes")
        .and_then(|i| args.get(i + 1))
        .and_then(|m| m.parse().ok())
        .unwrap_or(10);
    let opts = Options {
        issuer_args: e2e::soak::ISSUER_ARGS
            .iter()
            .map(|a| a.to_string())
            .collect(),
        ..Options::default()
    };
    let stack = Stack::start(dir, tools, &opts).await?;
    let report = e2e::soak::soak(&stack, minutes, 16).await;
    let stopped = stack.stop();
    let report = report?;
    println!("{}", report.markdown);
    if !stopped {
        bail!("a process did not stop cleanly after the soak");
    }
    if report.errors > 0 {
        bail!("the soak saw {} errors", report.errors);
    }
    Ok(())
}

/// `stack demo`: the stack on the shipped ports until Ctrl-C.
async fn demo(dir: &Path, tools: &Tools, postgres: bool) -> Result<()> {
    let stack = Stack::start(
        dir,
        tools,
        &Options {
            shipped_ports: true,
            postgres,
            edge_sync: true,
            ..Options::default()
        },
    )
    .await
    .context("starting the stack (are ports 8443, 8080, 8081 and, with --postgres, 8082 free?)")?;
    print_walk_through(&stack);
    tokio::signal::ctrl_c().await?;
    eprintln!("stopping");
    stack.stop();
    Ok(())
}

fn print_walk_through(s: &Stack) {
    let url = s.url();
    let secret = &s.secret;
    let (client, user, password) = (demo::CLIENT, demo::USER, demo::PASSWORD);
    let cacert = s.dir.join("tls/cert.pem");
    let cacert = cacert.display();
    println!(
        r#"
Running: Envoy with TLS at {url} (filter: {filter}), {issuers} behind it, a sample media service.
State and logs: {dir}. Demo client {client} / {secret}; demo user {user} / {password}.

  export CURL_CA_BUNDLE={cacert}

1. Get a token (password grant); keep access_token and refresh_token:
   curl -s -u '{client}:{secret}' -d grant_type=password -d username={user} -d password={password} {url}/apiv2/oauth/token

2. Call the media service with it (the filter checks it and tells the service who you are):
   curl -s -X POST -H "Authorization: Bearer ACCESS_TOKEN" -H 'Content-Type: application/json; charset=UTF-8' -d '{{}}' {url}/apiv2/MediaService/Find

3. Without a token, or with a bad one, Envoy refuses it (401 and WWW-Authenticate):
   curl -si -X POST {url}/apiv2/MediaService/Find
   curl -si -X POST -H 'ServiceAuthorization: Bearer mmat1.forged.token' {url}/apiv2/MediaService/Find
   (curl 7.x over HTTP/2 may report "(92) Stream error" instead of a refusal of a request with a
   body: it drops the answer Envoy sent before resetting the upload. Add --http1.1 to see it.)

4. Refresh (the refresh token rotates; keep the new one):
   curl -s -u '{client}:{secret}' -d grant_type=refresh_token -d refresh_token=REFRESH_TOKEN {url}/apiv2/oauth/token

5. A client token impersonating a user by claims:
   curl -s -u '{client}:{secret}' -d grant_type=client_credentials --data-urlencode 'impersonate_claims=upn=someone@example.com' {url}/apiv2/oauth/token

6. Revoke the access token; Envoy pulls revocations from the issuer each second (edge sync), so
   within 2 s step 2 answers 401 with error="invalid_token" at every Envoy worker:
   curl -s -u '{client}:{secret}' -d token=ACCESS_TOKEN {url}/apiv2/oauth/revoke
   (disabling the user works the same: {env}target/debug/issuer user disable {user} {store})

7. DPoP: a token bound to a key of yours (docs/dpop.md); each call carries a fresh proof by the key,
   and a copy of the token without the key is refused (also as Bearer):
   {issuer} dpop key --out {dir}/client.jwk
   curl -s -u '{client}:{secret}' -H "DPoP: $({issuer} dpop proof --key {dir}/client.jwk --method POST --url {url}/apiv2/oauth/token)" -d grant_type=client_credentials {url}/apiv2/oauth/token
   curl -s -X POST -H "Authorization: DPoP ACCESS_TOKEN" -H "DPoP: $({issuer} dpop proof --key {dir}/client.jwk --method POST --url {url}/apiv2/MediaService/Find --token ACCESS_TOKEN)" -H 'Content-Type: application/json; charset=UTF-8' -d '{{}}' {url}/apiv2/MediaService/Find

Server metadata: curl -s {url}/.well-known/oauth-authorization-server
Filter counters (Envoy's admin interface is a Unix socket only its owner can use):
   curl -s --unix-socket {admin} http://localhost/stats?filter=mms_auth
Admin commands work while it runs: {env}target/debug/issuer client list {store}
Press Ctrl-C to stop."#,
        filter = s.tools.filter_file().display(),
        issuer = s.tools.issuer.display(),
        issuers = if s.more_issuers.is_empty() {
            "the issuer".to_owned()
        } else {
            format!("{} issuers on one PostgreSQL", s.more_issuers.len() + 1)
        },
        dir = s.dir.display(),
        admin = s.dir.join(e2e::ADMIN_SOCKET).display(),
        store = s.store.args.join(" "),
        // The PostgreSQL URL holds the database's password: read from a 0600 file, never shown.
        env = if s.store.env.is_empty() {
            String::new()
        } else {
            format!(
                "ISSUER_STORE=\"$(cat {})\" ",
                s.dir.join("postgres/store-url").display()
            )
        },
    );
}

async fn walk_through(s: &Stack) -> Result<()> {
    let (access, refresh) = sign_in_and_call(s).await?;
    refresh_and_impersonate(s, &refresh).await?;
    bound_call(s).await?;
    revocation_reaches_the_edge(s, &access).await
}

/// Steps 1 to 3: a password grant, a protected call with its token, one without: the tokens.
async fn sign_in_and_call(s: &Stack) -> Result<(String, String)> {
    let http = s.client();
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let t: Value = http
        .post(&token_url)
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[
            ("grant_type", "password"),
            ("username", demo::USER),
            ("password", demo::PASSWORD),
        ])
        .send()
        .await?
        .json()
        .await?;
    let access = t["access_token"]
        .as_str()
        .with_context(|| format!("no token: {t}"))?;
    let refresh = t["refresh_token"].as_str().context("no refresh token")?;
    let r = http
        .post(&find)
        .bearer_auth(access)
        .header("content-type", "application/json; charset=UTF-8")
        .body("{}")
        .send()
        .await?;
    if r.status() != 200 {
        bail!("protected call with the token: {}", r.status());
    }
    let seen: Value = r.json().await?;
    if seen["identity"]["x-auth-subject"] != demo::USER {
        bail!("the media service did not see the user: {seen}");
    }
    let r = http.post(&find).body("{}").send().await?;
    if r.status() != 401 || !r.headers().contains_key("www-authenticate") {
        bail!(
            "the call without a token was not refused with 401: {}",
            r.status()
        );
    }
    Ok((access.to_owned(), refresh.to_owned()))
}

/// Steps 4 and 5: the refresh token rotates; an impersonation token reaches the media service.
async fn refresh_and_impersonate(s: &Stack, refresh: &str) -> Result<()> {
    let http = s.client();
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let r: Value = http
        .post(&token_url)
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", refresh)])
        .send()
        .await?
        .json()
        .await?;
    if r["refresh_token"].as_str().is_none_or(|n| n == refresh) {
        bail!("refresh did not rotate: {r}");
    }
    let c: Value = http
        .post(&token_url)
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[
            ("grant_type", "client_credentials"),
            ("impersonate_claims", "upn=someone@example.com"),
        ])
        .send()
        .await?
        .json()
        .await?;
    let imp = c["access_token"]
        .as_str()
        .with_context(|| format!("no impersonation token: {c}"))?;
    let seen: Value = http
        .post(&find)
        .header("ServiceAuthorization", format!("Bearer {imp}"))
        .body("{}")
        .send()
        .await?
        .json()
        .await?;
    if seen["identity"]["x-auth-claims"] != "upn=someone@example.com" {
        bail!("the media service did not see the impersonated claims: {seen}");
    }
    Ok(())
}

/// Step 7: a DPoP-bound token, with proofs made by `issuer dpop` as the printed commands make
/// them: the bound call passes with the binding told to the media service, the same token as
/// `Bearer` is refused.
async fn bound_call(s: &Stack) -> Result<()> {
    // A proof made in the first 2 s after the issuer or Envoy started is refused (it may have
    // been used before a restart, docs/dpop.md); a user reading the steps is slower than that.
    s.dpop_ready().await;
    let http = s.client();
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let key = s.dir.join("client.jwk");
    let _ = std::fs::remove_file(&key);
    let dpop = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new(&s.tools.issuer)
            .arg("dpop")
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "issuer dpop {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_owned())
    };
    let key_arg = key.to_str().context("key path")?;
    dpop(&["key", "--out", key_arg])?;
    let proof = dpop(&[
        "proof", "--key", key_arg, "--method", "POST", "--url", &token_url,
    ])?;
    let t: Value = http
        .post(&token_url)
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .header("DPoP", proof)
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await?
        .json()
        .await?;
    let access = t["access_token"]
        .as_str()
        .filter(|_| t["token_type"] == "DPoP")
        .with_context(|| format!("no DPoP token: {t}"))?;
    let proof = dpop(&[
        "proof", "--key", key_arg, "--method", "POST", "--url", &find, "--token", access,
    ])?;
    let r = http
        .post(&find)
        .header("Authorization", format!("DPoP {access}"))
        .header("DPoP", proof)
        .header("content-type", "application/json; charset=UTF-8")
        .body("{}")
        .send()
        .await?;
    if r.status() != 200 {
        bail!("bound call with a proof: {}", r.status());
    }
    let seen: Value = r.json().await?;
    if seen["identity"]["x-auth-binding"] != "dpop" {
        bail!("the media service was not told the call was bound: {seen}");
    }
    let r = http
        .post(&find)
        .bearer_auth(access)
        .body("{}")
        .send()
        .await?;
    if r.status() != 401 {
        bail!("the bound token passed as Bearer: {}", r.status());
    }
    Ok(())
}

/// Step 6: a revocation takes effect at the edge within 2 s.
async fn revocation_reaches_the_edge(s: &Stack, access: &str) -> Result<()> {
    let http = s.client();
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let r = http
        .post(format!("{}/apiv2/oauth/revoke", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("token", access)])
        .send()
        .await?;
    if r.status() != 200 {
        bail!("revocation answered {}", r.status());
    }
    let revoked_at = std::time::Instant::now();
    loop {
        let r = http
            .post(&find)
            .bearer_auth(access)
            .body("{}")
            .send()
            .await?;
        let www = r
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if r.status() == 401 && www.contains("invalid_token") {
            println!(
                "revoked token refused by Envoy {:?} after the revocation",
                revoked_at.elapsed()
            );
            break;
        }
        if revoked_at.elapsed() > std::time::Duration::from_secs(2) {
            bail!("the revoked token still passed Envoy 2 s after its revocation");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}
