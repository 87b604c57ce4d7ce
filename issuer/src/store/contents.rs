//! The whole state of a store as plain records, whatever backend held it: what moves between the
//! embedded store and PostgreSQL (`issuer restore --store URL`, `issuer backup --store URL`).
//!
//! The backup file ([`super::backup`]) is the one format on disk: its records are the embedded
//! store's ([`super::redb::contents`] reads them into [`Contents`] and writes them back out), and
//! [`super::postgres`] loads [`Contents`] into an empty database, or reads it out of one, in one
//! transaction. Everything that decides what a token, a secret or a refresh is moves: the hash key
//! (client secret hashes and refresh tokens are keyed by it), the signing keys (plain here, sealed
//! under the KEK in PostgreSQL), clients and users (their JSON records, as written), refresh token
//! families, revocations with their numbers and stamps (so an edge's cursor stays valid), the
//! edges' reports, the audit trail and the settings. The password back-off and the readiness
//! probe are the moment's, and are not carried.
//!
//! Secrets are wiped when a [`Contents`] drops.

use super::edges::EdgeReport;
use super::family::Family;
use super::keys::KeyRecord;
use super::revocation::Revocation;
use zeroize::{Zeroize, Zeroizing};

/// The settings a store keeps across a move: the access token lifetime (it decides when a
/// superseded key retires) and the last revocation number given out (never reused).
pub const MOVED_SETTINGS: [&str; 2] = ["access_ttl", "revocation_seq"];

/// Every record of a store.
#[derive(Default)]
pub struct Contents {
    /// The hash key.
    pub hash_key: Zeroizing<[u8; 32]>,
    /// Clients by id: the JSON record as stored.
    pub clients: Vec<(String, Zeroizing<String>)>,
    /// Users by name: the JSON record as stored.
    pub users: Vec<(String, Zeroizing<String>)>,
    /// Signing keys by id, their secrets in the clear (wiped on drop).
    pub keys: Vec<(u32, KeyRecord)>,
    /// Refresh token families by id.
    pub families: Vec<([u8; 16], Family)>,
    /// Revocations, by number, with their stamps.
    pub revocations: Vec<Revocation>,
    /// The edges' last reports, by the key they are filed under.
    pub edges: Vec<(String, EdgeReport)>,
    /// The audit trail, oldest first: the time and the JSON record as stored.
    pub audit: Vec<(u64, String)>,
    /// The settings of [`MOVED_SETTINGS`] that are set.
    pub settings: Vec<(String, u64)>,
}

impl std::fmt::Debug for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contents")
            .field("clients", &self.clients.len())
            .field("users", &self.users.len())
            .field("keys", &self.keys.len())
            .field("families", &self.families.len())
            .field("revocations", &self.revocations.len())
            .field("edges", &self.edges.len())
            .field("audit", &self.audit.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Contents {
    fn drop(&mut self) {
        for (_, key) in &mut self.keys {
            key.secret.zeroize();
        }
    }
}

impl Contents {
    /// A setting's value, if set.
    pub fn setting(&self, name: &str) -> Option<u64> {
        self.settings
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// What it holds, for the operator: "2 clients, 1 user, …".
    pub fn describe(&self) -> String {
        let counts = [
            (self.clients.len(), "client"),
            (self.users.len(), "user"),
            (self.keys.len(), "signing key"),
            (self.families.len(), "refresh family"),
            (self.revocations.len(), "revocation"),
            (self.edges.len(), "edge report"),
            (self.audit.len(), "audit event"),
        ];
        describe_counts(&counts)
    }
}

/// "2 clients, 1 user" of counts and singular names (`family` becomes `families`).
pub fn describe_counts(counts: &[(usize, &str)]) -> String {
    counts
        .iter()
        .map(|(n, name)| match (n, name.strip_suffix('y')) {
            (1, _) => format!("1 {name}"),
            (n, Some(stem)) if !name.ends_with("key") => format!("{n} {stem}ies"),
            (n, _) => format!("{n} {name}s"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_english() {
        assert_eq!(
            describe_counts(&[(1, "client"), (2, "refresh family"), (3, "signing key")]),
            "1 client, 2 refresh families, 3 signing keys"
        );
        assert_eq!(Contents::default().setting("access_ttl"), None);
    }
}
