//! The refresh token grant: rotate the presented token in the store (the identical successor for a
//! retry inside the window; reuse outside it revokes the family), then mint an access token with
//! the user's current roles. A directory user is re-read first: one the directory no longer
//! vouches for is refused and disabled, and a directory outage rotates nothing (503).

use super::directory_users::DirectoryUsers;
use super::{now, ApiError, Issue};
use crate::store::revocation::FAMILY_TAG_LEN;
use crate::store::{ClientRecord, Families, GrantKind, HashKeyed, RefreshRejection, RotateOutcome};
use shared::token::{Identity, SubjectKind};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The grant: the families it rotates, and the hash key their tags are made with.
pub(super) struct RefreshGrant {
    pub(super) families: Arc<dyn Families>,
    pub(super) hash: Arc<dyn HashKeyed>,
    pub(super) directory: Option<Arc<DirectoryUsers>>,
}

/// What a refresh did.
pub(super) enum Refreshed {
    /// What to mint; `retried` if this was a retry inside the window (the same successor).
    Rotated {
        /// The access token's identity, family and the successor.
        issue: Issue,
        /// A retry inside the window.
        retried: bool,
    },
    /// Refused: why (`invalid_grant` to the client; the family is revoked on reuse), and the
    /// tag of the token's family if it is a refresh token of this issuer.
    Refused(RefreshRejection, Option<[u8; FAMILY_TAG_LEN]>),
}

impl RefreshGrant {
    /// Rotates `refresh_token` for `client_id` (its `client` record), with a DPoP proof by the
    /// key `proof` or none (a bound family refuses a refresh without its key).
    pub(super) async fn grant(
        &self,
        client_id: &str,
        client: &ClientRecord,
        refresh_token: Zeroizing<String>,
        proof: Option<[u8; 32]>,
    ) -> Result<Refreshed, ApiError> {
        if !client.grants.contains(&GrantKind::Password) {
            return Err(ApiError::unauthorized_client(
                "the password grant is not enabled for this client",
            ));
        }
        if !self.directory_vouches(client_id, &refresh_token).await? {
            return Ok(Refreshed::Refused(RefreshRejection::Inactive, None));
        }
        let family = self.hash.hash_key().family_tag_of(&refresh_token);
        let outcome = self
            .families
            .rotate_family(&refresh_token, client_id, now(), proof)
            .await?;
        let rotation = match outcome {
            RotateOutcome::Rotated(r) => r,
            RotateOutcome::Refused(why) => return Ok(Refreshed::Refused(why, family)),
        };
        let identity = Identity {
            kind: SubjectKind::User,
            subject: rotation.user_name.clone(),
            roles: rotation.user.roles.clone(),
            claims: rotation.user.token_claims(),
        };
        Ok(Refreshed::Rotated {
            issue: Issue {
                identity,
                family,
                refresh: Some(rotation.successor),
                not_before: rotation.user.tokens_after(),
                act: None,
                expires_by: None,
            },
            retried: rotation.retried,
        })
    }

    /// Whether the directory still vouches for the user of this token's family (true for a
    /// local user, or without a directory).
    async fn directory_vouches(&self, client_id: &str, token: &str) -> Result<bool, ApiError> {
        let Some(directory) = &self.directory else {
            return Ok(true);
        };
        let info = self.families.family_info(token, now()).await?;
        let Some(info) = info.filter(|i| i.client == client_id) else {
            return Ok(true);
        };
        match directory.before_refresh(&info.user, now()).await {
            Ok(go_on) => Ok(go_on),
            Err(Some(e)) => Err(ApiError::store(&e)),
            Err(None) => Err(ApiError::directory_unavailable()),
        }
    }
}
