//! The audit trail of admin commands: what each change is called and what it changes
//! ([`record_of`]), the public view of that before and after ([`view`]), and `issuer audit`'s
//! read ([`read`]).

use super::{Actor, AdminError, Command};
use crate::store::audit::{changed, client_view, family_view, keys_view, user_view};
use crate::store::{AuditAction, AuditEvent, Store, StoreError};
use serde_json::Value;

/// Most events one `issuer audit` returns; a reader that gets this many asks again from a later
/// `--since`.
pub const MAX_READ: usize = 100_000;

/// What a change touches, whose state is recorded before and after it.
pub(super) enum Subject {
    Client(String),
    User(String),
    Keys,
    Session(String),
}

impl Subject {
    pub(super) fn name(&self) -> &str {
        match self {
            Self::Client(id) => id,
            Self::User(name) => name,
            Self::Keys => "keys",
            Self::Session(id) => id,
        }
    }
}

/// The action and subject of `cmd`, `None` for the commands that only read.
pub(super) fn record_of(cmd: &Command) -> Option<(AuditAction, Subject)> {
    use AuditAction as A;
    let client = |id: &String| Subject::Client(id.clone());
    let user = |name: &String| Subject::User(name.clone());
    Some(match cmd {
        Command::ClientAdd(c) => (A::ClientAdd, client(&c.id)),
        Command::ClientActivate { id, .. } => (A::ClientActivate, client(id)),
        Command::ClientImport(i) => (A::ClientImport, client(&i.statement.client_id)),
        Command::ClientDeactivate { id } => (A::ClientDeactivate, client(id)),
        Command::ClientRemove { id } => (A::ClientRemove, client(id)),
        Command::UserAdd(u) => (A::UserAdd, user(&u.name)),
        Command::UserDisable { name } => (A::UserDisable, user(name)),
        Command::UserEnable { name } => (A::UserEnable, user(name)),
        Command::UserPasswd { name, .. } => (A::UserPasswd, user(name)),
        Command::UserRemove { name } => (A::UserRemove, user(name)),
        Command::KeysRotate { .. } => (A::KeysRotate, Subject::Keys),
        Command::KeysRetire { .. } => (A::KeysRetire, Subject::Keys),
        Command::KeysPublish => (A::KeysPublish, Subject::Keys),
        Command::KeysPromote { .. } => (A::KeysPromote, Subject::Keys),
        Command::ClientUpdate { id, .. } | Command::ClientDpop { id, .. } => {
            (A::ClientUpdate, client(id))
        }
        Command::UserUpdate { name, .. } => (A::UserUpdate, user(name)),
        Command::SessionRevoke { id } => (A::SessionRevoke, Subject::Session(id.clone())),
        Command::Ping
        | Command::ClientList
        | Command::Edges
        | Command::UserList
        | Command::KeysList
        | Command::KeysFilterConfig
        | Command::AuditRead { .. }
        | Command::ClientVendorRevoke { .. }
        | Command::VendorRefused { .. }
        | Command::Backup => return None,
    })
}

/// The public state of `subject` at `now` (`null` if it does not exist): never a secret.
pub(super) async fn view(
    store: &dyn Store,
    subject: &Subject,
    now: u64,
) -> Result<Value, StoreError> {
    Ok(match subject {
        Subject::Client(id) => store
            .client(id)
            .await?
            .map_or(Value::Null, |c| client_view(&c)),
        Subject::User(name) => store
            .user(name)
            .await?
            .map_or(Value::Null, |u| user_view(&u)),
        Subject::Keys => keys_view(&store.key_infos(now).await?),
        Subject::Session(id) => match super::sessions::session_id(id) {
            Some(key) => store
                .family(&key)
                .await?
                .map_or(Value::Null, |f| family_view(&f)),
            None => Value::Null,
        },
    })
}

/// Records the change `action` of `subject` by `actor`: what differs between its state `before`
/// and now.
pub(super) async fn record(
    store: &dyn Store,
    actor: &Actor<'_>,
    (action, subject): (AuditAction, Subject),
    before: Value,
    now: u64,
) -> Result<(), AdminError> {
    let recorded = async {
        let (before, after) = changed(before, view(store, &subject, now).await?);
        let event = AuditEvent::new(now, actor.name, action, subject.name(), before, after)
            .through(actor.client, actor.address);
        store.record_audit(vec![event.encode()]).await
    };
    recorded.await.map_err(AdminError::Unrecorded)?;
    Ok(())
}

/// The events at or after `since`, oldest first (at most [`MAX_READ`]): the reply the command
/// line formats.
pub(super) async fn read(store: &dyn Store, since: u64) -> Result<Vec<AuditEvent>, AdminError> {
    Ok(store.audit_since(since, MAX_READ).await?)
}
