//! The rule `binary`, the issuer's binary (`issuer/src/bin/issuer/`) apart from its library (the
//! rest of `issuer/src/`): the binary uses the library as any other crate would (`issuer::…`), and
//! the library never names the binary. So a library file never includes a file of `bin/` (`#[path =
//! "…"]` on a `mod`, or `include!("…")`), the crate root `lib.rs` declares no module named like one
//! of the binary's (`mod commands;`), and a file of the binary never includes a library file.
//!
//! Test code counts too: a test of the library reaching into the binary ties them as much.

use super::imports::declared_mods;
use super::source::{is_ident, Source};
use super::Violation;
use std::collections::BTreeSet;

/// The library and the binaries of one package: `src` and its `bin/` folder.
pub struct Package<'a> {
    pub src: &'a str,
    /// The library's crate name, as the binary names it.
    pub lib: &'a str,
}

/// The issuer's.
pub const ISSUER: Package<'static> = Package {
    src: super::imports::ISSUER_SRC,
    lib: "issuer",
};

impl Package<'_> {
    fn bin(&self) -> String {
        format!("{}bin/", self.src)
    }

    fn in_library(&self, path: &str) -> bool {
        path.starts_with(self.src) && !path.starts_with(&self.bin())
    }

    fn in_binary(&self, path: &str) -> bool {
        path.starts_with(&self.bin())
    }
}

/// The files a source includes by path: each `#[path = "…"]` and `include!("…")`, with the path
/// as written, where it leads from the repository root, and its byte offset.
pub fn inclusions(s: &Source) -> Vec<(String, String, usize)> {
    let (code, b) = (&s.code, s.code.as_bytes());
    let skip_ws = |mut i: usize| {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    let word_at = |i: usize, w: &str| {
        code[i..].starts_with(w) && !b.get(i + w.len()).is_some_and(|&c| is_ident(c))
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices('#') {
        let i = skip_ws(at + 1);
        if b.get(i) != Some(&b'[') || !word_at(skip_ws(i + 1), "path") {
            continue;
        }
        let i = skip_ws(skip_ws(i + 1) + "path".len());
        if b.get(i) == Some(&b'=') {
            out.extend(literal_at(s, i + 1).map(|l| (l, at)));
        }
    }
    for (at, _) in code.match_indices("include") {
        let before = at.checked_sub(1).map(|i| b[i]);
        if before.is_some_and(is_ident) || !word_at(at, "include") {
            continue;
        }
        let i = skip_ws(at + "include".len());
        if b.get(i) == Some(&b'!') && b.get(skip_ws(i + 1)) == Some(&b'(') {
            out.extend(literal_at(s, skip_ws(i + 1) + 1).map(|l| (l, at)));
        }
    }
    out.sort_by_key(|(_, at)| *at);
    let dir = s.path.rsplit_once('/').map_or("", |(d, _)| d);
    out.into_iter()
        .map(|(literal, at)| {
            let target = normalize(&format!("{dir}/{literal}"));
            (literal, target, at)
        })
        .collect()
}

/// The plain string literal at `i` of the source's text, after any whitespace (the literal is
/// blanked in its code, so it is read from the text).
fn literal_at(s: &Source, i: usize) -> Option<String> {
    let rest = s.text.get(i..)?.trim_start().strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| rest[..end].to_owned())
}

/// `a/b/../c/./d` as `a/c/d`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The top-level modules of the package's binaries (`bin/NAME/X.rs`, `bin/NAME/X/`) that the
/// library does not have.
fn binary_modules(sources: &[Source], pkg: &Package) -> BTreeSet<String> {
    let bin = pkg.bin();
    let library: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.path.strip_prefix(pkg.src))
        .filter_map(|rest| rest.split('/').next())
        .map(|first| first.trim_end_matches(".rs").to_owned())
        .collect();
    sources
        .iter()
        .filter_map(|s| s.path.strip_prefix(&bin)?.split('/').nth(1))
        .map(|first| first.trim_end_matches(".rs").to_owned())
        .filter(|m| m != "main" && !library.contains(m))
        .collect()
}

