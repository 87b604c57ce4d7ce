//! The client credentials grant: a token for the client itself, or, if the client may, for an
//! identity it impersonates (`impersonate_claims`, or the obsolete `impersonate_as` + `roles`),
//! written to the audit log. No refresh token.

use super::{check_impersonation, ApiError, Issue};
use crate::store::{ClientRecord, GrantKind};
use shared::grant::Impersonation;
use shared::token::{Identity, SubjectKind};

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
        })
    }
}
