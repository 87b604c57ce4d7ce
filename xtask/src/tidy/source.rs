//! A Rust source file as the rules read it: its code with every comment and string or character
//! literal blanked (so a brace or a `crate::` in them counts for nothing), where its line
//! comments are (for the doc links), and which parts of it are test code (`#[cfg(test)]` and
//! `#[test]` items).
//!
//! Blanking keeps every newline and every byte offset, so an offset in the code is the same
//! offset, on the same line, in the text.

use std::ops::Range;

/// One Rust file, read for the rules.
pub struct Source {
    /// Path relative to the repository root, with `/`.
    pub path: String,
    pub text: String,
    /// The text with comments and literals blanked.
    pub code: String,
    /// Where each `//` comment is, from its `//` to the end of its line.
    pub line_comments: Vec<Range<usize>>,
    /// Byte ranges of test items (`#[cfg(test)]` modules, `#[test]` functions).
    pub tests: Vec<Range<usize>>,
    /// Names of test modules declared here in files of their own (`#[cfg(test)] mod tests;`).
    pub test_mods: Vec<String>,
    /// True for a file that is test code as a whole: an integration test, or the file of a
    /// `#[cfg(test)]` module.
    pub test_file: bool,
}

impl Source {
    pub fn new(path: &str, text: &str) -> Source {
        let (code, line_comments) = blank(text);
        let (tests, test_mods) = test_items(&code);
        Source {
            path: path.to_owned(),
            text: text.to_owned(),
            code,
            line_comments,
            tests,
            test_mods,
            test_file: false,
        }
    }

    /// The 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        line_of(&self.text, offset)
    }

    /// True when `offset` is in test code.
    pub fn in_test(&self, offset: usize) -> bool {
        self.test_file || self.tests.iter().any(|r| r.contains(&offset))
    }

    /// The code with its test items blanked as well (all of it for a test file).
    pub fn product_code(&self) -> String {
        if self.test_file {
            return blank_ranges(&self.code, std::slice::from_ref(&(0..self.code.len())));
        }
        blank_ranges(&self.code, &self.tests)
    }
}

/// The 1-based line of a byte offset of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

pub fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `code` with the bytes of `ranges` blanked (newlines kept).
fn blank_ranges(code: &str, ranges: &[Range<usize>]) -> String {
    let mut bytes = code.as_bytes().to_vec();
    for range in ranges {
        for b in &mut bytes[range.clone()] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    String::from_utf8(bytes).expect("blanking whole characters keeps UTF-8")
}

/// The text with comments and literals blanked, and the ranges of its line comments.
fn blank(text: &str) -> (String, Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut blanked: Vec<Range<usize>> = Vec::new();
    let mut line_comments = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let literal = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                line_comments.push(i..end);
                Some(end)
            }
            b'/' if b.get(i + 1) == Some(&b'*') => Some(block_comment_end(b, i)),
            b'"' => Some(string_end(b, i)),
            b'\'' => char_end(text, i),
            c if is_ident(c) && (i == 0 || !is_ident(b[i - 1])) => {
                let literal = prefixed_literal_end(text, i);
                if literal.is_none() {
                    i += b[i..].iter().take_while(|&&c| is_ident(c)).count() - 1;
                }
                literal
            }
            _ => None,
        };
        match literal {
            Some(end) => {
                blanked.push(i..end);
                i = end;
            }
            None => i += 1,
        }
    }
    (blank_ranges(text, &blanked), line_comments)
}

