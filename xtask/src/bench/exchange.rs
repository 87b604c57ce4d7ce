//! Token exchange (`cargo xtask bench --exchange`): what acting for a user costs.
//!
//! - The token endpoint: a service's token exchange of a user's access token (RFC 8693, the
//!   service acting) beside the same service's `client_credentials`, on the release issuer with
//!   its embedded store (`taskset -c 0`) and wrk on core 1, interleaved rounds.
//! - The filter: one Envoy (one worker, core 0) with the Wasm and the native filter, each with
//!   its token cache on and off, walking 10,000 distinct user tokens without an actor chain and
//!   10,000 with a chain of four actors; the ratio of each pair is taken within a round.
//! - The filter's core alone: criterion's `cargo bench -p filter-core --bench chain`, the same
//!   decision for the same two tokens without Envoy around it.

use super::envoy::{config, listener, native_filter, start_envoy, until_accepted, wasm_filter};
use super::issuer::{lua_post, password_grant_field};
use super::{cpu_ms, criterion_ns, median, rss_kib, wrk, Results, Sample, Settings};
use crate::util::{cargo, run};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use e2e::issuer::{add_client, issuer_admin_on, start_issuer_pinned, StoreArgs};
use e2e::unix_now;
use shared::token::{self, Chain, Claim, Identity, SubjectKind, TokenBody};
use std::fmt::Write as _;
use std::path::Path;

/// Token exchange over `client_credentials` on one core: at least this…
pub(super) const EXCHANGE_VS_CLIENT_CREDENTIALS: f64 = 0.8;
/// …with a p99 under this.
pub(super) const EXCHANGE_P99_MS: f64 = 5.0;
/// The filter's throughput with a chain of four actors over without: at least this (the cost
/// of a request within 10 %).
pub(super) const CHAIN_VS_PLAIN: f64 = 1.0 / 1.1;
/// Distinct tokens each filter run walks.
const POOL: usize = 10_000;
/// The actors of the chained tokens, the current one first.
const ACTORS: [&str; 4] = ["media-service", "transcoder", "uploader", "ingest-gateway"];

/// The section: both parts, written to their own part of BENCHMARKS.md.
pub(super) fn run_section(r: &mut super::Run) -> Result<()> {
    let dir = super::fresh_dir("bench-exchange")?;
    let endpoint = token_endpoint(&dir, &r.s)?;
    let native = crate::native::build_native_module()?;
    let edge = through_envoy(&dir, &r.tools, &native, &r.s)?;
    run(cargo().args(CORE_BENCH))?;
    let core: Vec<(String, f64)> = ["plain", "chain4"]
        .iter()
        .flat_map(|t| ["uncached", "cached"].map(|c| format!("filter_{t}_{c}")))
        .map(|n| Ok((n.clone(), criterion_ns(&n)?)))
        .collect::<Result<_>>()?;
    let how = super::measured_by(&r.s, r.quick, "variant", "ratios taken within each round");
    let body = format!(
        "### Token exchange and actor chains\n\n{how}{}{}{}",
        endpoint_report(&endpoint)?,
        envoy_report(&edge)?,
        core_report(&core)?
    );
    super::publish("bench-exchange", &body, r.started)
}

/// `cargo` arguments of the filter core's benchmark of chained tokens.
const CORE_BENCH: [&str; 10] = [
    "bench",
    "-p",
    "filter-core",
    "--bench",
    "chain",
    "--",
    "--warm-up-time",
    "1",
    "--measurement-time",
    "3",
];

/// Connections of the throughput runs (the issuer's core saturated) and of the latency runs
/// (below saturation: a p99 of queueing behind 64 requests on one core says nothing of a
/// request's own time).
const SATURATING: usize = 64;
const BELOW_SATURATION: usize = 8;

