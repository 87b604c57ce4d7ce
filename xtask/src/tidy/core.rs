//! The rule `core-purity`, the filter's core is pure: the crate `filter-core`
//! (`filter-wasm/core/src/`), which decides every request and runs edge sync for both Envoy
//! adapters, has no `unsafe` (its `lib.rs` forbids it, and says so) and names no host type: nothing
//! of proxy-wasm, of Envoy's dynamic-module ABI, of wasm-bindgen, nor the adapter crates. What a
//! host does goes through the traits and plain values the core defines (`EdgeHost`, headers in, an
//! action out), so the core stays testable and fuzzable natively and the adapters stay thin.
//!
//! Test code counts too: a test that needs a host type belongs in an adapter.

use super::source::{is_ident, Source};
use super::Violation;

/// Where the core's modules are.
pub const CORE_SRC: &str = "filter-wasm/core/src/";

/// The identifiers the core may not use, each with what it stands for.
const FORBIDDEN: [(&str, &str); 9] = [
    ("unsafe", "`unsafe` code"),
    ("extern", "a foreign function (`extern`)"),
    ("proxy_wasm", "the proxy-wasm SDK"),
    ("hostcalls", "proxy-wasm host calls"),
    ("abi", "an ABI module"),
    ("wasm_bindgen", "wasm-bindgen"),
    ("filter_envoy", "the proxy-wasm adapter"),
    ("filter_native", "the dynamic-module adapter"),
    ("filter_js", "the JS module"),
];

/// Identifiers that start with one of these name Envoy's C ABI.
const FORBIDDEN_PREFIXES: [&str; 2] = ["envoy_dynamic_module", "proxy_on_"];

/// The attribute the core's `lib.rs` must carry.
const FORBID_UNSAFE: &str = "#![forbid(unsafe_code)]";

/// Every host type or `unsafe` named in the core, and a missing `#![forbid(unsafe_code)]`.
pub fn purity(sources: &[Source]) -> Vec<Violation> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.path.starts_with(CORE_SRC)) {
        if s.path == format!("{CORE_SRC}lib.rs") && !s.code.contains(FORBID_UNSAFE) {
            out.push(violation(
                s,
                0,
                "forbid",
                format!("the core's lib.rs lacks `{FORBID_UNSAFE}`"),
            ));
        }
        for (word, at) in identifiers(&s.code) {
            let what = FORBIDDEN
                .iter()
                .find(|(w, _)| *w == word)
                .map(|(_, what)| *what)
                .or_else(|| {
                    FORBIDDEN_PREFIXES
                        .iter()
                        .any(|p| word.starts_with(p))
                        .then_some("Envoy's C ABI")
                });
            if let Some(what) = what {
                let message = format!(
                    "`{word}`: the filter's core names {what}; host calls belong in an adapter (filter-wasm/envoy, filter-wasm/native), behind a trait of the core such as `EdgeHost`"
                );
                out.push(violation(s, at, word, message));
            }
        }
    }
    out
}

fn violation(s: &Source, at: usize, detail: &str, message: String) -> Violation {
    Violation {
        rule: "core-purity",
        file: s.path.clone(),
        line: s.line(at),
        detail: detail.to_owned(),
        message,
    }
}

/// Every identifier of `code` (comments and literals already blanked), with its offset.
fn identifiers(code: &str) -> Vec<(&str, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident(b[i]) && !b[i].is_ascii_digit() {
            let len = b[i..].iter().take_while(|&&c| is_ident(c)).count();
            out.push((&code[i..i + len], i));
            i += len;
        } else if is_ident(b[i]) {
            // A number and its suffix.
            i += b[i..].iter().take_while(|&&c| is_ident(c)).count();
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(files: &[(&str, &str)]) -> Vec<(String, usize, String)> {
        let sources: Vec<Source> = files.iter().map(|(p, t)| Source::new(p, t)).collect();
        purity(&sources)
            .into_iter()
            .map(|v| (v.file, v.line, v.detail))
            .collect()
    }

    #[test]
    fn a_pure_core_passes() {
        let v = check(&[
            (
                "filter-wasm/core/src/lib.rs",
                "//! No `unsafe`, no proxy_wasm.\n#![forbid(unsafe_code)]\npub mod sync;\n",
            ),
            (
                "filter-wasm/core/src/sync.rs",
                "// unsafe in a comment\nconst S: &str = \"proxy_wasm::hostcalls\";\nfn unsafe_free(abi_version: u32) -> u32 { 0x1abi }\n#[cfg(test)]\nmod tests { fn host() {} }\n",
            ),
            (
                "filter-wasm/native/src/host.rs",
                "unsafe fn f() { abi::g() }\n",
            ),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn unsafe_and_host_types_in_the_core_fail() {
        let v = check(&[
            ("filter-wasm/core/src/lib.rs", "pub mod edge;\n"),
            (
                "filter-wasm/core/src/edge.rs",
                "use proxy_wasm::hostcalls;\nfn f() { unsafe { g() } }\nextern \"C\" { fn envoy_dynamic_module_callback_log(); }\n#[cfg(test)]\nmod tests { use crate::abi::X; }\n",
            ),
        ]);
        let found: Vec<(&str, usize, &str)> = v
            .iter()
            .map(|(f, l, d)| (f.as_str(), *l, d.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("filter-wasm/core/src/lib.rs", 1, "forbid"),
                ("filter-wasm/core/src/edge.rs", 1, "proxy_wasm"),
                ("filter-wasm/core/src/edge.rs", 1, "hostcalls"),
                ("filter-wasm/core/src/edge.rs", 2, "unsafe"),
                ("filter-wasm/core/src/edge.rs", 3, "extern"),
                (
                    "filter-wasm/core/src/edge.rs",
                    3,
                    "envoy_dynamic_module_callback_log"
                ),
                ("filter-wasm/core/src/edge.rs", 5, "abi"),
            ]
        );
    }
}
