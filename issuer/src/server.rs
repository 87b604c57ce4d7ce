//! Serving: the accept loop over the warp routes (TCP or a Unix socket, optionally TLS), the admin
//! socket (and the backup through it, `backup`), the admin HTTP listener
//! ([`serve_admin_http`]), the periodic sweep, and graceful shutdown.
//!
//! warp 0.4 has no TLS of its own, so one accept loop serves both plain and TLS connections with
//! hyper-util, the same way: TLS is a handshake in front, nothing else differs. The loop is the
//! same for a TCP listener and the Unix socket ([`listener`]: what each gives is a stream and its
//! peer). How long and how large each connection may be is in [`conn`]; how the loop weathers
//! failing accepts (out of file descriptors) in `accept`.

use crate::admin::{self, Answer, Command};
use crate::app::{now, App};
use crate::http::admin::{admin_routes, AdminHttp};
use crate::http::{routes_in, AppSlot};
use accept::AcceptErrors;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use tower_service::Service;
pub use watch_files::watch_revocation_files_forever;

mod accept;
mod backup;
pub mod conn;
pub mod listener;
mod watch_files;

pub use listener::{ListenAddr, Listener};

/// How long shutdown waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often expired refresh state and retired keys are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Most time between two reads of the vendors' clients for their next expiry: a statement
/// imported elsewhere (through another issuer) that expires sooner is deactivated within it (its
/// secret is refused from its expiry on regardless).
const EXPIRY_RECHECK: Duration = Duration::from_secs(10);
/// How often the key ring is re-read.
const KEY_RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Serves HTTP on `listener` (TCP or the Unix socket) until `shutdown` completes, then drains
/// requests in flight. Each connection is served by [`conn::serve`], which bounds every state it
/// can be left in. Until `app` holds the app (the store is open), only `/livez` answers 200.
pub async fn serve_http(
    app: AppSlot,
    listener: impl Listener,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let routes = routes_in(app);
    let handler: conn::Handler = Arc::new(move |req| {
        let mut service = warp::service(routes.clone());
        Box::pin(service.call(req))
    });
    serve_with(handler, listener, tls, shutdown).await;
}

/// Serves the admin listener (`[admin_http]`: the admin HTTP API and the console) on
/// `listener` until `shutdown`, as [`serve_http`] serves the main one.
pub async fn serve_admin_http(
    state: Arc<AdminHttp>,
    listener: impl Listener,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let routes = admin_routes(state);
    let handler: conn::Handler = Arc::new(move |req| {
        let mut service = warp::service(routes.clone());
        Box::pin(service.call(req))
    });
    serve_with(handler, listener, tls, shutdown).await;
}

/// The accept loop of a listener whose requests `handler` answers.
async fn serve_with(
    handler: conn::Handler,
    listener: impl Listener,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let shared = Arc::new(conn::Shared::new(handler, tls));
    let (stop, stopped) = watch::channel(false);
    let mut errors = AcceptErrors::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let now = Instant::now();
                errors.succeeded(now);
                let serve = conn::serve(shared.clone(), stream, peer, now, stopped.clone());
                tokio::spawn(serve);
            }
            Err(e) => {
                let pause = errors.failed(&e, Instant::now());
                if !pause.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = &mut shutdown => break,
                    }
                }
            }
        }
    }
    drop(listener);
    drop(stopped);
    // Every connection closes gracefully; they are done when the last receiver is gone.
    let _ = stop.send(true);
    if tokio::time::timeout(DRAIN_TIMEOUT, stop.closed())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain timeout; closing");
    }
}

