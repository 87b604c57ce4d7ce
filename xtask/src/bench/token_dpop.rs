//! The token endpoint with and without DPoP (`cargo xtask bench --dpop` or `--token-dpop`):
//! `client_credentials` plain, then bound by an ES256 proof and by an Ed25519 proof, each proof
//! made ahead and sent once, on the release issuer with its embedded store (`taskset -c 0`) and
//! wrk on core 1, in interleaved rounds so that each ratio is taken within a round.

use super::issuer::lua_post;
use super::{rss_kib, wrk, Results, Sample, Settings};
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use e2e::issuer::{start_issuer_pinned, StoreArgs};
use e2e::unix_now;
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::fmt::Write as _;
use std::path::Path;

/// What is measured, in the order of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    Es256,
    Ed25519,
}

const VARIANTS: [(Variant, &str); 3] = [
    (Variant::Plain, "client_credentials, no proof"),
    (Variant::Es256, "client_credentials, an ES256 proof each"),
    (
        Variant::Ed25519,
        "client_credentials, an Ed25519 proof each",
    ),
];

/// Proof keys of each algorithm. A key holds a bounded share of the replay memory, so the
/// proofs of a round are spread over several keys, as several clients' would be.
const PROOF_KEYS: usize = 32;
/// Proofs made ahead for a second of load: above what one core answers with a proof.
const MAX_RATE: u64 = 15_000;
/// The issuer's proof window (the largest allowed): the proofs of a round are dated when their
/// making begins, which takes seconds on a loaded machine.
const PROOF_WINDOW: &str = "600";

/// DPoP-bound `client_credentials` over the plain grant on one core: at least this.
pub(super) const BOUND_VS_PLAIN: f64 = 0.5;

/// The runs' figures.
pub(super) struct TokenDpopRun {
    results: Results,
    command: String,
}

/// The order of the variants in round `round`: each variant goes first in turn.
fn order(round: usize) -> [usize; 3] {
    let n = VARIANTS.len();
    [round % n, (round + 1) % n, (round + 2) % n]
}

