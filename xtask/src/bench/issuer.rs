//! The issuer's own loads: `/healthz`, `client_credentials`, `password` and refresh rotations,
//! the release build on core 0 and wrk with Lua scripts on core 1; and the bench client and
//! users every issuer run is provisioned with.

use super::{rss_kib, wrk, Results, Sample, Settings};
use anyhow::{Context, Result};
use base64::Engine as _;
use e2e::issuer::{issuer_admin_on, start_issuer_pinned, StoreArgs};
use e2e::Tools;
use std::path::Path;
use std::process::Command;

/// A load on the issuer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    Healthz,
    ClientCredentials,
    Password,
    Refresh,
}

/// The loads, in the order they run and are reported.
pub(super) const ISSUER_LOADS: [Load; 4] = [
    Load::Healthz,
    Load::ClientCredentials,
    Load::Password,
    Load::Refresh,
];

impl Load {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Healthz => "/healthz",
            Self::ClientCredentials => "client_credentials",
            Self::Password => "password",
            Self::Refresh => "refresh (64 clients)",
        }
    }

    /// Its place in [`ISSUER_LOADS`] and in the results.
    pub(super) fn index(self) -> usize {
        ISSUER_LOADS.iter().position(|l| *l == self).unwrap_or(0)
    }
}

pub(super) fn lua_post(path: &Path, basic: &str, body: &str) -> Result<()> {
    std::fs::write(
        path,
        format!(
            "wrk.method = \"POST\"\nwrk.body = \"{body}\"\nwrk.headers[\"Content-Type\"] = \"application/x-www-form-urlencoded\"\nwrk.headers[\"Authorization\"] = \"Basic {basic}\"\n"
        ),
    )?;
    Ok(())
}

