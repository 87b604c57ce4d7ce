//! The rules `doc-link` and `outside-ref`.
//!
//! `doc-link`: a Markdown link `[text](path)` or a backticked repository path in a `*.md` file or
//! a `//!`/`///` comment names something that exists.
//!
//! `outside-ref`: no `*.md` file, Rust comment or string literal of product code cites what a
//! reader of the repository cannot open: an issue number (`issue N`, `#N`, `name#N`; a URL says
//! where instead; a standard's `PKCS#N` is no issue) or a Markdown file by a bare name
//! (`NAME.md`) that no `*.md` file of the repository has. Fenced code blocks aside, as for the doc
//! links.
//!
//! What counts as a repository path: no spaces, a `/` in it, and a known extension, or a trailing
//! `/` for a folder (checked when its first folder exists, so `dir/tls/` for a parameter `dir` is
//! not); not a URL, an absolute path, a glob, or a placeholder (`FILE.md`, `DIR`, `…`, `<x>`); not
//! under the folders builds write (`target/`, `dist/`, `.demo/`, `.tools/`). `:LINE` and
//! `#anchor` suffixes are dropped. A Markdown link in a `*.md` file is relative to that file; any
//! other path may be relative to the repository root, to the file's folder, or to its package.

use super::source::Source;
use super::Violation;

/// Extensions of the files a path may name.
const EXTENSIONS: [&str; 13] = [
    "rs", "md", "yaml", "yml", "toml", "json", "html", "mjs", "js", "py", "txt", "sh", "lock",
];
/// Folders whose contents builds and runs write: never checked.
pub const GENERATED: [&str; 9] = [
    "target/",
    "dist/",
    ".demo/",
    ".tools/",
    "node_modules/",
    "fuzz/corpus/",
    "fuzz/artifacts/",
    "fuzz/coverage/",
    "fuzz/target/",
];

/// Names that stand for a file in a path (`FILE.md`); a folder in capitals (`DIR`) does too.
const PLACEHOLDERS: [&str; 6] = ["FILE", "NAME", "PATH", "X", "N", "VERSION"];

/// One path a document cites, with its line, and whether it is a Markdown link.
#[derive(Debug, PartialEq, Eq)]
pub struct Cited {
    pub path: String,
    pub line: usize,
    pub link: bool,
}

/// The paths a Markdown file cites, outside fenced code blocks.
pub fn cited_in_markdown(text: &str) -> Vec<Cited> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.extend(cited_in_line(line, n + 1, true));
        }
    }
    out
}

/// The paths the `//!` and `///` comments of a Rust file cite.
pub fn cited_in_docs(s: &Source) -> Vec<Cited> {
    let mut out = Vec::new();
    for r in &s.line_comments {
        let comment = &s.text[r.clone()];
        let doc = ["//!", "///"]
            .iter()
            .find_map(|m| comment.strip_prefix(m))
            .filter(|rest| !rest.starts_with('/'));
        if let Some(doc) = doc {
            out.extend(cited_in_line(doc, s.line(r.start), false));
        }
    }
    out
}

/// The Markdown link targets and backticked paths of one line.
fn cited_in_line(line: &str, number: usize, markdown: bool) -> Vec<Cited> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let checked = if markdown { link_path(target) } else { None };
        if let Some(path) = checked.or_else(|| repository_path(target)) {
            out.push(Cited {
                path,
                line: number,
                link: markdown,
            });
        }
        rest = &after[end..];
    }
    let spans: Vec<&str> = line.split('`').collect();
    for span in spans.iter().skip(1).step_by(2).take((spans.len() - 1) / 2) {
        if let Some(path) = repository_path(span) {
            out.push(Cited {
                path,
                line: number,
                link: false,
            });
        }
    }
    out
}

