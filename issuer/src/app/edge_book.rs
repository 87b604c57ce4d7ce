//! What the edges say of themselves in their polls ([`crate::store::edges`]): noted in memory as
//! polls arrive, and written to the store in one batch every [`EDGE_FLUSH_EVERY`], so a fleet of
//! edges polling every second costs the store one write every few seconds, not one per poll.

use crate::store::edges::{edge_key, Admission, EdgeReport};
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

/// The reports of the edges this issuer has seen, by edge client, node and VM, each with whether
/// it changed since the last write; bounded as the store is ([`Admission`]).
#[derive(Default)]
pub struct EdgeBook {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    reports: HashMap<String, (EdgeReport, bool)>,
    room: Admission,
    /// Polls of new edges not noted since the last [`EdgeBook::take_refused`].
    refused: usize,
}

impl EdgeBook {
    /// Notes the poll of edge `node`/`vm` at `now`; false, noting nothing, for a new edge of a
    /// client at its bound or beyond the registry's ([`Admission`]). An edge is known to hold the
    /// key ids of the ring it says it holds when that is the ring served. It held everything this
    /// issuer had at its previous poll here when its cursor reaches the latest revocation then
    /// (what that poll's answer brought it; revocations made since are on their way), and its
    /// ring is current.
    pub fn note(&self, (node, vm): (&str, &str), poll: Poll<'_>, now: u64) -> bool {
        let mut guard = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = &mut *guard;
        let key = edge_key(poll.client, node, vm);
        let current = poll.keys == Some(poll.version);
        let prev = seen.reports.get(&key).map(|(r, _)| r);
        if prev.is_none() && !seen.room.admit(poll.client) {
            seen.refused += 1;
            return false;
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
        seen.reports.insert(key, (report, true));
        true
    }

    /// How many polls of new edges were not noted since the last call.
    pub fn take_refused(&self) -> usize {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut seen.refused)
    }

    /// The reports changed since the last call, to write; edges last seen before
    /// `forget_before` are forgotten.
    pub fn take_changed(&self, forget_before: u64) -> Vec<EdgeReport> {
        let mut guard = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let Seen { reports, room, .. } = &mut *guard;
        reports.retain(|_, (r, _)| {
            let keep = r.last_seen >= forget_before;
            if !keep {
                room.forget(&r.client);
            }
            keep
        });
        reports
            .values_mut()
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
        assert!(book.seen.lock().unwrap().reports.is_empty(), "forgotten");
    }

    #[test]
    fn one_client_notes_a_bounded_number_of_edges() {
        use crate::store::edges::MAX_EDGES_PER_CLIENT;
        let book = EdgeBook::default();
        let of = |client| Poll {
            client,
            ..poll(None, 0)
        };
        for i in 0..MAX_EDGES_PER_CLIENT {
            assert!(book.note((&format!("n{i}"), "vm"), of("flood"), 100));
        }
        assert!(!book.note(("one-more", "vm"), of("flood"), 100));
        assert!(book.note(("n0", "vm"), of("flood"), 101), "a known edge");
        assert!(book.note(("n0", "vm"), of("real"), 101), "another client's");
        assert_eq!(book.take_refused(), 1);
        assert_eq!(book.take_refused(), 0);
        assert_eq!(book.take_changed(0).len(), MAX_EDGES_PER_CLIENT + 1);
        // Forgotten, the flood leaves room again.
        assert_eq!(book.take_changed(101).len(), 0);
        assert!(book.note(("one-more", "vm"), of("flood"), 102));
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
