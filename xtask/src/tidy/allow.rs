//! The allow-list (`xtask/tidy-allow.txt`): violations known today, each to be fixed. An entry is
//! `RULE FILE [DETAIL]` on a line of its own (`#` starts a comment); it allows every violation of
//! that rule in that file with that detail: the module used (`layer`), the module without a layer
//! or the table's module that does not exist (`unlayered`), the path included or the module
//! declared (`binary`), the modules of the cycle (`cycle`, FILE being the folder), the module
//! (`anyhow`), the function's name (`fn-length`), the path cited (`doc-link`), the reference
//! (`outside-ref`), the constant (`fact`), the identifier (`core-purity`), nothing (`file-length`,
//! `layer-doc`). The rules are `RULES` in `tidy.rs`. An entry that allows nothing fails tidy, so
//! the list only shrinks.

use super::{Violation, RULES};

/// Where the allow-list is, from the repository root.
pub const ALLOW_LIST: &str = "xtask/tidy-allow.txt";

/// One entry, with its line in the list.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub line: usize,
    pub rule: String,
    pub file: String,
    pub detail: String,
}

impl Entry {
    fn allows(&self, v: &Violation) -> bool {
        self.rule == v.rule && self.file == v.file && self.detail == v.detail
    }
}

/// The entries of the list, or every malformed line.
pub fn parse(text: &str) -> Result<Vec<Entry>, Vec<String>> {
    let (mut entries, mut errors): (Vec<Entry>, Vec<String>) = (Vec::new(), Vec::new());
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let at = format!("{ALLOW_LIST}:{}", n + 1);
        let Some(detailed) = RULES
            .iter()
            .find(|r| r.name == fields[0])
            .map(|r| r.detailed)
        else {
            let rules: Vec<&str> = RULES.iter().map(|r| r.name).collect();
            errors.push(format!(
                "{at}: unknown rule `{}` (the rules: {})",
                fields[0],
                rules.join(", ")
            ));
            continue;
        };
        let expected = if detailed { 3 } else { 2 };
        if fields.len() != expected {
            errors.push(format!(
                "{at}: `{}` takes {} fields: RULE FILE{}",
                fields[0],
                expected,
                if detailed { " DETAIL" } else { "" }
            ));
            continue;
        }
        let entry = Entry {
            line: n + 1,
            rule: fields[0].to_owned(),
            file: fields[1].to_owned(),
            detail: fields.get(2).map_or(String::new(), |d| d.to_string()),
        };
        if let Some(first) = entries
            .iter()
            .find(|e| (&e.rule, &e.file, &e.detail) == (&entry.rule, &entry.file, &entry.detail))
        {
            errors.push(format!("{at}: the same as line {}", first.line));
            continue;
        }
        entries.push(entry);
    }
    if errors.is_empty() {
        Ok(entries)
    } else {
        Err(errors)
    }
}

/// The violations no entry allows, and a problem for each entry that allows none.
pub fn apply(violations: Vec<Violation>, entries: &[Entry]) -> (Vec<Violation>, Vec<String>) {
    let mut used = vec![false; entries.len()];
    let mut left = Vec::new();
    for v in violations {
        match entries.iter().position(|e| e.allows(&v)) {
            Some(i) => used[i] = true,
            None => left.push(v),
        }
    }
    let stale = entries
        .iter()
        .zip(used)
        .filter(|(_, used)| !used)
        .map(|(e, _)| {
            let entry = [&e.rule, &e.file, &e.detail]
                .iter()
                .filter(|f| !f.is_empty())
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            format!(
                "{ALLOW_LIST}:{}: `{entry}` no longer occurs: remove it from the list",
                e.line
            )
        })
        .collect();
    (left, stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(rule: &'static str, file: &str, detail: &str) -> Violation {
        Violation {
            rule,
            file: file.to_owned(),
            line: 1,
            detail: detail.to_owned(),
            message: String::new(),
        }
    }

    const LIST: &str = "# comment\n\nlayer issuer/src/app/mod.rs http  # app uses http\nfile-length tests/src/lib.rs\nfn-length issuer/src/admin.rs execute\n";

    #[test]
    fn entries_allow_their_violations() {
        let entries = parse(LIST).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].line, 3);
        let (left, stale) = apply(
            vec![
                violation("layer", "issuer/src/app/mod.rs", "http"),
                violation("layer", "issuer/src/app/mod.rs", "http"),
                violation("layer", "issuer/src/app/mod.rs", "server"),
                violation("file-length", "tests/src/lib.rs", ""),
                violation("fn-length", "issuer/src/admin.rs", "execute"),
                violation("fn-length", "issuer/src/admin.rs", "run"),
            ],
            &entries,
        );
        let left: Vec<&str> = left.iter().map(|v| v.detail.as_str()).collect();
        assert_eq!(left, ["server", "run"]);
        assert!(stale.is_empty(), "{stale:?}");
    }

    #[test]
    fn an_entry_that_allows_nothing_fails() {
        let entries = parse(LIST).unwrap();
        let (left, stale) = apply(
            vec![violation("file-length", "tests/src/lib.rs", "")],
            &entries,
        );
        assert!(left.is_empty());
        assert_eq!(stale.len(), 2, "{stale:?}");
        assert!(
            stale[0].starts_with(
                "xtask/tidy-allow.txt:3: `layer issuer/src/app/mod.rs http` no longer occurs"
            ),
            "{}",
            stale[0]
        );
        assert!(stale[1].contains(":5: `fn-length issuer/src/admin.rs execute`"));
    }

    #[test]
    fn malformed_lines_fail() {
        let errors = parse("layer issuer/src/app/mod.rs\nfile-length a.rs extra\nsize a.rs\nfn-length a.rs f\nfn-length a.rs f\n").unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].contains(":1: `layer` takes 3 fields"));
        assert!(errors[1].contains(":2: `file-length` takes 2 fields"));
        assert!(errors[2].contains(":3: unknown rule `size`"));
        assert!(errors[3].contains(":5: the same as line 4"));
    }
}