struct EndpointRun {
    /// Per variant, at [`SATURATING`] connections.
    results: Results,
    /// Per variant, at [`BELOW_SATURATION`] connections.
    latency: Results,
    /// Per variant and round, the issuer's CPU time a token at [`SATURATING`] connections, in
    /// µs: the cost behind the rates, which the machine's other load moves less.
    cpu_us: Vec<Vec<f64>>,
    command: String,
    /// The audit events the issuer dropped over the runs (its queue full): every exchange is
    /// audited, so a rate bought by losing them would not count.
    audit_dropped: u64,
}

/// The form of a token exchange of `subject`.
fn exchange_form(subject: &str) -> String {
    let enc = |s: &str| s.replace(':', "%3A");
    format!(
        "grant_type={}&subject_token={subject}&subject_token_type={}",
        enc(shared::grant::TOKEN_EXCHANGE),
        enc(shared::grant::ACCESS_TOKEN_TYPE)
    )
}

/// The store of the token endpoint's runs: client `app` (password grant) with user alice, and
/// client `svc` that may exchange `app`'s tokens. Returns the two clients' secrets.
fn provision(tools: &e2e::Tools, store: &StoreArgs) -> Result<(String, String)> {
    let app = add_client(tools, store, "app", &["--grants", "password"])?;
    let svc_args = ["--grants", "client_credentials", "--exchange-from", "app"];
    let svc = add_client(tools, store, "svc", &svc_args)?;
    issuer_admin_on(
        tools,
        store,
        &["user", "add", "alice", "--role", "viewer"],
        Some("bench-password"),
    )?;
    Ok((app, svc))
}

fn token_endpoint(dir: &Path, s: &Settings) -> Result<EndpointRun> {
    let tools = super::release_issuer();
    let store = StoreArgs::redb(&dir.join("issuer-data"));
    let (app, svc) = provision(&tools, &store)?;
    let log = dir.join("issuer-exchange.log");
    let (proc, url) = start_issuer_pinned(&tools, &store, e2e::free_port(), &[], Some("0"), &log)?;
    let endpoint = format!("{url}/apiv2/oauth/token");
    let basic = STANDARD.encode(format!("svc:{svc}"));
    let app_basic = format!("app:{app}");
    let variants = ["client_credentials", "token exchange of a user's token"];
    let run = |v: usize, seconds: u64, conns: usize| -> Result<(Sample, f64)> {
        // A fresh subject token a run: it must outlive the run.
        let form = match v {
            0 => "grant_type=client_credentials".to_owned(),
            _ => exchange_form(&password_grant_field(
                &url,
                &app_basic,
                "alice",
                "access_token",
            )?),
        };
        let script = dir.join(format!("exchange-{v}.lua"));
        lua_post(&script, &basic, &form)?;
        let args = ["-t1", &format!("-c{conns}"), &format!("-d{seconds}s"), "-s"]
            .map(String::from)
            .into_iter()
            .chain([script.display().to_string()])
            .collect::<Vec<_>>();
        let cpu = cpu_ms(proc.pid());
        let x = wrk(&args, &endpoint)?;
        let cpu_us = (cpu_ms(proc.pid()) - cpu) * 1000.0 / x.requests.max(1) as f64;
        eprintln!(
            "token endpoint, {conns} connections, {}: {:.0} tokens/s, {cpu_us:.1} µs CPU a token, p99 {:.3} ms, not 2xx {}",
            variants[v], x.rps, x.p99_ms, x.bad
        );
        if x.bad > 0 {
            bail!(
                "{}: {} of {} answers not 2xx",
                variants[v],
                x.bad,
                x.requests
            );
        }
        Ok((x, cpu_us))
    };
    for v in 0..variants.len() {
        run(v, 1, SATURATING)?;
    }
    let mut per = vec![Vec::new(); variants.len()];
    let mut below = vec![Vec::new(); variants.len()];
    let mut cpu_us = vec![Vec::new(); variants.len()];
    for round in 0..s.rounds {
        for step in 0..variants.len() {
            let v = (round + step) % variants.len();
            let (x, cpu) = run(v, s.seconds, SATURATING)?;
            per[v].push(x);
            cpu_us[v].push(cpu);
            below[v].push(run(v, s.seconds, BELOW_SATURATION)?.0);
        }
    }
    let rss = rss_kib(proc.pid());
    let dropped = "issuer_audit_events_dropped_total";
    let audit_dropped = super::raw_http::metric(super::raw_http::port_of(&url)?, dropped)?
        .with_context(|| format!("no {dropped} in {url}/metrics"))?;
    Ok(EndpointRun {
        audit_dropped,
        cpu_us,
        results: Results::new(&per, rss),
        latency: Results::new(&below, rss),
        command: format!(
            "taskset -c 0 issuer serve (release, embedded store); per variant: taskset -c 1 wrk --latency -t1 -c{SATURATING} -d{}s -s exchange-N.lua, then the same with -c{BELOW_SATURATION} (client `svc`, Basic-authenticated: grant_type=client_credentials, or the token exchange of user alice's access token from client `app`, `svc` declared with --exchange-from app)",
            s.seconds
        ),
    })
}

