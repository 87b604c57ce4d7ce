//! The client credentials grant: a token for the client itself, or, if the client may, for an
//! identity it impersonates (`impersonate_claims`, or the obsolete `impersonate_as` + `roles`),
//! written to the audit log. No refresh token.

use super::{check_impersonation, ApiError, App, TokenIssued};
use crate::store::{ClientRecord, GrantKind};
use shared::grant::Impersonation;
use shared::token::{Identity, SubjectKind};

impl App {
    pub(super) fn client_credentials_grant(
        &self,
        client_id: String,
        client: &ClientRecord,
        impersonation: Option<Impersonation>,
        issued_at: u64,
    ) -> Result<TokenIssued, ApiError> {
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
                    client = client_id.as_str(),
                    subject = identity.subject.as_str(),
                    roles = ?identity.roles,
                    claims = ?identity.claims.iter().map(|c| format!("{}={}", c.typ, c.value)).collect::<Vec<_>>(),
                    "impersonation"
                );
                identity
            }
        };
        let access = self.mint(&client_id, identity, issued_at, None)?;
        Ok(self.token_response(access, None))
    }
}
