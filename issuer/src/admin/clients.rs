//! `issuer client ...`: registering clients, letting them get tokens or not, removing them, and
//! listing them.

use super::{found, refused, AdminError};
use crate::store::{ClientChange, ClientRecord, GrantKind, Store};
use serde::{Deserialize, Serialize};

/// A client to register (`issuer client add`): it starts inactive unless `active` (as
/// `issuer apply` may add it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewClient {
    /// Client id.
    pub id: String,
    /// Allowed grants.
    pub grants: Vec<GrantKind>,
    /// May impersonate.
    pub impersonate: bool,
    /// If not empty, the claim types it may impersonate with.
    pub claim_types: Vec<String>,
    /// May read the edge feed.
    #[serde(default)]
    pub edge: bool,
    /// Keyed hash of the secret, hex.
    pub secret_hash: String,
    /// Active from the start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub active: bool,
}

/// `client add`.
pub(super) async fn add(store: &dyn Store, c: &NewClient, now: u64) -> Result<String, AdminError> {
    let rec = ClientRecord {
        secret_hash: c.secret_hash.clone(),
        active: c.active,
        grants: c.grants.clone(),
        impersonate: c.impersonate,
        impersonate_claim_types: c.claim_types.clone(),
        edge: c.edge,
        created_at: now,
        deactivated_at: None,
    };
    if rec.secret_hash_bytes().is_none() {
        return refused("malformed secret hash".into());
    }
    let id = &c.id;
    if !store.add_client(id, &rec).await? {
        return refused(format!("a client named {id:?} exists"));
    }
    if c.active {
        return Ok(format!("client {id} added (active)\n"));
    }
    Ok(format!(
        "client {id} added (inactive until `issuer client activate {id}`)\n"
    ))
}

/// `apply`'s change of what a client may do.
pub(super) async fn update(
    store: &dyn Store,
    id: &str,
    change: ClientChange,
    now: u64,
) -> Result<String, AdminError> {
    found(store.update_client(id, change, now).await?, "client", id)?;
    Ok(format!("client {id} changed\n"))
}

/// A client as `client list --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientView {
    /// Client id.
    pub id: String,
    /// Grants it may use.
    pub grants: Vec<GrantKind>,
    /// May impersonate.
    pub impersonate: bool,
    /// If not empty, the only claim types it may impersonate with.
    pub impersonate_claim_types: Vec<String>,
    /// Gets tokens.
    pub active: bool,
    /// May read the edge feed.
    pub edge: bool,
}

/// `client list --json`: a JSON array of [`ClientView`].
pub(super) async fn list_json(store: &dyn Store) -> Result<String, AdminError> {
    let views: Vec<ClientView> = store
        .clients()
        .await?
        .into_iter()
        .map(|(id, c)| ClientView {
            id,
            grants: c.grants,
            impersonate: c.impersonate,
            impersonate_claim_types: c.impersonate_claim_types,
            active: c.active,
            edge: c.edge,
        })
        .collect();
    Ok(serde_json::to_string_pretty(&views).unwrap_or_default() + "\n")
}

/// `client activate` (`active`) and `client deactivate`.
pub(super) async fn set_active(
    store: &dyn Store,
    id: &str,
    active: bool,
    now: u64,
) -> Result<String, AdminError> {
    let change = ClientChange::SetActive(active);
    found(store.update_client(id, change, now).await?, "client", id)?;
    let done = if active { "activated" } else { "deactivated" };
    Ok(format!("client {id} {done}\n"))
}

/// `client remove`.
pub(super) async fn remove(store: &dyn Store, id: &str, now: u64) -> Result<String, AdminError> {
    found(store.remove_client(id, now).await?, "client", id)?;
    Ok(format!("client {id} removed\n"))
}

/// `client list`: one line per client.
pub(super) async fn list(store: &dyn Store) -> Result<String, AdminError> {
    let mut out =
        String::from("ID                   ACTIVE  GRANTS                          IMPERSONATE\n");
    for (id, c) in store.clients().await? {
        out += &format!(
            "{id:<20} {:<7} {:<31} {}\n",
            if c.active { "yes" } else { "no" },
            grant_names(&c).join(","),
            impersonation(&c)
        );
    }
    Ok(out)
}

/// The client's grants by their wire names, and `edge` for an edge client.
fn grant_names(c: &ClientRecord) -> Vec<String> {
    c.grants
        .iter()
        .map(|g| {
            serde_json::to_value(g)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .chain(c.edge.then(|| "edge".to_owned()))
        .collect()
}

/// Whether the client may impersonate, and with which claim types.
fn impersonation(c: &ClientRecord) -> String {
    match (c.impersonate, c.impersonate_claim_types.is_empty()) {
        (false, _) => "no".to_string(),
        (true, true) => "yes".to_string(),
        (true, false) => format!("claims: {}", c.impersonate_claim_types.join(",")),
    }
}
