//! The edge feed, `GET /apiv2/oauth/edge`: what an edge (the Envoy filter) needs to verify tokens
//! and refuse revoked ones, for a client allowed to read it (`issuer client add NAME --edge`).
//!
//! - `since=N` asks for the revocations numbered after N (none: all in force, a full snapshot,
//!   marked `"full": true`); the answer's `cursor` is the number to send next time, and its
//!   `cursor_stamp` the stamp of that entry, sent back as `since=N.STAMP`. A cursor whose entry
//!   the store does not hold with that stamp belongs to another history (a store restored from
//!   a backup) and gets a full snapshot ([`RevocationPage::continues`]). An answer holds at most
//!   [`PAGE`] revocations; `"more": true` says to ask again at once.
//! - `keys=V` names the key ring version the edge holds: the keys are sent only if the ring
//!   changed. A poll with nothing new is a few dozen bytes.
//! - `wait=S` asks the issuer to hold the request up to S seconds (at most
//!   `--feed-max-wait-seconds`, offered in every answer as `wait_max_seconds`) until there is
//!   something to send, and then to answer at once ([`super::feed_wait`]).
//! - Served only over TLS (the issuer's own) or to a peer on this host (an Envoy on the same
//!   host: a loopback peer, or the peer of the issuer's Unix socket, `--listen unix:PATH`, the
//!   shipped layout): the answer holds verification keys. Never to a request relayed by a proxy
//!   (one that carries a header of [`RELAY_HEADERS`]: `Forwarded`, `X-Forwarded-*`, `Via`,
//!   `X-Real-IP`, …): a proxy on the same host would make anyone beyond it a loopback peer.
//!   Edges poll the issuer directly, through a cluster of their own, and the shipped Envoy
//!   configurations answer 404 for the feed's path.
//!
//! The state is the store's, so it survives restarts and is the same from every issuer on one
//! PostgreSQL database.

use super::{edge_book, now, App};
use super::{ApiError, Call};
use crate::store::edges::{MAX_EDGES, MAX_EDGES_PER_CLIENT};
use crate::store::StoreError;
use serde::Serialize;
use sha2::{Digest, Sha256};
use shared::edge_feed::{FeedAnswer, FeedEntry, FeedKey, RELAY_HEADERS};
use shared::revocation::{stamp_hex, Cursor, Revocation, RevocationPage};
use shared::KeyRing;

/// Most revocations in one answer, so an edge's answers stay bounded however many revocations
/// are in force.
pub const PAGE: usize = 10_000;

/// Most bytes of revocations in one answer (long user names make entries bigger); the filter
/// reads answers of up to 2 MiB.
pub const PAGE_BYTES: usize = 1 << 20;

/// What an edge asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EdgeQuery {
    /// The last revocation number it has, with the stamp of its entry if it was given one.
    pub since: Option<Cursor>,
    /// The key ring version it has.
    pub keys: Option<String>,
    /// How long it asks the issuer to hold the request for news, in seconds.
    pub wait: Option<u64>,
}

/// The largest `wait` a request may name (an issuer grants at most its `--feed-max-wait-seconds`).
pub const MAX_WAIT_ASKED: u64 = 3600;

impl EdgeQuery {
    /// Parses `since=N&keys=V` (N: ASCII digits, optionally `.` and the 16 hex digits of a
    /// stamp); anything else, or a malformed or repeated value, is refused.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        let mut q = Self::default();
        for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
            match name.as_ref() {
                "since" if q.since.is_none() => {
                    q.since = Some(Cursor::parse(&value).ok_or_else(|| {
                        ApiError::invalid_request("since must be a revocation cursor")
                    })?);
                }
                "keys" if q.keys.is_none() => {
                    if value.len() > 64 {
                        return Err(ApiError::invalid_request("keys is a version of the ring"));
                    }
                    q.keys = Some(value.into());
                }
                "wait" if q.wait.is_none() => {
                    let seconds = (value.len() <= 4 && value.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| value.parse::<u64>().ok())
                        .flatten()
                        .filter(|s| (1..=MAX_WAIT_ASKED).contains(s));
                    q.wait = Some(seconds.ok_or_else(|| {
                        ApiError::invalid_request("wait is a number of seconds from 1 to 3600")
                    })?);
                }
                _ => return Err(ApiError::invalid_request(
                    "the edge feed takes since=N, keys=VERSION and wait=SECONDS, each at most once",
                )),
            }
        }
        Ok(q)
    }
}

