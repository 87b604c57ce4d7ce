//! An administrator's revocation of one refresh token family (a session) by its id, whoever owns
//! it: its refresh token and its access tokens are refused from then on, by the issuer and,
//! through the revocation feed, by every edge.

use super::{conflict, invalid, not_found, AdminError};
use crate::store::Store;

/// What a session id is, as a refusal says it.
pub const SESSION_ID_RULE: &str = "a session id is 32 lowercase hex digits";

/// The family id `id` names: 32 lowercase hex digits.
pub fn session_id(id: &str) -> Option<[u8; 16]> {
    if id.len() != 32 || id.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    <[u8; 16]>::try_from(hex::decode(id).ok()?).ok()
}

/// `session revoke`: revokes the live family `id`; refused for an id that is not one, an unknown
/// id or a family revoked already.
pub(super) async fn revoke(store: &dyn Store, id: &str, now: u64) -> Result<String, AdminError> {
    let Some(key) = session_id(id) else {
        return invalid(SESSION_ID_RULE.into());
    };
    match store.revoke_family_id(&key, now).await? {
        None => not_found(format!("no session {id:?}")),
        Some(before) if before.revoked_at.is_some() => {
            conflict(format!("session {id} is revoked already"))
        }
        Some(before) => Ok(format!(
            "session {id} of user {} at client {} revoked: its refresh and access tokens are \
             refused\n",
            before.user, before.client
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::session_id;

    #[test]
    fn a_session_id_is_32_lowercase_hex_digits() {
        let id = "00112233445566778899aabbccddeeff";
        assert_eq!(session_id(id).map(hex::encode).as_deref(), Some(id));
        for bad in [
            "",
            "0011",
            &id.to_uppercase(),
            &format!("{id}00"),
            &id.replace('a', "g"),
        ] {
            assert_eq!(session_id(bad), None, "{bad:?}");
        }
    }
}
