//! The Envoy variants: one Envoy (one worker, on core 0) with a listener per variant on a
//! direct-response route, and the tokens they verify; wrk on core 1.

use super::{now, rss_kib, wrk, Proc, Results, Sample, Settings};
use anyhow::{bail, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts Envoy with `workers` workers on `config`, pinned to the CPUs `pin` (a `taskset` list)
/// if given, its log in `log`.
pub(super) fn start_envoy(
    envoy: &Path,
    config: &Path,
    log: &Path,
    workers: u32,
    pin: Option<&str>,
) -> Result<Proc> {
    let mut c = match pin {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus]).arg(envoy);
            c
        }
        None => Command::new(envoy),
    };
    let child = c
        .args([
            "--disable-hot-restart",
            "--log-level",
            "warn",
            "--concurrency",
        ])
        .arg(workers.to_string())
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    Ok(Proc(child))
}

pub(super) fn http_status(url: &str, headers: &[&str]) -> Result<u16> {
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

pub(super) fn wait_for(url: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(url, &[])? == 0 {
        if Instant::now() > deadline {
            bail!("{url} did not come up");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Lifetime of the bench's tokens: the issuer's default, within what the filter accepts
/// (`max_token_lifetime_seconds`, 3600 by default).
pub(super) const TOKEN_LIFETIME: u64 = 3600;

/// An HS256 JWT with claims like our token's, for `jwt_authn`.
fn hs256_jwt(secret: &[u8]) -> String {
    hs256_jwt_for(secret, "alice@example.com", now() + TOKEN_LIFETIME)
}

/// An HS256 JWT for `sub` expiring at `exp`.
pub(super) fn hs256_jwt_for(secret: &[u8], sub: &str, exp: u64) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"bench"}"#);
    let claims = format!(
        r#"{{"iss":"bench","sub":"{sub}","azp":"media-app","roles":["editor","viewer"],"email":"{sub}","iat":{},"exp":{exp}}}"#,
        now(),
    );
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret).expect("any key");
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Our token for the same identity.
pub(super) fn our_token(key: &shared::Key) -> String {
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

pub(super) const VARIANTS: [(&str, u16); 7] = [
    ("no auth filter", 10001),
    ("empty Wasm filter", 10002),
    ("our filter", 10003),
    ("jwt_authn HS256", 10004),
    ("reference: reads one header, adds one", 10005),
    ("ablation: read headers only", 10006),
    ("ablation: read and decide, no writes", 10007),
];

pub(super) fn listener(name: &str, port: u16, filters: &str) -> String {
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

/// Our Wasm filter block, in a VM of its own (`vm_id`), so no two listeners share state.
pub(super) fn wasm_filter(name: &str, module: &Path, config: &str) -> String {
    format!(
        r#"          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: {name}
                root_id: {name}
                failure_policy: FAIL_CLOSED
                vm_config:
                  vm_id: {name}
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
    let jwt = jwt_filter(jwt_secret, None);
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

/// Envoy's `jwt_authn` with the HS256 key, and its JWT cache of `cache` entries if given.
pub(super) fn jwt_filter(jwt_secret: &[u8], cache: Option<u32>) -> String {
    let jwks = format!(
        r#"{{"keys":[{{"kty":"oct","alg":"HS256","kid":"bench","k":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(jwt_secret)
    );
    let cache = cache.map_or(String::new(), |n| {
        format!("                  jwt_cache_config: {{ jwt_cache_size: {n} }}\n")
    });
    format!(
        r#"          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                bench:
                  issuer: bench
                  local_jwks: {{ inline_string: '{jwks}' }}
                  forward: true
{cache}              rules:
              - match: {{ prefix: "/" }}
                requires: {{ provider_name: bench }}
"#
    )
}

pub(super) fn bench_envoy(
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
    let proc = start_envoy(envoy, &cfg, &dir.join("envoy-bench.log"), 1, Some("0"))?;
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
