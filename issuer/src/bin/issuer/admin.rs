//! The command line's side of an admin command (part of the `issuer` binary): through the running
//! server's socket, or straight on the store. Either way the command's [`Reply`] comes back typed
//! and the command that asked renders it; [`run_admin`] prints the text that confirms a change.

use crate::data_dir::DataDir;
use crate::out;
use anyhow::{bail, Context as _};
use issuer::admin::{execute, Answer, Command, Reply, SOCKET_FILE};
use issuer::app::now;
use issuer::store::redb::RedbStore;
use issuer::store::{Location, OpenError, PgFiles, RefreshPolicy, Store};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// Runs `cmd` on the store at `location` and returns its reply: on the embedded store through
/// the running server's socket, or directly on the data dir when no server answers there; on
/// PostgreSQL directly on the database (`files` open it).
pub fn run(location: &Location, files: &PgFiles<'_>, cmd: &Command) -> anyhow::Result<Reply> {
    match location {
        Location::Redb(dir) => match send(dir, cmd)? {
            Some(answer) => answered(answer),
            None => {
                let store = open_redb(dir)?;
                Ok(block_on(execute(&store, cmd, now()))??)
            }
        },
        Location::Postgres(url) => block_on(async {
            let store =
                Location::connect_postgres(url, files, now(), RefreshPolicy::default()).await?;
            anyhow::Ok(execute(store.as_ref(), cmd, now()).await?)
        })?,
    }
}

/// [`run`] on the store `args` name.
pub fn run_on(args: &DataDir, cmd: &Command) -> anyhow::Result<Reply> {
    run(&args.location()?, &args.pg_files(), cmd)
}

/// Runs an admin command that changes something (see [`run`]) and prints what it says it did.
pub fn run_admin(args: &DataDir, cmd: Command) -> anyhow::Result<()> {
    let reply = run_on(args, &cmd)?;
    out::text(&text(reply)?)
}

/// The text of a change's reply.
pub fn text(reply: Reply) -> anyhow::Result<String> {
    match reply {
        Reply::Text(text) => Ok(text),
        other => Err(unexpected(&other)),
    }
}

/// A reply of another kind than the command asks for.
pub fn unexpected(reply: &Reply) -> anyhow::Error {
    let kind = serde_json::to_value(reply)
        .ok()
        .and_then(|v| v["reply"].as_str().map(str::to_owned))
        .unwrap_or_default();
    anyhow::anyhow!("the admin command got a reply of another kind ({kind:?})")
}

/// The reply an answer from the socket carries, or its refusal as an error.
fn answered(answer: Answer) -> anyhow::Result<Reply> {
    match answer {
        Answer::Ok(reply) => Ok(reply),
        Answer::Err(msg) => bail!("{msg}"),
    }
}

/// Opens the embedded store in `dir`, which no server answers for.
fn open_redb(dir: &Path) -> anyhow::Result<RedbStore> {
    match RedbStore::open(dir, now(), RefreshPolicy::default()) {
        Err(OpenError::Locked) => bail!(
            "{} is in use by a process that does not answer on its admin socket",
            dir.display()
        ),
        other => other.with_context(|| format!("opening {}", dir.display())),
    }
}

/// Where a series of admin commands goes (`issuer apply`): the running server's socket, one
/// connection and one line per command, so no line nears [`issuer::admin::MAX_LINE`] however
/// many there are; or the store, opened once.
pub enum Session {
    /// The running server's data dir.
    Socket(PathBuf),
    /// The store itself, and a runtime to run on.
    Store(Arc<dyn Store>, tokio::runtime::Runtime),
}

impl Session {
    /// Opens the store at `location` as [`run`] would for one command.
    pub fn open(location: &Location, files: &PgFiles<'_>) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let store: Arc<dyn Store> = match location {
            Location::Redb(dir) => {
                if send(dir, &Command::Ping)?.is_some() {
                    return Ok(Self::Socket(dir.clone()));
                }
                Arc::new(open_redb(dir)?)
            }
            Location::Postgres(url) => runtime.block_on(Location::connect_postgres(
                url,
                files,
                now(),
                RefreshPolicy::default(),
            ))?,
        };
        Ok(Self::Store(store, runtime))
    }

    /// Runs `cmd`; its reply.
    pub fn run(&self, cmd: &Command) -> anyhow::Result<Reply> {
        match self {
            Self::Socket(dir) => match send(dir, cmd)? {
                Some(answer) => answered(answer),
                None => bail!("the server on {} stopped answering", dir.display()),
            },
            Self::Store(store, runtime) => {
                Ok(runtime.block_on(execute(store.as_ref(), cmd, now()))?)
            }
        }
    }
}

/// Runs a future to completion on a runtime of its own (an admin command is one-shot).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}

/// Sends `cmd` to the server listening on the data dir's socket, one line each way (the protocol
/// is in [`issuer::admin`]'s doc). `Ok(None)` if no server answers there (no socket, or a stale
/// one), so the caller opens the database itself.
fn send(data_dir: &Path, cmd: &Command) -> anyhow::Result<Option<Answer>> {
    let path = data_dir.join(SOCKET_FILE);
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => {
            return Err(anyhow::anyhow!(
                "cannot reach the server's admin socket {}: {e}",
                path.display()
            ))
        }
    };
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(cmd)?;
    line.push('\n');
    let mut reply = String::new();
    let sent = stream
        .write_all(line.as_bytes())
        .and_then(|()| BufReader::new(stream).read_line(&mut reply));
    match sent {
        Ok(0) => Err(unanswered(&path)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ) =>
        {
            Err(unanswered(&path))
        }
        Err(e) => Err(e.into()),
        Ok(_) => Ok(Some(serde_json::from_str(&reply)?)),
    }
}

/// The server closed the connection on `socket` without an answer: most likely it refused this
/// process's user, as it serves only its own user and root.
fn unanswered(socket: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "the server closed its admin socket {} without an answer: it answers only the user it \
         runs as and root, so run the command as that user (the server's log names the uid it \
         refused)",
        socket.display()
    )
}

/// Reads one line of secret input from stdin (a terminal gets a prompt on stderr).
pub fn read_secret(prompt: &str) -> anyhow::Result<Zeroizing<String>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("{prompt}: ");
    }
    let mut line = Zeroizing::new(String::new());
    stdin.lock().read_line(&mut line)?;
    let value = Zeroizing::new(line.trim_end_matches(['\r', '\n']).to_owned());
    if value.is_empty() {
        bail!("empty {prompt} on stdin");
    }
    Ok(value)
}
