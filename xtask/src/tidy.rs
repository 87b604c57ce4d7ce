//! `cargo xtask tidy` (and the second step of `cargo xtask test`): the repository's rules,
//! checked mechanically. It fails listing every violation with its file, line and rule.
//!
//! A rule is known by its name, and only by it: in a violation, in `xtask/tidy-allow.txt`, in
//! the module docs of `tidy/`. [`RULES`] is the one list of them, with the module that checks
//! each.
//!
//! A new rule is a module of `tidy/` with a pure function of the sources (and documents) that
//! returns [`Violation`]s, called from [`check`], and a row of [`RULES`]. Known violations are
//! listed in `xtask/tidy-allow.txt` (`allow.rs`) until they are fixed.

mod allow;
mod binary;
mod core;
mod facts;
mod imports;
mod layers;
mod links;
mod sizes;
mod source;

use crate::util::root;
use anyhow::{bail, Context, Result};
use source::Source;
use std::collections::BTreeSet;
use std::path::Path;

/// One rule: its name, whether an allow-list entry of it names a detail (see `allow.rs`), the
/// module that checks it, and what it asks.
pub struct Rule {
    pub name: &'static str,
    pub detailed: bool,
    pub module: &'static str,
    pub asks: &'static str,
}

/// Every rule.
pub const RULES: [Rule; 12] = [
    Rule {
        name: "layer",
        detailed: true,
        module: "layers.rs",
        asks: "a module of the issuer's library uses only its own layer and those below (`ISSUER_LAYERS`)",
    },
    Rule {
        name: "unlayered",
        detailed: true,
        module: "layers.rs",
        asks: "every module of the issuer's library has a layer, and every module of the table exists",
    },
    Rule {
        name: "layer-doc",
        detailed: false,
        module: "layers.rs",
        asks: "`docs/architecture.md`'s copy of the layer table is the table",
    },
    Rule {
        name: "binary",
        detailed: true,
        module: "binary.rs",
        asks: "the issuer's binary (`issuer/src/bin/`) and its library include no file of each other, and the library declares no module of the binary",
    },
    Rule {
        name: "cycle",
        detailed: true,
        module: "imports.rs",
        asks: "no import cycle among the filter core's modules",
    },
    Rule {
        name: "anyhow",
        detailed: true,
        module: "imports.rs",
        asks: "no `anyhow` in the libraries of `shared`, the filter's crates and `issuer` (only in their binaries)",
    },
    Rule {
        name: "file-length",
        detailed: false,
        module: "sizes.rs",
        asks: "a Rust source file of at most `MAX_FILE_LINES` lines",
    },
    Rule {
        name: "fn-length",
        detailed: true,
        module: "sizes.rs",
        asks: "a function of at most `MAX_FN_LINES` lines outside tests",
    },
    Rule {
        name: "doc-link",
        detailed: true,
        module: "links.rs",
        asks: "a path a `*.md` file or a doc comment cites exists in the repository",
    },
    Rule {
        name: "outside-ref",
        detailed: true,
        module: "links.rs",
        asks: "no document or comment cites what a reader of the repository cannot open: a Markdown file it does not hold, an issue number",
    },
    Rule {
        name: "fact",
        detailed: true,
        module: "facts.rs",
        asks: "a document that states a limit of the code (`FACTS`) names its constant and states its value",
    },
    Rule {
        name: "core-purity",
        detailed: true,
        module: "core.rs",
        asks: "the filter's core has no `unsafe` and names no proxy-wasm or Envoy ABI type",
    },
];

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    /// From the repository root, with `/`.
    pub file: String,
    /// 1-based; 0 when the violation spans files (its message lists where).
    pub line: usize,
    /// What, within the file, an allow-list entry names: see `allow.rs`.
    pub detail: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}: {}", self.file, self.rule, self.message),
            n => write!(f, "{}:{n}: {}: {}", self.file, self.rule, self.message),
        }
    }
}

