//! What the Envoy runs share: the modules they load, the listener and filter blocks of their
//! configurations, the tokens they send, and waiting for a listener to answer.

use crate::{native, wasm};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use e2e::unix_now;
use hmac::{Hmac, KeyInit, Mac};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Envoy modules of the run.
pub(super) struct Modules {
    pub(super) ours: PathBuf,
    pub(super) empty: PathBuf,
    pub(super) reference: PathBuf,
    pub(super) read_only: PathBuf,
    pub(super) no_writes: PathBuf,
    /// The native filter, `libmms_auth.so`, and its ablations (empty, read, decide).
    pub(super) native: PathBuf,
    pub(super) native_ablations: [PathBuf; 3],
}

impl Modules {
    /// Builds the benchmark variants and the native modules beside `ours`, the shipped Wasm
    /// module (built and checked already).
    pub(super) fn build(ours: PathBuf) -> Result<Self> {
        Ok(Self {
            ours,
            empty: wasm::build_variant_module("passthrough")?,
            reference: wasm::build_variant_module("reference")?,
            read_only: wasm::build_variant_module("ablate-read")?,
            no_writes: wasm::build_variant_module("ablate-decide")?,
            native: native::build_native_module()?,
            native_ablations: [
                native::build_native_variant("native-empty")?,
                native::build_native_variant("native-read")?,
                native::build_native_variant("native-decide")?,
            ],
        })
    }
}

/// Starts Envoy with `workers` workers on `config`, pinned to the CPUs `pin` (a `taskset` list)
/// if given, and waits until `listener` accepts connections: the test harness's start.
pub(super) fn start_envoy(
    tools: &e2e::Tools,
    config: &Path,
    listener: u16,
    workers: u32,
    pin: Option<&str>,
    log: &Path,
) -> Result<e2e::Proc> {
    let dir = config.parent().context("a config file in a directory")?;
    e2e::envoy::start_envoy_on(tools, dir, config, listener, workers, pin, log)
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

/// Lifetime of the bench's tokens: the issuer's default, within what the filter accepts
/// (`max_token_lifetime_seconds`, 3600 by default).
pub(super) const TOKEN_LIFETIME: u64 = 3600;

/// An HS256 JWT for `sub` expiring at `exp`.
pub(super) fn hs256_jwt_for(secret: &[u8], sub: &str, exp: u64) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"bench"}"#);
    let claims = format!(
        r#"{{"iss":"bench","sub":"{sub}","azp":"media-app","roles":["editor","viewer"],"email":"{sub}","iat":{},"exp":{exp}}}"#,
        unix_now(),
    );
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret).expect("any key");
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Our token number `i`: a user, a client or an impersonation in turn, with the claims of
/// [`hs256_jwt_for`]'s JWT for the same number.
pub(super) fn our_token(key: &shared::Key, i: usize, exp: u64) -> String {
    bound_token(key, i, exp, None)
}

/// [`our_token`] bound to the key of thumbprint `cnf` if given (an `mmat2.` token).
pub(super) fn bound_token(key: &shared::Key, i: usize, exp: u64, cnf: Option<[u8; 32]>) -> String {
    use shared::token::{Claim, Identity, SubjectKind, TokenBody};
    let (kind, subject) = match i % 3 {
        0 => (SubjectKind::User, format!("user{i}@example.com")),
        1 => (SubjectKind::Client, String::new()),
        _ => (
            SubjectKind::Impersonation,
            format!("upn=someone{i}@example.com"),
        ),
    };
    let mut jti = [0u8; 16];
    jti[..8].copy_from_slice(&(i as u64).to_be_bytes());
    let (roles, claims) = if kind == SubjectKind::Client {
        (vec![], vec![])
    } else {
        let email = Claim {
            typ: "email".into(),
            value: format!("user{i}@example.com"),
        };
        (vec!["editor".into(), "viewer".into()], vec![email])
    };
    let body = TokenBody {
        kid: key.id(),
        jti,
        iat: exp.saturating_sub(TOKEN_LIFETIME),
        exp,
        client: format!("media-app-{}", i % 50),
        identity: Identity {
            kind,
            subject,
            roles,
            claims,
        },
        cnf,
        act: None,
    };
    shared::token::mint(key, &body).expect("valid body")
}

/// Until a request with `header` is answered 200 (the filter synced); how long that took.
pub(super) fn until_accepted(url: &str, header: &str) -> Result<Duration> {
    let start = Instant::now();
    while http_status(url, &[header])? != 200 {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("{url} never accepted the token: the filter did not sync");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(start.elapsed())
}

/// A static cluster `name` for the edge feed of the issuer listening at `url`, as the shipped
/// `issuer_feed` of `envoy/full-stack.yaml`: pooled connections are closed after 5 s idle, before
/// the issuer closes them (10 s), and the proxy headers Envoy's own HTTP client adds are stripped.
pub(super) fn issuer_cluster(name: &str, url: &str) -> Result<String> {
    let port = url.rsplit(':').next().context("issuer URL")?;
    Ok(format!(
        r#"  - name: {name}
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options: {{ idle_timeout: 5s }}
        explicit_http_config: {{ http_protocol_options: {{}} }}
        http_filters:
        - name: envoy.filters.http.header_mutation
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
            mutations:
              request_mutations:
              - remove: x-forwarded-for
              - remove: x-envoy-internal
        - name: envoy.filters.http.upstream_codec
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
"#
    ))
}

/// An Envoy configuration of `listeners` and `clusters` (blocks of [`listener`] and
/// [`issuer_cluster`]), with an admin interface on `admin` if given.
pub(super) fn config(admin: Option<u16>, listeners: &str, clusters: &str) -> String {
    let admin = admin.map_or(String::new(), |port| {
        format!("admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}\n")
    });
    format!("{admin}static_resources:\n  listeners:\n{listeners}  clusters:\n{clusters}")
}

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

/// Our native filter block: the dynamic module `module` (`libMODULE.so` in Envoy's
/// `ENVOY_DYNAMIC_MODULES_SEARCH_PATH`) with its configuration JSON.
pub(super) fn native_filter(module: &str, config: &str) -> String {
    format!(
        r#"          - name: envoy.filters.http.dynamic_modules
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config: {{ name: {module} }}
              filter_name: mms_auth
              filter_config:
                "@type": type.googleapis.com/google.protobuf.StringValue
                value: '{config}'
"#
    )
}

/// The `dpop` block of the bearer benchmarks' filter configurations: `public_origin` is required,
/// and no request of theirs carries a proof.
pub(super) const BENCH_DPOP: &str = r#""dpop":{"public_origin":"http://127.0.0.1"}"#;

/// Envoy's `jwt_authn` with the HS256 key, and its JWT cache of `cache` entries if given.
pub(super) fn jwt_filter(jwt_secret: &[u8], cache: Option<u32>) -> String {
    let jwks = format!(
        r#"{{"keys":[{{"kty":"oct","alg":"HS256","kid":"bench","k":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(jwt_secret)
    );
    jwt_authn_filter(&jwks, cache)
}

/// Envoy's `jwt_authn` verifying with the keys of `jwks` (a JWKS, JSON), forwarding the token,
/// and its JWT cache of `cache` entries if given.
pub(super) fn jwt_authn_filter(jwks: &str, cache: Option<u32>) -> String {
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