/// The end of a (nested) block comment starting at `start`.
fn block_comment_end(b: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// The end (past the closing quote) of a string whose opening quote is at `quote`.
fn string_end(b: &[u8], quote: usize) -> usize {
    let mut i = quote + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of a character literal at `quote`, or None for a lifetime or label.
fn char_end(text: &str, quote: usize) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(quote + 1) == Some(&b'\\') {
        let close = text.get(quote + 3..)?.find('\'')?;
        return Some(quote + 3 + close + 1);
    }
    let c = text.get(quote + 1..)?.chars().next()?;
    let after = quote + 1 + c.len_utf8();
    (b.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// The end of a literal with a prefix at `start` (`b"…"`, `r#"…"#`, `br"…"`, `c"…"`, `b'…'`),
/// or None when the identifier there is only an identifier.
fn prefixed_literal_end(text: &str, start: usize) -> Option<usize> {
    let b = text.as_bytes();
    let prefix_len = [&b"br"[..], b"cr", b"r", b"b", b"c"]
        .iter()
        .find(|p| b[start..].starts_with(p))?
        .len();
    let prefix = &b[start..start + prefix_len];
    let at = start + prefix_len;
    if prefix.ends_with(b"r") {
        let hashes = b[at..].iter().take_while(|&&c| c == b'#').count();
        if b.get(at + hashes) != Some(&b'"') {
            return None;
        }
        let mut close = vec![b'"'];
        close.extend(std::iter::repeat_n(b'#', hashes));
        let body = at + hashes + 1;
        let end = b[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |p| body + p + close.len());
        return Some(end);
    }
    match b.get(at) {
        Some(b'"') => Some(string_end(b, at)),
        Some(b'\'') if prefix == b"b" => char_end(text, at),
        _ => None,
    }
}

/// The test items of blanked code, and the names of test modules in files of their own.
fn test_items(code: &str) -> (Vec<Range<usize>>, Vec<String>) {
    let b = code.as_bytes();
    let (mut ranges, mut mods) = (Vec::new(), Vec::new());
    let mut from = 0;
    while let Some(found) = code[from..].find('#') {
        let hash = from + found;
        from = hash + 1;
        let inner = b.get(hash + 1) == Some(&b'!');
        let open = hash + 1 + usize::from(inner);
        if b.get(open) != Some(&b'[') {
            continue;
        }
        let close = matching(b, open, b'[', b']');
        let attr: String = code[open + 1..close.saturating_sub(1)]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let is_test = attr == "cfg(test)" || attr == "test" || attr.starts_with("tokio::test");
        if !is_test {
            continue;
        }
        if inner {
            ranges.push(0..code.len());
            continue;
        }
        let (stop, end) = item_end(b, close);
        if b.get(stop) == Some(&b';') {
            let words: Vec<&str> = code[close..stop].split_whitespace().collect();
            if let Some(p) = words.iter().position(|w| *w == "mod") {
                mods.extend(words.get(p + 1).map(|n| n.to_string()));
            }
        }
        ranges.push(hash..end);
        from = end.max(close);
    }
    (ranges, mods)
}

/// Where the item starting at `from` stops (its first `{` or `;` outside brackets) and ends
/// (past its closing brace, or its `;`).
pub fn item_end(b: &[u8], from: usize) -> (usize, usize) {
    let mut depth = 0usize;
    for i in from..b.len() {
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b';' if depth == 0 => return (i, i + 1),
            b'{' if depth == 0 => return (i, matching(b, i, b'{', b'}')),
            _ => {}
        }
    }
    (b.len(), b.len())
}

/// The offset past the bracket that closes the one at `open`.
pub fn matching(b: &[u8], open: usize, left: u8, right: u8) -> usize {
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate().skip(open) {
        if c == left {
            depth += 1;
        } else if c == right {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_literals_are_blanked_keeping_offsets() {
        let text = "let a = \"{ crate::x }\"; // crate::y {\n/* crate::z /* { */ } */ let c = '{';\nlet d = r#\"}\"#; let e = b'}'; let f = br\"{\"; fn g<'a>(x: &'a str) {}\n";
        let s = Source::new("f.rs", text);
        assert_eq!(s.code.len(), text.len());
        assert_eq!(s.code.lines().count(), 3);
        assert!(!s.code.contains("crate"), "{}", s.code);
        assert_eq!(s.code.matches('{').count(), 1, "{}", s.code);
        assert_eq!(s.code.matches('}').count(), 1, "{}", s.code);
        assert!(s.code.contains("fn g<'a>(x: &'a str) {}"));
        assert_eq!(s.line_comments.len(), 1);
        assert_eq!(&text[s.line_comments[0].clone()], "// crate::y {");
    }

    #[test]
    fn escapes_and_raw_identifiers_do_not_end_or_start_literals() {
        let s = Source::new(
            "f.rs",
            "let a = \"\\\"{\"; let b = '\\''; let r#type = 1; x{}\n",
        );
        assert_eq!(s.code.matches('{').count(), 1, "{}", s.code);
        assert!(s.code.contains("r#type"));
    }

    #[test]
    fn test_items_are_found() {
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\n#[test]\nfn c() {}\n#[cfg(test)]\nmod more;\nfn d() {}\n";
        let s = Source::new("f.rs", text);
        assert!(!s.in_test(text.find("fn a").unwrap()));
        assert!(s.in_test(text.find("fn b").unwrap()));
        assert!(s.in_test(text.find("fn c").unwrap()));
        assert!(!s.in_test(text.find("fn d").unwrap()));
        assert_eq!(s.test_mods, ["more"]);
        assert!(!s.product_code().contains("fn b"));
        assert!(s.product_code().contains("fn d"));
    }
}