/// Checks every rule on the repository, honouring the allow-list.
pub fn tidy() -> Result<()> {
    let root = root();
    eprintln!("\n$ tidy (cargo xtask tidy)");
    let packages = packages(&root)?;
    let sources = rust_sources(&root, &packages)?;
    let docs: Vec<(String, String)> = walk(&root, "", "md")?
        .into_iter()
        .map(|p| Ok((p.clone(), read(&root, &p)?)))
        .collect::<Result<_>>()?;
    let exists = |p: &str| root.join(p).exists();
    let violations = check(&sources, &docs, &packages, &exists);
    let list = std::fs::read_to_string(root.join(allow::ALLOW_LIST)).unwrap_or_default();
    let entries = match allow::parse(&list) {
        Ok(entries) => entries,
        Err(errors) => bail!("{}", errors.join("\n")),
    };
    let total = violations.len();
    let (mut left, stale) = allow::apply(violations, &entries);
    left.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    for v in &left {
        eprintln!("{v}");
    }
    for s in &stale {
        eprintln!("{s}");
    }
    let broken: BTreeSet<&str> = left.iter().map(|v| v.rule).collect();
    for rule in RULES.iter().filter(|r| broken.contains(r.name)) {
        eprintln!(
            "  {} (xtask/src/tidy/{}): {}",
            rule.name, rule.module, rule.asks
        );
    }
    eprintln!(
        "tidy: {} Rust and {} Markdown files; {} violation(s), {} allowed by {}",
        sources.len(),
        docs.len(),
        total,
        total - left.len(),
        allow::ALLOW_LIST
    );
    if !left.is_empty() || !stale.is_empty() {
        bail!(
            "tidy failed (listed above): {} violation(s) not in {}, {} entry(-ies) of it no longer found",
            left.len(),
            allow::ALLOW_LIST,
            stale.len()
        );
    }
    Ok(())
}

/// Every rule, on in-memory sources and documents.
pub fn check(
    sources: &[Source],
    docs: &[(String, String)],
    packages: &[String],
    exists: &dyn Fn(&str) -> bool,
) -> Vec<Violation> {
    let mut out = layers::check(sources, docs);
    out.extend(binary::check(sources, &binary::ISSUER));
    out.extend(imports::cycles(sources));
    out.extend(imports::anyhow_in_libraries(sources));
    out.extend(core::purity(sources));
    out.extend(facts::check(docs));
    for s in sources {
        out.extend(sizes::file_length(&s.path, &s.text));
        out.extend(sizes::fn_lengths(s));
        out.extend(links::check(
            &s.path,
            links::cited_in_docs(s),
            packages,
            exists,
        ));
        out.extend(links::outside_refs(&s.path, &links::prose(s), docs));
    }
    for (path, text) in docs {
        out.extend(links::check(
            path,
            links::cited_in_markdown(text),
            packages,
            exists,
        ));
        out.extend(links::outside_refs(path, &links::unfenced(text), docs));
    }
    out
}

/// The workspace members (from the root `Cargo.toml`), and `fuzz`.
fn packages(root: &Path) -> Result<Vec<String>> {
    let manifest = read(root, "Cargo.toml")?;
    let members = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('[')?.1.split_once(']'))
        .context("Cargo.toml has no workspace members")?
        .0;
    let mut out: Vec<String> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    out.push("fuzz".into());
    Ok(out)
}

/// The Rust sources the rules read, with the test files marked.
fn rust_sources(root: &Path, packages: &[String]) -> Result<Vec<Source>> {
    let mut paths = BTreeSet::new();
    for p in packages.iter().filter(|p| *p != "fuzz") {
        for dir in ["src", "tests", "benches", "examples"] {
            paths.extend(walk(root, &format!("{p}/{dir}"), "rs")?);
        }
        if root.join(p).join("build.rs").is_file() {
            paths.insert(format!("{p}/build.rs"));
        }
    }
    paths.extend(walk(root, "xtask", "rs")?);
    paths.extend(walk(root, "fuzz/fuzz_targets", "rs")?);
    let mut sources: Vec<Source> = paths
        .iter()
        .map(|p| Ok(Source::new(p, &read(root, p)?)))
        .collect::<Result<_>>()?;
    mark_test_files(&mut sources, packages);
    Ok(sources)
}

/// Marks the packages' integration tests and the files of `#[cfg(test)] mod x;` as test files.
fn mark_test_files(sources: &mut [Source], packages: &[String]) {
    let mut test_paths: Vec<String> = packages.iter().map(|p| format!("{p}/tests/")).collect();
    for s in sources.iter() {
        let (dir, file) = s.path.rsplit_once('/').unwrap_or(("", &s.path));
        let own = match file {
            "mod.rs" | "lib.rs" | "main.rs" => dir.to_owned(),
            _ => s.path.trim_end_matches(".rs").to_owned(),
        };
        for m in &s.test_mods {
            test_paths.push(format!("{own}/{m}.rs"));
            test_paths.push(format!("{own}/{m}/"));
        }
    }
    for s in sources.iter_mut() {
        s.test_file = test_paths
            .iter()
            .any(|t| s.path == *t || (t.ends_with('/') && s.path.starts_with(t.as_str())));
    }
}

