//! The edge feed's waiting requests and the store's change notifications (`issuer_feed_*`).

use super::RefreshLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Metrics of the feed's waits and of the wake-ups that end them.
#[derive(Debug, Clone, Default)]
pub struct FeedMetrics {
    waiting: Gauge,
    waits: Family<RefreshLabels, Counter>,
    notifications: Counter,
    listening: Gauge,
}

impl FeedMetrics {
    /// Registers them in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "feed_waiting",
            "Edge feed requests waiting for news now",
            self.waiting.clone(),
        );
        registry.register(
            "feed_waits",
            "Edge feed requests that asked to wait, by how they ended: news, quiet (the wait \
             ran out), failed (the store did not answer), busy (answered at once: the bound of \
             waiting requests was reached) or closing (the issuer stopped)",
            self.waits.clone(),
        );
        registry.register(
            "feed_notifications",
            "Change notifications received from PostgreSQL (LISTEN), each followed by a read of \
             the revocations and the key ring",
            self.notifications.clone(),
        );
        registry.register(
            "feed_listening",
            "1 while the issuer's LISTEN connection to PostgreSQL is up, else 0 (always 0 on the \
             embedded store, which has no other writer)",
            self.listening.clone(),
        );
    }

    /// The gauge of waiting requests, which their holds move.
    pub fn waiting(&self) -> Gauge {
        self.waiting.clone()
    }

    /// Counts a request that asked to wait, by how it ended.
    pub fn wait_ended(&self, result: &'static str) {
        self.waits.get_or_create(&RefreshLabels { result }).inc();
    }

    /// Counts one notification.
    pub fn notified(&self) {
        self.notifications.inc();
    }

    /// Sets whether the LISTEN connection is up.
    pub fn set_listening(&self, up: bool) {
        self.listening.set(i64::from(up));
    }
}
