//! The rules `cycle` and `anyhow`: no import cycle among the filter's top-level modules, and no
//! `anyhow` in the product's library code (its binaries may). The issuer's layers (`layers.rs`)
//! read imports the same way, with the helpers here.
//!
//! They read the `crate::` paths of the product code (test items left out: a test may reach
//! anywhere), `use crate::{a, b::c}` groups included, and attribute each to the file's top-level
//! module.

use super::source::{is_ident, Source};
use super::Violation;
use std::collections::{BTreeMap, BTreeSet};

/// Where the issuer's modules are.
pub const ISSUER_SRC: &str = "issuer/src/";
/// Where the filter core's modules are (the adapters are a module or two each).
pub const FILTER_SRC: &str = "filter-wasm/core/src/";

/// The top-level module of a file under `src` (`main`, `lib`, or the module's name).
pub fn top_module(path: &str, src: &str) -> Option<String> {
    let rest = path.strip_prefix(src)?;
    let first = rest.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first).to_owned())
}

/// The top-level modules named by the `crate::` paths of `code`, each with its byte offset.
pub fn crate_refs(code: &str) -> Vec<(String, usize)> {
    let mut refs = Vec::new();
    for at in whole_words(code, "crate") {
        let rest = code[at + "crate".len()..].trim_start();
        let Some(path) = rest.strip_prefix("::") else {
            continue;
        };
        let start = code.len() - path.len();
        refs.extend(path_heads(code, start));
    }
    refs
}

/// The offsets of `word` in `code` as a whole identifier (not part of a longer one, nor a
/// macro's `$word`).
fn whole_words<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let b = code.as_bytes();
    code.match_indices(word)
        .map(|(at, _)| at)
        .filter(move |&at| {
            let before = at.checked_sub(1).map(|i| b[i]);
            !before.is_some_and(|c| is_ident(c) || c == b'$')
                && !b.get(at + word.len()).is_some_and(|&c| is_ident(c))
        })
}

/// The first segment of the path at `start`, or of each path of a `{…}` group there.
fn path_heads(code: &str, start: usize) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let skip_ws = |mut i: usize| {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    let ident_at = |i: usize| -> Option<(String, usize)> {
        let len = b[i..].iter().take_while(|&&c| is_ident(c)).count();
        (len > 0).then(|| (code[i..i + len].to_owned(), i))
    };
    let i = skip_ws(start);
    if b.get(i) != Some(&b'{') {
        return ident_at(i).into_iter().collect();
    }
    let mut heads = Vec::new();
    let (mut depth, mut item_start) = (0usize, Some(i + 1));
    for (j, &c) in b.iter().enumerate().skip(i) {
        if let Some(s) = item_start.take() {
            heads.extend(ident_at(skip_ws(s)).filter(|(name, _)| name != "self"));
        }
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => item_start = Some(j + 1),
            _ => {}
        }
    }
    heads
}

/// The product's libraries, whose errors are enums: `anyhow` only in their binaries (a
/// `main.rs` and the modules it declares, or any file under a package's `bin` folder, such as
/// the issuer's command line in `issuer/src/bin/issuer/`).
pub const LIBRARY_SRCS: [&str; 6] = [
    "shared/src/",
    "filter-wasm/core/src/",
    "filter-wasm/envoy/src/",
    "filter-wasm/native/src/",
    "filter-wasm/js/src/",
    ISSUER_SRC,
];

/// Uses of `anyhow` in the product's library code.
pub fn anyhow_in_libraries(sources: &[Source]) -> Vec<Violation> {
    let mut out = Vec::new();
    for src in LIBRARY_SRCS {
        let binary: BTreeSet<String> = sources
            .iter()
            .filter(|s| s.path == format!("{src}main.rs"))
            .flat_map(|s| declared_mods(&s.product_code()))
            .chain(["main".to_owned()])
            .collect();
        for s in sources {
            let Some(module) = top_module(&s.path, src) else {
                continue;
            };
            if binary.contains(&module) || s.path.starts_with(&format!("{src}bin/")) {
                continue;
            }
            let code = s.product_code();
            let Some(at) = whole_words(&code, "anyhow").next() else {
                continue;
            };
            out.push(Violation {
                rule: "anyhow",
                file: s.path.clone(),
                line: s.line(at),
                detail: module.clone(),
                message: format!(
                    "`{module}` is library code and uses `anyhow`: a library's errors are enums (thiserror); anyhow belongs to binaries and xtask"
                ),
            });
        }
    }
    out
}

/// The names of the `mod NAME;` declarations of `code`.
pub fn declared_mods(code: &str) -> Vec<String> {
    code.split(';')
        .filter_map(|item| {
            let words: Vec<&str> = item.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] if name.bytes().all(is_ident) => Some((*name).to_owned()),
                _ => None,
            }
        })
        .collect()
}

