//! [`Notices`] for [`PgStore`]: a connection of its own, outside the pool, that `LISTEN`s on
//! channel `mms_feed`, where the triggers of migration 27 notify when a revocation is recorded
//! or a signing key changes (`schema.rs`).
//!
//! The connection is the listener's alone: a pooled one goes back to the pool and a pooler in
//! transaction mode hands each transaction another server session, where no `LISTEN` holds. It
//! is checked every [`CHECK_EVERY`]: a connection cut without a FIN would otherwise stay silent
//! for good, and one to a server that turned read-only (a primary demoted in place, or a
//! standby) hears nothing the new primary commits, so either is dropped, and the next call
//! connects again (with `target_session_attrs=read-write`, to the primary). Each new connection
//! begins with [`Notice::Listening`], for whatever changed unheard meanwhile, once a
//! notification it sent itself came back (through a pooler in transaction mode none does:
//! `--store-listen-url` then names a way to the database that keeps the session).

use super::PgStore;
use crate::store::storage::{ChangeListener, Notice, Notices};
use crate::store::{DriverError, StoreError, Unreachable};
use futures_util::StreamExt as _;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Socket};

/// The channel the triggers notify on.
pub const CHANNEL: &str = "mms_feed";
/// How often the listening connection is checked with a query.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);
/// The `application_name` of the listening connection, as `pg_stat_activity` shows it.
pub const APPLICATION_NAME: &str = "mms-issuer feed listener";
/// How long the check, and a connection attempt, may take.
const CHECK_WITHIN: Duration = Duration::from_secs(5);

/// How the listener reaches the database: the pool's settings and TLS.
#[derive(Clone)]
pub(super) struct ListenTo {
    pub(super) config: Config,
    pub(super) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

/// What the task reading the connection passes on.
enum Heard {
    Notified,
    /// The connection ended: the driver's error, or none when the server closed it.
    Closed(Option<tokio_postgres::Error>),
}

/// A `LISTEN` connection, connected on demand.
struct PgListener {
    to: ListenTo,
    live: Option<(Client, mpsc::UnboundedReceiver<Heard>)>,
}

impl Notices for PgStore {
    fn change_listener(&self) -> Option<Box<dyn ChangeListener>> {
        let to = self.listen.clone()?;
        Some(Box::new(PgListener { to, live: None }))
    }
}

/// Reads `conn` until it ends, passing notifications on as [`Heard::Notified`].
fn drive<S, T>(mut conn: Connection<S, T>, tx: mpsc::UnboundedSender<Heard>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        let why = loop {
            match messages.next().await {
                Some(Ok(AsyncMessage::Notification(_))) => {
                    if tx.send(Heard::Notified).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Some(e),
                None => break None,
            }
        };
        let _ = tx.send(Heard::Closed(why));
    });
}

async fn connect_with<M>(
    config: &Config,
    tls: M,
) -> Result<(Client, mpsc::UnboundedReceiver<Heard>), StoreError>
where
    M: MakeTlsConnect<Socket>,
    M::Stream: Send + 'static,
    <M::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, conn) = config.connect(tls).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    drive(conn, tx);
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    Ok((client, rx))
}

/// The LISTEN connection cannot serve, for the reason `why`.
fn unusable(why: &'static str) -> StoreError {
    StoreError::Unavailable(Unreachable::Listener(why))
}

/// The LISTEN connection ended: the driver's error, or none when the server closed it.
fn ended(why: Option<tokio_postgres::Error>) -> StoreError {
    match why {
        Some(e) => StoreError::Unavailable(Unreachable::Driver(DriverError::new(e))),
        None => unusable("the server closed the connection"),
    }
}

/// Whether `client`'s server still answers and takes writes (where notifications come from).
async fn check(client: &Client) -> Result<(), StoreError> {
    let asked = tokio::time::timeout(
        CHECK_WITHIN,
        client.simple_query("SHOW transaction_read_only"),
    );
    let answer = asked
        .await
        .map_err(|_| unusable("the LISTEN connection did not answer"))??;
    let writable = answer.iter().any(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("off"),
        _ => false,
    });
    if writable {
        Ok(())
    } else {
        Err(unusable(
            "the LISTEN connection's server is read-only (a failover)",
        ))
    }
}

impl PgListener {
    async fn connect(&self) -> Result<(Client, mpsc::UnboundedReceiver<Heard>), StoreError> {
        let attempt = async {
            match &self.to.tls {
                Some(tls) => connect_with(&self.to.config, tls.clone()).await,
                None => connect_with(&self.to.config, tokio_postgres::NoTls).await,
            }
        };
        let (client, mut heard) = tokio::time::timeout(CHECK_WITHIN, attempt)
            .await
            .map_err(|_| unusable("connecting to LISTEN timed out"))??;
        // A notification to itself must come back: through a pooler in transaction mode the
        // LISTEN holds on no session, and nothing would ever be heard.
        client
            .batch_execute(&format!("NOTIFY {CHANNEL}, 'listen-check'"))
            .await?;
        match tokio::time::timeout(CHECK_WITHIN, heard.recv()).await {
            Ok(Some(Heard::Notified)) => Ok((client, heard)),
            _ => Err(unusable(
                "a notification sent on the LISTEN connection never came back (a pooler in \
                 transaction mode? see --store-listen-url)",
            )),
        }
    }
}

#[async_trait::async_trait]
impl ChangeListener for PgListener {
    async fn next(&mut self) -> Result<Notice, StoreError> {
        let Some((client, heard)) = &mut self.live else {
            self.live = Some(self.connect().await?);
            return Ok(Notice::Listening);
        };
        let mut closed = false;
        let outcome = loop {
            tokio::select! {
                h = heard.recv() => match h {
                    Some(Heard::Notified) => {
                        // Those queued behind it are the same news; a close among them is
                        // taken up at the next call.
                        while let Ok(h) = heard.try_recv() {
                            closed |= matches!(h, Heard::Closed(_));
                        }
                        break Ok(Notice::Changed);
                    }
                    Some(Heard::Closed(why)) => break Err(ended(why)),
                    None => break Err(unusable("the listener stopped")),
                },
                () = tokio::time::sleep(CHECK_EVERY) => {
                    if let Err(e) = check(client).await {
                        break Err(e);
                    }
                }
            }
        };
        if closed || outcome.is_err() {
            self.live = None;
        }
        outcome
    }
}
