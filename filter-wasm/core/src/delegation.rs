//! Rules for delegated tokens by path (`delegation` in the configuration, `docs/filter.md`): a
//! token from token exchange carries the clients acting for its subject (its actor chain), which
//! the filter passes on in `x-auth-actors`, and a rule can refuse such tokens on a path, admit
//! only chains of named clients, or only chains up to a depth. Tokens without a chain pass every
//! rule.
//!
//! A path a proxy or an upstream could normalise into another (`%`, `\`, `;`, `//`, dot segments)
//! is held to every rule at once, so no spelling slips past the rule of the path it means.

use serde::Deserialize;
use shared::token::MAX_CHAIN_DEPTH;

/// Most rules one configuration holds.
pub const MAX_RULES: usize = 64;

/// The header carrying a token's actors: percent-encoded client ids, comma-separated, the
/// current actor first.
pub const ACTORS_HEADER: &str = "x-auth-actors";

/// A rule as the configuration writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    path_prefix: String,
    #[serde(default)]
    refuse: bool,
    #[serde(default)]
    actors: Option<Vec<String>>,
    #[serde(default)]
    max_depth: Option<usize>,
}

/// A rule for the delegated tokens of the paths under `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The plain absolute path prefix it covers.
    pub prefix: String,
    /// Refuse every delegated token.
    pub refuse: bool,
    /// If set, every client of the chain must be one of these (as `x-auth-actors` writes them).
    pub actors: Option<Vec<String>>,
    /// If set, the longest chain admitted.
    pub max_depth: Option<usize>,
}

/// Checks the rules as written: a plain absolute prefix, actors named, a depth of 1 to
/// [`MAX_CHAIN_DEPTH`]; the message names what is wrong.
pub fn rules(raw: Vec<RawRule>) -> Result<Vec<Rule>, String> {
    if raw.len() > MAX_RULES {
        return Err(format!("delegation: at most {MAX_RULES} rules"));
    }
    raw.into_iter()
        .map(|r| {
            let plain = r.path_prefix.starts_with('/') && is_clean(r.path_prefix.as_bytes());
            if !plain {
                return Err(format!(
                    "delegation: path_prefix {:?} must be a plain absolute path prefix",
                    r.path_prefix
                ));
            }
            if r.max_depth.is_some_and(|d| d == 0 || d > MAX_CHAIN_DEPTH) {
                return Err(format!("delegation: max_depth is 1 to {MAX_CHAIN_DEPTH}"));
            }
            if r.actors
                .as_ref()
                .is_some_and(|a| a.iter().any(String::is_empty))
            {
                return Err("delegation: an actor is a client id, not empty".into());
            }
            Ok(Rule {
                prefix: r.path_prefix,
                refuse: r.refuse,
                actors: r
                    .actors
                    .map(|a| a.iter().map(|x| crate::encode::enc(x)).collect()),
                max_depth: r.max_depth,
            })
        })
        .collect()
}

/// Whether nothing in `path` could be normalised into another path.
pub(crate) fn is_clean(path: &[u8]) -> bool {
    !path.contains(&b'%')
        && !path.contains(&b'\\')
        && !path.contains(&b';')
        && !path.windows(2).any(|w| w == b"//")
        && !path
            .split(|&c| c == b'/')
            .any(|seg| seg == b"." || seg == b"..")
}

/// Why `rules` refuse a token with the actors `actors` (the value of [`ACTORS_HEADER`]) on
/// `path`, if they do: the description for the answer.
pub fn refusal(rules: &[Rule], path: &[u8], actors: &str) -> Option<&'static str> {
    if rules.is_empty() {
        return None;
    }
    let path = &path[..path
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(path.len())];
    let doubtful = !is_clean(path);
    let chain: Vec<&str> = actors.split(',').collect();
    rules
        .iter()
        .filter(|r| doubtful || path.starts_with(r.prefix.as_bytes()))
        .find_map(|r| {
            if r.refuse {
                Some("delegated calls are refused here")
            } else if r
                .actors
                .as_ref()
                .is_some_and(|allowed| !chain.iter().all(|c| allowed.iter().any(|a| a == c)))
            {
                Some("an actor of this token is not admitted here")
            } else if r.max_depth.is_some_and(|d| chain.len() > d) {
                Some("the token's actor chain is too deep for this path")
            } else {
                None
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<Rule>, String> {
        rules(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn rules_are_checked_as_written() {
        assert!(parse(r#"[{"path_prefix":"/apiv2/Admin/","refuse":true}]"#).is_ok());
        for bad in [
            r#"[{"path_prefix":"apiv2/","refuse":true}]"#,
            r#"[{"path_prefix":"/a/../b","refuse":true}]"#,
            r#"[{"path_prefix":"/a","max_depth":0}]"#,
            r#"[{"path_prefix":"/a","max_depth":9}]"#,
            r#"[{"path_prefix":"/a","actors":[""]}]"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let unknown: Result<Vec<RawRule>, _> =
            serde_json::from_str(r#"[{"path_prefix":"/a","deny":true}]"#);
        assert!(unknown.is_err());
    }

    #[test]
    fn each_rule_refuses_what_it_says_on_its_paths() {
        let r = parse(
            r#"[{"path_prefix":"/apiv2/Admin/","refuse":true},
                {"path_prefix":"/apiv2/Media/","actors":["media","transcoder","up,loader"],"max_depth":2}]"#,
        )
        .unwrap();
        let admin = b"/apiv2/Admin/Users";
        let media = b"/apiv2/Media/Find?x=1";
        assert!(refusal(&r, admin, "uploader").is_some());
        assert_eq!(refusal(&r, b"/apiv2/Other/x", "a,b,c,d"), None);
        assert_eq!(refusal(&r, media, "media,transcoder"), None);
        assert_eq!(
            refusal(&r, media, "up%2Cloader"),
            None,
            "ids compared as encoded"
        );
        assert_eq!(
            refusal(&r, media, "media,billing"),
            Some("an actor of this token is not admitted here")
        );
        assert_eq!(
            refusal(&r, media, "media,transcoder,up%2Cloader"),
            Some("the token's actor chain is too deep for this path")
        );
        assert_eq!(refusal(&[], admin, "a"), None);
    }

    #[test]
    fn a_doubtful_path_is_held_to_every_rule() {
        let r = parse(r#"[{"path_prefix":"/apiv2/Admin/","refuse":true}]"#).unwrap();
        for path in [
            &b"/apiv2/%41dmin/Users"[..],
            b"/apiv2//Admin/Users",
            b"/apiv2/Media/../Admin/Users",
            b"/apiv2/Admin;x/Users",
            b"/apiv2\\Admin/Users",
        ] {
            assert!(refusal(&r, path, "uploader").is_some(), "{path:?}");
        }
    }
}
