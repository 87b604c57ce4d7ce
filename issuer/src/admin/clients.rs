//! `issuer client ...`: registering clients, letting them get tokens or not, removing them, and
//! listing them.

use super::{found, refused, AdminError};
use crate::store::{ClientChange, ClientRecord, GrantKind, Store};
use serde::{Deserialize, Serialize};

/// A client to register (`issuer client add`): it starts inactive.
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
}

/// `client add`.
pub(super) async fn add(store: &dyn Store, c: &NewClient, now: u64) -> Result<String, AdminError> {
    let rec = ClientRecord {
        secret_hash: c.secret_hash.clone(),
        active: false,
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
    Ok(format!(
        "client {id} added (inactive until `issuer client activate {id}`)\n"
    ))
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
