//! Parsers for the comma-separated lists of the client credentials grant: `impersonate_claims`
//! (`type=value` pairs) and the obsolete `roles`. Each item meets the rule of [`crate::rules`]
//! that a token's role or claim meets, and is trimmed.

use crate::error::RequestError;
use crate::rules::{claim_text_ok, role_ok};
use crate::token::{Claim, MAX_ITEMS};

fn blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Once its blanks are trimmed, an item neither starts nor ends with other whitespace (U+2000 and
/// the like would make a claim that looks like another).
fn trimmed(s: &str) -> bool {
    s.trim() == s
}

/// Parses `impersonate_claims`: `type=value` pairs separated by commas, blanks around each pair,
/// type and value trimmed of blanks (space, tab). An empty list, an empty item, a pair without
/// `=`, an empty type or value, a control character, other whitespace at either end of a type or
/// value, or more than [`MAX_ITEMS`] pairs is `invalid_request`.
pub fn parse_impersonate_claims(list: &str) -> Result<Vec<Claim>, RequestError> {
    const MALFORMED: RequestError = RequestError::invalid_request(
        "impersonate_claims must be a comma-separated list of type=value pairs",
    );
    let mut claims = Vec::new();
    for pair in list.split(',') {
        let (typ, value) = pair.split_once('=').ok_or(MALFORMED)?;
        let (typ, value) = (typ.trim_matches(blank), value.trim_matches(blank));
        if !claim_text_ok(typ, value) || !trimmed(typ) || !trimmed(value) {
            return Err(MALFORMED);
        }
        if claims.len() == MAX_ITEMS {
            return Err(RequestError::invalid_request(
                "impersonate_claims has too many pairs",
            ));
        }
        claims.push(Claim {
            typ: typ.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(claims)
}

/// Parses a comma-separated role list (`roles`, obsolete since 5.18): items trimmed, none empty.
pub fn parse_roles(list: &str) -> Result<Vec<String>, RequestError> {
    const MALFORMED: RequestError =
        RequestError::invalid_request("roles must be a comma-separated list of role names");
    let mut roles = Vec::new();
    for item in list.split(',') {
        let role = item.trim_matches(blank);
        if !role_ok(role) || !trimmed(role) {
            return Err(MALFORMED);
        }
        if roles.len() == MAX_ITEMS {
            return Err(RequestError::invalid_request("roles has too many items"));
        }
        roles.push(role.to_owned());
    }
    Ok(roles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn claim(t: &str, v: &str) -> Claim {
        Claim {
            typ: t.into(),
            value: v.into(),
        }
    }

    #[test]
    fn parses_and_trims_pairs() {
        assert_eq!(
            parse_impersonate_claims(" email = a@b.c ,\tgroup=ops").unwrap(),
            vec![claim("email", "a@b.c"), claim("group", "ops")]
        );
        assert_eq!(
            parse_impersonate_claims("upn=x").unwrap(),
            vec![claim("upn", "x")]
        );
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "",
            " ",
            "a",
            "a=",
            "=b",
            "a=b,",
            ",a=b",
            "a=b,,c=d",
            "a=b=c",
            "a=\u{1}",
            "a = b , c",
            "\u{2000}=a",
            "email\u{2000}=a",
            "a=b\u{3000}",
        ] {
            assert!(parse_impersonate_claims(bad).is_err(), "{bad:?} accepted");
        }
        let many = vec!["t=v"; MAX_ITEMS + 1].join(",");
        assert!(parse_impersonate_claims(&many).is_err());
    }

    #[test]
    fn roles_are_trimmed_and_never_empty() {
        assert_eq!(
            parse_roles("admin, editor").unwrap(),
            vec!["admin", "editor"]
        );
        for bad in ["", "a,,b", "a, ", " ,a", "\u{2000}", "a,\u{3000}b"] {
            assert!(parse_roles(bad).is_err(), "{bad:?} accepted");
        }
    }

    proptest! {
        #[test]
        fn claims_parser_never_panics_and_output_is_clean(s in "\\PC*|[a-z=, \t]{0,40}") {
            if let Ok(claims) = parse_impersonate_claims(&s) {
                prop_assert!(!claims.is_empty());
                for c in claims {
                    prop_assert!(!c.typ.is_empty() && !c.value.is_empty());
                    prop_assert!(!c.typ.contains([',', '=']) && !c.value.contains([',', '=']));
                    prop_assert_eq!(c.typ.trim(), c.typ.as_str());
                }
            }
        }

        #[test]
        fn well_formed_claims_round_trip(pairs in proptest::collection::vec(("[a-z]{1,8}", "[a-zA-Z0-9@.]{1,12}"), 1..8)) {
            let text = pairs.iter().map(|(t, v)| format!(" {t}={v} ")).collect::<Vec<_>>().join(",");
            let parsed = parse_impersonate_claims(&text).unwrap();
            let expected: Vec<Claim> = pairs.iter().map(|(t, v)| claim(t, v)).collect();
            prop_assert_eq!(parsed, expected);
        }
    }
}
