//! What the edges (the Envoy filter's VMs with edge sync) last said about themselves in their
//! polls of the edge feed: who they are and what they hold. Kept in the store, so every issuer on
//! one PostgreSQL lists the same edges (`issuer edges`), and `issuer keys rotate
//! --when-edges-ready` knows when every edge holds a new key.

use serde::{Deserialize, Serialize};
use shared::edge_feed::{vm_ordinal, UNKNOWN_NODE};
use std::collections::HashMap;

/// An edge unseen this long (seconds) is dropped from the store, by default
/// (`issuer serve --edge-forget-after`).
pub const EDGE_FORGET_AFTER: u64 = 600;

/// Most edges the store keeps: a new edge beyond is not recorded (until some are forgotten).
pub const MAX_EDGES: usize = 10_000;

/// Most edges one edge client has recorded at once: a new edge of a client at this bound is not
/// recorded (until some of its edges are forgotten), so a flood of made-up edge names from one
/// credential fills its own share alone and never pushes out, nor keeps out, the edges of
/// another. Each Envoy fleet should have an edge client of its own (`docs/operate.md`).
pub const MAX_EDGES_PER_CLIENT: usize = 256;

/// The last report of one edge (one VM of one Envoy), as the issuer that served its poll saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeReport {
    /// Envoy's node id.
    pub node: String,
    /// The VM within the node (one per worker).
    pub vm: String,
    /// The edge client it authenticated as.
    pub client: String,
    /// When it was first seen (seconds since the epoch).
    pub first_seen: u64,
    /// When it last polled.
    pub last_seen: u64,
    /// The key ring version it holds, as it said (none before its first good answer).
    pub keys_version: Option<String>,
    /// The key ids it is known to hold: the ring of the version it reported, when that was the
    /// serving issuer's ring. Empty until then.
    pub kids: Vec<u32>,
    /// The last revocation number it holds.
    pub cursor: u64,
    /// The highest revocation number given out when it last polled.
    pub latest: u64,
    /// When it last reported holding everything the serving issuer had (every revocation and the
    /// current key ring), if ever.
    pub synced_at: Option<u64>,
}

/// The key an edge is filed under: its edge client, node and VM, each but the last prefixed by
/// its length in bytes, so no two edges share a key whatever their names hold (`a/b` and `c`, `a`
/// and `b/c`).
pub fn edge_key(client: &str, node: &str, vm: &str) -> String {
    format!("{}:{client}{}:{node}{vm}", client.len(), node.len())
}

impl EdgeReport {
    /// The key the store files it under ([`edge_key`]).
    pub fn key(&self) -> String {
        edge_key(&self.client, &self.node, &self.vm)
    }

    /// Revocations it was behind when it last polled.
    pub fn behind(&self) -> u64 {
        self.latest.saturating_sub(self.cursor)
    }

    /// Seconds since it last held everything the issuer had (since it was first seen, if it never
    /// did): what `issuer_edge_lag_seconds` reports.
    pub fn lag(&self, now: u64) -> u64 {
        now.saturating_sub(self.synced_at.unwrap_or(self.first_seen))
    }

    /// This report merged over the one stored before it for the same edge: the earliest first
    /// sighting, and the later of everything else (two issuers may write one edge's reports).
    pub fn merged_over(mut self, older: &EdgeReport) -> EdgeReport {
        let first_seen = self.first_seen.min(older.first_seen);
        // Two issuers each judge "synced" against what they hold: the later judgement stands.
        let synced_at = self.synced_at.max(older.synced_at);
        if older.last_seen > self.last_seen {
            return EdgeReport {
                first_seen,
                synced_at,
                ..older.clone()
            };
        }
        self.first_seen = first_seen;
        self.synced_at = synced_at;
        // An issuer whose ring is a moment behind the edge's does not know that ring's keys
        // (another issuer served it): what the store knows of the same version stays.
        if self.kids.is_empty() && self.keys_version == older.keys_version {
            self.kids = older.kids.clone();
        }
        self
    }
}

