//! What the edges (the Envoy filter's VMs with edge sync) last said about themselves in their
//! polls of the edge feed: who they are and what they hold. Kept in the store, so every issuer on
//! one PostgreSQL lists the same edges (`issuer edges`), and `issuer keys rotate
//! --when-edges-ready` knows when every edge holds a new key.

use serde::{Deserialize, Serialize};

/// An edge unseen this long (seconds) is dropped from the store, by default
/// (`issuer serve --edge-forget-after`).
pub const EDGE_FORGET_AFTER: u64 = 600;

/// Most edges the store keeps; beyond, the ones seen least recently are dropped.
pub const MAX_EDGES: usize = 10_000;

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

/// The key an edge is filed under: its node and VM.
pub fn edge_key(node: &str, vm: &str) -> String {
    format!("{node}\n{vm}")
}

impl EdgeReport {
    /// The key the store files it under ([`edge_key`]).
    pub fn key(&self) -> String {
        edge_key(&self.node, &self.vm)
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

/// Keeps the [`MAX_EDGES`] most recently seen of `edges`, dropping those unseen since `since`:
/// what the store holds after a write.
pub fn retained(edges: &mut Vec<EdgeReport>, since: u64) -> Vec<String> {
    edges.sort_by(|a, b| {
        b.last_seen
            .cmp(&a.last_seen)
            .then_with(|| a.key().cmp(&b.key()))
    });
    let keep = edges
        .iter()
        .take_while(|e| e.last_seen >= since)
        .count()
        .min(MAX_EDGES);
    edges.split_off(keep).iter().map(EdgeReport::key).collect()
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
    fn the_stale_and_the_surplus_are_dropped() {
        let mut edges = vec![report("a", 0, 5), report("b", 0, 50), report("c", 0, 40)];
        assert_eq!(retained(&mut edges, 10), vec!["n\na".to_string()]);
        assert_eq!(edges.len(), 2);
        let mut many: Vec<_> = (0..MAX_EDGES as u64 + 2)
            .map(|i| report(&i.to_string(), 0, 100 + i))
            .collect();
        let dropped = retained(&mut many, 0);
        assert_eq!(dropped, vec!["n\n1".to_string(), "n\n0".to_string()]);
        assert_eq!(many.len(), MAX_EDGES);
    }
}
