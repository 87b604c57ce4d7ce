//! The resource owner password credentials grant: throttle, check the password (one check per user
//! at a time), mint an access token and start a refresh token family.

use super::{now, ApiError, App, Call, TokenIssued};
use crate::store::{ClientRecord, GrantKind};
use crate::throttle::Turn;
use shared::token::{Identity, SubjectKind};
use zeroize::Zeroizing;

impl App {
    pub(super) async fn password_grant(
        &self,
        call: &Call,
        client_id: String,
        client: &ClientRecord,
        username: String,
        password: Zeroizing<String>,
        issued_at: u64,
    ) -> Result<TokenIssued, ApiError> {
        if !client.grants.contains(&GrantKind::Password) {
            return Err(ApiError::unauthorized_client(
                "the password grant is not enabled for this client",
            ));
        }
        let ip = call.client_ip(&self.settings.trusted_proxies);
        // One password check per user at a time: each attempt sees the outcome of the one
        // before, so a burst of concurrent guesses meets the back-off after the free ones.
        let _turn = self.login_turn(&username).await;
        let attempt = match self
            .throttle
            .attempt(&username, ip, now())
            .await
            .map_err(|e| ApiError::store(&e))?
        {
            Turn::Go(attempt) => attempt,
            Turn::Wait(wait) => return Err(ApiError::throttled(wait)),
        };
        let user = self
            .store
            .user(&username)
            .await
            .map_err(|e| ApiError::store(&e))?;
        let ok = self
            .passwords
            .check(password, user.as_ref().map(|u| u.password_hash.clone()))
            .await;
        // A disabled user is refused exactly like a wrong password, throttle included:
        // otherwise the answer after the back-off starts would tell a right guess.
        let disabled = user.as_ref().is_some_and(|u| u.disabled);
        let user = match user {
            Some(u) if ok && !disabled => u,
            _ => {
                attempt
                    .failed(now())
                    .await
                    .map_err(|e| ApiError::store(&e))?;
                let (client, user) = (client_id.as_str(), username.as_str());
                if ok && disabled {
                    tracing::info!(client, user, "disabled user refused");
                } else {
                    tracing::info!(client, user, "wrong user credentials");
                }
                return Err(ApiError::invalid_grant("invalid user credentials"));
            }
        };
        attempt
            .succeeded(now())
            .await
            .map_err(|e| ApiError::store(&e))?;
        let identity = Identity {
            kind: SubjectKind::User,
            subject: username.clone(),
            roles: user.roles.clone(),
            claims: user.token_claims(),
        };
        // The family first: the access token carries its tag.
        let refresh = self
            .store
            .start_family(&client_id, &username, now())
            .await
            .map_err(|e| ApiError::store(&e))?;
        let family = self.store.hash_key().family_tag_of(&refresh);
        let access = self.mint(&client_id, identity, issued_at, family)?;
        Ok(self.token_response(access, Some(refresh)))
    }
}