/// `reports` with those of one edge merged into one ([`EdgeReport::merged_over`]), the most
/// recently seen first: what [`crate::store::Edges::edges`] answers. A store may hold one edge
/// twice for a while: under the key of an issuer of an earlier version (by node and VM) and
/// under [`edge_key`].
pub fn folded(reports: impl IntoIterator<Item = EdgeReport>) -> Vec<EdgeReport> {
    let mut by_key: HashMap<String, EdgeReport> = HashMap::new();
    for r in reports {
        let key = r.key();
        let r = match by_key.remove(&key) {
            Some(other) => r.merged_over(&other),
            None => r,
        };
        by_key.insert(key, r);
    }
    let mut all: Vec<_> = by_key.into_values().collect();
    without_replaced(&mut all);
    newest_first(&mut all);
    all
}

/// How long after a VM's first sighting the VM of the same number it replaced may still have
/// polled: an Envoy draining after a hot restart stops within it, while two Envoys that share a
/// node name both poll on, and neither is then taken for the other's successor.
pub const REPLACED_WITHIN: u64 = 60;

/// A VM first seen this long (seconds) after another of its node belongs to a later generation
/// of that Envoy (a restart, or a plugin configuration given anew): the VMs of one generation start
/// within seconds of each other.
pub const LATER_GENERATION_BY: u64 = 30;

/// How long (seconds) a VM may go without polling while a VM of a later generation of its node
/// polls before it counts as replaced: more than the longest poll interval (60 s) with its back-off.
pub const STOPPED_FOR: u64 = 120;

/// `edges` without the VMs their Envoy replaced. VMs of the node [`UNKNOWN_NODE`] (Envoys without
/// a node id, all alike) are never replaced. A VM of an edge client and node is replaced
/// - at once, by a VM of the same number ([`vm_ordinal`]) first seen after it, if it stopped
///   polling within [`REPLACED_WITHIN`] of that: a restarted Envoy numbers its VMs from 0 again;
/// - or by any VM of a later generation of its node ([`LATER_GENERATION_BY`]) that polled
///   [`STOPPED_FOR`] after it last did: a plugin configuration given anew (new root contexts of the
///   Wasm filter, numbered on), or a restart with fewer workers.
///
/// A VM that keeps polling is never replaced, so two Envoys sharing a node name both stay listed.
pub fn without_replaced(edges: &mut Vec<EdgeReport>) {
    let slot = |e: &EdgeReport| {
        let ordinal = vm_ordinal(&e.vm).filter(|_| e.node != UNKNOWN_NODE)?;
        Some((e.client.clone(), e.node.clone(), ordinal))
    };
    let mut newest: HashMap<(String, String, u8), u64> = HashMap::new();
    for e in edges.iter() {
        if let Some(s) = slot(e) {
            let first = newest.entry(s).or_insert(e.first_seen);
            *first = (*first).max(e.first_seen);
        }
    }
    let by_number = |e: &EdgeReport| {
        let successor = slot(e).and_then(|s| newest.get(&s).copied());
        successor.is_some_and(|first| {
            e.first_seen < first && e.last_seen <= first.saturating_add(REPLACED_WITHIN)
        })
    };
    // The sightings of each edge client's node, so that a VM is compared with its node's VMs only
    // (at most an edge client's bound of them), not with the whole registry.
    let mut nodes: HashMap<(&str, &str), Vec<(u64, u64)>> = HashMap::new();
    for e in edges.iter().filter(|e| e.node != UNKNOWN_NODE) {
        let sightings = nodes.entry((&e.client, &e.node)).or_default();
        sightings.push((e.first_seen, e.last_seen));
    }
    let by_generation = |e: &EdgeReport| {
        nodes
            .get(&(&e.client[..], &e.node[..]))
            .is_some_and(|sightings| {
                sightings.iter().any(|&(first, last)| {
                    first >= e.first_seen.saturating_add(LATER_GENERATION_BY)
                        && last >= e.last_seen.saturating_add(STOPPED_FOR)
                })
            })
    };
    let replaced: Vec<bool> = edges
        .iter()
        .map(|e| by_number(e) || by_generation(e))
        .collect();
    let mut replaced = replaced.into_iter();
    edges.retain(|_| !replaced.next().unwrap_or(false));
}

/// Sorts `edges` the most recently seen first.
pub fn newest_first(edges: &mut [EdgeReport]) {
    edges.sort_by(|a, b| {
        b.last_seen
            .cmp(&a.last_seen)
            .then_with(|| a.key().cmp(&b.key()))
    });
}

/// The room left in the registry: whether a new edge of a client may be recorded, given the edges
/// it holds ([`MAX_EDGES`], [`MAX_EDGES_PER_CLIENT`]). An edge known already is always recorded.
#[derive(Debug, Default)]
pub struct Admission {
    per_client: HashMap<String, usize>,
    total: usize,
}

