//! The rules `layer`, `unlayered` and `layer-doc`, the issuer library's layers: every top-level
//! module of `issuer/src/` (a `*.rs` file or a folder, `lib.rs` and the binary's `bin/` aside) has
//! a layer in [`ISSUER_LAYERS`], the one table of them, and uses (`use crate::X`, `crate::X::…`,
//! test items left out) only modules of its own layer or a lower one. `docs/architecture.md`
//! mirrors the table, and tidy checks the mirror.
//!
//! The rules are pure functions of the sources and a table, so the tests run them on small
//! made-up crates.

use super::imports::{crate_refs, top_module, ISSUER_SRC};
use super::source::Source;
use super::Violation;
use std::collections::BTreeMap;

/// One layer: its name and its modules.
pub struct Layer {
    pub name: &'static str,
    pub modules: &'static [&'static str],
}

/// The issuer library's layers, lowest first: a module uses only its own layer and those below.
pub const ISSUER_LAYERS: &[Layer] = &[
    Layer {
        name: "base",
        modules: &[
            "config",
            "display",
            "logging",
            "secret_file",
            "secrets",
            "tls_client",
            "vendor",
        ],
    },
    Layer {
        name: "store",
        modules: &["store"],
    },
    Layer {
        name: "directory",
        modules: &["directory"],
    },
    Layer {
        name: "services",
        modules: &["audit", "metrics", "passwords", "throttle"],
    },
    Layer {
        name: "admin",
        modules: &["admin"],
    },
    Layer {
        name: "app",
        modules: &["app"],
    },
    Layer {
        name: "http",
        modules: &["http"],
    },
    Layer {
        name: "server",
        modules: &["server"],
    },
];

/// Where the table is mirrored, and the heading of its section there.
pub const MIRROR: (&str, &str) = ("docs/architecture.md", "## The issuer's layers");

/// The index of the layer of `module` in `layers`, lowest 0.
fn rank(layers: &[Layer], module: &str) -> Option<usize> {
    layers.iter().position(|l| l.modules.contains(&module))
}

/// The order of `layers`, highest first, as messages show it.
fn order(layers: &[Layer]) -> String {
    let names: Vec<&str> = layers.iter().rev().map(|l| l.name).collect();
    names.join(" → ")
}

/// The top-level modules of the library under `src`, each with the file that declares it
/// (`NAME.rs`, else `NAME/mod.rs`, else its first file).
pub fn modules(sources: &[Source], src: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for s in sources {
        let Some(module) = top_module(&s.path, src) else {
            continue;
        };
        if module == "lib" || module == "bin" {
            continue;
        }
        let own = [format!("{src}{module}.rs"), format!("{src}{module}/mod.rs")];
        let file = out.entry(module).or_insert_with(|| s.path.clone());
        if own.contains(&s.path) && *file != own[0] {
            *file = s.path.clone();
        }
    }
    out
}

/// A module of the library with no layer, and (when the crate root `lib.rs` is among the sources,
/// so its modules are all known) a module of the table that does not exist.
pub fn unlayered(sources: &[Source], src: &str, layers: &[Layer]) -> Vec<Violation> {
    let found = modules(sources, src);
    let mut out: Vec<Violation> = found
        .iter()
        .filter(|(module, _)| rank(layers, module).is_none())
        .map(|(module, file)| Violation {
            rule: "unlayered",
            file: file.clone(),
            line: 1,
            detail: module.clone(),
            message: format!(
                "module `{module}` has no layer: give it one in ISSUER_LAYERS (xtask/src/tidy/layers.rs) and in {} ({})",
                MIRROR.0,
                order(layers)
            ),
        })
        .collect();
    if sources.iter().any(|s| s.path == format!("{src}lib.rs")) {
        for layer in layers {
            for module in layer.modules.iter().filter(|m| !found.contains_key(**m)) {
                out.push(Violation {
                    rule: "unlayered",
                    file: format!("{src}lib.rs"),
                    line: 1,
                    detail: (*module).to_owned(),
                    message: format!(
                        "layer `{}` names module `{module}`, which {src} does not have: remove it from ISSUER_LAYERS and {}",
                        layer.name, MIRROR.0
                    ),
                });
            }
        }
    }
    out
}