fn endpoint_report(r: &EndpointRun) -> Result<String> {
    let ratio = r.results.paired(1, 0);
    let ex_p99 = r.latency.samples[1].p99_ms;
    let mut out = format!("#### The token endpoint\n\nCommand: `{}`.\n\n", r.command);
    writeln!(
        out,
        "| variant | tokens/s, {SATURATING} conn. | p50 ms | p99 ms | issuer CPU µs a token | tokens/s, {BELOW_SATURATION} conn. | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|---|"
    )?;
    for (i, name) in ["client_credentials", "token exchange"].iter().enumerate() {
        let (x, y) = (r.results.samples[i], r.latency.samples[i]);
        writeln!(
            out,
            "| {name} | {:.0} | {:.3} | {:.3} | {:.1} | {:.0} | {:.3} | {:.3} |",
            x.rps,
            x.p50_ms,
            x.p99_ms,
            median(r.cpu_us[i].clone()),
            y.rps,
            y.p50_ms,
            y.p99_ms
        )?;
    }
    let by_cpu = median(
        r.cpu_us[0]
            .iter()
            .zip(&r.cpu_us[1])
            .map(|(cc, ex)| cc / ex)
            .collect(),
    );
    writeln!(
        out,
        "\n| target | wanted | measured | |\n|---|---|---|---|\n| token exchange vs client_credentials, one core ({SATURATING} connections) | ≥ {EXCHANGE_VS_CLIENT_CREDENTIALS:.2} | {ratio:.2} (by the issuer's CPU a token: {by_cpu:.2}) | {} |\n| token exchange p99 ({BELOW_SATURATION} connections) | < {EXCHANGE_P99_MS} ms | {ex_p99:.3} ms | {} |\n| audit events dropped (every exchange writes one) | 0 | {} | {} |\n",
        super::mark(ratio >= EXCHANGE_VS_CLIENT_CREDENTIALS),
        super::mark(ex_p99 < EXCHANGE_P99_MS),
        r.audit_dropped,
        super::mark(r.audit_dropped == 0)
    )?;
    Ok(out)
}

/// A user's token signed with `key`, as the password grant makes them, with the chain of
/// [`ACTORS`] if `chained`.
fn user_token(key: &shared::Key, i: usize, exp: u64, chained: bool) -> Result<String> {
    let mut jti = [0u8; 16];
    jti[..8].copy_from_slice(&(i as u64).to_be_bytes());
    jti[8] = u8::from(chained);
    let act = chained.then(|| Chain {
        origin: "media-app".into(),
        actors: ACTORS.map(String::from).to_vec(),
    });
    let body = TokenBody {
        kid: key.id(),
        jti,
        iat: exp - 3_600,
        exp,
        client: act
            .as_ref()
            .map_or("media-app".into(), |c| c.actors[0].clone()),
        identity: Identity {
            kind: SubjectKind::User,
            subject: format!("user{i}@example.com"),
            roles: vec!["editor".into(), "viewer".into()],
            claims: vec![Claim {
                typ: "email".into(),
                value: format!("user{i}@example.com"),
            }],
        },
        cnf: None,
        act,
    };
    token::mint(key, &body).context("a token")
}