/// Every crossing between the package's library and its binaries.
pub fn check(sources: &[Source], pkg: &Package) -> Vec<Violation> {
    let mut out = Vec::new();
    let violation = |s: &Source, at: usize, detail: &str, message: String| Violation {
        rule: "binary",
        file: s.path.clone(),
        line: s.line(at),
        detail: detail.to_owned(),
        message,
    };
    for s in sources {
        let library = pkg.in_library(&s.path);
        if !library && !pkg.in_binary(&s.path) {
            continue;
        }
        for (literal, target, at) in inclusions(s) {
            if library && pkg.in_binary(&target) {
                out.push(violation(s, at, &literal, format!("the library includes `{literal}` ({target}), a file of the binary: the library never names the binary; move what both need into the library")));
            } else if !library && pkg.in_library(&target) {
                out.push(violation(s, at, &literal, format!("the binary includes `{literal}` ({target}), a file of the library: use it as `{}::…` instead", pkg.lib)));
            }
        }
    }
    let root = format!("{}lib.rs", pkg.src);
    let of_binary = binary_modules(sources, pkg);
    for s in sources.iter().filter(|s| s.path == root) {
        for name in declared_mods(&s.code)
            .into_iter()
            .filter(|m| of_binary.contains(m))
        {
            let at = s.code.find(&format!("mod {name}")).unwrap_or(0);
            out.push(violation(s, at, &name, format!("the library declares `mod {name}`, a module of the binary ({}): the library never names the binary", pkg.bin())));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PKG: Package<'static> = Package {
        src: "p/src/",
        lib: "p",
    };

    fn sources(files: &[(&str, &str)]) -> Vec<Source> {
        files.iter().map(|(p, t)| Source::new(p, t)).collect()
    }

    #[test]
    fn path_attributes_and_includes_are_read_and_resolved() {
        let s = Source::new(
            "p/src/bin/tool/main.rs",
            "#[path = \"../../store.rs\"]\nmod store;\n# [ path=\"./x/y.rs\" ] mod y;\ninclude!(\"../../gen.rs\");\n// #[path = \"../../a.rs\"]\nconst S: &str = \"#[path = \\\"b.rs\\\"]\";\nmy_include!(\"c.rs\");\n",
        );
        let found: Vec<(String, String, usize)> = inclusions(&s)
            .into_iter()
            .map(|(l, t, at)| (l, t, s.line(at)))
            .collect();
        assert_eq!(
            found,
            [
                ("../../store.rs".into(), "p/src/store.rs".into(), 1),
                ("./x/y.rs".into(), "p/src/bin/tool/x/y.rs".into(), 3),
                ("../../gen.rs".into(), "p/src/gen.rs".into(), 4),
            ]
        );
    }

    #[test]
    fn the_library_naming_the_binary_fails() {
        let v = check(
            &sources(&[
                ("p/src/lib.rs", "pub mod admin;\nmod commands;\npub mod store;\n"),
                ("p/src/admin.rs", "#[path = \"bin/tool/out.rs\"]\nmod out;\n"),
                ("p/src/store/mod.rs", "include!(\"../bin/tool/commands/serve.rs\");\n#[cfg(test)]\n#[path = \"tests.rs\"]\nmod tests;\n"),
                ("p/src/bin/tool/main.rs", "mod admin;\nmod commands;\nmod out;\nuse p::store::Store;\n"),
                ("p/src/bin/tool/admin.rs", ""),
                ("p/src/bin/tool/out.rs", ""),
                ("p/src/bin/tool/commands/serve.rs", ""),
            ]),
            &PKG,
        );
        let found: Vec<(&str, usize, &str)> = v
            .iter()
            .map(|v| (v.file.as_str(), v.line, v.detail.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("p/src/admin.rs", 1, "bin/tool/out.rs"),
                ("p/src/store/mod.rs", 1, "../bin/tool/commands/serve.rs"),
                ("p/src/lib.rs", 2, "commands"),
            ]
        );
    }

    #[test]
    fn the_binary_including_a_library_file_fails() {
        let v = check(
            &sources(&[
                ("p/src/lib.rs", "pub mod store;\n"),
                ("p/src/bin/tool/main.rs", "#[path = \"../../store/keys.rs\"]\nmod keys;\n#[path = \"cmds/x.rs\"]\nmod x;\n"),
                ("p/src/bin/tool/cmds/y.rs", "include!(\"../../../gen/table.rs\");\ninclude!(\"../../../../build/out.rs\");\n"),
            ]),
            &PKG,
        );
        let found: Vec<(&str, usize, &str)> = v
            .iter()
            .map(|v| (v.file.as_str(), v.line, v.detail.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("p/src/bin/tool/main.rs", 1, "../../store/keys.rs"),
                ("p/src/bin/tool/cmds/y.rs", 1, "../../../gen/table.rs"),
            ]
        );
        assert!(v[0].message.contains("use it as `p::…` instead"));
    }
}
