//! Tokens this VM verified recently, with the identity headers they give: a repeat of a token
//! (clients present the same one for minutes) skips verification and the building of its headers.
//! A DPoP-bound token is kept with its confirmation (the key thumbprint it is bound to): a hit
//! spares the token's check, never the proof's, which every request carries afresh.
//!
//! What may enter and how long it stays is what keeps it safe:
//! - only a token that verified, under the key ring and revocations of the moment, and was not
//!   revoked ([`crate::decision::decide`] proposes nothing else to remember), so a stream of
//!   forged or distinct invalid tokens never grows it;
//! - only inside its lifetime (checked at every hit, with the same skew as verification, so a
//!   clock stepping back cannot serve a token not yet valid);
//! - emptied whenever the key ring or the revocations change ([`crate::edge::EdgeState::apply`]),
//!   so a revoked token or one of a retired key is never served from it;
//! - bounded: at `capacity` entries, or [`MAX_BYTES`] of tokens and headers, it is emptied before
//!   the next insertion (constant memory; a working set larger than that just verifies more
//!   often); a token longer than [`MAX_TOKEN_BYTES`] is neither looked up nor kept.

use std::collections::HashMap;
use std::sync::Arc;

/// The identity headers of an allowed request, shared between the cache and the decision, so a
/// hit allocates nothing (an `Arc`: the native filter's states move between threads).
pub type IdentityHeaders = Arc<[(&'static str, String)]>;

/// A token that verified and was not revoked, to remember, with the identity headers it gives
/// ([`crate::decision::Verdict::remember`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remember<'t> {
    /// The token as presented.
    pub token: &'t str,
    /// Its issue time.
    pub iat: u64,
    /// Its expiry.
    pub exp: u64,
    /// The identity headers it gives.
    pub headers: IdentityHeaders,
    /// The thumbprint of the key it is bound to, if it is DPoP-bound.
    pub cnf: Option<[u8; 32]>,
}

/// What the cache holds for a token: the identity headers it gives, and its binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The identity headers it gives.
    pub headers: IdentityHeaders,
    /// The thumbprint of the key it is bound to, if it is DPoP-bound.
    pub cnf: Option<[u8; 32]>,
}

/// Entries held by default: a pool of 10,000 active tokens per VM fits, at about 600 bytes each
/// (the token and its headers).
pub const DEFAULT_CAPACITY: usize = 16_384;

/// Most bytes of tokens and headers held, whatever the number of entries.
pub const MAX_BYTES: usize = 16 << 20;

/// Longest token cached: longer ones (the issuer mints a few hundred bytes) are verified each
/// time, and never hashed for a lookup.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// What an entry is counted as: its token, its header values, and a fixed overhead.
fn weight(token: &str, headers: &IdentityHeaders) -> usize {
    token.len() + headers.iter().map(|(_, v)| v.len() + 32).sum::<usize>() + 64
}

#[derive(Debug, Clone)]
struct Entry {
    iat: u64,
    exp: u64,
    cached: Cached,
}

/// Verified tokens by their whole text.
#[derive(Debug, Clone, Default)]
pub struct TokenCache {
    entries: HashMap<Box<str>, Entry>,
    capacity: usize,
    bytes: usize,
}

impl TokenCache {
    /// An empty cache of at most `capacity` tokens (0: nothing is cached).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity,
            bytes: 0,
        }
    }

    /// The headers and binding of `token` if it verified earlier and its lifetime covers `now`
    /// (with `skew`, as verification allows).
    pub fn get(&self, token: &str, now: u64, skew: u64) -> Option<Cached> {
        if self.entries.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let e = self.entries.get(token)?;
        let live = e.exp.saturating_add(skew) > now && e.iat <= now.saturating_add(skew);
        live.then(|| e.cached.clone())
    }

    /// Remembers a token that verified and was not revoked.
    pub fn insert(&mut self, verified: Remember<'_>) {
        let Remember {
            token,
            iat,
            exp,
            headers,
            cnf,
        } = verified;
        if self.capacity == 0 || token.len() > MAX_TOKEN_BYTES {
            return;
        }
        let weight = weight(token, &headers);
        if self.entries.len() >= self.capacity || self.bytes + weight > MAX_BYTES {
            self.clear();
        }
        if self
            .entries
            .insert(
                token.into(),
                Entry {
                    iat,
                    exp,
                    cached: Cached { headers, cnf },
                },
            )
            .is_none()
        {
            self.bytes += weight;
        }
    }

    /// Forgets every token: the keys or the revocations changed.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// How many tokens are held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(subject: &str) -> IdentityHeaders {
        vec![("x-auth-subject", subject.to_owned())].into()
    }

    fn verified(token: &str, iat: u64, exp: u64, headers: IdentityHeaders) -> Remember<'_> {
        Remember {
            token,
            iat,
            exp,
            headers,
            cnf: None,
        }
    }

    #[test]
    fn hits_until_expiry_then_misses() {
        let mut c = TokenCache::new(4);
        c.insert(verified("t1", 900, 1_000, headers("alice")));
        assert_eq!(c.get("t1", 1_029, 30).unwrap().headers[0].1, "alice");
        assert!(c.get("t1", 1_030, 30).is_none(), "expired beyond the skew");
        assert!(
            c.get("t1", 869, 30).is_none(),
            "not yet valid: the clock stepped back"
        );
        assert!(c.get("t1", 870, 30).is_some());
        assert!(c.get("t2", 900, 30).is_none());
        assert!(
            c.get("t1x", 900, 30).is_none(),
            "the whole token is the key"
        );
    }

    #[test]
    fn a_bound_token_is_kept_with_its_binding() {
        let mut c = TokenCache::new(4);
        c.insert(Remember {
            cnf: Some([9; 32]),
            ..verified("b1", 900, 1_000, headers("bob"))
        });
        c.insert(verified("t1", 900, 1_000, headers("alice")));
        assert_eq!(c.get("b1", 950, 0).unwrap().cnf, Some([9; 32]));
        assert_eq!(c.get("t1", 950, 0).unwrap().cnf, None);
    }

    #[test]
    fn memory_stays_bounded_and_zero_capacity_caches_nothing() {
        let mut c = TokenCache::new(3);
        for i in 0..10 {
            c.insert(verified(&format!("t{i}"), 0, 5_000, headers("u")));
            assert!(c.len() <= 3);
        }
        assert!(c.get("t9", 0, 0).is_some(), "the latest is kept");
        c.clear();
        assert!(c.is_empty());
        let long = "t".repeat(MAX_TOKEN_BYTES + 1);
        c.insert(verified(&long, 0, 5_000, headers("u")));
        assert!(c.get(&long, 0, 0).is_none(), "long tokens are not kept");
        let mut big = TokenCache::new(1_000_000);
        let heavy: IdentityHeaders = vec![("x-auth-claims", "c".repeat(1 << 20))].into();
        for i in 0..40 {
            big.insert(verified(&format!("t{i}"), 0, 5_000, heavy.clone()));
            assert!(big.bytes <= MAX_BYTES);
        }
        let mut off = TokenCache::new(0);
        off.insert(verified("t", 0, 5_000, headers("u")));
        assert!(off.get("t", 0, 0).is_none());
    }
}