/// Answers admin commands on the socket, one JSON line each way per connection (the protocol is
/// in [`crate::admin`]'s doc). Only the issuer's own effective user and root may use it: the
/// socket's peer credentials (`SO_PEERCRED`) are read first, and any other peer's connection is
/// closed unanswered, with a warning naming its uid ([`admin_peer_allowed`]); the file's mode
/// (0600 in a 0700 data dir) is not the only guard. The audit trail names the operating-system
/// user of the peer process, from the same credentials. Changes run one at a time, so that each
/// audit record's before and after hold that change alone.
pub async fn serve_admin(app: Arc<App>, listener: UnixListener) {
    let own = nix::unistd::geteuid().as_raw();
    let one_change_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let app = app.clone();
        let one_change_at_a_time = one_change_at_a_time.clone();
        tokio::spawn(async move {
            let peer = match stream.peer_cred() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(
                        error = crate::display::Causes(&e).to_string(),
                        "admin connection refused: its peer's credentials are unknown; closed \
                         unanswered"
                    );
                    return;
                }
            };
            let uid = peer.uid();
            if !admin_peer_allowed(uid, own) {
                tracing::warn!(
                    uid,
                    pid = peer.pid(),
                    own_uid = own,
                    "admin connection refused: its peer's uid is neither the issuer's own nor \
                     root's; closed unanswered"
                );
                return;
            }
            // The user database may be NSS over the network: off the runtime's threads.
            let actor = tokio::task::spawn_blocking(move || crate::audit::user_name(uid))
                .await
                .map_err(std::io::Error::other);
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = BufReader::new(read.take(admin::MAX_LINE as u64));
            let answer = match reader.read_line(&mut line).await {
                Err(e) => Answer::Err(format!("reading the command: {e}")),
                Ok(_) => match (serde_json::from_str::<Command>(&line), actor) {
                    (Err(e), _) => Answer::Err(format!("malformed command: {e}")),
                    // No command without its actor for the audit trail.
                    (Ok(_), Err(e)) => Answer::Err(format!("the socket's peer is unknown: {e}")),
                    (Ok(Command::Backup), Ok(actor)) => {
                        let read = reader.into_inner().into_inner();
                        backup::answer(&app, read, write, &actor).await;
                        return;
                    }
                    (Ok(cmd), Ok(actor)) => {
                        let _turn = if cmd.is_change() {
                            Some(one_change_at_a_time.lock().await)
                        } else {
                            None
                        };
                        run_admin(&app, cmd, &actor).await
                    }
                },
            };
            let mut text = serde_json::to_string(&answer).expect("an answer serializes");
            text.push('\n');
            let _ = write.write_all(text.as_bytes()).await;
        });
    }
}

/// Whether a peer running as `uid` may use the admin socket of an issuer running as `own`
/// (effective uids): the issuer's own user, or root.
fn admin_peer_allowed(uid: u32, own: u32) -> bool {
    uid == own || uid == 0
}

async fn run_admin(app: &Arc<App>, cmd: Command, actor: &str) -> Answer {
    let done = admin::execute_as(app.store.as_ref(), &cmd, now(), actor).await;
    // A listing changed nothing. A change is reloaded even when it failed: it may have been made
    // before the failure (its audit record failed to be written).
    if cmd.is_change() {
        app.clients_changed();
        app.reload_revocations().await;
        if cmd.changes_keys() {
            if let Err(e) = app.reload_keys().await {
                return Answer::Err(format!(
                    "the key was rotated, but reloading failed: {}",
                    crate::display::Causes(&e)
                ));
            }
        }
    }
    match done {
        Ok(reply) => Answer::Ok(reply),
        Err(e) => Answer::Err(crate::display::Causes(&e).to_string()),
    }
}

/// Re-reads the key ring and the revocations every second, so a delayed rotation starts signing
/// on time, retired keys leave the ring, and a change made through another issuer or straight to
/// the database takes effect here.
pub async fn reload_keys_forever(app: Arc<App>) {
    let mut tick = tokio::time::interval(KEY_RELOAD_EVERY);
    loop {
        tick.tick().await;
        reload_keys_and_revocations(&app).await;
    }
}

/// Reads the key ring and the revocations again; a failure is logged, and the next read retries.
async fn reload_keys_and_revocations(app: &App) {
    if let Err(e) = app.reload_keys().await {
        tracing::error!(
            error = crate::display::Causes(&e).to_string(),
            "reloading keys failed"
        );
    }
    app.reload_revocations().await;
}

/// Listens for the changes other writers of a shared store commit (PostgreSQL's `NOTIFY`, see
/// `store::postgres::listen`) and reads the key ring and the revocations at each, so that edges
/// waiting on this issuer hear of a revocation recorded through another at once. Returns at
/// once on a store without notifications. A listener that fails is connected again after a
/// pause; meanwhile the reads every second ([`reload_keys_forever`]) carry the changes.
pub async fn follow_store_changes_forever(app: Arc<App>) {
    let Some(mut listener) = app.store.change_listener() else {
        return;
    };
    let mut down_since: Option<std::time::Instant> = None;
    loop {
        match listener.next().await {
            Ok(notice) => {
                if let Some(since) = down_since.take() {
                    tracing::info!(
                        after_ms = since.elapsed().as_millis() as u64,
                        "listening for the store's changes again"
                    );
                }
                app.metrics.feed.set_listening(true);
                if notice == crate::store::Notice::Changed {
                    app.metrics.feed.notified();
                }
                reload_keys_and_revocations(&app).await;
            }
            Err(e) => {
                app.metrics.feed.set_listening(false);
                if down_since.is_none() {
                    down_since = Some(std::time::Instant::now());
                    tracing::warn!(
                        error = crate::display::Causes(&e).to_string(),
                        "not listening for the store's changes: edges hear of changes through \
                         other issuers within a second, by the periodic read"
                    );
                }
                tokio::time::sleep(LISTEN_RETRY).await;
            }
        }
    }
}