/// A Markdown link target that is a path in the repository (not a URL or an anchor).
fn link_path(target: &str) -> Option<String> {
    let path = strip_suffixes(target.trim_matches(['<', '>']));
    let external = path.contains("://") || path.starts_with("mailto:");
    (!path.is_empty() && !external && !generated(path)).then(|| path.to_owned())
}

/// Text that is a path in the repository, by the rules in the module comment.
pub fn repository_path(text: &str) -> Option<String> {
    let path = strip_suffixes(text);
    let forbidden = |c: char| c.is_whitespace() || "*<>{}()[]$=,;:'\"|\\@~".contains(c);
    if !path.contains('/') || path.starts_with(['/', '-']) {
        return None;
    }
    if path.contains(forbidden) || path.contains("...") || path.contains('…') || generated(path) {
        return None;
    }
    let upper = |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
    let placeholder = |c: &str| match c.split_once('.') {
        None => upper(c),
        Some((stem, _)) => PLACEHOLDERS.contains(&stem),
    };
    if path.split('/').any(placeholder) {
        return None;
    }
    let file = path.rsplit('/').next().unwrap_or("");
    let known = file
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
    (known || path.ends_with('/')).then(|| path.to_owned())
}

/// The path without a `#anchor` or a `:LINE` (`:LINE-LINE`, `:LINE:COLUMN`) suffix.
fn strip_suffixes(text: &str) -> &str {
    let path = text.split('#').next().unwrap_or("");
    match path.split_once(':') {
        Some((p, n))
            if !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'-' || b == b':') =>
        {
            p
        }
        _ => path,
    }
}

fn generated(path: &str) -> bool {
    let path = path.trim_start_matches("./");
    GENERATED
        .iter()
        .any(|g| path.starts_with(g) || path == g.trim_end_matches('/'))
}

/// Where a cited path may be, relative to the repository root: a Markdown link in a `*.md` file
/// from that file's folder; anything else from the root, the file's folder or its package.
pub fn candidates(file: &str, cited: &Cited, packages: &[String]) -> Vec<String> {
    let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
    if cited.link && file.ends_with(".md") {
        return vec![normalize(dir, &cited.path)];
    }
    let mut out = vec![normalize("", &cited.path), normalize(dir, &cited.path)];
    let package = packages.iter().find(|p| file.starts_with(&format!("{p}/")));
    out.extend(package.map(|p| normalize(p, &cited.path)));
    out
}

/// `path` from folder `dir`, with `.` and `..` resolved (a path above the root stays visible as
/// `../`, so it never exists).
fn normalize(dir: &str, path: &str) -> String {
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    if path.ends_with('/') {
        joined + "/"
    } else {
        joined
    }
}

/// False for a folder whose first component exists nowhere it may be relative to: a
/// placeholder such as `dir/tls/` (a parameter `dir`), not a repository path.
fn anchored(file: &str, cited: &Cited, packages: &[String], exists: &dyn Fn(&str) -> bool) -> bool {
    if !cited.path.ends_with('/') {
        return true;
    }
    let first = cited.path.split('/').find(|c| !c.is_empty() && *c != ".");
    let first = Cited {
        path: format!("{}/", first.unwrap_or("")),
        line: cited.line,
        link: cited.link,
    };
    candidates(file, &first, packages).iter().any(|p| exists(p))
}

/// The violations among `cited` (in `file`), given what exists.
pub fn check(
    file: &str,
    cited: Vec<Cited>,
    packages: &[String],
    exists: &dyn Fn(&str) -> bool,
) -> Vec<Violation> {
    cited
        .into_iter()
        .filter(|c| anchored(file, c, packages, exists))
        .filter(|c| !candidates(file, c, packages).iter().any(|p| exists(p)))
        .map(|c| Violation {
            rule: "doc-link",
            file: file.to_owned(),
            line: c.line,
            message: format!("`{}` does not exist", c.path),
            detail: c.path,
        })
        .collect()
}

