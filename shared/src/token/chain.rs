//! The actor chain of a token obtained by token exchange (RFC 8693 delegation): who acts for the
//! token's subject, in an optional section at the end of the body. Layout and rules:
//! `docs/token-format.md`, "Actor chain".

use super::{MintError, MAX_CHAIN_DEPTH};
use crate::rules::name_ok;

/// The byte that opens the chain section after the claims.
pub(super) const CHAIN_SECTION: u8 = 1;

/// Who acts for a token's subject. A token without one speaks for its subject with nobody
/// acting (or, for an impersonation, with its client acting unseen, as before exchange existed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    /// The client the first token of the chain was issued to: the subject token's own client,
    /// before anyone acted. For a subject of kind `client` this client is the subject.
    pub origin: String,
    /// The acting clients, outermost first: `actors[0]` is the current actor, the client the
    /// token was issued to (the body's `client`), and each next one acted before it. 1 to
    /// [`MAX_CHAIN_DEPTH`] of them, all distinct and none equal to `origin`.
    pub actors: Vec<String>,
}

impl Chain {
    /// How many clients act: the delegation's depth.
    pub fn depth(&self) -> usize {
        self.actors.len()
    }

    /// Every client the chain names: the actors, outermost first, then the origin. A revocation
    /// of any of them covers the token.
    pub fn clients(&self) -> impl Iterator<Item = &str> {
        self.actors
            .iter()
            .map(String::as_str)
            .chain(core::iter::once(self.origin.as_str()))
    }

    /// Whether `client` is named anywhere in the chain (an exchange by it would be a cycle).
    pub fn names(&self, client: &str) -> bool {
        self.clients().any(|c| c == client)
    }
}

/// Whether `chain` fits a token issued to `client`: the rules of [`Chain`]'s fields.
pub(super) fn chain_ok(chain: &Chain, client: &str) -> Result<(), MintError> {
    if chain.actors.is_empty() || chain.actors.len() > MAX_CHAIN_DEPTH {
        return Err(MintError::ChainDepth);
    }
    if !name_ok(&chain.origin) || !chain.actors.iter().all(|a| name_ok(a)) {
        return Err(MintError::InvalidField("actor"));
    }
    if chain.actors[0] != client {
        return Err(MintError::InconsistentIdentity);
    }
    let distinct = chain
        .clients()
        .enumerate()
        .all(|(i, a)| !chain.clients().skip(i + 1).any(|b| b == a));
    if distinct {
        Ok(())
    } else {
        Err(MintError::ChainCycle)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Lengths were checked against MAX_FIELD_LEN (255) before encoding.
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// Appends the chain section: its opening byte, the origin, the count, the actors.
pub(super) fn encode_chain(out: &mut Vec<u8>, chain: &Chain) {
    out.push(CHAIN_SECTION);
    put_str(out, &chain.origin);
    out.push(chain.actors.len() as u8);
    for a in &chain.actors {
        put_str(out, a);
    }
}