/// A revocation as the feed writes it: `kind` and its field beside the numbers.
fn entry_json(e: &Revocation) -> FeedEntry {
    FeedEntry::from(e)
}

/// Bytes of `v` in JSON.
fn json_len(v: &impl Serialize) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// The revocations of one answer, as `render` writes them: of `page` (read after `since`), at
/// most `limit` and `max_bytes` (but at least one); the cursor to send next and whether more are
/// waiting.
fn cut<T: Serialize>(
    page: &RevocationPage,
    since: u64,
    full: bool,
    limit: usize,
    max_bytes: usize,
    render: impl Fn(&Revocation) -> T,
) -> (Vec<T>, u64, bool) {
    let mut revoked = Vec::new();
    let (mut bytes, mut last, mut more) = (0, None, false);
    for e in &page.entries {
        let v = render(e);
        let size = json_len(&v) + 1;
        if revoked.len() == limit || (!revoked.is_empty() && bytes + size > max_bytes) {
            more = true;
            break;
        }
        bytes += size;
        last = Some(e.seq);
        revoked.push(v);
    }
    let cursor = match last {
        Some(last) if more => last,
        // Everything up to the latest number is in this answer (or swept).
        _ if full => page.latest,
        last => last.unwrap_or(since),
    };
    (revoked, cursor, more)
}

/// The first header of [`RELAY_HEADERS`] (in its order) that `headers` carries, if any: the
/// request was relayed by a proxy.
///
/// Envoy's own HTTP client, which the filters poll with, adds `x-envoy-internal` (and
/// `X-Forwarded-For` to a native module's requests): the shipped configurations poll through a
/// cluster of their own (`issuer_feed`) that strips both, so the feed needs no exception for
/// Envoy.
fn relayed_by(headers: &warp::http::HeaderMap) -> Option<&'static str> {
    RELAY_HEADERS.into_iter().find(|h| headers.contains_key(*h))
}

/// A version of what comes with the keys: it changes whenever a key is added, retired or starts
/// signing, or the access token lifetime changes, and tells nothing about the keys (a digest).
fn keys_version(ring: &KeyRing, access_ttl: u64) -> String {
    let mut h = Sha256::new();
    h.update(b"mms/edge-keys/v2");
    for k in ring.keys() {
        h.update(k.id().to_be_bytes());
        h.update(k.secret());
    }
    h.update(ring.signing_key().map_or(0, |k| k.id()).to_be_bytes());
    h.update(access_ttl.to_be_bytes());
    hex::encode(&h.finalize()[..8])
}

/// Whether two rings hold the same keys with the same one signing: if not, edges waiting for
/// news are woken to take the new ring.
pub(super) fn same_keys(a: &KeyRing, b: &KeyRing) -> bool {
    keys_version(a, 0) == keys_version(b, 0)
}

/// Whether an answer brings the edge anything: then it is sent at once, without waiting.
fn has_news(a: &FeedAnswer) -> bool {
    a.full || a.more || a.keys.is_some() || !a.revoked.is_empty()
}

