//! Edge feed requests that wait for news (`wait=S`): the signal that something an edge holds
//! changed, and the bounds on how many requests may wait for it.
//!
//! Anything that changes what the feed answers bumps one generation number: a revocation or a
//! key ring read from the store that differs from the last one read (every second, at once after a
//! write through this issuer, and at once when PostgreSQL notifies that another issuer wrote).
//! A waiting request subscribes before it reads the store, so a change between its read and
//! its wait still wakes it. The generation says only that something may have changed: a woken
//! request reads the store again, and a missed bump costs at most the wait it asked for.
//!
//! Bounds: [`FeedWaitSettings::max_waiting`] requests wait at once on this issuer, of which at
//! most [`FeedWaitSettings::max_waiting_per_client`] of one edge client; a request beyond either
//! bound is answered at once with `"busy": true`, never dropped, and the filter then asks again a
//! poll interval later. Each wait lasts at most [`FeedWaitSettings::max_wait`] seconds. When the
//! issuer stops, every waiting request is answered at once.

use prometheus_client::metrics::gauge::Gauge;
use shared::revocation::RevocationPage;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// The longest wait an issuer allows by default (`--feed-max-wait-seconds`), in seconds.
pub const MAX_WAIT: u64 = 30;
/// The largest `--feed-max-wait-seconds`: the feed's bound, [`shared::edge_feed::MAX_WAIT_SECONDS`].
pub const MAX_WAIT_LIMIT: u64 = shared::edge_feed::MAX_WAIT_SECONDS;
/// Requests that may wait at once on one issuer by default (`--feed-max-waiting`).
pub const MAX_WAITING: usize = 20_000;
/// Requests of one edge client that may wait at once by default
/// (`--feed-max-waiting-per-client`).
pub const MAX_WAITING_PER_CLIENT: usize = 10_000;

/// How the feed holds requests that ask to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedWaitSettings {
    /// The longest wait granted, in seconds; 0 turns waiting off (every request answered at
    /// once, and the answers do not offer it).
    pub max_wait: u64,
    /// Requests that may wait at once on this issuer.
    pub max_waiting: usize,
    /// Requests of one edge client that may wait at once.
    pub max_waiting_per_client: usize,
}

impl Default for FeedWaitSettings {
    fn default() -> Self {
        Self {
            max_wait: MAX_WAIT,
            max_waiting: MAX_WAITING,
            max_waiting_per_client: MAX_WAITING_PER_CLIENT,
        }
    }
}

/// The feed's change signal and its waiting requests.
#[derive(Debug)]
pub struct FeedWaits {
    settings: FeedWaitSettings,
    generation: watch::Sender<u64>,
    closing: watch::Sender<bool>,
    per_client: Arc<Mutex<HashMap<String, usize>>>,
    /// The requests waiting now: `issuer_feed_waiting`, moved only under `per_client`'s lock.
    waiting: Gauge,
    /// The last page of revocations read, with the generation seen before the read and the
    /// cursor it was read after.
    page: Mutex<Option<(u64, u64, Arc<RevocationPage>)>>,
}

/// A request's place among the waiting ones, given back when dropped (also when the edge went
/// away and the request was dropped unanswered).
#[derive(Debug)]
pub struct Hold {
    client: String,
    per_client: Arc<Mutex<HashMap<String, usize>>>,
    waiting: Gauge,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut per = self
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.waiting.dec();
        if let Some(n) = per.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.client);
            }
        }
    }
}

/// Why a request that asked to wait is answered at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// [`FeedWaitSettings::max_waiting`] requests wait already.
    Issuer,
    /// [`FeedWaitSettings::max_waiting_per_client`] requests of its edge client wait already.
    Client,
}

impl FeedWaits {
    /// No request waiting, generation 0; `waiting` (at 0) counts the waiting requests.
    pub fn new(settings: FeedWaitSettings, waiting: Gauge) -> Self {
        Self {
            waiting,
            settings,
            generation: watch::Sender::new(0),
            closing: watch::Sender::new(false),
            per_client: Arc::default(),
            page: Mutex::new(None),
        }
    }

    /// The current generation: read it before reading the store, to label what was read.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// The page read after `since` by a request that saw `generation` before its read: it holds
    /// every change signalled up to that generation, so it serves any request that saw the same.
    pub fn cached_page(&self, generation: u64, since: u64) -> Option<Arc<RevocationPage>> {
        let page = self.page.lock().unwrap_or_else(PoisonError::into_inner);
        page.as_ref()
            .filter(|(g, s, _)| *g == generation && *s == since)
            .map(|(_, _, p)| p.clone())
    }

