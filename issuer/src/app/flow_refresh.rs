//! The refresh token grant: rotate the presented token in the store (the identical successor for a
//! retry inside the window; reuse outside it revokes the family), then mint an access token with
//! the user's current roles.

use super::{now, ApiError, App, TokenIssued};
use crate::store::{ClientRecord, GrantKind, RefreshRejection, RotateOutcome};
use shared::token::{Identity, SubjectKind};
use zeroize::Zeroizing;

impl App {
    pub(super) async fn refresh_grant(
        &self,
        client_id: String,
        client: &ClientRecord,
        refresh_token: Zeroizing<String>,
        issued_at: u64,
    ) -> Result<TokenIssued, ApiError> {
        if !client.grants.contains(&GrantKind::Password) {
            return Err(ApiError::unauthorized_client(
                "the password grant is not enabled for this client",
            ));
        }
        let family = self.store.hash_key().family_tag_of(&refresh_token);
        let outcome = self
            .store
            .rotate_family(&refresh_token, &client_id, now())
            .await
            .map_err(|e| ApiError::store(&e))?;
        let rotation = match outcome {
            RotateOutcome::Rotated(r) => r,
            RotateOutcome::Refused(rejection) => {
                self.metrics.refresh(rejection.reason());
                if rejection == RefreshRejection::ReuseDetected {
                    tracing::warn!(target: "audit", client = client_id.as_str(), "refresh token reuse: family revoked");
                    // The store revoked the family's access tokens in the same transaction.
                    self.reload_revocations().await;
                }
                return Err(ApiError::invalid_grant("invalid refresh token"));
            }
        };
        self.metrics.refresh(if rotation.retried {
            "retried"
        } else {
            "rotated"
        });
        let identity = Identity {
            kind: SubjectKind::User,
            subject: rotation.user_name.clone(),
            roles: rotation.user.roles.clone(),
            claims: rotation.user.token_claims(),
        };
        let access = self.mint(&client_id, identity, issued_at, family)?;
        Ok(self.token_response(access, Some(rotation.successor)))
    }
}
