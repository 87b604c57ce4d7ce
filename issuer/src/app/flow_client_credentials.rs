//! The client credentials grant: a token for the client itself, or, if the client may, for an
//! identity it impersonates (`impersonate_claims`, or the obsolete `impersonate_as` + `roles`),
//! written to the audit log. No refresh token.

use super::{vendor_clients, ApiError, Issue};
use crate::store::{ClientRecord, GrantKind};
use shared::grant::Impersonation;
use shared::token::{Identity, SubjectKind};
use shared::ErrorCode;

/// The grant. It holds nothing: the client's record is all it reads.
#[derive(Debug, Default)]
pub(super) struct ClientCredentialsGrant;

impl ClientCredentialsGrant {
    /// What to mint for `client_id` (its `client` record) asking to impersonate `impersonation`.
    pub(super) fn grant(
        &self,
        client_id: &str,
        client: &ClientRecord,
        impersonation: Option<Impersonation>,
    ) -> Result<Issue, ApiError> {
        if !client.grants.contains(&GrantKind::ClientCredentials) {
            return Err(ApiError::unauthorized_client(
                "the client_credentials grant is not enabled for this client",
            ));
        }
        let identity = match impersonation {
            None => Identity {
                kind: SubjectKind::Client,
                subject: String::new(),
                roles: vec![],
                claims: vec![],
            },
            Some(imp) => {
                check_impersonation(client, &imp)?;
                let identity = match imp {
                    Impersonation::Claims(claims) => Identity {
                        kind: SubjectKind::Impersonation,
                        subject: String::new(),
                        roles: vec![],
                        claims,
                    },
                    Impersonation::Legacy { user, roles } => Identity {
                        kind: SubjectKind::Impersonation,
                        subject: user.unwrap_or_default(),
                        roles,
                        claims: vec![],
                    },
                };
                tracing::info!(
                    target: "audit",
                    client = client_id,
                    subject = identity.subject.as_str(),
                    roles = ?identity.roles,
                    claims = ?identity.claims.iter().map(|c| format!("{}={}", c.typ, c.value)).collect::<Vec<_>>(),
                    "impersonation"
                );
                identity
            }
        };
        Ok(Issue {
            identity,
            family: None,
            refresh: None,
            not_before: 0,
            act: None,
            expires_by: None,
        })
    }
}

/// Impersonation needs the client's permission; a client limited to claim types may use only
/// those. The obsolete form counts as claim type `name` for `impersonate_as` and `role` for `roles`.
fn check_impersonation(client: &ClientRecord, imp: &Impersonation) -> Result<(), ApiError> {
    if !client.impersonate {
        return Err(ApiError::unauthorized_client(
            "this client may not impersonate",
        ));
    }
    vendor_clients::check_legacy(client, imp)?;
    let allowed = &client.impersonate_claim_types;
    if allowed.is_empty() {
        return Ok(());
    }
    let mut used: Vec<&str> = imp.claim_types().collect();
    if let Impersonation::Legacy { user, roles } = imp {
        if user.is_some() {
            used.push("name");
        }
        if !roles.is_empty() {
            used.push("role");
        }
    }
    if used.iter().all(|t| allowed.iter().any(|a| a == t)) {
        Ok(())
    } else {
        Err(ApiError::oauth(
            ErrorCode::UnauthorizedClient,
            "this client may not impersonate with these claim types",
        ))
    }
}
