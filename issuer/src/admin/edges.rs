//! `issuer edges` and the edge side of `issuer keys status|rotate --when-edges-ready`: what the
//! store holds of the edges' reports ([`crate::store::edges`]) with the key ring they should
//! hold, as one report the command line renders and waits on.

use super::{conflict, not_found, AdminError};
use crate::store::edges::clients_at_bound;
use crate::store::{EdgeReport, KeyState, PromoteOutcome, Store, HELD};
use serde::{Deserialize, Serialize};

/// One edge, as `issuer edges` lists it: its last report, and what that means now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRow {
    /// The edge's last report.
    #[serde(flatten)]
    pub report: EdgeReport,
    /// Revocations given out after its cursor.
    pub behind: u64,
    /// Seconds since it last held everything the issuer had.
    pub lag_seconds: u64,
}

/// The edges and the keys they should hold: the answer of [`super::Command::Edges`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgesReport {
    /// The store's time of the report (seconds since the epoch).
    pub now: u64,
    /// The key that signs.
    pub signing: Option<u32>,
    /// The key published and not signing yet (held or pending), if any: the one edges must hold
    /// before it signs.
    pub next: Option<u32>,
    /// Whether [`EdgesReport::next`] waits to be promoted (`keys rotate --when-edges-ready`).
    pub held: bool,
    /// Every edge the store holds, the most recently seen first.
    pub edges: Vec<EdgeRow>,
    /// The edge clients at their bound of edges
    /// ([`crate::store::edges::MAX_EDGES_PER_CLIENT`]): a new edge of theirs is not recorded,
    /// so they may have edges not listed.
    #[serde(default)]
    pub clients_at_bound: Vec<String>,
}

/// The edges that count for a rotation: those seen within this many seconds of a report.
pub const RECENT_EDGE_SECONDS: u64 = 30;

impl EdgesReport {
    /// Whether the held key ([`EdgesReport::next`]) may sign: every edge seen within `seconds`
    /// holds it, and no edge client is at its bound (its edges would not all be listed).
    pub fn ready_to_promote(&self, seconds: u64) -> bool {
        let Some(next) = self.next.filter(|_| self.held) else {
            return false;
        };
        self.clients_at_bound.is_empty()
            && self
                .seen_within(seconds)
                .all(|e| e.report.kids.contains(&next))
    }

    /// The key every edge should hold: the next one, or else the signing one.
    pub fn newest(&self) -> Option<u32> {
        self.next.or(self.signing)
    }

    /// The edges seen within `seconds` of the report, but those replaced.
    pub fn seen_within(&self, seconds: u64) -> impl Iterator<Item = &EdgeRow> {
        let since = self.now.saturating_sub(seconds);
        self.edges
            .iter()
            .filter(move |e| e.report.last_seen >= since && !self.replaced(e))
    }

    /// True if `e` was replaced: its node has a VM, of the same edge client, first seen after `e`
    /// was last seen. Envoy makes new VMs when it restarts or its plugin configuration changes;
    /// the old ones poll no more.
    pub fn replaced(&self, e: &EdgeRow) -> bool {
        let (e, mut others) = (&e.report, self.edges.iter().map(|o| &o.report));
        others.any(|o| {
            o.client == e.client && o.node == e.node && o.vm != e.vm && o.first_seen > e.last_seen
        })
    }
}

/// `edges`: the report.
pub(super) async fn report(store: &dyn Store, now: u64) -> Result<EdgesReport, AdminError> {
    let keys = store.key_infos(now).await?;
    let state_of = |s: KeyState| keys.iter().find(|k| k.state == s).map(|k| k.kid);
    let latest = store.revocations(u64::MAX, now, 0).await?.latest;
    let edges = store.edges().await?;
    let clients_at_bound = clients_at_bound(&edges);
    let edges = edges
        .into_iter()
        .map(|e| EdgeRow {
            behind: latest.saturating_sub(e.cursor),
            lag_seconds: e.lag(now),
            report: e,
        })
        .collect();
    let held = state_of(KeyState::Held);
    Ok(EdgesReport {
        now,
        signing: state_of(KeyState::Signing),
        next: held.or(state_of(KeyState::Pending)),
        held: held.is_some(),
        edges,
        clients_at_bound,
    })
}

/// `keys publish`: the id of a new key that signs only once promoted, or of the one held
/// already.
pub(super) async fn publish(store: &dyn Store, now: u64) -> Result<u32, AdminError> {
    let keys = store.key_infos(now).await?;
    if let Some(k) = keys.iter().find(|k| k.state == KeyState::Held) {
        return Ok(k.kid);
    }
    match store.rotate_key(now, HELD).await? {
        Some(r) => Ok(r.kid),
        None => conflict(
            "a rotation is pending already (see `issuer keys list`); wait until its key signs"
                .into(),
        ),
    }
}

/// `keys promote`: the held key `kid` signs from now on.
pub(super) async fn promote(store: &dyn Store, kid: u32, now: u64) -> Result<String, AdminError> {
    match store.promote_key(kid, now).await? {
        PromoteOutcome::Promoted => Ok(format!("key {kid} now signs\n")),
        PromoteOutcome::Unknown => not_found(format!("no key {kid}")),
        PromoteOutcome::NotHeld(state) => conflict(format!(
            "key {kid} is {state}, not held: only a key published by `keys rotate \
             --when-edges-ready` is promoted"
        )),
    }
}
