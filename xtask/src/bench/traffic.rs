//! Envoy under load (the filter's throughput and latency targets): one Envoy (one worker on
//! core 0) with a listener per variant on a direct-response route, wrk on core 1. Three workloads: one token
//! repeated (the first figures, kept for continuity), a pool of 10,000 distinct tokens (users,
//! clients and impersonations, in both headers) that every wrk connection walks, and the pool with
//! one request in ten carrying a token that must be refused (expired, forged, malformed, missing).
//! Variants and workloads are named values; they run interleaved, round after round.

use super::edge::{edge_issuer, sync_config, EdgeIssuer, REVOCATIONS};
use super::envoy::{
    config, hs256_jwt_for, issuer_cluster, jwt_filter, listener, native_filter, our_token,
    start_envoy, until_accepted, wasm_filter, Modules, BENCH_DPOP, TOKEN_LIFETIME,
};
use super::{mark, rss_kib, wrk, Results, Sample, Settings};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use e2e::unix_now;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Distinct tokens in the pool.
pub(super) const POOL: usize = 10_000;

/// The tokens a variant checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tokens {
    Ours,
    Jwt,
}

/// What sits in front of the direct response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Filter {
    None,
    EmptyWasm,
    /// Reads one header and adds one: the least a header-based Wasm filter can cost.
    Reference,
    Ours,
    /// Ours, its keys and revocations pulled by edge sync from an issuer with [`REVOCATIONS`] in
    /// force (none of them of the tokens sent).
    OursRevocations,
    /// Ablation: ours reading the headers, then letting the request through.
    OursReadOnly,
    /// Ablation: ours stopping after the decision (no header written).
    OursNoWrites,
    JwtAuthn,
    JwtAuthnCached,
    /// Ours as a native Envoy dynamic module (`libmms_auth.so`).
    Native,
    /// The native filter with edge sync, as [`Filter::OursRevocations`].
    NativeRevocations,
    /// Ablation: a native module that lets every request through at once.
    NativeEmpty,
    /// Ablation: the native filter reading the headers, then letting the request through.
    NativeReadOnly,
    /// Ablation: the native filter stopping after the decision (no header written).
    NativeNoWrites,
}

impl Filter {
    fn checks_tokens(self) -> bool {
        !matches!(
            self,
            Self::None
                | Self::EmptyWasm
                | Self::Reference
                | Self::OursReadOnly
                | Self::NativeEmpty
                | Self::NativeReadOnly
        )
    }

    fn tokens(self) -> Tokens {
        match self {
            Self::JwtAuthn | Self::JwtAuthnCached => Tokens::Jwt,
            _ => Tokens::Ours,
        }
    }
}

pub(super) struct Variant {
    pub(super) name: &'static str,
    pub(super) filter: Filter,
}

pub(super) const VARIANTS: [Variant; 14] = [
    Variant {
        name: "no auth filter",
        filter: Filter::None,
    },
    Variant {
        name: "empty Wasm filter",
        filter: Filter::EmptyWasm,
    },
    Variant {
        name: "reference: reads one header, adds one",
        filter: Filter::Reference,
    },
    Variant {
        name: "our filter",
        filter: Filter::Ours,
    },
    Variant {
        name: "our filter, edge sync, 100,000 revocations in force",
        filter: Filter::OursRevocations,
    },
    Variant {
        name: "ablation: ours, read headers only",
        filter: Filter::OursReadOnly,
    },
    Variant {
        name: "ablation: ours, read and decide, no writes",
        filter: Filter::OursNoWrites,
    },
    Variant {
        name: "jwt_authn HS256, no JWT cache",
        filter: Filter::JwtAuthn,
    },
    Variant {
        name: "jwt_authn HS256, jwt_cache_config for the pool",
        filter: Filter::JwtAuthnCached,
    },
    Variant {
        name: "native filter (dynamic module)",
        filter: Filter::Native,
    },
    Variant {
        name: "native filter, edge sync, 100,000 revocations in force",
        filter: Filter::NativeRevocations,
    },
    Variant {
        name: "ablation: native, empty module",
        filter: Filter::NativeEmpty,
    },
    Variant {
        name: "ablation: native, read headers only",
        filter: Filter::NativeReadOnly,
    },
    Variant {
        name: "ablation: native, read and decide, no writes",
        filter: Filter::NativeNoWrites,
    },
];

