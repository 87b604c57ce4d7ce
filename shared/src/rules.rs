//! The rules a client id, user name, role or claim meets wherever it appears: in a token body
//! (checked when minting and when decoding), in the `impersonate_claims` and `roles` parameters
//! ([`crate::claims`]), and in the issuer's admin commands, which store what tokens will carry.
//! One definition, so that nothing the issuer accepts for storage can fail to fit a token.
//!
//! Every string is 1 to [`MAX_FIELD_LEN`] bytes of UTF-8 without a control character; roles and
//! claim values hold no `,` (lists of them are comma-separated); claim types hold no `,` or `=`.

use crate::token::MAX_FIELD_LEN;

/// Which characters a string field may hold.
#[derive(Clone, Copy)]
enum Field {
    /// Client id and user name: printable, no control characters.
    Name,
    /// Role or claim value: printable, no `,`.
    Item,
    /// Claim type: printable, no `,` and no `=`.
    ClaimType,
}

/// Whether `s` is a `field`: 1 to [`MAX_FIELD_LEN`] bytes, no control character, and none of the
/// characters the field excludes.
fn field_ok(s: &str, field: Field) -> bool {
    if s.is_empty() || s.len() > MAX_FIELD_LEN {
        return false;
    }
    s.chars().all(|c| {
        !c.is_control()
            && match field {
                Field::Name => true,
                Field::Item => c != ',',
                Field::ClaimType => c != ',' && c != '=',
            }
    })
}

/// A name as a token carries it, in its client field or as its subject (a user name): 1 to
/// [`MAX_FIELD_LEN`] bytes, no control character.
pub fn name_ok(s: &str) -> bool {
    field_ok(s, Field::Name)
}

/// A token's subject: empty (a client's own token, a claims-only impersonation) or a
/// [`name_ok`] name.
pub fn subject_ok(s: &str) -> bool {
    s.is_empty() || name_ok(s)
}

/// A user name: a [`name_ok`] name.
pub fn user_name_ok(s: &str) -> bool {
    name_ok(s)
}

/// A client id: a [`name_ok`] name without `:`, which separates the id from the secret in HTTP
/// Basic credentials.
pub fn client_id_ok(s: &str) -> bool {
    name_ok(s) && !s.contains(':')
}

/// A role: 1 to [`MAX_FIELD_LEN`] bytes, no control character, no `,`.
pub fn role_ok(s: &str) -> bool {
    field_ok(s, Field::Item)
}

/// A claim type: 1 to [`MAX_FIELD_LEN`] bytes, no control character, no `,` or `=`.
pub fn claim_type_ok(s: &str) -> bool {
    field_ok(s, Field::ClaimType)
}

/// A claim value as a token carries it: 1 to [`MAX_FIELD_LEN`] bytes, no control character, no
/// `,`.
pub fn claim_value_ok(s: &str) -> bool {
    field_ok(s, Field::Item)
}

/// A claim given as the text `TYPE=VALUE` (an `impersonate_claims` pair, `issuer user add
/// --claim`): the type meets [`claim_type_ok`], the value [`claim_value_ok`] and holds no `=`
/// either, so the text splits back into the same claim.
pub fn claim_text_ok(typ: &str, value: &str) -> bool {
    claim_type_ok(typ) && claim_value_ok(value) && !value.contains('=')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roles_and_claims() {
        let long = "a".repeat(MAX_FIELD_LEN);
        let too_long = "a".repeat(MAX_FIELD_LEN + 1);
        for ok in ["alice", "a b", "x,y=z", long.as_str(), "é"] {
            assert!(user_name_ok(ok), "{ok:?}");
        }
        assert!(subject_ok("") && subject_ok("alice") && !subject_ok("a\nb"));
        for bad in ["", "a\nb", "\u{7f}", too_long.as_str()] {
            assert!(
                !name_ok(bad) && !user_name_ok(bad) && !client_id_ok(bad),
                "{bad:?}"
            );
            assert!(
                !role_ok(bad) && !claim_type_ok(bad) && !claim_value_ok(bad),
                "{bad:?}"
            );
        }
        assert!(client_id_ok("app") && !client_id_ok("a:b"));
        assert!(role_ok("a=b") && !role_ok("a,b"));
        assert!(claim_value_ok("a=b") && !claim_value_ok("a,b"));
        assert!(claim_type_ok("email") && !claim_type_ok("a=b") && !claim_type_ok("a,b"));
        assert!(claim_text_ok("email", "a@b.c"));
        assert!(!claim_text_ok("email", "a=b") && !claim_text_ok("", "x"));
    }
}