pub(super) fn lua_refresh(path: &Path, basic: &str, tokens: &Path) -> Result<()> {
    std::fs::write(
        path,
        format!(
            r#"-- Each wrk thread has one connection and one refresh token family: it presents its token,
-- keeps the successor from the answer, and presents that next.
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end
function init(args)
  local i = 0
  for line in io.lines("{tokens}") do
    i = i + 1
    if i == id then token = line end
  end
end
function request()
  return wrk.format("POST", "/apiv2/oauth/token", {{["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Basic {basic}"}}, "grant_type=refresh_token&refresh_token=" .. token)
end
function response(status, headers, body)
  local next = body:match('"refresh_token":"([^"]+)"')
  if next then token = next end
end
"#,
            tokens = tokens.display()
        ),
    )?;
    Ok(())
}

/// Users of the password load: one per wrk connection (a user's own sign-ins are checked one at a
/// time, so many connections signing in one user would measure that queue, not the server).
pub(super) const PASSWORD_USERS: usize = 8;

/// wrk's script of password grants: thread N (one connection) signs in `PREFIX`N with
/// `password`; with `own_address`, from address 10.9.0.N (`X-Forwarded-For`, as behind Envoy);
/// with `delay_ms`, pausing that long between sign-ins (wrk's latency leaves the pause out).
pub(super) fn lua_sign_in(
    path: &Path,
    basic: &str,
    prefix: &str,
    password: &str,
    own_address: bool,
    delay_ms: u64,
) -> Result<()> {
    let delay = if delay_ms > 0 {
        format!("function delay()\n  return {delay_ms}\nend\n")
    } else {
        String::new()
    };
    let address = if own_address {
        r#", ["X-Forwarded-For"] = "10.9.0." .. id"#
    } else {
        ""
    };
    std::fs::write(
        path,
        format!(
            r#"local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
{delay}function request()
  return wrk.format("POST", "/apiv2/oauth/token", {{["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Basic {basic}"{address}}}, "grant_type=password&username={prefix}" .. id .. "&password={password}")
end
"#
        ),
    )?;
    Ok(())
}

pub(super) fn password_grant(url: &str, basic_user: &str, user: &str) -> Result<String> {
    password_grant_field(url, basic_user, user, "refresh_token")
}

/// The `field` of the answer to `user`'s password grant through `basic_user` (`id:secret`).
pub(super) fn password_grant_field(
    url: &str,
    basic_user: &str,
    user: &str,
    field: &str,
) -> Result<String> {
    let out = Command::new("curl")
        .args(["-s", "-u", basic_user, "-d", "grant_type=password", "-d"])
        .arg(format!("username={user}"))
        .args(["-d", "password=bench-password"])
        .arg(format!("{url}/apiv2/oauth/token"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let key = format!("\"{field}\":\"");
    let start = text.find(&key).with_context(|| format!("no {field}"))? + key.len();
    let end = start + text[start..].find('"').context("unterminated")?;
    Ok(text[start..end].to_owned())
}

pub(super) fn bench_issuer(dir: &Path, s: &Settings) -> Result<(Results, String)> {
    let tools = super::release_issuer();
    let store = StoreArgs::redb(&dir.join("issuer-data"));
    let basic_user = provision(&tools, &store)?;
    let basic = base64::engine::general_purpose::STANDARD.encode(&basic_user);
    let log = dir.join("issuer-bench.log");
    let (proc, url) = start_issuer_pinned(&tools, &store, e2e::free_port(), &[], Some("0"), &log)?;
    let cc = dir.join("cc.lua");
    lua_post(&cc, &basic, "grant_type=client_credentials")?;
    let pw = dir.join("password.lua");
    lua_sign_in(&pw, &basic, "bench", "bench-password", false, 0)?;
    let rf = dir.join("refresh.lua");
    let tokens = dir.join("refresh-tokens.txt");
    lua_refresh(&rf, &basic, &tokens)?;
    let d = format!("-d{}s", s.seconds);
    let mut per_load: Vec<Vec<Sample>> = vec![Vec::new(); ISSUER_LOADS.len()];
    for round in 0..s.rounds {
        for (i, load) in ISSUER_LOADS.iter().enumerate() {
            let sample = match load {
                Load::Healthz => wrk(
                    &["-t1".into(), "-c64".into(), d.clone()],
                    &format!("{url}/healthz"),
                )?,
                Load::ClientCredentials => wrk(
                    &[
                        "-t1".into(),
                        "-c64".into(),
                        d.clone(),
                        "-s".into(),
                        cc.display().to_string(),
                    ],
                    &format!("{url}/apiv2/oauth/token"),
                )?,
                Load::Password => wrk(
                    &[
                        format!("-t{PASSWORD_USERS}"),
                        format!("-c{PASSWORD_USERS}"),
                        d.clone(),
                        "-s".into(),
                        pw.display().to_string(),
                    ],
                    &format!("{url}/apiv2/oauth/token"),
                )?,
                Load::Refresh => {
                    // 64 fresh families, one per connection, signed in 8 at a time (sign-ins in
                    // flight count against the address's budget until they finish).
                    let list = sign_in(&url, &basic_user, 64)?;
                    std::fs::write(&tokens, list.join("\n") + "\n")?;
                    wrk(
                        &[
                            "-t64".into(),
                            "-c64".into(),
                            d.clone(),
                            "-s".into(),
                            rf.display().to_string(),
                        ],
                        &format!("{url}/apiv2/oauth/token"),
                    )?
                }
            };
            eprintln!(
                "issuer round {} {}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, not 2xx: {}",
                round + 1,
                load.name(),
                sample.rps,
                sample.p50_ms,
                sample.p99_ms,
                sample.bad
            );
            per_load[i].push(sample);
        }
    }
    let rss = rss_kib(proc.pid());
    let command = format!(
        "taskset -c 0 issuer serve (release); taskset -c 1 wrk --latency -d{0}s: /healthz -t1 -c64; client_credentials -t1 -c64 -s cc.lua; password -t8 -c8 -s password.lua (one user per connection); refresh -t64 -c64 -s refresh.lua (64 families, each thread presents its latest refresh token)",
        s.seconds
    );
    Ok((Results::new(&per_load, rss), command))
}

/// The bench client and users on `store`; returns `id:secret`.
pub(super) fn provision(tools: &Tools, store: &StoreArgs) -> Result<String> {
    let grants = ["--grants", "password,client_credentials"];
    let secret = e2e::issuer::add_client(tools, store, "bench", &grants)?;
    for i in 0..PASSWORD_USERS {
        issuer_admin_on(
            tools,
            store,
            &["user", "add", &format!("bench{i}"), "--role", "viewer"],
            Some("bench-password"),
        )?;
    }
    Ok(format!("bench:{secret}"))
}

/// `n` new refresh token families at `url`, signed in 8 at a time (sign-ins in flight count
/// against the address's budget until they finish).
pub(super) fn sign_in(url: &str, basic_user: &str, n: usize) -> Result<Vec<String>> {
    let mut tokens = Vec::with_capacity(n);
    for wave in (0..n).collect::<Vec<_>>().chunks(8) {
        let handles: Vec<_> = wave
            .iter()
            .map(|i| {
                let (u, b) = (url.to_owned(), basic_user.to_owned());
                let user = format!("bench{}", i % PASSWORD_USERS);
                std::thread::spawn(move || password_grant(&u, &b, &user))
            })
            .collect();
        for h in handles {
            tokens.push(h.join().map_err(|_| anyhow::anyhow!("sign-in thread"))??);
        }
    }
    Ok(tokens)
}