/// The filters of the Envoy runs: (name, native, token cache entries).
const FILTERS: [(&str, bool, usize); 4] = [
    ("wasm", false, filter_core::cache::DEFAULT_CAPACITY),
    ("wasm_nocache", false, 0),
    ("native", true, filter_core::cache::DEFAULT_CAPACITY),
    ("native_nocache", true, 0),
];

struct EnvoyRun {
    /// Per filter of [`FILTERS`]: the plain tokens' results and the chained ones', paired.
    results: Vec<Results>,
    /// Per filter, per tokens (plain, chained) and round: Envoy's CPU time a request, in µs.
    cpu_us: Vec<[Vec<f64>; 2]>,
    command: String,
}

/// Writes the Envoy configuration: a listener per filter of [`FILTERS`] on `ports`, each
/// accepting tokens of `key`, the native module copied beside it.
fn write_config(
    dir: &Path,
    wasm: &Path,
    native: &Path,
    key: &shared::Key,
    ports: &[u16],
) -> Result<std::path::PathBuf> {
    let mut listeners = String::new();
    for ((name, is_native, cache), port) in FILTERS.iter().zip(ports) {
        let cfg = format!(
            r#"{{"keys":[{{"kid":1,"secret":"{}"}}],"token_cache_entries":{cache},{}}}"#,
            URL_SAFE_NO_PAD.encode(key.secret()),
            super::envoy::BENCH_DPOP
        );
        let filter = if *is_native {
            native_filter("mms_auth", &cfg)
        } else {
            wasm_filter(name, wasm, &cfg)
        };
        listeners += &listener(name, *port, &filter);
    }
    std::fs::copy(native, dir.join(e2e::NATIVE_LIBRARY))?;
    let cfg = dir.join("envoy-exchange.yaml");
    std::fs::write(&cfg, config(None, &listeners, "    []\n"))?;
    Ok(cfg)
}

fn through_envoy(dir: &Path, tools: &e2e::Tools, native: &Path, s: &Settings) -> Result<EnvoyRun> {
    let key = shared::Key::new(1, [0x5a; 32]);
    let exp = unix_now() + 3_600;
    let mut scripts = Vec::new();
    for chained in [false, true] {
        let tokens = (0..POOL)
            .map(|i| user_token(&key, i, exp, chained))
            .collect::<Result<Vec<_>>>()?;
        let path = dir.join(format!(
            "tokens-{}.lua",
            ["plain", "chain4"][usize::from(chained)]
        ));
        let requests: Vec<(String, String)> = tokens
            .iter()
            .map(|t| ("Authorization".to_owned(), format!("Bearer {t}")))
            .collect();
        super::traffic::lua(&path, &requests)?;
        scripts.push((path, tokens[0].clone()));
    }
    let ports: Vec<u16> = FILTERS.iter().map(|_| e2e::free_port()).collect();
    let cfg = write_config(dir, &tools.wasm, native, &key, &ports)?;
    let proc = start_envoy(tools, &cfg, ports[0], 1, Some("0"), &dir.join("envoy.log"))?;
    let url = |port: u16| format!("http://127.0.0.1:{port}/apiv2/MediaService/Find");
    for port in &ports {
        for (_, first) in &scripts {
            until_accepted(&url(*port), &format!("Authorization: Bearer {first}"))?;
        }
    }
    let run = |f: usize, t: usize, seconds: u64| -> Result<(Sample, f64)> {
        let args = ["-t1", "-c32", &format!("-d{seconds}s"), "-s"]
            .map(String::from)
            .into_iter()
            .chain([scripts[t].0.display().to_string()])
            .collect::<Vec<_>>();
        let cpu = cpu_ms(proc.pid());
        let x = wrk(&args, &url(ports[f]))?;
        let cpu_us = (cpu_ms(proc.pid()) - cpu) * 1000.0 / x.requests.max(1) as f64;
        if x.bad > 0 {
            bail!("{} {t}: {} answers not 2xx", FILTERS[f].0, x.bad);
        }
        Ok((x, cpu_us))
    };
    for f in 0..FILTERS.len() {
        for t in 0..2 {
            run(f, t, 1)?;
        }
    }
    let mut per = vec![vec![Vec::new(), Vec::new()]; FILTERS.len()];
    let mut cpu_us = vec![[Vec::new(), Vec::new()]; FILTERS.len()];
    for round in 0..s.rounds {
        for (f, per_filter) in per.iter_mut().enumerate() {
            for step in 0..2 {
                let t = (round + step) % 2;
                let (x, cpu) = run(f, t, s.seconds)?;
                eprintln!(
                    "exchange round {} {} {}: {:.0} req/s, {cpu:.1} µs Envoy CPU a request, p99 {:.3} ms",
                    round + 1,
                    FILTERS[f].0,
                    ["plain", "chain of 4"][t],
                    x.rps,
                    x.p99_ms
                );
                per_filter[t].push(x);
                cpu_us[f][t].push(cpu);
            }
        }
    }
    let rss = rss_kib(proc.pid());
    Ok(EnvoyRun {
        results: per.iter().map(|p| Results::new(p, rss)).collect(),
        cpu_us,
        command: format!(
            "taskset -c 0 envoy --concurrency 1 -c target/bench-exchange/envoy-exchange.yaml (a listener per filter); per filter and tokens: taskset -c 1 wrk --latency -t1 -c32 -d{}s -s target/bench-exchange/tokens-{{plain,chain4}}.lua ({POOL} distinct user tokens each, in `Authorization`)",
            s.seconds
        ),
    })
}

