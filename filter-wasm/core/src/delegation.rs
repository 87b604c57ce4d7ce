//! Rules for delegated tokens by path (`delegation` in the configuration, `docs/filter.md`): a
//! token from token exchange carries the clients acting for its subject (its actor chain), which
//! the filter passes on in `x-auth-actors`, and a rule can refuse such tokens on a path, admit
//! only chains of named clients, or only chains up to a depth. Tokens without a chain pass every
//! rule.
//!
//! A path a proxy or an upstream could normalise into another (`%`, `\`, `;`, `//`, dot segments)
//! is held to every rule at once, so no spelling slips past the rule of the path it means.

use shared::token::MAX_CHAIN_DEPTH;

/// Most rules one configuration holds.
pub const MAX_RULES: usize = 64;

/// The header carrying a token's actors: percent-encoded client ids, comma-separated, the
/// current actor first.
pub const ACTORS_HEADER: &str = "x-auth-actors";

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

/// Reads the rules as the configuration writes them, each a string: the path prefix, then any of
/// `refuse`, `actors=A,B,…` (client ids as `x-auth-actors` writes them) and `max_depth=N`,
/// separated by spaces. (Strings rather than objects keep the Wasm module within its size.)
pub fn rules(raw: &[String]) -> Result<Vec<Rule>, &'static str> {
    if raw.len() > MAX_RULES {
        return Err("delegation: at most 64 rules (MAX_RULES)");
    }
    raw.iter().map(|r| rule(r)).collect()
}

fn rule(text: &str) -> Result<Rule, &'static str> {
    let mut words = text.split(' ').filter(|w| !w.is_empty());
    let prefix = words.next().unwrap_or_default();
    if !prefix.starts_with('/') || !is_clean(prefix.as_bytes()) {
        return Err("delegation: a rule starts with a plain absolute path prefix");
    }
    let mut r = Rule {
        prefix: prefix.to_owned(),
        refuse: false,
        actors: None,
        max_depth: None,
    };
    for w in words {
        if w == "refuse" {
            r.refuse = true;
        } else if let Some(list) = w.strip_prefix("actors=") {
            let actors: Vec<String> = list.split(',').map(str::to_owned).collect();
            if actors.iter().any(String::is_empty) {
                return Err("delegation: actors= names client ids, none empty");
            }
            r.actors = Some(actors);
        } else if let Some(n) = w.strip_prefix("max_depth=") {
            // One digit: MAX_CHAIN_DEPTH is 8.
            match n.as_bytes() {
                [d @ b'1'..=b'9'] if usize::from(d - b'0') <= MAX_CHAIN_DEPTH => {
                    r.max_depth = Some(usize::from(d - b'0'));
                }
                _ => return Err("delegation: max_depth is 1 to 8 (MAX_CHAIN_DEPTH)"),
            }
        } else {
            return Err("delegation: a rule holds refuse, actors=… or max_depth=N");
        }
    }
    Ok(r)
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
    let depth = actors.split(',').count();
    rules
        .iter()
        .filter(|r| doubtful || path.starts_with(r.prefix.as_bytes()))
        .find_map(|r| {
            if r.refuse {
                Some("delegated calls are refused here")
            } else if r
                .actors
                .as_ref()
                .is_some_and(|allowed| !actors.split(',').all(|c| allowed.iter().any(|a| a == c)))
            {
                Some("an actor of this token is not admitted here")
            } else if r.max_depth.is_some_and(|d| depth > d) {
                Some("the token's actor chain is too deep for this path")
            } else {
                None
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<Rule>, &'static str> {
        rules(&serde_json::from_str::<Vec<String>>(json).unwrap())
    }

    #[test]
    fn rules_are_checked_as_written() {
        assert_eq!(
            parse(r#"["/apiv2/Admin/  refuse", "/m actors=a,b%2Cc max_depth=2"]"#).unwrap(),
            [
                Rule {
                    prefix: "/apiv2/Admin/".into(),
                    refuse: true,
                    actors: None,
                    max_depth: None
                },
                Rule {
                    prefix: "/m".into(),
                    refuse: false,
                    actors: Some(vec!["a".into(), "b%2Cc".into()]),
                    max_depth: Some(2)
                }
            ]
        );
        for bad in [
            r#"["apiv2/ refuse"]"#,
            r#"[""]"#,
            r#"["/a/../b refuse"]"#,
            r#"["/a max_depth=0"]"#,
            r#"["/a max_depth=9"]"#,
            r#"["/a max_depth=x"]"#,
            r#"["/a actors=a,,b"]"#,
            r#"["/a deny"]"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_rule_refuses_what_it_says_on_its_paths() {
        let r = parse(
            r#"["/apiv2/Admin/ refuse", "/apiv2/Media/ actors=media,transcoder,up%2Cloader max_depth=2"]"#,
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
        let r = parse(r#"["/apiv2/Admin/ refuse"]"#).unwrap();
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
