//! The issuer in the harness: where its state lives ([`StoreArgs`]), its admin command line, the
//! demo client and user it is provisioned with, and `issuer serve` started and awaited
//! ([`launch`], the one starter of every test's issuers, `issuer/tests/it` included).

use crate::{write_private, Proc, Tools};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Where an issuer's state lives, as its command-line arguments and environment. A PostgreSQL
/// URL holds the database's password, so it goes in the environment (`ISSUER_STORE`), which other
/// users cannot read, never on the command line, which `ps` shows them.
#[derive(Debug, Clone)]
pub struct StoreArgs {
    /// Arguments.
    pub args: Vec<String>,
    /// Environment variables.
    pub env: Vec<(String, String)>,
}

impl StoreArgs {
    /// The embedded store in `data`.
    pub fn redb(data: &Path) -> Self {
        Self {
            args: vec!["--data-dir".into(), data.display().to_string()],
            env: Vec::new(),
        }
    }

    /// A PostgreSQL database, its secrets sealed under the KEK in `kek_file`.
    pub fn postgres(url: &str, kek_file: &Path) -> Self {
        Self {
            args: vec!["--kek-file".into(), kek_file.display().to_string()],
            env: vec![("ISSUER_STORE".into(), url.into())],
        }
    }

    /// Adds these arguments and this environment to `cmd`.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
    }
}

