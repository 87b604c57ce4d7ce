//! The plain records the conformance suite stores: a client and a user.

use issuer::store::{ClientRecord, GrantKind, UserRecord};

pub(crate) fn client(active: bool) -> ClientRecord {
    ClientRecord {
        secret_hash: hex::encode([0u8; 32]),
        active,
        grants: vec![GrantKind::Password],
        impersonate: false,
        impersonate_claim_types: vec![],
        edge: false,
        dpop: Default::default(),
        created_at: 0,
        deactivated_at: None,
        vendor: None,
        exchange: None,
    }
}

pub(crate) fn user() -> UserRecord {
    UserRecord {
        password_hash: "h".into(),
        disabled: false,
        roles: vec!["r".into()],
        claims: vec![],
        created_at: 0,
        password_changed_at: None,
        disabled_at: None,
        directory: None,
    }
}