impl Admission {
    /// The room left beside edges whose clients are `clients` (one item per edge).
    pub fn of<'a>(clients: impl IntoIterator<Item = &'a str>) -> Self {
        let mut room = Self::default();
        for c in clients {
            room.count(c, 1);
        }
        room
    }

    /// The room left beside `counts`: edges held, by client.
    pub fn of_counts(counts: impl IntoIterator<Item = (String, usize)>) -> Self {
        let mut room = Self::default();
        for (c, n) in counts {
            room.count(&c, n);
        }
        room
    }

    fn count(&mut self, client: &str, n: usize) {
        match self.per_client.get_mut(client) {
            Some(held) => *held += n,
            None => {
                self.per_client.insert(client.to_owned(), n);
            }
        }
        self.total += n;
    }

    /// True, counting it, if a new edge of `client` may be recorded.
    pub fn admit(&mut self, client: &str) -> bool {
        let held = self.per_client.get(client).copied().unwrap_or(0);
        if held >= MAX_EDGES_PER_CLIENT || self.total >= MAX_EDGES {
            return false;
        }
        self.count(client, 1);
        true
    }

    /// Forgets one edge of `client`.
    pub fn forget(&mut self, client: &str) {
        if let Some(held) = self.per_client.get_mut(client) {
            *held = held.saturating_sub(1);
            self.total = self.total.saturating_sub(1);
        }
    }
}

