//! DPoP-bound requests through Envoy (`cargo xtask bench --dpop`): the pool of 10,000 tokens
//! minted as `mmat2.` tokens bound to one of a few ES256 proof keys, each request with a fresh
//! proof (made ahead, used once, `htu` the URL wrk hits, `iat` at the round's start), through the
//! native and the Wasm filter side by side in one Envoy; the same tokens unbound as `Bearer`; and
//! Envoy's `jwt_authn` verifying a distinct ES256 JWT per request without its cache (one P-256
//! verification a request, its baseline); and the same bound requests with Ed25519 proofs (which
//! no host verifies for the Wasm filter: `docs/dpop.md`). One worker on core 0, wrk on core 1, interleaved
//! rounds as in `traffic.rs`.

use super::envoy::{
    bound_token, config, jwt_authn_filter, listener, native_filter, start_envoy, wasm_filter,
    Modules, TOKEN_LIFETIME,
};
use super::traffic::POOL;
use super::{cpu_ms, mark, median, rss_kib, wrk, Results, Sample, Settings};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use e2e::unix_now;
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::fmt::Write as _;
use std::path::Path;

/// Proof keys the pool's tokens are bound to (token `i` to key `i % PROOF_KEYS`).
const PROOF_KEYS: usize = 4;
/// The filters' proof window (the largest allowed): proofs are made at a round's start.
const PROOF_WINDOW: u64 = 600;
/// The filters' replay cache size (the largest allowed).
const REPLAY_ENTRIES: u64 = 1_000_000;
/// The default proof window, for the replay memory a deployment needs at the measured rate.
const DEFAULT_WINDOW: u64 = 60;
/// Requests a second the proofs and JWTs of a run are made for (each used once): above what one
/// Envoy worker answers with a signature check a request, so none is sent twice.
const MAX_RATE: u64 = 25_000;
const PATH: &str = "/apiv2/MediaService/Find";

/// A listener of the run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    NativeDpop,
    WasmDpop,
    NativeBearer,
    WasmBearer,
    JwtAuthnEs256,
    NativeEd25519,
    WasmEd25519,
    WasmDpopModule,
}

/// The variants in the order of a round: the target's pair first, side by side.
const VARIANTS: [(Variant, &str); 8] = [
    (
        Variant::NativeDpop,
        "native filter, DPoP (fresh proof each)",
    ),
    (
        Variant::JwtAuthnEs256,
        "jwt_authn ES256, no JWT cache, a distinct JWT each",
    ),
    (Variant::WasmDpop, "Wasm filter, DPoP (fresh proof each)"),
    (
        Variant::NativeBearer,
        "native filter, the same tokens unbound",
    ),
    (Variant::WasmBearer, "Wasm filter, the same tokens unbound"),
    (
        Variant::NativeEd25519,
        "native filter, DPoP with Ed25519 proofs",
    ),
    (
        Variant::WasmEd25519,
        "Wasm filter, DPoP with Ed25519 proofs",
    ),
    (
        Variant::WasmDpopModule,
        "Wasm filter, DPoP, ES256 in the module (`es256_verifier: module`)",
    ),
];

/// The order variant indices run in during round `round`: the target's pair goes first, and
/// which of the two leads alternates, so drift on the host does not favour either.
fn order(round: usize) -> [usize; 8] {
    if round.is_multiple_of(2) {
        [0, 1, 2, 3, 4, 5, 6, 7]
    } else {
        [1, 0, 2, 3, 4, 5, 6, 7]
    }
}

fn index(v: Variant) -> usize {
    VARIANTS
        .iter()
        .position(|(x, _)| *x == v)
        .expect("a variant")
}

/// The keys and tokens of a run.
struct Material {
    key: shared::Key,
    proof_keys: Vec<ProofKey>,
    bound: Vec<String>,
    /// Ed25519 keys, and the pool's tokens bound to them.
    ed_keys: Vec<ProofKey>,
    bound_ed: Vec<String>,
    bearer: Vec<String>,
    jwt_key: ProofKey,
}

