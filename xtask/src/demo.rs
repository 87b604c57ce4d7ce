//! `cargo xtask demo`: the issuer with a demo client and user, state in `.demo/` (git-ignored),
//! and a curl walk-through. `--smoke` runs the walk-through itself and stops the server.

use crate::{cargo, ci, run};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const CLIENT: &str = "demo-app";
const USER: &str = "demo";
const PASSWORD: &str = "demo-password";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first so the issuer shuts down gracefully, then make sure it is gone.
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.0.wait();
    }
}

fn issuer(bin: &Path, data: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("ISSUER_DATA_DIR", data);
    c
}

fn provision(bin: &Path, state: &Path, data: &Path) -> Result<String> {
    let secret_file = state.join("client-secret");
    if let Ok(secret) = std::fs::read_to_string(&secret_file) {
        return Ok(secret.trim().to_owned());
    }
    eprintln!(
        "first run: creating the demo client {CLIENT:?} and user {USER:?} in {}",
        data.display()
    );
    let out = issuer(bin, data)
        .args([
            "client",
            "add",
            CLIENT,
            "--grants",
            "password,client_credentials",
            "--impersonate",
        ])
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "issuer client add failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let stdout = String::from_utf8(out.stdout)?;
    let secret = stdout
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .context("issuer client add printed no secret")?
        .to_owned();
    run(issuer(bin, data).args(["client", "activate", CLIENT]))?;
    let mut add = issuer(bin, data)
        .args([
            "user",
            "add",
            USER,
            "--role",
            "viewer",
            "--claim",
            "email=demo@example.com",
        ])
        .stdin(Stdio::piped())
        .spawn()?;
    writeln!(add.stdin.take().context("stdin")?, "{PASSWORD}")?;
    if !add.wait()?.success() {
        bail!("issuer user add failed");
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&secret_file)?;
    writeln!(f, "{secret}")?;
    Ok(secret)
}

fn curl(args: &[&str]) -> Result<serde_json::Value> {
    let out = Command::new("curl")
        .arg("-sS")
        .args(args)
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!(
            "curl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "curl {args:?} answered {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn smoke(url: &str, secret: &str) -> Result<()> {
    if Command::new("curl").arg("--version").output().is_err() {
        if ci() {
            bail!("curl is missing");
        }
        eprintln!("curl is missing: skipping the demo walk-through");
        return Ok(());
    }
    let auth = format!("{CLIENT}:{secret}");
    let token_url = format!("{url}/apiv2/oauth/token");
    let user_form = format!("username={USER}");
    let pw_form = format!("password={PASSWORD}");
    let t = curl(&[
        "-u",
        &auth,
        "-d",
        "grant_type=password",
        "-d",
        &user_form,
        "-d",
        &pw_form,
        &token_url,
    ])?;
    let refresh = t["refresh_token"]
        .as_str()
        .context("password grant gave no refresh token")?;
    let access = t["access_token"]
        .as_str()
        .context("password grant gave no access token")?;
    if t["token_type"] != "Bearer" || !access.starts_with("mmat1.") {
        bail!("unexpected password grant answer {t}");
    }
    let rt_form = format!("refresh_token={refresh}");
    let r = curl(&[
        "-u",
        &auth,
        "-d",
        "grant_type=refresh_token",
        "-d",
        &rt_form,
        &token_url,
    ])?;
    let next = r["refresh_token"]
        .as_str()
        .context("refresh gave no refresh token")?;
    if next == refresh {
        bail!("the refresh token was not rotated");
    }
    let old = curl(&[
        "-u",
        &auth,
        "-d",
        "grant_type=refresh_token",
        "-d",
        &format!("refresh_token={next}x"),
        &token_url,
    ])?;
    if old["error"] != "invalid_grant" {
        bail!("a bogus refresh token was not refused: {old}");
    }
    let c = curl(&[
        "-u",
        &auth,
        "-d",
        "grant_type=client_credentials",
        "-d",
        "impersonate_claims=upn=someone@example.com",
        &token_url,
    ])?;
    if c["access_token"].as_str().is_none() || c.get("refresh_token").is_some() {
        bail!("unexpected client credentials answer {c}");
    }
    let i = curl(&[
        "-u",
        &auth,
        "-d",
        &format!("token={access}"),
        &format!("{url}/apiv2/oauth/introspect"),
    ])?;
    if i["active"] != true || i["username"] != USER {
        bail!("introspection of the demo token failed: {i}");
    }
    eprintln!("demo walk-through: password grant, refresh rotation, impersonation and introspection all answered as expected");
    Ok(())
}

pub fn run_demo(root: &Path, smoke_only: bool) -> Result<()> {
    run(cargo().args(["build", "-p", "issuer"]))?;
    let bin = root.join("target/debug/issuer");
    // The smoke run gets a fresh state of its own, so it never meets a demo that is running.
    let state = if smoke_only {
        root.join("target/demo-smoke")
    } else {
        root.join(".demo")
    };
    if smoke_only && state.exists() {
        std::fs::remove_dir_all(&state)?;
    }
    std::fs::create_dir_all(&state)?;
    let data = state.join("data");
    let secret = provision(&bin, &state, &data)?;
    let listen = if smoke_only {
        "127.0.0.1:0".to_string()
    } else {
        std::env::var("DEMO_LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into())
    };
    let mut child = issuer(&bin, &data)
        .args(["serve", "--listen", &listen])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the issuer")?;
    let stdout = child.stdout.take().context("issuer stdout")?;
    let server = Server(child);
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first)?;
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .context("the issuer did not start")?
        .to_owned();
    if smoke_only {
        smoke(&url, &secret)?;
        drop(server);
        return Ok(());
    }
    println!(
        r#"
The issuer is running at {url} (data in {data}).
Demo client: {CLIENT} / {secret}
Demo user:   {USER} / {PASSWORD}

1. A token for the user (password grant); note access_token and refresh_token:
   curl -s -u '{CLIENT}:{secret}' -d grant_type=password -d username={USER} -d password={PASSWORD} {url}/apiv2/oauth/token

2. A new access token from the refresh token (the refresh token rotates; keep the new one):
   curl -s -u '{CLIENT}:{secret}' -d grant_type=refresh_token -d refresh_token=REFRESH_TOKEN {url}/apiv2/oauth/token

3. A token for the client itself, impersonating a user by claims:
   curl -s -u '{CLIENT}:{secret}' -d grant_type=client_credentials --data-urlencode 'impersonate_claims=upn=someone@example.com' {url}/apiv2/oauth/token

4. What a token says (introspection):
   curl -s -u '{CLIENT}:{secret}' -d token=ACCESS_TOKEN {url}/apiv2/oauth/introspect

Admin commands work while it runs, e.g.: ISSUER_DATA_DIR={data} target/debug/issuer client list
Press Ctrl-C to stop."#,
        data = data.display()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })?;
    let _ = rx.recv();
    eprintln!("stopping the issuer");
    drop(server);
    Ok(())
}