/// A workload: one token, the pool, or the pool with one refused request in ten.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Workload {
    OneToken,
    Pool,
    Mixed,
}

const WORKLOADS: [Workload; 3] = [Workload::OneToken, Workload::Pool, Workload::Mixed];

impl Workload {
    fn title(self) -> &'static str {
        match self {
            Self::OneToken => "One token, repeated",
            Self::Pool => "Pool: 10,000 distinct valid tokens",
            Self::Mixed => "Mixed: the pool and 10 % refused (expired, forged, malformed, missing)",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Self::OneToken => "one",
            Self::Pool => "pool",
            Self::Mixed => "mixed",
        }
    }
}

/// Per workload, the results of every variant (in [`VARIANTS`] order).
pub(super) struct Traffic {
    runs: Vec<(Workload, Results)>,
    command: String,
}

impl Traffic {
    fn results(&self, w: Workload) -> &Results {
        &self
            .runs
            .iter()
            .find(|(x, _)| *x == w)
            .expect("every workload ran")
            .1
    }

    fn index(f: Filter) -> usize {
        VARIANTS
            .iter()
            .position(|v| v.filter == f)
            .expect("a variant")
    }

    /// The median over rounds of `a`'s throughput over `b`'s.
    pub(super) fn ratio(&self, w: Workload, a: Filter, b: Filter) -> f64 {
        self.results(w).paired(Self::index(a), Self::index(b))
    }

    pub(super) fn sample(&self, w: Workload, f: Filter) -> Sample {
        self.results(w).samples[Self::index(f)]
    }

    /// Envoy's memory after the runs: RSS and peak, KiB.
    pub(super) fn rss_kib(&self) -> (u64, u64) {
        self.runs[0].1.rss_kib
    }
}

/// The header and value of request `i` of a workload (an empty name: no header).
fn request(
    tokens: Tokens,
    w: Workload,
    key: &shared::Key,
    jwt: &[u8],
    i: usize,
    now: u64,
) -> (String, String) {
    let valid_exp = now + TOKEN_LIFETIME;
    let header = if tokens == Tokens::Ours && i % 2 == 1 {
        "ServiceAuthorization"
    } else {
        "Authorization"
    };
    let token = |exp| match tokens {
        Tokens::Ours => our_token(key, i, exp),
        Tokens::Jwt => hs256_jwt_for(jwt, &format!("user{i}@example.com"), exp),
    };
    if w == Workload::Mixed && i % 10 == 9 {
        let bad = match (i / 10) % 4 {
            0 => token(now - 600),
            1 => {
                let mut t = token(valid_exp).into_bytes();
                let at = t.len() - 5;
                t[at] = if t[at] == b'A' { b'B' } else { b'A' };
                String::from_utf8(t).expect("ASCII")
            }
            2 => "mmat1.not-a-token".into(),
            _ => return (String::new(), String::new()),
        };
        return (header.into(), format!("Bearer {bad}"));
    }
    (header.into(), format!("Bearer {}", token(valid_exp)))
}

/// A wrk script walking the workload's requests, one after the other, on every connection.
pub(super) fn lua(path: &Path, requests: &[(String, String)]) -> Result<()> {
    let mut s = String::from("local names = {\n");
    for (n, _) in requests {
        writeln!(s, "\"{n}\",")?;
    }
    s.push_str("}\nlocal values = {\n");
    for (_, v) in requests {
        writeln!(s, "\"{v}\",")?;
    }
    s.push_str(
        r#"}
local n = #values
local i = 0
request = function()
  i = i + 1
  if i > n then i = 1 end
  if names[i] == "" then return wrk.format("GET") end
  return wrk.format("GET", nil, { [names[i]] = values[i] })
end
"#,
    );
    std::fs::write(path, s)?;
    Ok(())
}