impl Material {
    fn new() -> Result<Self> {
        let key = shared::Key::new(7, [0x5a; 32]);
        let proof_keys = (0..PROOF_KEYS)
            .map(|i| ProofKey::es256([i as u8 + 1; 32]).context("an ES256 key"))
            .collect::<Result<Vec<_>>>()?;
        let exp = unix_now() + TOKEN_LIFETIME;
        let bound = (0..POOL)
            .map(|i| bound_token(&key, i, exp, Some(proof_keys[i % PROOF_KEYS].jkt())))
            .collect();
        let ed_keys: Vec<ProofKey> = (0..PROOF_KEYS)
            .map(|i| ProofKey::ed25519([i as u8 + 0x41; 32]))
            .collect();
        let bound_ed = (0..POOL)
            .map(|i| bound_token(&key, i, exp, Some(ed_keys[i % PROOF_KEYS].jkt())))
            .collect();
        let bearer = (0..POOL).map(|i| bound_token(&key, i, exp, None)).collect();
        let jwt_key = ProofKey::es256([0x77; 32]).context("an ES256 key")?;
        Ok(Self {
            key,
            proof_keys,
            bound,
            ed_keys,
            bound_ed,
            bearer,
            jwt_key,
        })
    }

    /// The filter configuration of the listener on `port`: the static key, the listener's origin
    /// (the proofs' `htu`), the widest proof window, the largest replay cache (every proof of the
    /// run stays remembered: about 20,000 a second for 13 s a listener).
    /// `verifier` is `dpop.es256_verifier`.
    fn filter_config(&self, port: u16, verifier: &str) -> String {
        format!(
            r#"{{"keys":[{{"kid":{},"secret":"{}"}}],"dpop":{{"public_origin":"http://127.0.0.1:{port}","proof_window_seconds":{PROOF_WINDOW},"replay_entries":{REPLAY_ENTRIES},"es256_verifier":"{verifier}"}}}}"#,
            self.key.id(),
            URL_SAFE_NO_PAD.encode(self.key.secret())
        )
    }