/// The files with extension `ext` under `dir` (from the root; `""` for all of it), skipping
/// hidden folders and those builds write.
fn walk(root: &Path, dir: &str, ext: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let full = root.join(dir);
    if !full.is_dir() {
        return Ok(out);
    }
    for entry in std::fs::read_dir(&full).with_context(|| full.display().to_string())? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        };
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let skipped = name.starts_with('.')
                || ["target", "node_modules"].contains(&name.as_str())
                || links::GENERATED.contains(&format!("{path}/").as_str());
            if !skipped {
                out.extend(walk(root, &path, ext)?);
            }
        } else if name.ends_with(&format!(".{ext}")) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

fn read(root: &Path, path: &str) -> Result<String> {
    std::fs::read_to_string(root.join(path)).with_context(|| format!("reading {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_the_packages_tests_and_test_modules_in_files() {
        let mut sources: Vec<Source> = [
            ("a/src/lib.rs", "#[cfg(test)]\nmod tests;\n"),
            ("a/src/tests.rs", ""),
            ("a/src/edge.rs", "#[cfg(test)]\nmod tests;\nmod inner;\n"),
            ("a/src/edge/tests.rs", ""),
            ("a/src/edge/inner.rs", ""),
            ("a/tests/it/main.rs", ""),
            ("b/src/tests/x.rs", ""),
        ]
        .iter()
        .map(|(p, t)| Source::new(p, t))
        .collect();
        mark_test_files(&mut sources, &["a".into(), "b".into()]);
        let marked: Vec<&str> = sources
            .iter()
            .filter(|s| s.test_file)
            .map(|s| s.path.as_str())
            .collect();
        assert_eq!(
            marked,
            [
                "a/src/tests.rs",
                "a/src/edge/tests.rs",
                "a/tests/it/main.rs"
            ]
        );
    }

    #[test]
    fn the_allow_list_names_the_rules_as_the_table_does() {
        let list = std::fs::read_to_string(root().join(allow::ALLOW_LIST)).unwrap();
        let legend: Vec<&str> = list
            .lines()
            .filter_map(|l| l.strip_prefix("#   "))
            .filter(|l| !l.starts_with(' '))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        assert_eq!(legend, names);
    }

    #[test]
    fn every_rule_reports_through_check() {
        let long_fn = format!("fn long() {{\n{}}}\n", "    x();\n".repeat(80));
        let sources: Vec<Source> = [
            (
                "issuer/src/store/mod.rs",
                "use crate::app::now;\n".to_owned(),
            ),
            ("filter-wasm/core/src/a.rs", "use crate::b::x;\n".to_owned()),
            ("filter-wasm/core/src/b.rs", "use crate::a::y;\n".to_owned()),
            (
                "filter-wasm/core/src/c.rs",
                "fn f() { unsafe {} }\n".to_owned(),
            ),
            ("shared/src/big.rs", "//\n".repeat(601)),
            (
                "shared/src/f.rs",
                format!("//! See `docs/gone.md`.\n{long_fn}"),
            ),
        ]
        .iter()
        .map(|(p, t)| Source::new(p, t))
        .collect();
        let docs = [(
            "x.md".to_owned(),
            "[a](docs/here.md) [b](docs/gone.md)\n".to_owned(),
        )];
        let exists = |p: &str| p == "docs/here.md";
        let v = check(&sources, &docs, &["shared".into()], &exists);
        let found: Vec<String> = v.iter().map(|v| v.to_string()).collect();
        let rules: Vec<&str> = v.iter().map(|v| v.rule).collect();
        assert!(rules.iter().all(|r| RULES.iter().any(|x| x.name == *r)));
        assert_eq!(
            rules,
            [
                "layer",
                "cycle",
                "core-purity",
                "file-length",
                "fn-length",
                "doc-link",
                "doc-link"
            ],
            "{found:#?}"
        );
        assert_eq!(found[0], "issuer/src/store/mod.rs:1: layer: `store` (layer store) uses `crate::app` (layer app), a layer above it (server → http → app → admin → services → directory → store → base: a module uses only its own layer and those below it)");
        assert!(found[2].starts_with("filter-wasm/core/src/c.rs:1: core-purity: `unsafe`"));
        assert!(found[4].starts_with("shared/src/f.rs:2: fn-length: fn `long` is 82 lines"));
        assert_eq!(found[6], "x.md:1: doc-link: `docs/gone.md` does not exist");
    }
}
