//! What the edges say of themselves in their polls ([`crate::store::edges`]): noted in memory as
//! polls arrive, and written to the store in one batch every [`EDGE_FLUSH_EVERY`], so a fleet of
//! edges polling every second costs the store one write every few seconds, not one per poll.

use crate::store::edges::{edge_key, EdgeReport, MAX_EDGES};
use shared::edge_feed::{is_edge_name, NODE_HEADER, VM_HEADER};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often the reports noted are written to the store.
pub const EDGE_FLUSH_EVERY: Duration = Duration::from_secs(2);

/// One poll as the edge feed saw it.
pub struct Poll<'a> {
    /// The edge client.
    pub client: &'a str,
    /// The key ring version the edge said it holds.
    pub keys: Option<&'a str>,
    /// The revocation number it said it holds.
    pub cursor: u64,
    /// The key ring version served.
    pub version: &'a str,
    /// The key ids of that ring.
    pub kids: Vec<u32>,
    /// The highest revocation number given out.
    pub latest: u64,
}

/// The node and VM a poll names in its headers, if both are valid names.
pub fn identity(headers: &warp::http::HeaderMap) -> Option<(&str, &str)> {
    let name = |h| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .filter(|v| is_edge_name(v))
    };
    Some((name(NODE_HEADER)?, name(VM_HEADER)?))
}

/// The reports of the edges this issuer has seen, by node and VM, each with whether it changed
/// since the last write.
#[derive(Default)]
pub struct EdgeBook {
    seen: Mutex<HashMap<String, (EdgeReport, bool)>>,
}

impl EdgeBook {
    /// Notes the poll of edge `node`/`vm` at `now`. An edge is known to hold the key ids of the
    /// ring it says it holds when that is the ring served. It held everything this issuer had at
    /// its previous poll here when its cursor reaches the latest revocation then (what that poll's
    /// answer brought it; revocations made since are on their way), and its ring is current.
    pub fn note(&self, (node, vm): (&str, &str), poll: Poll<'_>, now: u64) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let key = edge_key(node, vm);
        let current = poll.keys == Some(poll.version);
        let prev = seen.get(&key).map(|(r, _)| r);
        if prev.is_none() && seen.len() >= MAX_EDGES {
            return;
        }
        let synced_as_of = match prev {
            _ if current && poll.cursor >= poll.latest => Some(now),
            Some(p) if current && poll.cursor >= p.latest => Some(p.last_seen),
            _ => None,
        };
        let report = EdgeReport {
            node: node.into(),
            vm: vm.into(),
            client: poll.client.into(),
            first_seen: now,
            last_seen: now,
            keys_version: poll.keys.map(str::to_owned),
            kids: if current { poll.kids } else { Vec::new() },
            cursor: poll.cursor,
            latest: poll.latest,
            synced_at: synced_as_of,
        };
        // The same merge as the store's: the first sighting, the last sync and the keys known
        // of the same version stay.
        let report = match prev {
            Some(p) => report.merged_over(p),
            None => report,
        };
        seen.insert(key, (report, true));
    }

    /// The reports changed since the last call, to write; edges last seen before
    /// `forget_before` are forgotten.
    pub fn take_changed(&self, forget_before: u64) -> Vec<EdgeReport> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, (r, _)| r.last_seen >= forget_before);
        seen.values_mut()
            .filter(|(_, changed)| *changed)
            .map(|(r, changed)| {
                *changed = false;
                r.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll<'a>(keys: Option<&'a str>, cursor: u64) -> Poll<'a> {
        Poll {
            client: "edge",
            keys,
            cursor,
            version: "v2",
            kids: vec![1, 2],
            latest: 7,
        }
    }

    #[test]
    fn an_edge_holds_the_ring_it_says_it_holds() {
        let book = EdgeBook::default();
        let id = ("node-a", "vm-1");
        book.note(id, poll(None, 0), 100);
        let first = book.take_changed(0);
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].kids.clone(), first[0].synced_at), (vec![], None));
        assert!(book.take_changed(0).is_empty(), "written once");
        book.note(id, poll(Some("v2"), 5), 101);
        let r = &book.take_changed(0)[0];
        assert_eq!(
            (r.kids.clone(), r.synced_at, r.behind()),
            (vec![1, 2], None, 2)
        );
        book.note(id, poll(Some("v2"), 7), 102);
        let r = &book.take_changed(0)[0];
        assert_eq!((r.synced_at, r.first_seen, r.lag(110)), (Some(102), 100, 8));
        // Revocations keep coming, one a poll: the edge always lacks the newest, yet holds what
        // each previous answer brought it, so it counts as in sync as of its previous poll.
        let busy = |cursor, latest| Poll {
            latest,
            ..poll(Some("v2"), cursor)
        };
        book.note(id, busy(7, 8), 103);
        book.note(id, busy(8, 9), 104);
        assert_eq!(book.take_changed(0)[0].synced_at, Some(103));
        // A ring this issuer has not served: which keys it holds is not known.
        book.note(id, poll(Some("v3"), 7), 105);
        let r = &book.take_changed(0)[0];
        assert_eq!((r.kids.clone(), r.synced_at), (vec![], Some(103)));
        assert!(book.take_changed(106).is_empty());
        assert!(book.seen.lock().unwrap().is_empty(), "forgotten");
    }

    #[test]
    fn names_come_from_the_headers() {
        let mut h = warp::http::HeaderMap::new();
        assert_eq!(identity(&h), None);
        h.insert(NODE_HEADER, "envoy-1".parse().unwrap());
        assert_eq!(identity(&h), None, "both or none");
        h.insert(VM_HEADER, "00ab".parse().unwrap());
        assert_eq!(identity(&h), Some(("envoy-1", "00ab")));
        h.insert(VM_HEADER, "x".repeat(129).parse().unwrap());
        assert_eq!(identity(&h), None);
    }
}