    /// Keeps `page`, read after `since` with `generation` seen before the read.
    pub fn cache_page(&self, generation: u64, since: u64, page: Arc<RevocationPage>) {
        *self.page.lock().unwrap_or_else(PoisonError::into_inner) = Some((generation, since, page));
    }

    /// The bounds.
    pub fn settings(&self) -> FeedWaitSettings {
        self.settings
    }

    /// Something the feed answers may have changed: every waiting request reads the store again.
    pub fn changed(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The issuer stops: every waiting request is answered now, and none waits from now on.
    pub fn close(&self) {
        self.closing.send_replace(true);
        self.changed();
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        usize::try_from(self.waiting.get()).unwrap_or(0)
    }

    /// A place for a request of `client` that asks to wait, or why there is none.
    pub fn hold(&self, client: &str) -> Result<Hold, Busy> {
        let mut per = self
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.waiting() >= self.settings.max_waiting {
            return Err(Busy::Issuer);
        }
        let mine = per.get(client).copied().unwrap_or(0);
        if mine >= self.settings.max_waiting_per_client {
            return Err(Busy::Client);
        }
        per.insert(client.to_owned(), mine + 1);
        self.waiting.inc();
        Ok(Hold {
            client: client.to_owned(),
            per_client: self.per_client.clone(),
            waiting: self.waiting.clone(),
        })
    }

    /// A subscription to the changes from now on: subscribe before reading the store.
    pub fn subscribe(&self) -> Changes {
        Changes {
            generation: self.generation.subscribe(),
            closing: self.closing.subscribe(),
        }
    }
}

/// The changes since a request subscribed.
#[derive(Debug)]
pub struct Changes {
    generation: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
}

impl Changes {
    /// Waits until something changed since the subscription (or the last wait), or `deadline`
    /// passes, or the issuer stops. True if the request should read the store again and may
    /// wait once more; false once the wait is over.
    pub async fn next(&mut self, deadline: tokio::time::Instant) -> bool {
        if *self.closing.borrow() {
            return false;
        }
        tokio::select! {
            changed = self.generation.changed() => changed.is_ok() && !*self.closing.borrow(),
            () = tokio::time::sleep_until(deadline) => false,
        }
    }

    /// True once the issuer stops.
    pub fn closing(&self) -> bool {
        *self.closing.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bounded(total: usize, per: usize) -> FeedWaits {
        let settings = FeedWaitSettings {
            max_wait: 5,
            max_waiting: total,
            max_waiting_per_client: per,
        };
        FeedWaits::new(settings, Gauge::default())
    }

    #[test]
    fn holds_are_bounded_per_issuer_and_per_client_and_given_back() {
        let w = bounded(3, 2);
        let a1 = w.hold("a").unwrap();
        let _a2 = w.hold("a").unwrap();
        assert_eq!(w.hold("a").unwrap_err(), Busy::Client);
        let _b1 = w.hold("b").unwrap();
        assert_eq!(w.hold("c").unwrap_err(), Busy::Issuer);
        assert_eq!(w.waiting(), 3, "the gauge counts the holds");
        drop(a1);
        assert_eq!(w.waiting(), 2);
        let _c1 = w.hold("c").unwrap();
        assert_eq!(w.hold("a").unwrap_err(), Busy::Issuer);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_after_subscribing_wakes_and_a_quiet_wait_ends_at_its_deadline() {
        let w = bounded(3, 3);
        let mut changes = w.subscribe();
        w.changed();
        let far = tokio::time::Instant::now() + Duration::from_secs(30);
        assert!(
            changes.next(far).await,
            "the change before the wait wakes it"
        );
        let soon = tokio::time::Instant::now() + Duration::from_secs(2);
        assert!(!changes.next(soon).await, "nothing new: the wait ends");
        assert!(tokio::time::Instant::now() >= soon);
    }

    #[test]
    fn a_page_serves_only_its_generation_and_cursor() {
        let w = bounded(1, 1);
        let page = Arc::new(RevocationPage::default());
        w.cache_page(w.generation(), 7, page.clone());
        assert!(w.cached_page(0, 7).is_some());
        assert!(w.cached_page(0, 8).is_none());
        w.changed();
        assert!(
            w.cached_page(w.generation(), 7).is_none(),
            "a change makes it stale"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn closing_ends_every_wait_at_once() {
        let w = Arc::new(bounded(3, 3));
        let mut changes = w.subscribe();
        let far = tokio::time::Instant::now() + Duration::from_secs(30);
        let waiter = tokio::spawn(async move { changes.next(far).await });
        tokio::task::yield_now().await;
        w.close();
        assert!(!waiter.await.unwrap());
        assert!(w.subscribe().closing());
        assert!(!w.subscribe().next(far).await);
        assert!(tokio::time::Instant::now() < far);
    }
}
