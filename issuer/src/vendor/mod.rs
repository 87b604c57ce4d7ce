//! Client credential sets issued by the service's vendor (`docs/clients.md`): software statements
//! in the sense of RFC 7591 (OAuth 2.0 Dynamic Client Registration), signed by a vendor key an
//! installation trusts by configuration (`[[vendor]]`), and the vendor's revocation lists.
//!
//! Pure: no I/O, no clock, no randomness of its own (the time and the keys are passed in).
//!
//! - [`keys`]: a vendor's public JWK set, and the one `issuer vendor keygen` writes;
//! - [`jws`]: the compact JWS both documents are, and its checks in order (size, header,
//!   trusted key, signature, then the claims);
//! - [`statement`]: the statement's claims, signing and checking;
//! - [`revocations`]: the revocation list's.
//!
//! Every refusal is a [`Refusal`], which names its RFC 7591 error code.

pub mod jws;
pub mod keys;
pub mod revocations;
pub mod statement;

pub use keys::{parse_key_set, KeySetError, VendorKey};
pub use revocations::{RevocationList, VerifiedRevocations};
pub use statement::{Impersonation, Statement, VendorGrant, Verified};

/// Why a statement or revocation list is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Longer than [`jws::MAX_LEN`].
    #[error("the document is longer than {} bytes", jws::MAX_LEN)]
    TooLarge,
    /// Not a well-formed JWS, or its header is not.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// An algorithm other than `EdDSA` and `ES256` (`none`, an HMAC, …), or not the key's.
    #[error("the algorithm {0:?} is not accepted: a vendor signs with EdDSA or ES256")]
    Algorithm(String),
    /// Not the `typ` of the document expected.
    #[error("the header's `typ` is not that of this kind of document")]
    Type,
    /// The `kid` names no key of a trusted vendor.
    #[error("signed with a key of no trusted vendor (no `[[vendor]]` holds its `kid`)")]
    Untrusted,
    /// The signature does not verify.
    #[error("the signature does not verify under the vendor's key")]
    Signature,
    /// Past its `exp`.
    #[error("the statement has expired")]
    Expired,
    /// The vendor revoked the client.
    #[error("the vendor has revoked this client")]
    Revoked,
    /// A grant this issuer does not know.
    #[error("unknown grant {0:?}: the grants are password, refresh_token and client_credentials")]
    UnknownGrant(String),
    /// A claim missing or out of its bounds.
    #[error("invalid claim: {0}")]
    Claim(&'static str),
    /// The client id belongs to a client not issued by this vendor (a local client, or another
    /// vendor's).
    #[error("the client id belongs to a client this vendor did not issue")]
    Taken,
}

impl Refusal {
    /// The RFC 7591 error code: `unapproved_software_statement` when the statement may be
    /// well-formed but is not accepted here (untrusted, revoked, its id taken),
    /// `invalid_software_statement` otherwise.
    pub fn error_code(&self) -> &'static str {
        match self {
            Self::Untrusted | Self::Revoked | Self::Taken => "unapproved_software_statement",
            _ => "invalid_software_statement",
        }
    }
}

/// The trusted vendors: each with its name and public keys.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    vendors: Vec<(String, Vec<VendorKey>)>,
    /// Files the issuer watches for each vendor's revocation list: (vendor, path).
    revocation_files: Vec<(String, std::path::PathBuf)>,
}

impl Trust {
    /// Trusts `keys` as the vendor `name`'s (in addition to those trusted already).
    pub fn add(&mut self, name: &str, keys: Vec<VendorKey>) {
        self.vendors.push((name.to_owned(), keys));
    }

    /// Watches `path` for the vendor `name`'s revocation list.
    pub fn watch_revocations(&mut self, name: &str, path: std::path::PathBuf) {
        self.revocation_files.push((name.to_owned(), path));
    }

    /// The files watched for revocation lists, by vendor.
    pub fn revocation_files(&self) -> &[(String, std::path::PathBuf)] {
        &self.revocation_files
    }

    /// The vendor and key whose `kid` is `kid`.
    pub fn key(&self, kid: &str) -> Option<(&str, &VendorKey)> {
        self.vendors
            .iter()
            .find_map(|(name, keys)| jws::find(keys, kid).map(|k| (name.as_str(), k)))
    }

    /// The vendors' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vendors.iter().map(|(n, _)| n.as_str())
    }

    /// Whether no vendor is trusted.
    pub fn is_empty(&self) -> bool {
        self.vendors.is_empty()
    }
}

#[cfg(test)]
mod tests;
