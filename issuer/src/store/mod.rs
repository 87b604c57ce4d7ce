//! The issuer's durable state: clients, users, signing keys, refresh token families,
//! revocations and settings, behind small traits by concern ([`storage`]). Two backends implement
//! them all:
//!
//! - [`redb`]: one embedded file in a data dir, one process (the default, nothing to run);
//! - [`postgres`]: several issuers on one database (see `docs/deploy-postgres.md`).
//!
//! Every write is durable before its call returns: a refresh token handed to a client is never
//! lost by a crash, and two clients never receive different successors of one token. This is the
//! bottom layer of the issuer: it imports nothing of the modules above it, and takes the time as
//! an argument.

pub mod accounts;
pub mod audit;
pub mod backup;
pub mod contents;
pub mod edges;
pub mod error;
pub mod exchange;
pub mod family;
pub mod kek;
pub mod keys;
pub mod location;
pub mod postgres;
pub mod redb;
pub mod storage;
pub mod throttle;
pub mod vendor;
/// Revocations: the types and the in-memory set are shared with the Envoy filter.
pub mod revocation {
    pub use shared::revocation::*;

    /// Seconds a revocation stays in force past the last expiry of the tokens it covers: any edge
    /// may accept a token until its `exp` plus its clock skew, which is at most this.
    pub const REVOCATION_MARGIN: u64 = shared::token::MAX_CLOCK_SKEW;
}

pub use accounts::{
    ClientChange, ClientRecord, DirectoryLink, DpopPolicy, GrantKind, UserChange, UserRecord,
};
pub use audit::{AuditAction, AuditEvent, EncodedEvent};
pub use edges::EdgeReport;
pub use error::{
    ConnectionFault, DiskFault, DriverError, OpenError, Redacted, StoreError, Unreachable,
};
pub use exchange::ExchangePolicy;
pub use keys::{
    KeyInfo, KeyState, PromoteOutcome, Promotion, RetireOutcome, Rotated, RotationPlan, HELD,
    KEY_RETIRE_MARGIN,
};
pub use location::{Location, PgFiles};
pub use storage::{
    may_hold, AccessLifetime, Audit, AuditKey, AuditPage, AuditRead, ChangeListener, Clients,
    Edges, Families, FamilyFilter, FamilyKey, FamilyRevocation, HashKeyed, Listed, Liveness,
    Notice, Notices, Owners, ProofIds, RecordFilter, RefreshInfo, RefreshPolicy, RefreshRejection,
    Revocations, RotateOutcome, Rotation, SigningKeys, Store, Sweep, Users,
};

/// Every trait of the store, for code that calls a backend by its own type (`use
/// issuer::store::prelude::*`); through `dyn Store` they need no import.
pub mod prelude {
    pub use super::storage::{
        AccessLifetime, Audit, Clients, Edges, Families, HashKeyed, Liveness, Revocations,
        SigningKeys, Sweep, Users,
    };
}

/// Access token lifetime assumed until `issuer serve` records its own.
pub const DEFAULT_ACCESS_TTL: u64 = 3600;