    /// `jwt_authn`'s JWKS: the public half of the JWT key, with `kid` and `alg`.
    fn jwks(&self) -> String {
        let jwk = self.jwt_key.public_jwk();
        let inner = jwk.trim_start_matches('{');
        format!(r#"{{"keys":[{{"kid":"bench","alg":"ES256","use":"sig",{inner}]}}"#)
    }

    /// Request `j`'s headers for variant `v` on `url` (`tag` keeps proofs of rounds apart).
    fn headers(&self, v: Variant, url: &str, tag: &str, j: usize, now: u64) -> [String; 2] {
        let i = j % POOL;
        match v {
            Variant::NativeDpop
            | Variant::WasmDpop
            | Variant::WasmDpopModule
            | Variant::NativeEd25519
            | Variant::WasmEd25519 => {
                let ed = matches!(v, Variant::NativeEd25519 | Variant::WasmEd25519);
                let (tokens, keys) = if ed {
                    (&self.bound_ed, &self.ed_keys)
                } else {
                    (&self.bound, &self.proof_keys)
                };
                let token = &tokens[i];
                let jti = format!("{tag}-{j}");
                let claims = ProofClaims {
                    htm: "GET",
                    htu: url,
                    jti: &jti,
                    iat: now,
                    access_token: Some(token),
                    nonce: None,
                };
                let proof = keys[i % PROOF_KEYS].proof(&claims);
                [format!("DPoP {token}"), proof]
            }
            Variant::NativeBearer | Variant::WasmBearer => {
                [format!("Bearer {}", self.bearer[i]), String::new()]
            }
            Variant::JwtAuthnEs256 => {
                let header = r#"{"alg":"ES256","typ":"JWT","kid":"bench"}"#;
                let claims = format!(
                    r#"{{"iss":"bench","sub":"user{i}@example.com","jti":"{tag}-{j}","azp":"media-app","iat":{now},"exp":{}}}"#,
                    now + TOKEN_LIFETIME
                );
                let jwt = self.jwt_key.sign_parts(header, &claims);
                [format!("Bearer {jwt}"), String::new()]
            }
        }
    }
}

/// A wrk script sending `requests` once each in order (`Authorization`, and `DPoP` when not
/// empty), on every connection of its one thread.
fn lua(path: &Path, requests: &[[String; 2]]) -> Result<()> {
    let mut s = String::from("local auth = {\n");
    for [a, _] in requests {
        writeln!(s, "\"{a}\",")?;
    }
    s.push_str("}\nlocal proof = {\n");
    for [_, p] in requests {
        writeln!(s, "\"{p}\",")?;
    }
    s.push_str(
        r#"}
local n = #auth
local i = 0
request = function()
  i = i + 1
  if i > n then i = 1 end
  if proof[i] == "" then return wrk.format("GET", nil, { Authorization = auth[i] }) end
  return wrk.format("GET", nil, { Authorization = auth[i], DPoP = proof[i] })
end
"#,
    );
    std::fs::write(path, s)?;
    Ok(())
}

/// The filter blocks of variant `v` on the listener on `port`.
fn filters(v: Variant, m: &Modules, material: &Material, port: u16) -> String {
    let verifier = match v {
        Variant::WasmDpopModule => "module",
        _ => "auto",
    };
    let cfg = material.filter_config(port, verifier);
    match v {
        Variant::NativeDpop | Variant::NativeBearer | Variant::NativeEd25519 => {
            native_filter("mms_auth", &cfg)
        }
        Variant::WasmDpop
        | Variant::WasmBearer
        | Variant::WasmEd25519
        | Variant::WasmDpopModule => wasm_filter(&format!("{v:?}").to_lowercase(), &m.ours, &cfg),
        Variant::JwtAuthnEs256 => jwt_authn_filter(&material.jwks(), None),
    }
}

/// The run's figures, the command, and the Envoy's memory.
pub(super) struct DpopRun {
    results: Results,
    command: String,
    rate: f64,
    /// Envoy's CPU time a request (µs) of each variant in each round.
    cpu_us: Vec<Vec<f64>>,
}

pub(super) fn bench_dpop(
    dir: &Path,
    tools: &e2e::Tools,
    m: &Modules,
    s: &Settings,
) -> Result<DpopRun> {
    let material = Material::new()?;
    let ports: Vec<u16> = VARIANTS.iter().map(|_| e2e::free_port()).collect();
    let mut listeners = String::new();
    for ((v, _), port) in VARIANTS.iter().zip(&ports) {
        let name = format!("{v:?}").to_lowercase();
        listeners += &listener(&name, *port, &filters(*v, m, &material, *port));
    }
    std::fs::copy(&m.native, dir.join(e2e::NATIVE_LIBRARY))?;
    let cfg = dir.join("envoy-dpop.yaml");
    std::fs::write(&cfg, config(Some(e2e::free_port()), &listeners, ""))?;
    let log = dir.join("envoy-dpop.log");
    let proc = start_envoy(tools, &cfg, ports[0], 1, Some("0"), &log)?;
    let url = |port: u16| format!("http://127.0.0.1:{port}{PATH}");
    // A run's figures and Envoy's CPU time a request over it, in µs (Envoy is idle outside it).
    let run = |v: usize, round: &str, seconds: u64| -> Result<(Sample, f64)> {
        let n = (MAX_RATE * seconds) as usize;
        let (variant, _) = VARIANTS[v];
        let now = unix_now();
        let tag = format!("{round}-{v}");
        let requests: Vec<_> = (0..n)
            .map(|j| material.headers(variant, &url(ports[v]), &tag, j, now))
            .collect();
        let script = dir.join(format!("{variant:?}-{round}.lua").to_lowercase());
        lua(&script, &requests)?;
        let args = ["-t1", "-c32", &format!("-d{seconds}s"), "-s"]
            .map(String::from)
            .into_iter()
            .chain([script.display().to_string()])
            .collect::<Vec<_>>();
        let cpu = cpu_ms(proc.pid());
        let sample = wrk(&args, &url(ports[v]));
        let cpu_us = (cpu_ms(proc.pid()) - cpu) * 1000.0;
        std::fs::remove_file(&script)?;
        sample.map(|x| (x, cpu_us / x.requests.max(1) as f64))
    };
    for v in 0..VARIANTS.len() {
        run(v, "warm", 1)?;
    }
    let mut per = vec![Vec::new(); VARIANTS.len()];
    let mut cpu_us = vec![Vec::new(); VARIANTS.len()];
    for round in 0..s.rounds {
        for v in order(round) {
            let name = VARIANTS[v].1;
            let (x, cpu) = run(v, &format!("r{round}"), s.seconds)?;
            eprintln!(
                "dpop round {} {name}: {:.0} req/s, p99 {:.3} ms, Envoy CPU {cpu:.1} µs a request, not 2xx {}",
                round + 1,
                x.rps,
                x.p99_ms,
                x.bad
            );
            per[v].push(x);
            cpu_us[v].push(cpu);
        }
    }
    // Every round of every variant printed first, then any refusal fails the run.
    for (samples, (_, name)) in per.iter().zip(VARIANTS) {
        if let Some(x) = samples.iter().find(|x| x.bad > 0) {
            bail!("{name}: {} of {} answers were not 2xx", x.bad, x.requests);
        }
    }
    let results = Results::new(&per, rss_kib(proc.pid()));
    let rate = results.samples[index(Variant::NativeDpop)].rps;
    Ok(DpopRun {
        results,
        command: format!(
            "taskset -c 0 envoy --concurrency 1 -c target/bench-dpop/envoy-dpop.yaml; per variant: taskset -c 1 wrk --latency -t1 -c32 -d{}s -s VARIANT-ROUND.lua ({MAX_RATE} requests a second made ahead, each sent once)",
            s.seconds
        ),
        rate,
        cpu_us,
    })
}

/// Heap bytes an id of the replay memory costs in the native filter at the bench's size (the
/// largest `replay_entries`), its indexes included: measured by the allocator of
/// `cargo bench -p mms-token --bench replay` (BENCHMARKS.md, "The replay memory"). The Wasm
/// filter's shared data takes `shared::dpop::replay::ENTRY_BYTES` an id.
const REPLAY_ENTRY_BYTES: f64 = 145.0;

/// The Wasm filter with DPoP (ES256 verified by the host) over `jwt_authn` verifying ES256
/// without its cache: at least this.
const WASM_DPOP_VS_JWT_AUTHN: f64 = 0.80;
/// The native filter with DPoP over the same: at least this…
const NATIVE_DPOP_VS_JWT_AUTHN: f64 = 0.95;
/// …with a p99 at most this times `jwt_authn`'s.
const NATIVE_DPOP_P99_OVER_JWT_AUTHN: f64 = 1.10;

/// The DPoP section of the report.
pub(super) fn report(r: &DpopRun) -> Result<String> {
    let res = &r.results;
    let jwt = index(Variant::JwtAuthnEs256);
    let mut out = format!("Command: `{}`.\n\n", r.command);
    out.push_str(
        "| variant | requests/s | vs jwt_authn ES256 | p50 ms | p99 ms | Envoy CPU µs a request |\n|---|---|---|---|---|---|\n",
    );
    for (i, ((_, name), x)) in VARIANTS.iter().zip(&res.samples).enumerate() {
        writeln!(
            out,
            "| {name} | {:.0} | {:.2} | {:.3} | {:.3} | {:.1} |",
            x.rps,
            res.paired(i, jwt),
            x.p50_ms,
            x.p99_ms,
            median(r.cpu_us[i].clone())
        )?;
    }
    let (native, jwt_s) = (res.samples[index(Variant::NativeDpop)], res.samples[jwt]);
    let ratio = res.paired(index(Variant::NativeDpop), jwt);
    let wasm = res.paired(index(Variant::WasmDpop), jwt);
    writeln!(
        out,
        "\n| target | wanted | measured | |\n|---|---|---|---|\n| Wasm with DPoP (ES256 by the host) vs jwt_authn ES256 without cache | ≥ {WASM_DPOP_VS_JWT_AUTHN:.2} | {wasm:.2} | {} |\n| native with DPoP vs jwt_authn ES256 without cache | ≥ {NATIVE_DPOP_VS_JWT_AUTHN:.2} | {ratio:.2} | {} |\n| p99 of native with DPoP vs jwt_authn | within {:.0} % | {:.3} ms vs {:.3} ms | {} |",
        mark(wasm >= WASM_DPOP_VS_JWT_AUTHN),
        mark(ratio >= NATIVE_DPOP_VS_JWT_AUTHN),
        (NATIVE_DPOP_P99_OVER_JWT_AUTHN - 1.0) * 100.0,
        native.p99_ms,
        jwt_s.p99_ms,
        mark(native.p99_ms <= jwt_s.p99_ms * NATIVE_DPOP_P99_OVER_JWT_AUTHN)
    )?;
    let cpu = |v: Variant| &r.cpu_us[index(v)];
    let cheaper = median(
        cpu(Variant::JwtAuthnEs256)
            .iter()
            .zip(cpu(Variant::NativeDpop))
            .map(|(j, n)| j / n)
            .collect(),
    );
    writeln!(
        out,
        "\nEnvoy's CPU time a request (user and system over each run, over its requests), the cost behind the rates: native with DPoP {:.1} µs, `jwt_authn` {:.1} µs; `jwt_authn`'s over the native filter's, paired within each round: {cheaper:.2} (above 1: the native filter costs less).",
        median(cpu(Variant::NativeDpop).clone()),
        median(cpu(Variant::JwtAuthnEs256).clone())
    )?;
    let entries = r.rate * DEFAULT_WINDOW as f64;
    writeln!(
        out,
        "\nReplay memory at the native filter's rate ({:.0} proofs/s, each `jti` kept for the default {DEFAULT_WINDOW} s window): {entries:.0} entries × {REPLAY_ENTRY_BYTES:.0} bytes ≈ {:.1} MiB. Envoy memory after the runs: RSS {} MiB, peak {} MiB.\n",
        r.rate,
        entries * REPLAY_ENTRY_BYTES / 1_048_576.0,
        res.rss_kib.0 / 1024,
        res.rss_kib.1 / 1024
    )?;
    Ok(out)
}
