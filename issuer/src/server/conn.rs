//! One connection of the HTTP listener, from accept to close, with every state bounded.
//!
//! hyper bounds little on its own: hyper-util's protocol detection waits forever for the first 24
//! bytes, an HTTP/2 connection has no idle timeout at all, and the HTTP/1 header read timeout only
//! starts once detection has handed the connection to HTTP/1. So each connection has a watchdog.
//! Requests in flight are counted, from the moment a request's head has been parsed and the routes
//! are called until its response is ready; a connection with none in flight is closed once it has
//! been idle for [`IDLE_TIMEOUT`]. That bounds the time from accept to the first request (TLS
//! handshake, protocol detection, the HTTP/2 preface, SETTINGS and first headers, HTTP/1 headers)
//! and the time between requests (keep-alive) alike. The close is graceful (an idle HTTP/1
//! connection is closed at once, an HTTP/2 client gets GOAWAY); a connection that has not finished
//! [`CLOSE_GRACE`] later, with no request in flight, is dropped. A request in flight is bounded by
//! the routes themselves (the body read timeout, the store's timeouts), and once its response is
//! ready the connection is idle again, so a client that stops reading the response is cut off
//! like any idle one.
//!
//! Request heads are bounded in size too: [`MAX_HEAD_BYTES`] for HTTP/1 (request line and
//! headers, answered 431 beyond) and for the HTTP/2 header list, with at most
//! [`MAX_CONCURRENT_STREAMS`] requests at once on one HTTP/2 connection.

use crate::app::Peer;
use crate::http::PeerAddr;
use futures_util::future::BoxFuture;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How long a connection may go without a request in flight: from accept until the first
/// request's head is in, and between requests. HTTP/1's header read timeout is the same, so an
/// unfinished head at any point is cut off at this bound too (with a 408).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection closed for idleness has to finish (an HTTP/2 client to take its GOAWAY)
/// before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// The largest request head: HTTP/1 request line and headers, or HTTP/2 header list. Envoy
/// forwards at most 60 KiB by default, so everything Envoy passes fits.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Requests at once on one HTTP/2 connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 64;

/// The routes as one function: a request in, its response out.
pub type Handler = Arc<
    dyn Fn(Request<Incoming>) -> BoxFuture<'static, Result<warp::reply::Response, Infallible>>
        + Send
        + Sync,
>;

/// What all connections of one listener share.
pub struct Shared {
    handler: Handler,
    tls: Option<TlsAcceptor>,
    builder: auto::Builder<TokioExecutor>,
}

impl Shared {
    /// Connections served by `handler`, over TLS when `tls` is given.
    pub fn new(handler: Handler, tls: Option<TlsAcceptor>) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(IDLE_TIMEOUT)
            .max_buf_size(MAX_HEAD_BYTES);
        builder
            .http2()
            .max_header_list_size(MAX_HEAD_BYTES as u32)
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
        Self {
            handler,
            tls,
            builder,
        }
    }
}