/// Runs the issuer's admin command line on `data`; fails unless it succeeds. Returns stdout.
pub fn issuer_admin(
    tools: &Tools,
    data: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String> {
    issuer_admin_on(tools, &StoreArgs::redb(data), args, stdin)
}

/// Runs the issuer's admin command line on `store`; fails unless it succeeds. Returns stdout.
pub fn issuer_admin_on(
    tools: &Tools,
    store: &StoreArgs,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String> {
    let mut command = Command::new(&tools.issuer);
    command.args(args);
    let mut child = store
        .apply(&mut command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    if let Some(s) = stdin {
        writeln!(input, "{s}")?;
    }
    drop(input);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("issuer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The demo client and users a stack is provisioned with.
pub mod demo {
    /// Client allowed both grants and impersonation.
    pub const CLIENT: &str = "demo-app";
    /// A user with roles and a claim.
    pub const USER: &str = "demo";
    /// Its password.
    pub const PASSWORD: &str = "demo-password";
    /// The client Envoy reads the edge feed as (`client add --edge`).
    pub const EDGE_CLIENT: &str = "envoy-edge";
}

/// Creates the store (`issuer init`) unless it exists, as before the first `issuer serve`.
pub fn init(tools: &Tools, store: &StoreArgs) -> Result<()> {
    issuer_admin_on(tools, store, &["init"], None).map(drop)
}

/// Adds client `id` with these `client add` options and activates it, creating the store first
/// if need be ([`init`]); returns its secret.
pub fn add_client(tools: &Tools, store: &StoreArgs, id: &str, options: &[&str]) -> Result<String> {
    init(tools, store)?;
    let mut args = vec!["client", "add", id];
    args.extend(options);
    let out = issuer_admin_on(tools, store, &args, None)?;
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .context("no secret printed")?
        .to_owned();
    issuer_admin_on(tools, store, &["client", "activate", id], None)?;
    Ok(secret)
}

/// The secret kept in `file` (0600) by an earlier run, or the one `make` provisions now, kept.
fn provision_once(file: &Path, make: impl FnOnce() -> Result<String>) -> Result<String> {
    if let Ok(s) = std::fs::read_to_string(file) {
        return Ok(s.trim().to_owned());
    }
    let secret = make()?;
    write_private(file, format!("{secret}\n").as_bytes())?;
    Ok(secret)
}

/// Creates the edge client on `data` unless done before; returns its secret, kept in
/// `dir/edge-secret` (0600).
pub fn provision_edge_on(tools: &Tools, dir: &Path, data: &StoreArgs) -> Result<String> {
    provision_once(&dir.join("edge-secret"), || {
        add_client(tools, data, demo::EDGE_CLIENT, &["--edge"])
    })
}

/// Creates the demo client and user in `data` unless done before; returns the client secret,
/// kept in `dir/client-secret` (0600).
pub fn provision(tools: &Tools, dir: &Path, data: &Path) -> Result<String> {
    provision_on(tools, dir, &StoreArgs::redb(data))
}

/// [`provision`] on any store.
pub fn provision_on(tools: &Tools, dir: &Path, data: &StoreArgs) -> Result<String> {
    provision_once(&dir.join("client-secret"), || {
        let grants = ["--grants", "password,client_credentials", "--impersonate"];
        let secret = add_client(tools, data, demo::CLIENT, &grants)?;
        let user = [
            "user",
            "add",
            demo::USER,
            "--role",
            "viewer",
            "--role",
            "editor",
            "--claim",
            "email=demo@example.com",
        ];
        issuer_admin_on(tools, data, &user, Some(demo::PASSWORD))?;
        Ok(secret)
    })
}

/// Starts `issuer serve` on `data` and waits for its `listening on` line.
pub fn start_issuer(
    tools: &Tools,
    data: &Path,
    port: u16,
    extra: &[&str],
    log: &Path,
) -> Result<(Proc, String)> {
    start_issuer_on(tools, &StoreArgs::redb(data), port, extra, log)
}

/// [`start_issuer`] on any store.
pub fn start_issuer_on(
    tools: &Tools,
    store: &StoreArgs,
    port: u16,
    extra: &[&str],
    log: &Path,
) -> Result<(Proc, String)> {
    start_issuer_pinned(tools, store, port, extra, None, log)
}

/// [`start_issuer_on`], pinned to the CPUs `pin` (a `taskset` list) when given: the benchmarks
/// keep the issuer and the load generator on cores of their own.
pub fn start_issuer_pinned(
    tools: &Tools,
    store: &StoreArgs,
    port: u16,
    extra: &[&str],
    pin: Option<&str>,
    log: &Path,
) -> Result<(Proc, String)> {
    start_issuer_with(
        crate::command_on(&tools.issuer, pin),
        store,
        port,
        extra,
        log,
    )
}

/// `issuer serve` run by `command` (the issuer binary, or a wrapper such as `taskset` or
/// `prlimit` that execs it, so the pid stays the issuer's), on `store`, listening on `port`.
pub fn start_issuer_with(
    command: Command,
    store: &StoreArgs,
    port: u16,
    extra: &[&str],
    log: &Path,
) -> Result<(Proc, String)> {
    let listen = format!("127.0.0.1:{port}");
    start_issuer_listening(command, store, &listen, extra, log)
}

/// [`start_issuer_on`] listening on the Unix socket `socket` (`--listen unix:PATH`), whose
/// folder the issuer checks: its own, writable by no one else. Returns `unix:PATH`.
pub fn start_issuer_on_socket(
    tools: &Tools,
    store: &StoreArgs,
    socket: &Path,
    extra: &[&str],
    log: &Path,
) -> Result<(Proc, String)> {
    let listen = format!("unix:{}", socket.display());
    start_issuer_listening(Command::new(&tools.issuer), store, &listen, extra, log)
}

/// `issuer serve` run by `command` on `store`, listening on `listen` (`--listen`).
fn start_issuer_listening(
    mut command: Command,
    store: &StoreArgs,
    listen: &str,
    extra: &[&str],
    log: &Path,
) -> Result<(Proc, String)> {
    command.args(["serve", "--trust-x-forwarded-for", "--listen", listen]);
    store.apply(&mut command).args(extra);
    launch(command, log)
}

/// Starts `command`, a whole `issuer serve` command line (the issuer binary, or a wrapper that
/// execs it), with its stderr in `log` (0600), and waits until the issuer serves: it prints
/// `listening on URL` on stdout then. Returns the process and that URL.
pub fn launch(mut command: Command, log: &Path) -> Result<(Proc, String)> {
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "info,issuer::app::edge=debug");
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::from(crate::private_log(log)?))
        .spawn()
        .context("starting the issuer")?;
    let stdout = child.stdout.take().context("stdout")?;
    let proc = Proc::new(child, "issuer");
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("the issuer did not start; see {}", log.display()))?
        .to_owned();
    // The rest (the admin listener's line, when it has one) is read and dropped until the
    // issuer exits: a closed pipe would fail the issuer's next write to stdout.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    Ok((proc, url))
}

/// A token request of the demo client to the token endpoint `url`, which must succeed.
pub async fn token(
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    form: &[(&str, &str)],
) -> serde_json::Value {
    let r = http
        .post(url)
        .basic_auth(crate::demo::CLIENT, Some(secret))
        .form(form)
        .send()
        .await
        .expect("an answer");
    let status = r.status();
    let body: serde_json::Value = r.json().await.unwrap_or(serde_json::Value::Null);
    assert_eq!(status, 200, "{body}");
    body
}

/// A refresh at the token endpoint `url`: the successor.
pub async fn refresh(http: &reqwest::Client, url: &str, secret: &str, rt: &str) -> String {
    let v = token(
        http,
        url,
        secret,
        &[("grant_type", "refresh_token"), ("refresh_token", rt)],
    )
    .await;
    v["refresh_token"].as_str().unwrap().to_owned()
}

/// Runs `issuer ARGS --config CONFIG` with `stdin` (an admin or `directory` command, as an
/// operator runs it): whether it succeeded, and what it printed on stdout then stderr.
pub fn run_with_config(
    tools: &Tools,
    config: &Path,
    args: &[&str],
    stdin: &str,
) -> Result<(bool, String)> {
    let mut child = Command::new(&tools.issuer)
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the issuer")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}