fn envoy_report(r: &EnvoyRun) -> Result<String> {
    let mut out = format!("#### Through Envoy\n\nCommand: `{}`.\n\n", r.command);
    out.push_str(
        "| filter | token cache | plain req/s | chain of 4 req/s | chain vs plain | Envoy CPU µs a request, plain | chained | plain over chained | p99 plain ms | p99 chain ms | |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (((name, _, cache), res), cpu) in FILTERS.iter().zip(&r.results).zip(&r.cpu_us) {
        let (plain, chain) = (res.samples[0], res.samples[1]);
        let ratio = res.paired(1, 0);
        let cost = median(cpu[0].iter().zip(&cpu[1]).map(|(p, c)| p / c).collect());
        writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {ratio:.3} | {:.1} | {:.1} | {cost:.3} | {:.3} | {:.3} | {} |",
            name.trim_end_matches("_nocache"),
            if *cache == 0 { "off" } else { "on" },
            plain.rps,
            chain.rps,
            median(cpu[0].clone()),
            median(cpu[1].clone()),
            plain.p99_ms,
            chain.p99_ms,
            super::mark(cost >= CHAIN_VS_PLAIN)
        )?;
    }
    writeln!(
        out,
        "\nTarget: a token with a chain of four actors costs the filter within 10 % of a plain token. The cost is Envoy's CPU time a request (user and system over each run, over its requests; paired within each round): plain over chained ≥ {CHAIN_VS_PLAIN:.3}. The rates beside it move with the machine's other load and with wrk sharing the other core.\n"
    )?;
    Ok(out)
}

fn core_report(core: &[(String, f64)]) -> Result<String> {
    let ns = |n: &str| core.iter().find(|(k, _)| k == n).map_or(f64::NAN, |x| x.1);
    let mut out = format!(
        "#### The filter's core alone (criterion, `cargo {}`)\n\n| token cache | plain ns | chain of 4 ns | chain over plain |\n|---|---|---|---|\n",
        CORE_BENCH.join(" ")
    );
    for cache in ["uncached", "cached"] {
        let (p, c) = (
            ns(&format!("filter_plain_{cache}")),
            ns(&format!("filter_chain4_{cache}")),
        );
        writeln!(out, "| {cache} | {p:.0} | {c:.0} | {:.2} |", c / p)?;
    }
    Ok(out)
}