/// The pause before the change listener connects again.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Runs the readiness probe's write every [`KEY_RELOAD_EVERY`] ([`App::probe_store`]); a
/// failure is logged once until the store takes writes again.
pub async fn probe_store_forever(app: Arc<App>) {
    let mut tick = tokio::time::interval(KEY_RELOAD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        match app.probe_store().await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the store takes writes again: ready");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(
                    error = crate::display::Causes(&e).to_string(),
                    "the store refused the readiness probe's write: not ready"
                );
            }
            Err(_) => {}
        }
    }
}

/// Writes the edges' reports to the store every [`crate::app::edge_book::EDGE_FLUSH_EVERY`].
pub async fn flush_edges_forever(app: Arc<App>) {
    let mut tick = tokio::time::interval(crate::app::edge_book::EDGE_FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = app.flush_edges().await {
            tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "writing the edges' reports failed"
            );
        }
    }
}

/// Sweeps expired refresh state, retired keys and audit events past their retention
/// periodically.
pub async fn sweep_forever(app: Arc<App>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tick.tick().await;
        match app.store.sweep(now()).await {
            Ok(n) if n > 0 => {
                tracing::info!(removed = n, "swept expired refresh state and retired keys")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "sweep failed"
            ),
        }
        app.apply_revocation_files(now()).await;
        let before = now().saturating_sub(app.audit_retention);
        match app.store.sweep_audit(before).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "swept the audit trail"),
            Ok(_) => {}
            Err(e) => tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "audit trail sweep failed"
            ),
        }
    }
}

/// Deactivates each vendor's client at the second its last statement expires (revoking its
/// tokens), on a timer set for the next expiry; the clients are read again at least every
/// [`EXPIRY_RECHECK`] and whenever they change through this issuer.
pub async fn expire_vendor_clients_forever(app: Arc<App>) {
    loop {
        let at = now();
        if let Err(e) = app.expire_vendor_clients(at).await {
            tracing::error!(
                error = e.to_string(),
                "deactivating expired vendor clients failed"
            );
        }
        let next = match app.next_vendor_expiry(at).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(
                    error = crate::display::Causes(&e).to_string(),
                    "reading the vendors' clients failed"
                );
                None
            }
        };
        let wait = next.map_or(EXPIRY_RECHECK, |exp| until_second(exp).min(EXPIRY_RECHECK));
        app.vendor_clients_changed_within(wait).await;
    }
}

/// The time from now to the start of the second `second` (seconds since the epoch).
fn until_second(second: u64) -> Duration {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(second);
    at.duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
}

/// Rechecks the directory's users every `recheck_seconds`, read again each round (a reload may
/// change it), for as long as the issuer has a directory.
pub async fn recheck_directory_forever(app: Arc<App>) {
    while let Some(every) = app.directory_recheck_every() {
        match app.recheck_directory().await {
            Ok(Some(n)) if n > 0 => {
                tracing::info!(disabled = n, "directory recheck disabled users")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "directory recheck failed"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// Probes the directory's servers every `probe_seconds`, read again each round, so that each
/// issuer knows which answer without waiting for a sign-in to fail, and uses a server that came
/// back at once.
pub async fn probe_directory_forever(app: Arc<App>) {
    while let Some(every) = app.directory_probe_every() {
        app.probe_directory().await;
        tokio::time::sleep(every).await;
    }
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                "cannot listen for SIGTERM"
            );
            std::future::pending::<()>().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_admin_socket_serves_its_own_user_and_root_only() {
        use super::admin_peer_allowed;
        assert!(admin_peer_allowed(999, 999));
        assert!(admin_peer_allowed(0, 999));
        assert!(admin_peer_allowed(0, 0));
        assert!(!admin_peer_allowed(65534, 999));
        assert!(!admin_peer_allowed(65534, 0));
        assert!(!admin_peer_allowed(1000, 999));
    }
}