impl App {
    /// `GET /apiv2/oauth/edge` with the query `query`: the feed's answer, at once or, when the
    /// edge asks to wait and has everything, once there is news or the wait is over.
    pub async fn edge(&self, call: &Call, query: &str) -> Result<FeedAnswer, ApiError> {
        // The steps before and after the wait boxed: a held request keeps only the wait's state.
        let client_id = Box::pin(self.edge_client(call)).await?;
        let q = EdgeQuery::parse(query)?;
        let wait = q.wait.map_or(0, |w| w.min(self.max_wait()));
        // Subscribed before the first read: a change after it wakes the wait below.
        let mut changes = self.feed.subscribe();
        let mut out = Box::pin(self.feed_answer(call, &client_id, &q)).await?;
        if wait == 0 || has_news(&out) {
            return Ok(out);
        }
        let Ok(hold) = self.feed.hold(&client_id) else {
            self.metrics.feed.wait_ended("busy");
            out.busy = true;
            return Ok(out);
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(wait);
        let mut ended = "quiet";
        let mut answer = Ok(out);
        while changes.next(deadline).await {
            answer = Box::pin(self.feed_answer(call, &client_id, &q)).await;
            if answer.as_ref().map_or(true, has_news) {
                ended = if answer.is_ok() { "news" } else { "failed" };
                break;
            }
        }
        if changes.closing() {
            ended = "closing";
        } else if ended == "quiet" {
            // The edge held everything while it waited: noted so as of now.
            answer = Box::pin(self.feed_answer(call, &client_id, &q)).await;
        }
        drop(hold);
        self.metrics.feed.wait_ended(ended);
        answer
    }

    /// The longest this issuer holds a feed request (0: none): `--feed-max-wait-seconds`, and at
    /// most half of `--edge-forget-after`, since an edge is noted at each answer and one that
    /// waits must be noted often enough never to be forgotten.
    fn max_wait(&self) -> u64 {
        let seen_every = (self.settings.edge_forget_after / 2).max(1);
        self.feed.settings().max_wait.min(seen_every)
    }

    /// The edge client a feed request authenticates as, once its transport is acceptable.
    async fn edge_client(&self, call: &Call) -> Result<String, ApiError> {
        // The transport first: over plain HTTP from afar, not even whether a credential is good.
        let local = call.peer.is_some_and(|p| p.is_local());
        if !self.settings.tls && !local {
            return Err(ApiError::forbidden(
                "the edge feed is served only over TLS, on the Unix socket or to a loopback \
                 address",
            ));
        }
        if let Some(name) = relayed_by(&call.headers) {
            tracing::warn!(
                header = name,
                peer = call
                    .peer
                    .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
                "edge feed refused: the request came through a proxy"
            );
            return Err(ApiError::forbidden(
                "the edge feed is not served through a proxy; poll the issuer directly",
            ));
        }
        let (client_id, client) = self.authenticate(call).await?;
        if !client.edge {
            tracing::info!(
                client = client_id.as_str(),
                "edge feed refused: not an edge client"
            );
            return Err(ApiError::forbidden(
                "this client may not read the edge feed",
            ));
        }
        Ok(client_id)
    }

    /// The answer to `q` from the store as it is now, the poll noted in the list of edges.
    async fn feed_answer(
        &self,
        call: &Call,
        client_id: &str,
        q: &EdgeQuery,
    ) -> Result<FeedAnswer, ApiError> {
        let asked = q.since.unwrap_or_default();
        let mut since = asked.seq;
        let mut full = q.since.is_none();
        // One more than a page, to know whether more are waiting.
        let read = |since| self.store.revocations(since, now(), PAGE + 1);
        // The edges woken by one change mostly ask after the same cursor: one read serves them.
        let generation = self.feed.generation();
        let mut page = match self.feed.cached_page(generation, since) {
            Some(page) => page,
            None => {
                let page = std::sync::Arc::new(read(since).await?);
                self.feed.cache_page(generation, since, page.clone());
                page
            }
        };
        if !full && !page.continues(asked.seq, asked.stamp) {
            // The edge's cursor is not of this store's history (it was restored from a backup),
            // or its entry was swept: a full snapshot, which the edge adds to what it holds.
            since = 0;
            full = true;
            page = std::sync::Arc::new(read(0).await?);
        }
        let (revoked, cursor, more) = cut(&page, since, full, PAGE, PAGE_BYTES, entry_json);
        let ring = self.ring();
        let version = keys_version(&ring, self.settings.access_ttl);
        if let Some(edge) = edge_book::identity(&call.headers) {
            let poll = edge_book::Poll {
                client: client_id,
                keys: q.keys.as_deref(),
                cursor: asked.seq,
                version: &version,
                kids: ring.keys().iter().map(|k| k.id()).collect(),
                latest: page.latest,
            };
            tracing::debug!(
                node = edge.0,
                vm = edge.1,
                keys = poll.keys,
                cursor = poll.cursor,
                "edge poll"
            );
            // A new edge beyond the bounds is not noted: the poll is answered all the same.
            self.edges.note(edge, poll, now());
        }
        let send_keys = q.keys.as_deref() != Some(version.as_str());
        let max_wait = self.max_wait();
        Ok(FeedAnswer {
            cursor,
            cursor_stamp: page.stamp_of(cursor, since).map(stamp_hex),
            full,
            keys: send_keys.then(|| ring.keys().iter().map(FeedKey::new).collect()),
            keys_version: version,
            max_token_lifetime_seconds: send_keys.then_some(self.settings.access_ttl),
            more,
            revoked,
            wait_max_seconds: (max_wait > 0).then_some(max_wait),
            busy: false,
        })
    }
}

impl App {
    /// Writes the edges' reports noted since the last call (and drops from the store the edges
    /// unseen for too long), then sets `/metrics`' `issuer_edges` and `issuer_edge_lag_seconds`
    /// from the edges the store holds: those of every issuer on a shared store.
    pub async fn flush_edges(&self) -> Result<(), StoreError> {
        let now = now();
        let forget_before = now.saturating_sub(self.settings.edge_forget_after);
        let changed = self.edges.take_changed(forget_before);
        let mut refused = self.edges.take_refused();
        if !changed.is_empty() {
            refused += self.store.record_edges(changed, forget_before).await?;
        }
        if refused > 0 {
            tracing::warn!(
                refused,
                per_client = MAX_EDGES_PER_CLIENT,
                most = MAX_EDGES,
                "new edges not recorded: an edge client is at its bound (`issuer keys status` \
                 names it), or the registry is full"
            );
            self.metrics.edges_refused(refused);
        }
        let mut edges = self.store.edges().await?;
        if edges.iter().any(|e| e.last_seen < forget_before) {
            // Nothing new: the count of refused edges is the previous write's.
            self.store.record_edges(Vec::new(), forget_before).await?;
            edges = self.store.edges().await?;
        }
        let lag = edges.iter().map(|e| e.lag(now)).max().unwrap_or(0);
        self.metrics.set_edges(edges.len(), lag);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::revocation::Revoked;

    #[test]
    fn queries() {
        assert_eq!(EdgeQuery::parse("").unwrap(), EdgeQuery::default());
        assert_eq!(
            EdgeQuery::parse("since=12&keys=ab").unwrap(),
            EdgeQuery {
                since: Some(Cursor {
                    seq: 12,
                    stamp: None
                }),
                keys: Some("ab".into()),
                wait: None,
            }
        );
        let since = |q: &str| EdgeQuery::parse(q).unwrap().since.unwrap();
        assert_eq!(since("since=18446744073709551615").seq, u64::MAX);
        assert_eq!(
            since("since=7.00000000000000ff"),
            Cursor {
                seq: 7,
                stamp: Some(255)
            }
        );
        for bad in [
            "since=x",
            "since=1&since=2",
            "other=1",
            "since=-1",
            "since=%2B5",
            "since=+5",
            "since=",
            "since=%205",
            "since=5%20",
            "since=0x5",
            "since=%EF%BC%95",
            "since=18446744073709551616",
            "since=000000000000000000005",
            "since=7.ff",
            "since=7.00000000000000FF",
            "since=7.00000000000000ff&since=7",
        ] {
            assert!(EdgeQuery::parse(bad).is_err(), "{bad}");
        }
        assert!(EdgeQuery::parse(&format!("keys={}", "a".repeat(65))).is_err());
        assert_eq!(EdgeQuery::parse("wait=25").unwrap().wait, Some(25));
        assert_eq!(EdgeQuery::parse("wait=3600").unwrap().wait, Some(3600));
        for bad in [
            "wait=0",
            "wait=3601",
            "wait=",
            "wait=+5",
            "wait=05000",
            "wait=1&wait=1",
            "wait=1.5",
        ] {
            assert!(EdgeQuery::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn relayed_requests_are_recognised() {
        let mut h = warp::http::HeaderMap::new();
        h.insert("authorization", "Basic eA==".parse().unwrap());
        h.insert("x-envoy-expected-rq-timeout-ms", "5000".parse().unwrap());
        h.insert("mms-edge-node", "node".parse().unwrap());
        assert_eq!(relayed_by(&h), None);
        // Each name, in any case, alone.
        for name in RELAY_HEADERS {
            for spelling in [name.to_owned(), name.to_ascii_uppercase()] {
                let mut h = h.clone();
                h.insert(
                    warp::http::HeaderName::from_bytes(spelling.as_bytes()).unwrap(),
                    "x".parse().unwrap(),
                );
                assert_eq!(relayed_by(&h), Some(name), "{spelling}");
            }
        }
        // What Envoy's own client adds, unless the feed's cluster strips it: refused.
        let mut own = h.clone();
        own.insert("x-envoy-internal", "true".parse().unwrap());
        assert_eq!(relayed_by(&own), Some("x-envoy-internal"));
        own.insert("x-forwarded-for", "192.0.2.2".parse().unwrap());
        assert_eq!(relayed_by(&own), Some("x-forwarded-for"));
    }

    #[test]
    fn answers_are_cut_into_pages_whose_cursors_chain() {
        let entry = |seq| Revocation {
            seq,
            what: Revoked::User { name: "u".into() },
            at: 1,
            until: 2,
            stamp: None,
        };
        let page = |from: u64, to: u64, latest| RevocationPage {
            entries: (from..=to).map(entry).collect(),
            latest,
            ..RevocationPage::default()
        };
        let big = usize::MAX;
        // A full snapshot of 5 entries (numbers 3 to 7, the latest given out 9) in pages of 2.
        let (first, cursor, more) = cut(&page(3, 7, 9), 0, true, 2, big, entry_json);
        assert_eq!((first.len(), cursor, more), (2, 4, true));
        let (second, cursor, more) = cut(&page(5, 7, 9), 4, false, 2, big, entry_json);
        assert_eq!((second.len(), cursor, more), (2, 6, true));
        let (last, cursor, more) = cut(&page(7, 7, 9), 6, false, 2, big, entry_json);
        assert_eq!((last.len(), cursor, more), (1, 7, false));
        // Nothing new: the cursor stays; a whole snapshot ends at the latest number.
        assert_eq!(cut(&page(1, 0, 9), 7, false, 2, big, entry_json).1, 7);
        let whole = cut(&page(3, 4, 9), 0, true, 2, big, entry_json);
        assert_eq!(
            whole,
            (vec![entry_json(&entry(3)), entry_json(&entry(4))], 9, false)
        );
        // By size: two entries to a page; one always goes, however big.
        let size = json_len(&entry_json(&entry(1))) + 1;
        let (sized, cursor, more) = cut(&page(3, 7, 9), 0, true, 100, 2 * size, entry_json);
        assert_eq!((sized.len(), cursor, more), (2, 4, true));
        let (one, _, more) = cut(&page(3, 7, 9), 0, true, 100, 1, entry_json);
        assert_eq!((one.len(), more), (1, true));
    }
}
