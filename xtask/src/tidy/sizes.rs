//! The rules `file-length` and `fn-length`: a source file of at most [`MAX_FILE_LINES`] lines, and
//! a function of at most [`MAX_FN_LINES`] outside tests, counted from its `fn` line to its
//! closing brace.

use super::source::{is_ident, item_end, Source};
use super::Violation;

pub const MAX_FILE_LINES: usize = 600;
pub const MAX_FN_LINES: usize = 80;

/// A file over [`MAX_FILE_LINES`].
pub fn file_length(path: &str, text: &str) -> Option<Violation> {
    let lines = text.lines().count();
    (lines > MAX_FILE_LINES).then(|| Violation {
        rule: "file-length",
        file: path.to_owned(),
        line: MAX_FILE_LINES + 1,
        detail: String::new(),
        message: format!("{lines} lines (at most {MAX_FILE_LINES})"),
    })
}

/// Every function with a body: its name, and the offsets of its `fn` and of its end.
pub fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn") {
        let at = from + found;
        from = at + 2;
        let word_start = at == 0 || !is_ident(b[at - 1]);
        if !word_start || !b.get(at + 2).is_some_and(|c| c.is_ascii_whitespace()) {
            continue;
        }
        let rest = code[at + 2..].trim_start();
        let rest = rest.strip_prefix("r#").unwrap_or(rest);
        let len = rest.bytes().take_while(|&c| is_ident(c)).count();
        if len == 0 {
            continue;
        }
        let (stop, end) = item_end(b, at + 2);
        if b.get(stop) == Some(&b'{') {
            out.push((rest[..len].to_owned(), at, end));
        }
    }
    out
}

/// The functions over [`MAX_FN_LINES`] outside test code.
pub fn fn_lengths(s: &Source) -> Vec<Violation> {
    if s.test_file {
        return Vec::new();
    }
    functions(&s.code)
        .into_iter()
        .filter(|(_, at, _)| !s.in_test(*at))
        .filter_map(|(name, at, end)| {
            let first = s.line(at);
            let lines = s.line(end.saturating_sub(1)) - first + 1;
            (lines > MAX_FN_LINES).then(|| Violation {
                rule: "fn-length",
                file: s.path.clone(),
                line: first,
                detail: name.clone(),
                message: format!("fn `{name}` is {lines} lines (at most {MAX_FN_LINES})"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of `lines` lines, from its `fn` line to its closing brace.
    fn function(name: &str, lines: usize) -> String {
        let body: String = (0..lines - 2)
            .map(|i| format!("    let x{i} = \"}}\";\n"))
            .collect();
        format!("pub fn {name}(a: [u8; 2]) -> Result<(), String> {{\n{body}}}\n")
    }

    #[test]
    fn a_file_over_600_lines_fails() {
        let v = file_length("a/src/big.rs", &"x\n".repeat(601)).expect("a violation");
        assert_eq!((v.file.as_str(), v.line), ("a/src/big.rs", 601));
        assert!(file_length("a/src/ok.rs", &"x\n".repeat(600)).is_none());
    }

    #[test]
    fn functions_are_found_with_their_ends() {
        let code = "fn a() {}\ntrait T { fn b(&self); fn c() { { } } }\nlet f: fn(u8) -> u8 = g;\nfn r#match<'a>(x: &'a str) where X: Fn() {\n}\n";
        let s = Source::new("f.rs", code);
        let found: Vec<(String, &str)> = functions(&s.code)
            .into_iter()
            .map(|(n, at, end)| (n, &code[at..end]))
            .collect();
        assert_eq!(
            found,
            [
                ("a".to_owned(), "fn a() {}"),
                ("c".to_owned(), "fn c() { { } }"),
                (
                    "match".to_owned(),
                    "fn r#match<'a>(x: &'a str) where X: Fn() {\n}"
                ),
            ]
        );
    }

    #[test]
    fn a_function_over_80_lines_fails() {
        let text = function("small", 80) + &function("big", 81);
        let v = fn_lengths(&Source::new("a/src/lib.rs", &text));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].detail.as_str(), v[0].line), ("big", 81));
        assert!(v[0].message.contains("81 lines"), "{}", v[0].message);
    }

    #[test]
    fn long_functions_in_tests_pass() {
        let text = format!(
            "#[cfg(test)]\nmod tests {{\n{}}}\n#[test]\n{}",
            function("in_mod", 90),
            function("test_fn", 90)
        );
        assert!(fn_lengths(&Source::new("a/src/lib.rs", &text)).is_empty());
        let mut s = Source::new("a/tests/it.rs", &function("big", 90));
        s.test_file = true;
        assert!(fn_lengths(&s).is_empty());
    }
}
