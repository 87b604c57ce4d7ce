//! Untrusted text made safe to print: what a client, a guesser, a directory or a file chose (user
//! names tried at sign-in, impersonated subjects, user names, roles, claims, client ids, edge
//! names) reaches the command line's output with no character a reader may take for a line break
//! or a terminal may reorder the line around.
//!
//! The rules for names refuse control characters but allow U+2028 LINE SEPARATOR, U+2029
//! PARAGRAPH SEPARATOR and the bidi controls; Python's `splitlines` and JavaScript end a line at
//! the separators (JSON lines with them raw stop parsing in JavaScript), and U+202E shows the
//! rest of a line reversed. [`must_escape`] is the one list; [`escape_text`] escapes a value for
//! text output as the logs do (`\u{2028}`), [`escape_lines`] a whole text output but its line
//! breaks, and [`escape_json`] serialized JSON (`\u2028`: still valid JSON, parsing to the same
//! string).
//!
//! Beside them, [`Causes`] tells an error with its causes, as logs and the admin socket's answers
//! show it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach output raw: C0 and C1 controls and DEL, U+0085 NEXT LINE, U+2028
/// and U+2029, and the bidi controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069).
pub fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every character `keep` does not keep and [`must_escape`] names written by `escape`.
fn escaped(s: &str, keep: impl Fn(char) -> bool, escape: fn(&mut String, char)) -> Cow<'_, str> {
    if !s.chars().any(|c| must_escape(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if must_escape(c) && !keep(c) {
            escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn rust_escape(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
}

fn json_escape(out: &mut String, c: char) {
    let _ = write!(out, "\\u{:04x}", u32::from(c));
}

/// One untrusted value for text output: every character [`must_escape`] names as `\u{XXXX}`, as the
/// text logs write it. Not reversible (a `\` is left as it is, so `DOMAIN\user` reads as such);
/// the JSON outputs are exact.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escaped(s, |_| false, rust_escape)
}

/// A whole text output, its lines ended by `\n`: as [`escape_text`], but `\n` is kept.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    escaped(s, |c| c == '\n', rust_escape)
}

/// Serialized JSON (one document, or one per line): every character [`must_escape`] names as
/// `\uXXXX` but the whitespace between tokens (`\n`, `\r`, `\t`). Outside strings JSON holds no
/// other of them, and inside one `\uXXXX` is the same character, so the text parses to the same
/// value, now also where U+2028 and U+2029 end a line.
pub fn escape_json(s: &str) -> Cow<'_, str> {
    escaped(s, |c| matches!(c, '\n' | '\r' | '\t'), json_escape)
}

/// An error told with its causes, `what failed: why: why that`, for logs and answers that have
/// no `{:#}` of anyhow's. The library's errors keep their causes as
/// [`std::error::Error::source`] and do not repeat them in their own text.
pub struct Causes<'a>(pub &'a (dyn std::error::Error + 'a));

impl std::fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ODD: &str =
        "a\u{2028}b\u{2029}c\u{85}d\u{202e}e\u{2066}f\u{200f}g\u{61c}h\u{1b}[0m\u{7f}\ti\nj";

    #[test]
    fn text_escapes_every_forging_character() {
        assert_eq!(
            escape_text(ODD),
            "a\\u{2028}b\\u{2029}c\\u{85}d\\u{202e}e\\u{2066}f\\u{200f}g\\u{61c}h\\u{1b}[0m\\u{7f}\\u{9}i\\u{a}j"
        );
        assert!(matches!(
            escape_text("DOMAIN\\alice é"),
            Cow::Borrowed("DOMAIN\\alice é")
        ));
        assert_eq!(escape_lines("a\u{2028}\nb\r\n"), "a\\u{2028}\nb\\u{d}\n");
    }

    #[test]
    fn json_stays_json_and_parses_to_the_same_value() {
        let value = serde_json::json!({ "name": ODD, "list": [ODD] });
        for raw in [
            value.to_string(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let safe = escape_json(&raw);
            assert!(!safe.contains(['\u{2028}', '\u{2029}', '\u{85}', '\u{202e}', '\u{7f}']));
            assert!(
                safe.contains("\\u2028") && safe.contains("\\u0085"),
                "{safe}"
            );
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
                value
            );
        }
        assert!(!escape_json(&value.to_string()).chars().any(must_escape));
    }
}