/// Each use of a module of a higher layer than the user's own.
pub fn upward(sources: &[Source], src: &str, layers: &[Layer]) -> Vec<Violation> {
    let mut out = Vec::new();
    for s in sources {
        let Some(module) = top_module(&s.path, src) else {
            continue;
        };
        let Some(own) = rank(layers, &module) else {
            continue;
        };
        for (target, offset) in crate_refs(&s.product_code()) {
            let Some(theirs) = rank(layers, &target).filter(|&r| r > own) else {
                continue;
            };
            out.push(Violation {
                rule: "layer",
                file: s.path.clone(),
                line: s.line(offset),
                detail: target.clone(),
                message: format!(
                    "`{module}` (layer {}) uses `crate::{target}` (layer {}), a layer above it ({}: a module uses only its own layer and those below it)",
                    layers[own].name,
                    layers[theirs].name,
                    order(layers)
                ),
            });
        }
    }
    out
}

/// The rows of the mirror's table, highest layer first: `` | `NAME` | `m1`, `m2` | … ``.
pub fn mirror_rows(layers: &[Layer]) -> Vec<String> {
    layers
        .iter()
        .rev()
        .map(|l| {
            let modules: Vec<String> = l.modules.iter().map(|m| format!("`{m}`")).collect();
            format!("| `{}` | {} |", l.name, modules.join(", "))
        })
        .collect()
}

/// The mirror of the table in `docs` (path, text): the section's table rows, each starting with
/// what [`mirror_rows`] gives, in that order. Nothing when the document is not among `docs`.
pub fn mirror(docs: &[(String, String)], layers: &[Layer]) -> Vec<Violation> {
    let (path, heading) = MIRROR;
    let Some((_, text)) = docs.iter().find(|(p, _)| p == path) else {
        return Vec::new();
    };
    let section = text
        .split_once(&format!("\n{heading}\n"))
        .map(|(before, rest)| {
            let start = before.matches('\n').count() + 3;
            let body = rest.split("\n## ").next().unwrap_or("");
            (start, body)
        });
    let Some((start, body)) = section else {
        return vec![mirror_violation(
            path,
            0,
            &format!("no section `{heading}`"),
        )];
    };
    let rows: Vec<(usize, &str)> = body
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("| `"))
        .collect();
    let expected = mirror_rows(layers);
    for (i, want) in expected.iter().enumerate() {
        match rows.get(i) {
            Some((_, row)) if row.starts_with(want.as_str()) => {}
            Some((n, row)) => {
                return vec![mirror_violation(
                    path,
                    start + n,
                    &format!("row `{row}` should start `{want}`"),
                )]
            }
            None => {
                return vec![mirror_violation(
                    path,
                    start,
                    &format!("the table lacks the row `{want}`"),
                )]
            }
        }
    }
    match rows.get(expected.len()) {
        Some((n, row)) => vec![mirror_violation(
            path,
            start + n,
            &format!("row `{row}` is not a layer of ISSUER_LAYERS"),
        )],
        None => Vec::new(),
    }
}

fn mirror_violation(path: &str, line: usize, what: &str) -> Violation {
    Violation {
        rule: "layer-doc",
        file: path.to_owned(),
        line,
        detail: String::new(),
        message: format!(
            "the layer table differs from ISSUER_LAYERS (xtask/src/tidy/layers.rs): {what}"
        ),
    }
}

