//! `issuer client ...`: registering clients, letting them get tokens or not, removing them, and
//! listing them.

use super::{conflict, found, invalid, AdminError};
use crate::store::{ClientChange, ClientRecord, DpopPolicy, ExchangePolicy, GrantKind, Store};
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
    /// Whether its tokens must be bound with DPoP.
    #[serde(default, skip_serializing_if = "DpopPolicy::is_allowed")]
    pub dpop: DpopPolicy,
    /// Keyed hash of the secret, hex.
    pub secret_hash: String,
    /// Active from the start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub active: bool,
    /// What it may do with the token exchange grant; `None`: it cannot exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangePolicy>,
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
        dpop: c.dpop,
        created_at: now,
        deactivated_at: None,
        vendor: None,
        exchange: c.exchange.clone(),
    };
    if rec.secret_hash_bytes().is_none() {
        return invalid("malformed secret hash".into());
    }
    let id = &c.id;
    if !store.add_client(id, &rec).await? {
        return conflict(format!(
            "a client named {id:?} exists: choose another id, or remove it first (`issuer client \
             remove {id}`, which revokes its tokens); a client an `issuer apply` file declares is \
             changed in that file (`edge = true` makes it an edge client)"
        ));
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
    super::vendor::within_statement(store, id, &change).await?;
    found(store.update_client(id, change, now).await?, "client", id)?;
    Ok(format!("client {id} changed\n"))
}

/// A client as `client list` shows it, in a table or as JSON.
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
    /// Whether its tokens must be bound with DPoP.
    #[serde(default)]
    pub dpop: DpopPolicy,
    /// A vendor's client: what its statements say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<super::vendor::VendorView>,
    /// What it may do with the token exchange grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangePolicy>,
}

impl ClientView {
    /// The view of client `id`'s record `c`.
    pub fn of(id: String, c: ClientRecord) -> Self {
        ClientView {
            id,
            grants: c.grants,
            impersonate: c.impersonate,
            impersonate_claim_types: c.impersonate_claim_types,
            active: c.active,
            edge: c.edge,
            dpop: c.dpop,
            vendor: c.vendor.as_deref().map(super::vendor::VendorView::of),
            exchange: c.exchange,
        }
    }
}

/// `client list`: every client, in the store's order.
pub(super) async fn list(store: &dyn Store) -> Result<Vec<ClientView>, AdminError> {
    Ok(store
        .clients()
        .await?
        .into_iter()
        .map(|(id, c)| ClientView::of(id, c))
        .collect())
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

/// `client dpop ID required|allowed`.
pub(super) async fn set_dpop(
    store: &dyn Store,
    id: &str,
    dpop: DpopPolicy,
    now: u64,
) -> Result<String, AdminError> {
    let change = ClientChange::SetDpop(dpop);
    found(store.update_client(id, change, now).await?, "client", id)?;
    Ok(format!("client {id}: DPoP {}\n", dpop.as_str()))
}

/// `client remove`.
pub(super) async fn remove(store: &dyn Store, id: &str, now: u64) -> Result<String, AdminError> {
    found(store.remove_client(id, now).await?, "client", id)?;
    Ok(format!("client {id} removed\n"))
}