/// Import cycles among the filter's top-level modules, one violation per cycle.
pub fn cycles(sources: &[Source]) -> Vec<Violation> {
    // module → (module it uses → where, first found)
    let mut edges: BTreeMap<String, BTreeMap<String, (String, usize)>> = BTreeMap::new();
    for s in sources {
        let Some(module) = top_module(&s.path, FILTER_SRC).filter(|m| m != "lib") else {
            continue;
        };
        let uses = edges.entry(module.clone()).or_default();
        for (target, offset) in crate_refs(&s.product_code()) {
            if target != module {
                uses.entry(target)
                    .or_insert_with(|| (s.path.clone(), s.line(offset)));
            }
        }
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(m) = todo.pop() {
            for next in edges.get(&m).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (m, from_m) in &reached {
        if done.contains(*m) || !from_m.contains(*m) {
            continue;
        }
        let cycle: Vec<&String> = from_m
            .iter()
            .filter(|n| reached.get(n).is_some_and(|r| r.contains(*m)))
            .collect();
        done.extend(cycle.iter().map(|n| (*n).clone()));
        out.push(cycle_violation(&edges, &cycle));
    }
    out
}

/// The violation of one cycle (the modules each reach the others), listing its imports.
fn cycle_violation(
    edges: &BTreeMap<String, BTreeMap<String, (String, usize)>>,
    cycle: &[&String],
) -> Violation {
    let mut imports = Vec::new();
    for m in cycle {
        for (target, (file, line)) in &edges[*m] {
            if cycle.contains(&target) {
                imports.push((
                    file.clone(),
                    *line,
                    format!("{file}:{line}: `{m}` uses `crate::{target}`"),
                ));
            }
        }
    }
    let names: Vec<&str> = cycle.iter().map(|m| m.as_str()).collect();
    let listed: Vec<String> = imports.iter().map(|(_, _, text)| text.clone()).collect();
    Violation {
        rule: "cycle",
        file: FILTER_SRC.trim_end_matches('/').to_owned(),
        line: 0,
        detail: names.join(","),
        message: format!(
            "import cycle among {}: {}\n    {}",
            FILTER_SRC,
            names.join(", "),
            listed.join("\n    ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> Vec<Source> {
        files.iter().map(|(p, t)| Source::new(p, t)).collect()
    }

    #[test]
    fn crate_paths_and_groups_are_read() {
        let code = "use crate::a::B;\nuse crate::{b, c::{D, E}, self};\nlet x = crate :: d::f();\npub(crate) fn g() {}\n$crate::h; notcrate::i;";
        let names: Vec<String> = crate_refs(code).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }

    #[test]
    fn anyhow_is_refused_in_library_code_only() {
        let v = anyhow_in_libraries(&sources(&[
            ("issuer/src/main.rs", "mod cmd_admin;\npub mod serve_listen;\nuse anyhow::Result;\n"),
            ("issuer/src/cmd_admin.rs", "use anyhow::bail;\n"),
            ("issuer/src/serve_listen/tls.rs", "fn f() -> anyhow::Result<()> { Ok(()) }\n"),
            ("issuer/src/app/mod.rs", "use crate::store::Store;\n\nfn f() -> anyhow::Result<()> { Ok(()) }\n"),
            ("issuer/src/http.rs", "// anyhow\nconst S: &str = \"anyhow\";\nfn not_anyhow_x() {}\n#[cfg(test)]\nmod tests { use anyhow::Result; }\n"),
            ("shared/src/lib.rs", "pub use anyhow::Error;\n"),
            ("tests/src/lib.rs", "use anyhow::Result;\n"),
            ("xtask/src/main.rs", "use anyhow::Result;\n"),
        ]));
        let found: Vec<(&str, usize)> = v.iter().map(|v| (v.file.as_str(), v.line)).collect();
        assert_eq!(
            found,
            [("shared/src/lib.rs", 1), ("issuer/src/app/mod.rs", 3)]
        );
    }

    #[test]
    fn a_cycle_among_the_filters_modules_fails() {
        let v = cycles(&sources(&[
            (
                "filter-wasm/core/src/config.rs",
                "use crate::edge::EdgeSync;\nuse crate::cache::X;\n",
            ),
            (
                "filter-wasm/core/src/edge.rs",
                "use crate::cache::TokenCache;\nuse crate::config::Config;\n",
            ),
            ("filter-wasm/core/src/cache.rs", "use crate::bearer::x;\n"),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].detail, "config,edge");
        assert!(v[0]
            .message
            .contains("filter-wasm/core/src/config.rs:1: `config` uses `crate::edge`"));
        assert!(v[0]
            .message
            .contains("filter-wasm/core/src/edge.rs:2: `edge` uses `crate::config`"));
    }

    #[test]
    fn a_dag_and_a_test_only_edge_pass() {
        let v = cycles(&sources(&[
            ("filter-wasm/core/src/lib.rs", "mod config; use crate::config::x;\n"),
            ("filter-wasm/core/src/decision.rs", "use crate::edge::EdgeState;\nuse crate::config::Config;\n"),
            ("filter-wasm/core/src/edge.rs", "use crate::config::Config;\nuse crate::edge::inner;\n#[cfg(test)]\nmod tests { use crate::decision::decide; }\n"),
            ("filter-wasm/core/src/config.rs", "use crate::cache::DEFAULT;\n"),
        ]));
        assert!(v.is_empty(), "{v:?}");
    }
}
