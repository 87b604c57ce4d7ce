use super::*;

fn paths(cited: &[Cited]) -> Vec<&str> {
    cited.iter().map(|c| c.path.as_str()).collect()
}

#[test]
fn repository_paths_are_told_from_other_text() {
    for path in [
        "docs/filter.md",
        "issuer/tests/it.rs",
        "issuer/tests/it/main.rs:12",
        "docs/issuer.md#tokens",
        "envoy/full-stack.yaml",
        "fuzz/fuzz_targets/",
        "../README.md",
        ".cargo/config.toml",
    ] {
        assert!(repository_path(path).is_some(), "{path}");
    }
    for text in [
        "README.md",
        "https://example.com/a.md",
        "/usr/lib/postgresql/15/bin/initdb.sh",
        "envoy/*.yaml",
        "target/debug/stack.rs",
        "dist/js/node/package.json",
        ".demo/envoy.yaml",
        ".tools/venv/x.py",
        "docs/FILE.md",
        "DIR/x.rs",
        "docs/....md",
        "a/<name>.rs",
        "application/json",
        "/oauth2/token",
        "cargo xtask test",
        "src/{a,b}.rs",
        "@scope/pkg.js",
    ] {
        assert_eq!(repository_path(text), None, "{text}");
    }
}

#[test]
fn markdown_links_and_code_spans_are_cited_outside_fences() {
    let text = "See [the filter](docs/filter.md#edge) and `issuer/tests/it.rs:3`, [web](https://x.io/a.md), `cargo xtask test`.\n```sh\ncat `docs/nope.md`\n```\n[top](../README.md) [anchor](#x) [b](BENCHMARKS.md)\n";
    let cited = cited_in_markdown(text);
    assert_eq!(
        paths(&cited),
        [
            "docs/filter.md",
            "issuer/tests/it.rs",
            "../README.md",
            "BENCHMARKS.md"
        ]
    );
    assert_eq!(cited[1].line, 1);
    assert_eq!(cited[2].line, 5);
    assert!(cited[0].link && !cited[1].link);
}

#[test]
fn doc_comments_are_cited_and_other_comments_and_strings_are_not() {
    let text = "//! See `docs/a.md`.\n/// And [b](docs/b.md), [`Thing`](crate::x::Thing).\n// Not `docs/c.md`.\n//// Nor `docs/d.md`.\nconst S: &str = \"/// `docs/e.md`\";\nfn f() {} /// `docs/f.md`\n";
    let cited = cited_in_docs(&Source::new("a/src/lib.rs", text));
    assert_eq!(paths(&cited), ["docs/a.md", "docs/b.md", "docs/f.md"]);
    assert_eq!(cited.iter().map(|c| c.line).collect::<Vec<_>>(), [1, 2, 6]);
}

#[test]
fn a_path_that_does_not_exist_fails_and_one_that_does_passes() {
    let exists = |p: &str| {
        [
            "docs/filter.md",
            "README.md",
            "issuer/tests/it/main.rs",
            "filter-wasm/src/edge.rs",
            "filter-wasm/src/",
            "fuzz/",
            "fuzz/fuzz_targets/",
        ]
        .contains(&p)
    };
    let packages = ["issuer".to_owned(), "filter-wasm".to_owned()];
    let md = "[f](filter.md) [r](../README.md) `docs/filter.md` `issuer/tests/it.rs` [g](docs/filter.md) `fuzz/fuzz_targets/`\n";
    let v = check("docs/x.md", cited_in_markdown(md), &packages, &exists);
    let found: Vec<(&str, usize)> = v.iter().map(|v| (v.detail.as_str(), v.line)).collect();
    assert_eq!(found, [("docs/filter.md", 1), ("issuer/tests/it.rs", 1)]);
    assert!(v[0].message.contains("does not exist"));
    assert!(v
        .iter()
        .all(|v| v.file == "docs/x.md" && v.rule == "doc-link"));
    let rs = "//! `src/edge.rs` and `filter-wasm/src/edge.rs` and `src/gone.rs`\n//! `dir/tls/`, `src/gone/`\n";
    let s = Source::new("filter-wasm/src/lib.rs", rs);
    let v = check(&s.path, cited_in_docs(&s), &packages, &exists);
    assert_eq!(paths_of(&v), ["src/gone.rs", "src/gone/"]);
}

fn paths_of(v: &[Violation]) -> Vec<&str> {
    v.iter().map(|v| v.detail.as_str()).collect()
}

#[test]
fn issue_numbers_and_markdown_files_outside_the_repository_are_found() {
    let refs = |line: &str| -> Vec<(String, bool)> { references(line) };
    let issue = |n: &str| (format!("#{n}"), true);
    let file = |f: &str| (f.to_owned(), false);
    assert_eq!(
        refs("as issue 12 said, (#44) and Issues #7, org#301."),
        [issue("44"), issue("7"), issue("301"), issue("12")]
    );
    assert_eq!(
        refs("the targets of PRODUCT.md and [x](NOTES.md#a)"),
        [file("PRODUCT.md"), file("NOTES.md")]
    );
    for none in [
        "{other:#04x}",
        "&#8212; #abc #1-install issue-free tissue 4 PKCS#8",
        "https://github.com/o/r/issues/12 and https://x.io/#12",
        "docs/filter.md, *.md, FILE.md, a.mdx",
    ] {
        assert_eq!(refs(none), [], "{none}");
    }
}

#[test]
fn outside_refs_spare_known_files_and_the_literals_of_tests() {
    let docs = [("docs/BENCH.md".to_owned(), String::new())];
    let text = "// See BENCH.md and GONE.md.\nfn f() { g(\"issue 3\"); }\n#[test]\nfn t() { g(\"#4\"); }\n";
    let s = Source::new("a/src/lib.rs", text);
    let v = outside_refs(&s.path, &prose(&s), &docs);
    let found: Vec<(usize, &str)> = v.iter().map(|v| (v.line, v.detail.as_str())).collect();
    assert_eq!(found, [(1, "GONE.md"), (2, "#3")]);
    assert_eq!(v[0].rule, "outside-ref");
    assert_eq!(unfenced("a #5\n```\nb #6\n```\n"), "a #5\n\n\n\n");
}
