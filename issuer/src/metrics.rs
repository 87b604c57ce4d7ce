//! Prometheus metrics served at `/metrics`: the issuer's own (`issuer_*`), what the build was
//! (`issuer_build_info`), and the standard process metrics ([`process`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod feed;
mod process;

pub use feed::FeedMetrics;

/// The commit the issuer was built from (`build.rs`), `unknown` without git.
pub const REVISION: &str = env!("ISSUER_REVISION");
/// The compiler that built the issuer (`build.rs`), `unknown` if it did not say.
pub const RUSTC: &str = env!("ISSUER_RUSTC");

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    endpoint: &'static str,
    grant: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
    rustc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefreshLabels {
    result: &'static str,
}

/// The issuer's metrics.
pub struct Metrics {
    registry: Registry,
    /// The metrics without the `issuer_` prefix: the standard process metrics.
    unprefixed: Registry,
    ready: Gauge,
    requests: Family<TokenLabels, Counter>,
    refresh: Family<RefreshLabels, Counter>,
    dpop: Family<RefreshLabels, Counter>,
    latency: Histogram,
    edges: Gauge,
    edge_lag: Gauge,
    edges_refused: Counter,
    audit_dropped: Counter,
    password_checks: Counter,
    password_check_typical: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The edge feed's waits and the store's change notifications.
    pub feed: FeedMetrics,
}

/// Registers `issuer_build_info` and `issuer_ready` in `registry`; returns the readiness gauge
/// and the registry of the metrics without the prefix (the process metrics).
fn register_build_ready_process(registry: &mut Registry) -> (Gauge, Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            revision: REVISION,
            rustc: RUSTC,
        })
        .set(1);
    registry.register(
        "build_info",
        "Always 1: the version, git revision and compiler the issuer was built with",
        build,
    );
    let ready = Gauge::default();
    registry.register(
        "ready",
        "1 while the issuer is ready (what /readyz answers 200 for), else 0; read at the scrape",
        ready.clone(),
    );
    let mut unprefixed = Registry::default();
    unprefixed.register_collector(Box::new(process::ProcessCollector));
    (ready, unprefixed)
}

/// Registers `issuer_dpop_proofs`.
fn register_dpop(registry: &mut Registry) -> Family<RefreshLabels, Counter> {
    let dpop = Family::<RefreshLabels, Counter>::default();
    registry.register(
        "dpop_proofs",
        "DPoP proofs at the token endpoint by result: accepted, replayed, required (none from a \
         client that must send one), before_start, too_old, key_busy, busy, invalid_dpop_proof \
         or use_dpop_nonce",
        dpop.clone(),
    );
    dpop
}

/// Registers `issuer_audit_events_dropped`.
fn register_audit_dropped(registry: &mut Registry) -> Counter {
    let audit_dropped = Counter::default();
    registry.register(
        "audit_events_dropped",
        "Security events not recorded in the audit trail (queue full or write failed)",
        audit_dropped.clone(),
    );
    audit_dropped
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("issuer");
        let (ready, unprefixed) = register_build_ready_process(&mut registry);
        let requests = Family::<TokenLabels, Counter>::default();
        registry.register(
            "oauth_requests",
            "OAuth endpoint requests by endpoint, grant and outcome (ok or the error code)",
            requests.clone(),
        );
        let refresh = Family::<RefreshLabels, Counter>::default();
        registry.register(
            "refresh_rotations",
            "Refresh token presentations by result (rotated, retried or the rejection reason)",
            refresh.clone(),
        );
        let dpop = register_dpop(&mut registry);
        let latency = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "token_request_duration_seconds",
            "Time to answer a token request",
            latency.clone(),
        );
        let edges = Gauge::default();
        registry.register(
            "edges",
            "Edges (filter VMs with edge sync) held: those that polled within --edge-forget-after",
            edges.clone(),
        );
        let edge_lag = Gauge::default();
        registry.register_with_unit(
            "edge_lag",
            "The largest time since an edge last held every revocation and the current key ring",
            prometheus_client::registry::Unit::Seconds,
            edge_lag.clone(),
        );
        let edges_refused = Counter::default();
        registry.register(
            "edges_refused",
            "Polls of new edges not recorded (counted at each write of the edges' reports): \
             their edge client is at its bound of edges, or the registry is full",
            edges_refused.clone(),
        );
        let audit_dropped = register_audit_dropped(&mut registry);
        let password_checks = Counter::default();
        registry.register(
            "password_checks",
            "Password hash checks done (a user's hash, or the placeholder that makes a name \
             without one cost the same)",
            password_checks.clone(),
        );
        let password_check_typical = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register_with_unit(
            "password_check_typical",
            "A moving average of one password hash check's time: the least time a refused \
             sign-in that needed no check (a name for the directory) takes",
            prometheus_client::registry::Unit::Seconds,
            password_check_typical.clone(),
        );
        let feed = FeedMetrics::default();
        feed.register(&mut registry);
        Self {
            feed,
            unprefixed,
            ready,
            password_checks,
            password_check_typical,
            registry,
            requests,
            refresh,
            dpop,
            latency,
            edges,
            edge_lag,
            edges_refused,
            audit_dropped,
        }
    }
}

impl Metrics {
    /// Counts one answered OAuth request.
    pub fn request(
        &self,
        endpoint: &'static str,
        grant: &'static str,
        outcome: &'static str,
        seconds: f64,
    ) {
        self.requests
            .get_or_create(&TokenLabels {
                endpoint,
                grant,
                outcome,
            })
            .inc();
        if endpoint == "token" {
            self.latency.observe(seconds);
        }
    }

    /// Sets `issuer_ready`: whether the issuer is ready now.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Counts one refresh token presentation.
    pub fn refresh(&self, result: &'static str) {
        self.refresh.get_or_create(&RefreshLabels { result }).inc();
    }

    /// Counts one DPoP proof at the token endpoint (or its absence, refused).
    pub fn dpop_proof(&self, result: &'static str) {
        self.dpop.get_or_create(&RefreshLabels { result }).inc();
    }

    /// Sets the number of edges and the largest lag among them, in seconds.
    pub fn set_edges(&self, count: usize, lag: u64) {
        self.edges.set(i64::try_from(count).unwrap_or(i64::MAX));
        self.edge_lag.set(i64::try_from(lag).unwrap_or(i64::MAX));
    }

    /// Counts `n` new edges not recorded.
    pub fn edges_refused(&self, n: usize) {
        self.edges_refused
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// The counter of audit events dropped ([`crate::audit::AuditLog`]).
    pub fn audit_dropped(&self) -> Counter {
        self.audit_dropped.clone()
    }

    /// The counter of password hash checks and the gauge of their typical time
    /// ([`crate::passwords::PasswordChecker`]).
    pub fn password_checks(&self) -> (Counter, Gauge<f64, std::sync::atomic::AtomicU64>) {
        (
            self.password_checks.clone(),
            self.password_check_typical.clone(),
        )
    }

    /// Adds the directory's metrics (`issuer_directory_*`).
    pub fn add_directory(&mut self, directory: &crate::directory::DirectoryMetrics) {
        directory.register(&mut self.registry);
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        encode_registry(&mut out, &self.registry).expect("writing to a String");
        encode_registry(&mut out, &self.unprefixed).expect("writing to a String");
        encode_eof(&mut out).expect("writing to a String");
        out
    }
}