/// Serves the connection `stream` (TCP or the Unix socket) from `peer`, accepted at `accepted`,
/// until it ends, the watchdog closes it, or `stop` turns true (shutdown). Either close is
/// graceful and lets requests in flight finish (at shutdown the caller bounds how long it waits
/// for them); a connection with none in flight that has not finished [`CLOSE_GRACE`] later is
/// dropped.
pub async fn serve<S>(
    shared: Arc<Shared>,
    stream: S,
    peer: Peer,
    accepted: Instant,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new(accepted));
    let Some(acceptor) = &shared.tls else {
        return drive(&shared, TokioIo::new(stream), peer, activity, &mut stop).await;
    };
    let deadline = tokio::time::Instant::from_std(accepted + IDLE_TIMEOUT);
    let handshake = tokio::select! {
        done = tokio::time::timeout_at(deadline, acceptor.accept(stream)) => done,
        _ = stop.wait_for(|stopping| *stopping) => return,
    };
    match handshake {
        Ok(Ok(tls)) => drive(&shared, TokioIo::new(tls), peer, activity, &mut stop).await,
        Ok(Err(e)) => tracing::debug!(error = e.to_string(), %peer, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

/// Serves HTTP on `io` under the watchdog.
async fn drive<I>(
    shared: &Shared,
    io: I,
    peer: Peer,
    activity: Arc<Activity>,
    stop: &mut watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let handler = shared.handler.clone();
    let counted = activity.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(PeerAddr(peer));
        let in_flight = counted.begin();
        let response = handler(req);
        async move {
            let response = response.await;
            drop(in_flight);
            response
        }
    });
    let conn = shared.builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let why = loop {
        let now = Instant::now();
        let wake = match activity.idle_until(IDLE_TIMEOUT) {
            Some(at) if at <= now => break "idle",
            Some(at) => at,
            // A request in flight: look again later (when it ends, the idle clock starts then).
            None => now + IDLE_TIMEOUT,
        };
        tokio::select! {
            ended = conn.as_mut() => return log_end(ended, peer),
            _ = stop.wait_for(|stopping| *stopping) => break "shutting down",
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    };
    tracing::debug!(%peer, why, "closing the connection");
    conn.as_mut().graceful_shutdown();
    loop {
        match tokio::time::timeout(CLOSE_GRACE, conn.as_mut()).await {
            Ok(ended) => return log_end(ended, peer),
            // Requests in flight finish (the routes bound them; at shutdown, the drain timeout).
            Err(_) if activity.idle_until(IDLE_TIMEOUT).is_none() => {}
            Err(_) => {
                tracing::debug!(%peer, why, "the connection did not close in time; dropped");
                return;
            }
        }
    }
}

fn log_end(ended: Result<(), Box<dyn std::error::Error + Send + Sync>>, peer: Peer) {
    if let Err(e) = ended {
        tracing::debug!(error = e.to_string(), %peer, "connection ended with an error");
    }
}

/// Requests in flight on one connection, and since when it has had none.
struct Activity {
    /// When the connection was accepted; `idle_since_ms` counts from here.
    accepted: Instant,
    in_flight: AtomicU32,
    /// When the last request in flight ended (0: none has yet), in ms since `accepted`.
    idle_since_ms: AtomicU64,
}

impl Activity {
    fn new(accepted: Instant) -> Self {
        Self {
            accepted,
            in_flight: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(0),
        }
    }

    /// A request begins; it is in flight until the returned guard drops.
    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// When the connection will have been idle for `bound` if no request comes; `None` while
    /// one is in flight.
    fn idle_until(&self, bound: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::SeqCst));
        Some(self.accepted + since + bound)
    }
}

/// A request in flight; dropped when its response is ready (or the request is abandoned).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        // The idle clock restarts before the count drops, so the watchdog never sees a count
        // of zero with an older time.
        self.0.idle_since_ms.fetch_max(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = IDLE_TIMEOUT;

    #[test]
    fn a_new_connection_is_idle_since_accept() {
        let accepted = Instant::now();
        let a = Activity::new(accepted);
        assert_eq!(a.idle_until(BOUND), Some(accepted + BOUND));
    }

    #[test]
    fn no_deadline_while_any_request_is_in_flight() {
        let a = Arc::new(Activity::new(Instant::now()));
        let first = a.begin();
        let second = a.begin();
        assert_eq!(a.idle_until(BOUND), None);
        drop(first);
        assert_eq!(a.idle_until(BOUND), None, "one is still in flight");
        drop(second);
        assert!(a.idle_until(BOUND).is_some());
    }

    #[test]
    fn the_idle_clock_restarts_when_the_last_request_ends() {
        let accepted = Instant::now() - Duration::from_secs(30);
        let a = Arc::new(Activity::new(accepted));
        assert!(a.idle_until(BOUND).is_some_and(|at| at < Instant::now()));
        let before = Instant::now();
        drop(a.begin());
        let at = a.idle_until(BOUND).unwrap();
        // Millisecond resolution: the restart is at most 1 ms before the request ended.
        assert!(at + Duration::from_millis(1) >= before + BOUND, "{at:?}");
        assert!(at <= Instant::now() + BOUND);
    }
}