/// The wrk arguments of a workload for one kind of token: a header for one token (as the first
/// runs did), a script for the others.
fn wrk_load(
    dir: &Path,
    w: Workload,
    tokens: Tokens,
    key: &shared::Key,
    jwt: &[u8],
) -> Result<Vec<String>> {
    let now = unix_now();
    if w == Workload::OneToken {
        let (name, value) = request(tokens, w, key, jwt, 0, now);
        return Ok(vec!["-H".into(), format!("{name}: {value}")]);
    }
    let requests: Vec<_> = (0..POOL)
        .map(|i| request(tokens, w, key, jwt, i, now))
        .collect();
    let tag = if tokens == Tokens::Ours {
        "ours"
    } else {
        "jwt"
    };
    let path = dir.join(format!("{}-{tag}.lua", w.file()));
    lua(&path, &requests)?;
    Ok(vec!["-s".into(), path.display().to_string()])
}

fn filters(
    f: Filter,
    m: &Modules,
    key: &shared::Key,
    jwt: &[u8],
    name: &str,
    sync: &str,
) -> String {
    let ours_cfg = format!(
        r#"{{"keys":[{{"kid":{},"secret":"{}"}}],{BENCH_DPOP}}}"#,
        key.id(),
        URL_SAFE_NO_PAD.encode(key.secret())
    );
    match f {
        Filter::None => String::new(),
        Filter::EmptyWasm => wasm_filter(name, &m.empty, ""),
        Filter::Reference => wasm_filter(name, &m.reference, ""),
        Filter::Ours => wasm_filter(name, &m.ours, &ours_cfg),
        Filter::OursRevocations => wasm_filter(name, &m.ours, sync),
        Filter::OursReadOnly => wasm_filter(name, &m.read_only, &ours_cfg),
        Filter::OursNoWrites => wasm_filter(name, &m.no_writes, &ours_cfg),
        Filter::JwtAuthn => jwt_filter(jwt, None),
        Filter::JwtAuthnCached => jwt_filter(jwt, Some(2 * POOL as u32)),
        Filter::Native => native_filter("mms_auth", &ours_cfg),
        Filter::NativeRevocations => native_filter("mms_auth", sync),
        Filter::NativeEmpty => native_filter("mms_auth_empty", &ours_cfg),
        Filter::NativeReadOnly => native_filter("mms_auth_read", &ours_cfg),
        Filter::NativeNoWrites => native_filter("mms_auth_decide", &ours_cfg),
    }
}

/// Writes the Envoy configuration of the traffic runs: a listener per variant on `ports`.
fn write_config(
    dir: &Path,
    issuer: &EdgeIssuer,
    m: &Modules,
    jwt: &[u8],
    ports: &[u16],
) -> Result<PathBuf> {
    let sync = sync_config("issuer", &issuer.edge_secret);
    let mut listeners = String::new();
    for (v, port) in VARIANTS.iter().zip(ports) {
        let name = format!("{:?}", v.filter).to_lowercase();
        let filters = filters(v.filter, m, &issuer.key, jwt, &name, &sync);
        listeners += &listener(&name, *port, &filters);
    }
    let clusters = issuer_cluster("issuer", &issuer.url)?;
    // Envoy loads the native filter and its ablations from the directory it runs in.
    std::fs::copy(&m.native, dir.join(e2e::NATIVE_LIBRARY))?;
    for lib in &m.native_ablations {
        std::fs::copy(lib, dir.join(lib.file_name().context("a library file")?))?;
    }
    let cfg = dir.join("envoy-traffic.yaml");
    std::fs::write(&cfg, config(Some(e2e::free_port()), &listeners, &clusters))?;
    Ok(cfg)
}