/// Every layer rule on the issuer's library.
pub fn check(sources: &[Source], docs: &[(String, String)]) -> Vec<Violation> {
    let mut out = unlayered(sources, ISSUER_SRC, ISSUER_LAYERS);
    out.extend(upward(sources, ISSUER_SRC, ISSUER_LAYERS));
    out.extend(mirror(docs, ISSUER_LAYERS));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &[Layer] = &[
        Layer {
            name: "low",
            modules: &["store", "secrets"],
        },
        Layer {
            name: "mid",
            modules: &["app"],
        },
        Layer {
            name: "high",
            modules: &["server"],
        },
    ];

    fn sources(files: &[(&str, &str)]) -> Vec<Source> {
        files.iter().map(|(p, t)| Source::new(p, t)).collect()
    }

    fn found(v: &[Violation]) -> Vec<(&str, usize, &str)> {
        v.iter()
            .map(|v| (v.file.as_str(), v.line, v.detail.as_str()))
            .collect()
    }

    #[test]
    fn a_lower_layer_using_a_higher_one_fails() {
        let v = upward(
            &sources(&[
                (
                    "c/src/store/mod.rs",
                    "use crate::secrets::Key;\nuse crate::server::x;\n",
                ),
                ("c/src/store/redb/mod.rs", "fn f() { crate::app::now(); }\n"),
                ("c/src/app/mod.rs", "use crate::{store::Store, server};\n"),
                ("c/src/secrets.rs", "use crate::store::Store;\n"),
                ("c/src/server.rs", "use crate::{app::App, store, other};\n"),
            ]),
            "c/src/",
            SMALL,
        );
        assert_eq!(
            found(&v),
            [
                ("c/src/store/mod.rs", 2, "server"),
                ("c/src/store/redb/mod.rs", 1, "app"),
                ("c/src/app/mod.rs", 1, "server"),
            ]
        );
        assert_eq!(v[0].to_string(), "c/src/store/mod.rs:2: layer: `store` (layer low) uses `crate::server` (layer high), a layer above it (high → mid → low: a module uses only its own layer and those below it)");
    }

    #[test]
    fn comments_strings_and_tests_may_name_any_layer() {
        let v = upward(
            &sources(&[(
                "c/src/store/mod.rs",
                "// crate::app::now\nconst S: &str = \"crate::server\";\n#[cfg(test)]\nmod tests { use crate::app::now; }\n",
            )]),
            "c/src/",
            SMALL,
        );
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_module_without_a_layer_fails_naming_it() {
        let v = unlayered(
            &sources(&[
                ("c/src/lib.rs", "pub mod store;\n"),
                ("c/src/store/a.rs", ""),
                ("c/src/store/mod.rs", ""),
                ("c/src/secrets.rs", ""),
                ("c/src/app/mod.rs", ""),
                ("c/src/server.rs", ""),
                ("c/src/fresh/a.rs", ""),
                ("c/src/fresh/mod.rs", ""),
                ("c/src/newer.rs", ""),
                ("c/src/bin/tool/main.rs", ""),
            ]),
            "c/src/",
            SMALL,
        );
        assert_eq!(
            found(&v),
            [
                ("c/src/fresh/mod.rs", 1, "fresh"),
                ("c/src/newer.rs", 1, "newer")
            ]
        );
        assert!(v[0].message.starts_with("module `fresh` has no layer"));
    }

    #[test]
    fn a_layer_naming_a_missing_module_fails_once_the_crate_is_known() {
        let files = [("c/src/store.rs", ""), ("c/src/app.rs", "")];
        assert!(unlayered(&sources(&files), "c/src/", SMALL).is_empty());
        let with_root = [("c/src/lib.rs", ""), files[0], files[1]];
        let v = unlayered(&sources(&with_root), "c/src/", SMALL);
        assert_eq!(
            found(&v),
            [
                ("c/src/lib.rs", 1, "secrets"),
                ("c/src/lib.rs", 1, "server")
            ]
        );
    }

    #[test]
    fn the_documented_table_mirrors_the_layers() {
        let doc = |rows: &str| {
            vec![(
                MIRROR.0.to_owned(),
                format!("# A\n\n{}\n\n| layer | modules | what |\n|---|---|---|\n{rows}\n## Next\n| `x` | y |\n", MIRROR.1),
            )]
        };
        let good = "| `high` | `server` | the top |\n| `mid` | `app` | |\n| `low` | `store`, `secrets` | |\n";
        assert!(mirror(&doc(good), SMALL).is_empty());
        let swapped = good.replace("`store`, `secrets`", "`secrets`, `store`");
        let v = mirror(&doc(&swapped), SMALL);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].line, 9);
        assert!(v[0]
            .message
            .contains("should start `| `low` | `store`, `secrets` |`"));
        let v = mirror(&doc(&good.replace("| `mid` | `app` | |\n", "")), SMALL);
        assert!(
            v[0].message.contains("should start `| `mid` | `app` |`"),
            "{v:?}"
        );
        let v = mirror(&doc(&format!("{good}| `top` | `main` |\n")), SMALL);
        assert!(v[0].message.contains("is not a layer"), "{v:?}");
        assert!(mirror(&[], SMALL).is_empty());
    }

    #[test]
    fn the_issuer_table_names_each_module_once() {
        let mut all: Vec<&str> = ISSUER_LAYERS
            .iter()
            .flat_map(|l| l.modules.iter().copied())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a module in two layers");
    }
}