/// wrk's script for `proofs` (one `DPoP` header each, sent once and in order; none: no header).
fn lua(path: &Path, basic: &str, proofs: &[String]) -> Result<()> {
    if proofs.is_empty() {
        return lua_post(path, basic, "grant_type=client_credentials");
    }
    let mut s = String::from("local proof = {\n");
    for p in proofs {
        writeln!(s, "\"{p}\",")?;
    }
    write!(
        s,
        r#"}}
local n = #proof
local i = 0
request = function()
  i = i + 1
  if i > n then i = 1 end
  return wrk.format("POST", nil, {{["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Basic {basic}", DPoP = proof[i]}}, "grant_type=client_credentials")
end
"#
    )?;
    std::fs::write(path, s)?;
    Ok(())
}

/// A round's proofs for `seconds` of load under `keys` (none without keys), dated now.
fn proofs(keys: &[ProofKey], endpoint: &str, tag: &str, seconds: u64) -> Vec<String> {
    let now = unix_now();
    let n = if keys.is_empty() {
        0
    } else {
        (MAX_RATE * seconds) as usize
    };
    (0..n)
        .map(|j| {
            let jti = format!("{tag}-{j}");
            let claims = ProofClaims {
                htm: "POST",
                htu: endpoint,
                jti: &jti,
                iat: now,
                access_token: None,
                nonce: None,
            };
            keys[j % keys.len()].proof(&claims)
        })
        .collect()
}

/// The section: the runs, written to their own part of BENCHMARKS.md.
pub(super) fn run(r: &mut super::Run) -> Result<()> {
    let dir = super::fresh_dir("bench-token-dpop")?;
    let results = bench_token_dpop(&dir, &r.s)?;
    let how = super::measured_by(&r.s, r.quick, "variant", "ratios taken within each round");
    let body = format!(
        "### Token endpoint: DPoP-bound `client_credentials` beside plain\n\n{how}{}",
        report(&results)?
    );
    super::publish("bench-token-dpop", &body, r.started)
}

fn bench_token_dpop(dir: &Path, s: &Settings) -> Result<TokenDpopRun> {
    let tools = super::release_issuer();
    let store = StoreArgs::redb(&dir.join("issuer-data"));
    let grants = ["--grants", "client_credentials"];
    let secret = e2e::issuer::add_client(&tools, &store, "bench", &grants)?;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("bench:{secret}"));
    let log = dir.join("issuer-token-dpop.log");
    let (proc, url) = start_issuer_pinned(
        &tools,
        &store,
        e2e::free_port(),
        &["--dpop-proof-seconds", PROOF_WINDOW],
        Some("0"),
        &log,
    )?;
    let endpoint = format!("{url}/apiv2/oauth/token");
    let es256 = (0..PROOF_KEYS)
        .map(|i| ProofKey::es256([i as u8 + 1; 32]).context("an ES256 key"))
        .collect::<Result<Vec<_>>>()?;
    let ed25519: Vec<ProofKey> = (0..PROOF_KEYS)
        .map(|i| ProofKey::ed25519([i as u8 + 0x41; 32]))
        .collect();
    // Proofs dated within the issuer's first seconds are refused (its memory of used proofs
    // cannot vouch for them): the rounds begin after that.
    std::thread::sleep(std::time::Duration::from_secs(
        shared::dpop::MAX_AHEAD_SECONDS + 1,
    ));
    let run = |v: usize, round: &str, seconds: u64| -> Result<Sample> {
        let (variant, _) = VARIANTS[v];
        let keys = match variant {
            Variant::Plain => &[][..],
            Variant::Es256 => &es256[..],
            Variant::Ed25519 => &ed25519[..],
        };
        let proofs = proofs(keys, &endpoint, &format!("{round}-{v}"), seconds);
        let script = dir.join(format!("token-{variant:?}-{round}.lua").to_lowercase());
        lua(&script, &basic, &proofs)?;
        let args = ["-t1", "-c64", &format!("-d{seconds}s"), "-s"]
            .map(String::from)
            .into_iter()
            .chain([script.display().to_string()])
            .collect::<Vec<_>>();
        let sample = wrk(&args, &endpoint);
        std::fs::remove_file(&script)?;
        sample
    };
    for v in 0..VARIANTS.len() {
        run(v, "warm", 1)?;
    }
    let mut per = vec![Vec::new(); VARIANTS.len()];
    for round in 0..s.rounds {
        for v in order(round) {
            let x = run(v, &format!("r{round}"), s.seconds)?;
            eprintln!(
                "token endpoint round {} {}: {:.0} tokens/s, p99 {:.3} ms, not 2xx {}",
                round + 1,
                VARIANTS[v].1,
                x.rps,
                x.p99_ms,
                x.bad
            );
            per[v].push(x);
        }
    }
    for (samples, (_, name)) in per.iter().zip(VARIANTS) {
        if let Some(x) = samples.iter().find(|x| x.bad > 0) {
            bail!("{name}: {} of {} answers were not 2xx", x.bad, x.requests);
        }
    }
    Ok(TokenDpopRun {
        results: Results::new(&per, rss_kib(proc.pid())),
        command: format!(
            "taskset -c 0 issuer serve --dpop-proof-seconds {PROOF_WINDOW} (release, embedded store); per variant: taskset -c 1 wrk --latency -t1 -c64 -d{}s -s VARIANT-ROUND.lua (Basic-authenticated grant_type=client_credentials; {MAX_RATE} proofs a second made ahead under {PROOF_KEYS} keys, each sent once)",
            s.seconds
        ),
    })
}

/// The token endpoint's section of the report.
pub(super) fn report(r: &TokenDpopRun) -> Result<String> {
    let res = &r.results;
    let mut out = format!("Command: `{}`.\n\n", r.command);
    out.push_str("| variant | tokens/s | vs no proof | p50 ms | p99 ms |\n|---|---|---|---|---|\n");
    for (i, ((_, name), x)) in VARIANTS.iter().zip(&res.samples).enumerate() {
        writeln!(
            out,
            "| {name} | {:.0} | {:.2} | {:.3} | {:.3} |",
            x.rps,
            res.paired(i, 0),
            x.p50_ms,
            x.p99_ms
        )?;
    }
    let es = res.paired(1, 0);
    let plain_us = 1e6 / res.samples[0].rps.max(1.0);
    let bound_us = 1e6 / res.samples[1].rps.max(1.0);
    writeln!(
        out,
        "\n| target | wanted | measured | |\n|---|---|---|---|\n| DPoP-bound (ES256) client_credentials vs plain, one core | ≥ {BOUND_VS_PLAIN:.2} | {es:.2} | {} |\n\nPer token on the issuer's core: {plain_us:.1} µs plain, {bound_us:.1} µs with an ES256 proof ({:.1} µs more). Issuer memory after the runs: RSS {} MiB, peak {} MiB.\n",
        super::mark(es >= BOUND_VS_PLAIN),
        bound_us - plain_us,
        res.rss_kib.0 / 1024,
        res.rss_kib.1 / 1024
    )?;
    Ok(out)
}