/// The edge clients of `edges` with [`MAX_EDGES_PER_CLIENT`] edges or more: those whose new
/// edges are not recorded.
pub fn clients_at_bound(edges: &[EdgeReport]) -> Vec<String> {
    let mut per_client: HashMap<&str, usize> = HashMap::new();
    for e in edges {
        *per_client.entry(e.client.as_str()).or_default() += 1;
    }
    let mut full: Vec<String> = per_client
        .into_iter()
        .filter(|(_, n)| *n >= MAX_EDGES_PER_CLIENT)
        .map(|(c, _)| c.to_owned())
        .collect();
    full.sort();
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(vm: &str, first_seen: u64, last_seen: u64) -> EdgeReport {
        EdgeReport {
            node: "n".into(),
            vm: vm.into(),
            client: "edge".into(),
            first_seen,
            last_seen,
            keys_version: None,
            kids: vec![],
            cursor: 3,
            latest: 5,
            synced_at: None,
        }
    }

    #[test]
    fn a_report_never_moves_an_edge_back() {
        let older = EdgeReport {
            synced_at: Some(90),
            ..report("a", 10, 100)
        };
        let newer = report("a", 50, 120).merged_over(&older);
        assert_eq!((newer.first_seen, newer.last_seen), (10, 120));
        assert_eq!(newer.synced_at, Some(90), "kept until it syncs again");
        let late = report("a", 50, 90).merged_over(&older);
        assert_eq!((late.first_seen, late.last_seen), (10, 100));
        // A newer poll served by an issuer that last saw the edge synced earlier than the store
        // did, and a late report that saw it synced later: the latest sync stands either way.
        let served_behind = EdgeReport {
            synced_at: Some(80),
            ..report("a", 50, 120)
        };
        assert_eq!(served_behind.merged_over(&older).synced_at, Some(90));
        let late_but_synced = EdgeReport {
            synced_at: Some(95),
            ..report("a", 50, 95)
        };
        let merged = late_but_synced.merged_over(&older);
        assert_eq!((merged.last_seen, merged.synced_at), (100, Some(95)));
        // The same version, from an issuer that did not serve it: the keys known stay.
        let known = EdgeReport {
            kids: vec![1, 2],
            ..report("a", 10, 100)
        };
        assert_eq!(report("a", 10, 110).merged_over(&known).kids, vec![1, 2]);
        let other = EdgeReport {
            keys_version: Some("v2".into()),
            ..report("a", 10, 110)
        };
        assert!(other.merged_over(&known).kids.is_empty(), "another version");
        assert_eq!(older.behind(), 2);
        assert_eq!(older.lag(100), 10);
        assert_eq!(report("b", 40, 100).lag(100), 60);
    }

    #[test]
    fn an_envoy_restarted_or_configured_anew_replaces_its_vms() {
        let vm = |node: &str, stamp: u128, n: u32, first: u64, last: u64| EdgeReport {
            node: node.into(),
            vm: shared::edge_feed::vm_name(stamp, n),
            ..report("x", first, last)
        };
        let mut edges = vec![
            vm("envoy-a", 1, 0, 100, 500),
            vm("envoy-a", 1, 1, 100, 500),
            vm("envoy-a", 2, 0, 499, 900),
            vm("envoy-a", 2, 1, 500, 900),
            // Polled on long after its successor came: two Envoys share the name.
            vm("envoy-b", 3, 0, 100, 900),
            vm("envoy-b", 4, 0, 400, 900),
            // Envoys without a node id are never told apart.
            vm(UNKNOWN_NODE, 5, 0, 100, 200),
            vm(UNKNOWN_NODE, 6, 0, 300, 900),
            // Not a VM name of the filter's, and polling on.
            vm("envoy-a", 1, 0, 100, 900),
        ];
        edges.last_mut().unwrap().vm = "worker-0".into();
        // A plugin configuration given anew: a later generation, numbered on; the old VM stopped.
        edges.push(vm("envoy-c", 7, 0, 100, 1000));
        edges.push(vm("envoy-c", 8, 3, 1100, 1200));
        // A worker of the same generation that stopped (cut off) is not replaced: it lags.
        edges.push(vm("envoy-d", 9, 0, 100, 500));
        edges.push(vm("envoy-d", 9, 1, 101, 900));
        without_replaced(&mut edges);
        let left: Vec<(&str, u64)> = edges.iter().map(|e| (&e.node[..], e.first_seen)).collect();
        assert_eq!(
            left,
            [
                ("envoy-a", 499),
                ("envoy-a", 500),
                ("envoy-b", 100),
                ("envoy-b", 400),
                (UNKNOWN_NODE, 100),
                (UNKNOWN_NODE, 300),
                ("envoy-a", 100),
                ("envoy-c", 1100),
                ("envoy-d", 100),
                ("envoy-d", 101),
            ]
        );
    }

    #[test]
    fn keys_never_collide() {
        let key = |c, n, v| edge_key(c, n, v);
        assert_ne!(key("e", "a/b", "c"), key("e", "a", "b/c"));
        assert_ne!(key("e", "a\nb", "c"), key("e", "a", "b\nc"));
        assert_ne!(key("e:1", "a", "b"), key("e", "1a", "b"));
        assert_ne!(key("e", "n", "v"), key("f", "n", "v"));
        assert_eq!(report("a", 0, 0).key(), key("edge", "n", "a"));
    }

    #[test]
    fn a_client_at_its_bound_records_no_new_edge() {
        let mut room = Admission::of(["a"; MAX_EDGES_PER_CLIENT - 1]);
        assert!(room.admit("a"));
        assert!(!room.admit("a"), "at its bound");
        assert!(room.admit("b"), "another client");
        room.forget("a");
        assert!(room.admit("a"), "room again once one is forgotten");
        let full = (0..MAX_EDGES).map(|i| (format!("c{i}"), 1));
        let mut room = Admission::of_counts(full);
        assert!(!room.admit("new"), "the registry is full");
        room.forget("c1");
        assert!(room.admit("new"));
        let mut edges: Vec<_> = (0..MAX_EDGES_PER_CLIENT)
            .map(|_| report("a", 0, 0))
            .collect();
        edges.push(EdgeReport {
            client: "other".into(),
            ..report("a", 0, 0)
        });
        assert_eq!(clients_at_bound(&edges), ["edge"]);
        edges.pop();
        edges.pop();
        assert!(clients_at_bound(&edges).is_empty());
    }

    #[test]
    fn the_most_recently_seen_come_first() {
        let mut edges = vec![report("a", 0, 5), report("b", 0, 50), report("c", 0, 50)];
        newest_first(&mut edges);
        let vms: Vec<_> = edges.iter().map(|e| e.vm.as_str()).collect();
        assert_eq!(vms, ["b", "c", "a"]);
        let twice = folded([report("a", 0, 5), report("b", 0, 50), report("a", 3, 9)]);
        let seen: Vec<_> = twice
            .iter()
            .map(|e| (e.vm.as_str(), e.first_seen, e.last_seen))
            .collect();
        assert_eq!(seen, [("b", 0, 50), ("a", 0, 9)]);
    }
}
