//! The rule `fact`: a limit of the code has one home, a named constant, and the documents that
//! state it are checked against it. [`FACTS`] lists each constant with the documents that must
//! state it; such a document names the constant (`` `MAX_MODULE_BYTES` ``), and every paragraph of
//! any `*.md` file that names it states its value as the code has it (`364,100` or `364100`). A
//! changed limit then fails tidy until the documents say the new one.
//!
//! Tables that only report (BENCHMARKS.md's results) are generated from the constants instead:
//! see `xtask/src/bench/targets.rs`.

use super::Violation;
use crate::util::thousands;

/// One limit: its constant, the file that defines it, its value, and the documents that state it.
pub struct Fact {
    pub name: &'static str,
    pub home: &'static str,
    pub value: u64,
    pub stated_in: &'static [&'static str],
}

/// The limits documents state.
pub const FACTS: [Fact; 3] = [
    Fact {
        name: "MAX_MODULE_BYTES",
        home: "xtask/src/wasm.rs",
        value: crate::wasm::MAX_MODULE_BYTES,
        stated_in: &["docs/filter.md", "docs/token-format.md", "BENCHMARKS.md"],
    },
    Fact {
        name: "MAX_FILE_LINES",
        home: "xtask/src/tidy/sizes.rs",
        value: super::sizes::MAX_FILE_LINES as u64,
        stated_in: &["README.md"],
    },
    Fact {
        name: "MAX_FN_LINES",
        home: "xtask/src/tidy/sizes.rs",
        value: super::sizes::MAX_FN_LINES as u64,
        stated_in: &["README.md"],
    },
];

/// The violations of [`FACTS`] among `docs` (path and text of every `*.md` file).
pub fn check(docs: &[(String, String)]) -> Vec<Violation> {
    check_facts(&FACTS, docs)
}

fn check_facts(facts: &[Fact], docs: &[(String, String)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for fact in facts {
        let named = format!("`{}`", fact.name);
        let values = [thousands(fact.value), fact.value.to_string()];
        for (path, text) in docs {
            let mut names = false;
            for (line, paragraph) in paragraphs(text) {
                if !paragraph.contains(&named) {
                    continue;
                }
                names = true;
                if !values.iter().any(|v| states(&paragraph, v)) {
                    out.push(violation(
                        fact,
                        path,
                        line,
                        format!(
                            "names `{}` without its value, {} (`{}`)",
                            fact.name, values[0], fact.home
                        ),
                    ));
                }
            }
            if !names && fact.stated_in.contains(&path.as_str()) {
                out.push(violation(
                    fact,
                    path,
                    0,
                    format!(
                        "states a limit whose home is `{}` in `{}`: name it there, beside its value {}",
                        fact.name, fact.home, values[0]
                    ),
                ));
            }
        }
    }
    out
}

fn violation(fact: &Fact, path: &str, line: usize, message: String) -> Violation {
    Violation {
        rule: "fact",
        file: path.to_owned(),
        line,
        detail: fact.name.to_owned(),
        message,
    }
}

/// The paragraphs of a Markdown text (runs of lines between blank ones), each with its first
/// line (1-based).
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            open = false;
            continue;
        }
        match out.last_mut() {
            Some((_, p)) if open => {
                p.push('\n');
                p.push_str(line);
            }
            _ => out.push((n + 1, line.to_owned())),
        }
        open = true;
    }
    out
}

/// True when `text` has `value` as a number of its own (not a part of a longer one).
fn states(text: &str, value: &str) -> bool {
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == ',');
    text.match_indices(value).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + value.len()..].chars().next();
        let after =
            after.filter(|c| *c != ',' || digit(text[at + value.len() + 1..].chars().next()));
        !digit(before) && !digit(after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Fact = Fact {
        name: "MAX_X",
        home: "a/src/x.rs",
        value: 364_100,
        stated_in: &["docs/a.md"],
    };

    fn docs(texts: &[(&str, &str)]) -> Vec<(String, String)> {
        texts
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn a_paragraph_that_names_a_fact_states_its_value() {
        let ok = docs(&[
            (
                "docs/a.md",
                "Intro.\n\nThe limit is\n364,100 bytes (`MAX_X`).\n",
            ),
            ("docs/b.md", "At most 364100 (`MAX_X`), once 250,000.\n"),
        ]);
        assert!(check_facts(&[LIMIT], &ok).is_empty());
        let stale = docs(&[("docs/a.md", "Intro.\n\nThe limit, `MAX_X`, is 1,364,100.\n")]);
        let v = check_facts(&[LIMIT], &stale);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].rule, v[0].line), ("fact", 3));
        assert!(v[0].message.contains("364,100"), "{}", v[0].message);
    }

    #[test]
    fn a_document_that_states_a_fact_names_it() {
        let v = check_facts(&[LIMIT], &docs(&[("docs/a.md", "At most 364,100.\n")]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            (v[0].file.as_str(), v[0].detail.as_str()),
            ("docs/a.md", "MAX_X")
        );
    }

    #[test]
    fn numbers_are_matched_whole() {
        assert!(states("at most 600 lines", "600"));
        assert!(states("600, then", "600"));
        assert!(!states("6000 lines", "600"));
        assert!(!states("1,600 lines", "600"));
        assert!(!states("600,000 lines", "600"));
    }
}
