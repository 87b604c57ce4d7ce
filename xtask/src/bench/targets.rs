//! The product's performance targets, each a named constant, and the main section of
//! BENCHMARKS.md that measures against them: the table of targets, the issuer's loads and the
//! micro-benchmarks. The table's "target" column is rendered from the same constants the verdict
//! uses, so the report cannot say one bound and judge by another.

use super::issuer::{Load, ISSUER_LOADS};
use super::traffic::{Filter, Traffic, Workload};
use super::wrk::Results;
use super::{mark, CRITERION};
use crate::util::thousands;
use crate::wasm::MAX_MODULE_BYTES;
use anyhow::Result;
use std::fmt::Write as _;

/// Our filter's throughput over an empty Wasm filter's, one token: at least this.
pub(super) const VS_EMPTY_WASM: f64 = 0.90;
/// Our filter's throughput over `jwt_authn` HS256's, one token: at least this.
pub(super) const VS_JWT_AUTHN: f64 = 1.15;
/// The issuer's client_credentials throughput over its `/healthz`'s: at least this…
pub(super) const CLIENT_CREDENTIALS_VS_HEALTHZ: f64 = 0.5;
/// …and more than this many grants a second.
pub(super) const CLIENT_CREDENTIALS_PER_SECOND: f64 = 15_000.0;
/// Durable refresh rotations a second, 64 clients: at least this…
pub(super) const REFRESH_PER_SECOND: f64 = 10_000.0;
/// …with a p99 of at most this.
pub(super) const REFRESH_P99_MS: f64 = 10.0;
/// Native token verification: the product's bound, in nanoseconds…
pub(super) const VERIFY_BOUND_NS: f64 = 1_000.0;
/// …and the aim the report judges by.
pub(super) const VERIFY_AIM_NS: f64 = 500.0;

/// The main section: the product's performance targets, the issuer's loads, the
/// micro-benchmarks.
pub(super) fn report(
    traffic: &Traffic,
    iss: &Results,
    iss_cmd: &str,
    micro: &[(&str, f64)],
    wasm_size: u64,
) -> Result<String> {
    Ok(targets(traffic, iss, micro, wasm_size)? + &issuer_and_micro(iss, iss_cmd, micro)?)
}

/// The table of the product's performance targets.
fn targets(
    traffic: &Traffic,
    iss: &Results,
    micro: &[(&str, f64)],
    wasm_size: u64,
) -> Result<String> {
    let one = Workload::OneToken;
    let i = &iss.samples;
    let (none, ours) = (
        traffic.sample(one, Filter::None),
        traffic.sample(one, Filter::Ours),
    );
    let (cc, refresh) = (i[Load::ClientCredentials.index()], i[Load::Refresh.index()]);
    let (vs_pass, vs_jwt, vs_none, vs_reference) = (
        traffic.ratio(one, Filter::Ours, Filter::EmptyWasm),
        traffic.ratio(one, Filter::Ours, Filter::JwtAuthn),
        traffic.ratio(one, Filter::Ours, Filter::None),
        traffic.ratio(one, Filter::Ours, Filter::Reference),
    );
    let cc_vs_health = iss.paired(Load::ClientCredentials.index(), Load::Healthz.index());
    let verify_ns = micro
        .iter()
        .find(|(n, _)| *n == "verify")
        .map_or(f64::NAN, |m| m.1);
    let mut r = String::new();
    writeln!(r, "### Against the product's performance targets\n")?;
    writeln!(
        r,
        "Envoy figures: the one-token workload of the traffic runs.\n"
    )?;
    writeln!(r, "| what | target | measured | |\n|---|---|---|---|")?;
    writeln!(
        r,
        "| our filter vs empty Wasm filter | ≥ {VS_EMPTY_WASM:.2} | {vs_pass:.2} | {} |",
        mark(vs_pass >= VS_EMPTY_WASM)
    )?;
    writeln!(
        r,
        "| our filter vs `jwt_authn` HS256 | ≥ {VS_JWT_AUTHN:.2} | {vs_jwt:.2} | {} |",
        mark(vs_jwt >= VS_JWT_AUTHN)
    )?;
    writeln!(
        r,
        "| our filter vs no auth filter | reported | {:.2} (p50 +{:.3} ms, p99 +{:.3} ms) | |",
        vs_none,
        ours.p50_ms - none.p50_ms,
        ours.p99_ms - none.p99_ms
    )?;
    writeln!(
        r,
        "| issuer client_credentials vs `/healthz` | ≥ {CLIENT_CREDENTIALS_VS_HEALTHZ}, and > {}/s | {cc_vs_health:.2}, {:.0}/s | {} |",
        thousands(CLIENT_CREDENTIALS_PER_SECOND as u64),
        cc.rps,
        mark(cc_vs_health >= CLIENT_CREDENTIALS_VS_HEALTHZ && cc.rps > CLIENT_CREDENTIALS_PER_SECOND)
    )?;
    writeln!(
        r,
        "| durable refresh rotations, 64 clients | ≥ {}/s, p99 ≤ {REFRESH_P99_MS} ms | {:.0}/s, p99 {:.2} ms | {} |",
        thousands(REFRESH_PER_SECOND as u64),
        refresh.rps,
        refresh.p99_ms,
        mark(refresh.rps >= REFRESH_PER_SECOND && refresh.p99_ms <= REFRESH_P99_MS)
    )?;
    writeln!(
        r,
        "| native token verification | ≤ {VERIFY_BOUND_NS:.0} ns (aim: ≤ {VERIFY_AIM_NS:.0} ns) | {verify_ns:.0} ns | {} |",
        mark(verify_ns <= VERIFY_AIM_NS)
    )?;
    writeln!(
        r,
        "| filter `.wasm`, release, stripped, after `wasm-opt` | ≤ {} bytes | {wasm_size} bytes | {} |",
        thousands(MAX_MODULE_BYTES),
        mark(wasm_size <= MAX_MODULE_BYTES)
    )?;
    writeln!(
        r,
        "| our filter vs the reference filter (reads one header, adds one) | reported | {vs_reference:.2} | |\n"
    )?;
    Ok(r)
}

/// The issuer's loads and the micro-benchmarks.
fn issuer_and_micro(iss: &Results, iss_cmd: &str, micro: &[(&str, f64)]) -> Result<String> {
    let i = &iss.samples;
    let mut r = String::new();
    writeln!(r, "### Issuer, release build on core 0, wrk on core 1\n")?;
    writeln!(r, "| load | requests/s | vs /healthz | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|")?;
    for (l, (load, x)) in ISSUER_LOADS.iter().zip(i).enumerate() {
        writeln!(
            r,
            "| {} | {:.0} | {:.2} | {:.3} | {:.3} | {} |",
            load.name(),
            x.rps,
            iss.paired(l, Load::Healthz.index()),
            x.p50_ms,
            x.p99_ms,
            x.requests
        )?;
    }
    writeln!(r, "\nEvery response of every issuer run was 2xx, and every Envoy run answered as it must (the run fails otherwise). Issuer memory after the runs: RSS {} MiB, peak {} MiB.\n", iss.rss_kib.0 / 1024, iss.rss_kib.1 / 1024)?;
    writeln!(r, "Command: `{iss_cmd}`\n")?;
    writeln!(
        r,
        "### Micro-benchmarks (criterion, `cargo {}`)\n",
        CRITERION.join(" ")
    )?;
    writeln!(r, "| operation | mean |\n|---|---|")?;
    for (n, ns) in micro {
        writeln!(r, "| {n} | {ns:.0} ns |")?;
    }
    Ok(r)
}