pub(super) fn bench_traffic(
    dir: &Path,
    tools: &e2e::Tools,
    m: &Modules,
    s: &Settings,
) -> Result<Traffic> {
    // Every token of ours is signed with the issuer's key, so the edge-synced listener, which
    // takes its key ring from the issuer, accepts the same tokens as the others.
    let issuer = edge_issuer(tools, dir, "issuer-revocations", REVOCATIONS)?;
    let key = issuer.key.clone();
    let jwt = [0xa5u8; 32];
    let mut loads: Vec<(Workload, [Vec<String>; 2])> = Vec::new();
    for w in WORKLOADS {
        let ours = wrk_load(dir, w, Tokens::Ours, &key, &jwt)?;
        loads.push((w, [ours, wrk_load(dir, w, Tokens::Jwt, &key, &jwt)?]));
    }
    let ports: Vec<u16> = VARIANTS.iter().map(|_| e2e::free_port()).collect();
    let cfg = write_config(dir, &issuer, m, &jwt, &ports)?;
    let log = dir.join("envoy-traffic.log");
    let proc = start_envoy(tools, &cfg, ports[0], 1, Some("0"), &log)?;
    let url = |port: u16| format!("http://127.0.0.1:{port}/apiv2/MediaService/Find");
    let first = &loads[0].1[0];
    for synced in [Filter::OursRevocations, Filter::NativeRevocations] {
        let port = ports[Traffic::index(synced)];
        until_accepted(&url(port), &first[1]).with_context(|| format!("listener {synced:?}"))?;
    }
    let run = |w: usize, v: usize, seconds: u64| -> Result<Sample> {
        let load = &loads[w].1[usize::from(VARIANTS[v].filter.tokens() == Tokens::Jwt)];
        let args = ["-t1", "-c32", &format!("-d{seconds}s")]
            .map(String::from)
            .into_iter()
            .chain(load.iter().cloned())
            .collect::<Vec<_>>();
        wrk(&args, &url(ports[v]))
    };
    // Warm every listener up (V8's tiers, jwt_authn's cache and ours with each workload's
    // tokens) outside the measurement; one token needs no warming of its own.
    for (w, (workload, _)) in loads.iter().enumerate() {
        for v in 0..VARIANTS.len() {
            if *workload != Workload::OneToken {
                run(w, v, 1)?;
            }
        }
    }
    let mut per: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); VARIANTS.len()]; loads.len()];
    for round in 0..s.rounds {
        for (w, (workload, _)) in loads.iter().enumerate() {
            for (v, variant) in VARIANTS.iter().enumerate() {
                let sample = run(w, v, s.seconds)?;
                check(*workload, variant, &sample)?;
                eprintln!(
                    "traffic round {} {:?} {}: {:.0} req/s, p99 {:.3} ms",
                    round + 1,
                    workload,
                    variant.name,
                    sample.rps,
                    sample.p99_ms
                );
                per[w][v].push(sample);
            }
        }
    }
    let rss = rss_kib(proc.pid());
    let runs = loads
        .iter()
        .zip(&per)
        .map(|((w, _), samples)| (*w, Results::new(samples, rss)))
        .collect();
    Ok(Traffic {
        runs,
        command: format!(
            "taskset -c 0 envoy --concurrency 1 -c target/bench-traffic/envoy-traffic.yaml; per variant and workload: taskset -c 1 wrk --latency -t1 -c32 -d{}s, with -H 'Authorization: Bearer TOKEN' (one token) or -s target/bench-traffic/{{pool,mixed}}-{{ours,jwt}}.lua",
            s.seconds
        ),
    })
}

/// Every answer 2xx but on the mixed workload, where the variants that check tokens refuse a
/// tenth and the others none.
fn check(w: Workload, v: &Variant, x: &Sample) -> Result<()> {
    let refused = x.bad as f64 / x.requests.max(1) as f64;
    let expected = if w == Workload::Mixed && v.filter.checks_tokens() {
        0.1
    } else {
        0.0
    };
    if (refused - expected).abs() > 0.02 || (expected == 0.0 && x.bad > 0) {
        bail!(
            "{} on {}: {:.1} % of answers were not 2xx, expected {:.0} %",
            v.name,
            w.title(),
            refused * 100.0,
            expected * 100.0
        );
    }
    Ok(())
}

/// The throughput targets on the pool and mixed workloads: what, the least
/// ratio wanted, and the two variants compared.
const TARGETS: [(&str, f64, Filter, Filter); 4] = [
    (
        "ours vs the reference filter",
        0.90,
        Filter::Ours,
        Filter::Reference,
    ),
    (
        "ours vs jwt_authn without cache",
        1.15,
        Filter::Ours,
        Filter::JwtAuthn,
    ),
    (
        "ours vs jwt_authn with its cache",
        0.80,
        Filter::Ours,
        Filter::JwtAuthnCached,
    ),
    (
        "ours with 100,000 revocations (edge sync) vs ours with none",
        0.95,
        Filter::OursRevocations,
        Filter::Ours,
    ),
];