/// The text of a Markdown file with its fenced code blocks blanked (lines kept).
pub fn unfenced(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```") || trimmed.starts_with("~~~");
        if fence {
            fenced = !fenced;
        }
        if !fence && !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// What of a Rust file is prose, the rest blanked (lines and offsets kept): its `//` comments,
/// and the string and character literals of its product code (a test's literals are data).
pub fn prose(s: &Source) -> String {
    let (text, code) = (s.text.as_bytes(), s.code.as_bytes());
    let mut out: Vec<u8> = text
        .iter()
        .map(|&b| if b == b'\n' { b'\n' } else { b' ' })
        .collect();
    for r in &s.line_comments {
        out[r.clone()].copy_from_slice(&text[r.clone()]);
    }
    if !s.test_file {
        for (i, (&t, &c)) in text.iter().zip(code).enumerate() {
            if c == b' ' && t != b' ' && !s.in_test(i) {
                out[i] = t;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The references of `prose` (of `file`) a reader cannot follow: issue numbers, and Markdown
/// files named bare that none of `docs` is.
pub fn outside_refs(file: &str, prose: &str, docs: &[(String, String)]) -> Vec<Violation> {
    let known = |name: &str| docs.iter().any(|(p, _)| p.rsplit('/').next() == Some(name));
    let mut out = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        for (reference, issue) in references(line) {
            if !issue && known(&reference) {
                continue;
            }
            let message = if issue {
                format!("`{reference}` names an issue no reader of the repository can follow: say what it was, or link it with a URL")
            } else {
                format!("`{reference}` is no file of the repository")
            };
            out.push(Violation {
                rule: "outside-ref",
                file: file.to_owned(),
                line: n + 1,
                detail: reference,
                message,
            });
        }
    }
    out
}

/// The issue numbers (as `#N`, true) and bare Markdown file names (false) of one line.
fn references(line: &str) -> Vec<(String, bool)> {
    let b = line.as_bytes();
    let word = |i: usize| {
        b.get(i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    };
    let digits = |from: usize| {
        b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let ends_number = |at: usize| !word(at) && b.get(at) != Some(&b'-');
    let mut out = Vec::new();
    for (at, _) in line.match_indices('#') {
        let n = digits(at + 1);
        let before = at.checked_sub(1).map(|i| b[i]);
        let opens = before.is_none_or(|c| c.is_ascii_alphanumeric() || b" \t([,".contains(&c));
        // A standard's part (`PKCS#8`): its name in capitals.
        let name = line[..at]
            .rsplit(|c: char| !c.is_ascii_alphanumeric())
            .next();
        let standard = name.is_some_and(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        });
        let url = line[..at]
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|t| t.contains("://"));
        if n > 0 && opens && !url && !standard && ends_number(at + 1 + n) {
            out.push((format!("#{}", &line[at + 1..at + 1 + n]), true));
        }
    }
    let lower = line.to_ascii_lowercase();
    for (at, _) in lower.match_indices("issue") {
        if at > 0 && word(at - 1) {
            continue;
        }
        let mut i = at + "issue".len();
        i += usize::from(b.get(i) == Some(&b's'));
        i += usize::from(b.get(i) == Some(&b' '));
        i += usize::from(b.get(i) == Some(&b'#'));
        let n = digits(i);
        if n > 0 && ends_number(i + n) && b.get(i - 1) != Some(&b'#') {
            out.push((format!("#{}", &line[i..i + n]), true));
        }
    }
    for (at, _) in line.match_indices(".md") {
        if word(at + 3) {
            continue;
        }
        let stem = line[..at]
            .bytes()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || b"_-.".contains(c))
            .count();
        let start = at - stem;
        let placeholder = PLACEHOLDERS.contains(&&line[start..at]);
        let in_path = start > 0 && b"/\\*<{$".contains(&b[start - 1]);
        if stem > 0 && !placeholder && !in_path {
            out.push((line[start..at + 3].to_owned(), false));
        }
    }
    out
}

#[cfg(test)]
mod tests;
