//! The token endpoint's dispatch: the grant a request names, handed to its flow, which says
//! what to mint ([`Issue`]).

use super::flow_refresh::Refreshed;
use super::{flow_token_exchange, ApiError, App, Call, Issue};
use crate::store::ClientRecord;
use shared::grant::Grant;

impl App {
    /// What the request's grant asks to mint for `client_id` (its `client` record), with the
    /// request's DPoP `proof` if it had one.
    pub(super) async fn issue_of(
        &self,
        call: &Call,
        grant: Grant,
        client_id: &str,
        client: &ClientRecord,
        proof: Option<&shared::dpop::Proof>,
    ) -> Result<Issue, ApiError> {
        let issue = match grant {
            Grant::Password { username, password } => {
                let ip = call.client_ip(&self.settings.trusted_proxies);
                let jkt = proof.map(|p| p.jkt);
                self.password
                    .grant(ip, client_id, client, (username, password), jkt)
                    .await?
            }
            Grant::RefreshToken { refresh_token } => {
                match self
                    .refresh
                    .grant(client_id, client, refresh_token, proof.map(|p| p.jkt))
                    .await?
                {
                    Refreshed::Rotated { issue, retried } => {
                        self.metrics
                            .refresh(if retried { "retried" } else { "rotated" });
                        issue
                    }
                    Refreshed::Refused(why, family) => {
                        return Err(self.refresh_refused(client_id, why, family).await)
                    }
                }
            }
            Grant::ClientCredentials { impersonation } => {
                self.client_credentials
                    .grant(client_id, client, impersonation)?
            }
            Grant::TokenExchange {
                subject_token,
                actor_token,
                audience,
            } => {
                let ex = flow_token_exchange::Exchange {
                    subject_token,
                    actor_token,
                    audience,
                };
                self.token_exchange(client_id, client, ex, proof)?
            }
        };
        Ok(issue)
    }
}