/// The native filter's throughput targets: against `jwt_authn` with its cache and
/// against no auth filter.
const NATIVE_TARGETS: [(&str, f64, Filter, Filter); 2] = [
    (
        "native vs jwt_authn with its cache",
        1.0,
        Filter::Native,
        Filter::JwtAuthnCached,
    ),
    (
        "native vs no auth filter",
        0.90,
        Filter::Native,
        Filter::None,
    ),
];

/// A table of targets on workload `w`: each row the least ratio wanted of two variants'
/// throughput, then the p99 of `p99.1` no worse than that of `p99.2`.
fn target_table(
    r: &Traffic,
    w: Workload,
    heading: &str,
    targets: &[(&str, f64, Filter, Filter)],
    p99: (&str, Filter, Filter),
) -> Result<String> {
    let mut out = format!("| {heading} | wanted | measured | |\n|---|---|---|---|\n");
    for &(what, target, a, b) in targets {
        let ratio = r.ratio(w, a, b);
        writeln!(
            out,
            "| {what} | ≥ {target:.2} | {ratio:.2} | {} |",
            mark(ratio >= target)
        )?;
    }
    let (x, y) = (r.sample(w, p99.1), r.sample(w, p99.2));
    writeln!(
        out,
        "| {} | no worse | {:.3} ms vs {:.3} ms | {} |",
        p99.0,
        x.p99_ms,
        y.p99_ms,
        mark(x.p99_ms <= y.p99_ms)
    )?;
    Ok(out)
}

/// The native filter's targets on a workload, and its ratio to ours.
fn native_targets(r: &Traffic, w: Workload) -> Result<String> {
    use Filter::{JwtAuthnCached, Native, Ours};
    let mut out = target_table(
        r,
        w,
        "native filter target",
        &NATIVE_TARGETS,
        (
            "p99 of native vs jwt_authn with its cache",
            Native,
            JwtAuthnCached,
        ),
    )?;
    writeln!(
        out,
        "| native vs our Wasm filter | reported | {:.2} | |\n",
        r.ratio(w, Native, Ours)
    )?;
    Ok(out)
}

/// The traffic section of the report: a table per workload, and the targets of the Wasm and the
/// native filter on the pool and mixed workloads.
pub(super) fn report(r: &Traffic) -> Result<String> {
    use Filter::{EmptyWasm, JwtAuthn, JwtAuthnCached, Ours, Reference};
    let mut out = format!("Command: `{}`.\n\n", r.command);
    for (w, res) in &r.runs {
        writeln!(out, "#### {}\n", w.title())?;
        writeln!(out, "| variant | requests/s | vs empty Wasm | vs reference | vs jwt_authn | vs jwt_authn cached | p50 ms | p99 ms | not 2xx |\n|---|---|---|---|---|---|---|---|---|")?;
        for (i, (v, x)) in VARIANTS.iter().zip(&res.samples).enumerate() {
            let vs = |f| res.paired(i, Traffic::index(f));
            writeln!(
                out,
                "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {} |",
                v.name,
                x.rps,
                vs(EmptyWasm),
                vs(Reference),
                vs(JwtAuthn),
                vs(JwtAuthnCached),
                x.p50_ms,
                x.p99_ms,
                x.bad
            )?;
        }
        if *w == Workload::OneToken {
            out.push('\n');
            continue;
        }
        out.push('\n');
        out += &target_table(
            r,
            *w,
            "target",
            &TARGETS,
            ("p99 of ours vs jwt_authn without cache", Ours, JwtAuthn),
        )?;
        out.push('\n');
        out += &native_targets(r, *w)?;
    }
    let (rss, peak) = r.rss_kib();
    writeln!(
        out,
        "Envoy memory after the runs: RSS {} MiB, peak {} MiB.\n",
        rss / 1024,
        peak / 1024
    )?;
    Ok(out)
}
