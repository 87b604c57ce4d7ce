//! The commands and their flags, declared once in [`COMMANDS`]: parsing, `--help`, and an error
//! for anything not declared (an unknown command or flag, a missing value, a stray argument, two
//! flags that exclude each other), so a mistyped flag never runs something else.

use crate::bench::Sections;
use std::fmt;

/// One flag of a command.
pub struct Flag {
    pub name: &'static str,
    /// The placeholder of its value, for a flag that takes one.
    pub value: Option<&'static str>,
    pub help: &'static str,
}

/// One command: its name, what it does, its flags, and groups of flags that exclude each other.
pub struct Cmd {
    pub name: &'static str,
    pub about: &'static str,
    pub flags: &'static [Flag],
    pub exclusive: &'static [&'static [&'static str]],
}

const fn flag(name: &'static str, value: Option<&'static str>, help: &'static str) -> Flag {
    Flag { name, value, help }
}

/// Every command, in the order `--help` shows them.
pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "test",
        about: "every check and test (what .ci/run runs), ending with a bounded run of every fuzz target (FUZZ_SECONDS, default 30 each)",
        flags: &[],
        exclusive: &[],
    },
    Cmd {
        name: "tidy",
        about: "the repository's rules: the issuer's layers, no import cycle in the filter, files up to 600 lines, functions up to 80, doc links that resolve (exceptions in xtask/tidy-allow.txt)",
        flags: &[],
        exclusive: &[],
    },
    Cmd {
        name: "demo",
        about: "the full stack on this machine (issuer, Envoy with the filter and TLS, a media upstream) and a curl walk-through; Ctrl-C stops it",
        flags: &[
            flag("--postgres", None, "two issuers on a throwaway PostgreSQL"),
            flag(
                "--native",
                None,
                "the native filter (an Envoy dynamic module) instead of the Wasm one",
            ),
        ],
        exclusive: &[],
    },
    Cmd {
        name: "dist",
        about: "release artifacts in dist/: the issuer, the Envoy module and configurations, the npm packages",
        flags: &[],
        exclusive: &[],
    },
    Cmd {
        name: "bench",
        about: "the benchmarks, side by side, written to BENCHMARKS.md",
        flags: &[
            flag("--quick", None, "a short run: one round of 2 s, a small store"),
            flag("--traffic", None, "the Envoy traffic runs alone"),
            flag("--edge", None, "the edge sync runs alone"),
            flag("--stores", None, "the store runs alone"),
            flag("--directory", None, "the directory sign-in runs alone"),
            flag("--failover", None, "the PostgreSQL failover runs alone"),
        ],
        exclusive: &[&["--traffic", "--edge", "--stores", "--directory", "--failover"]],
    },
    Cmd {
        name: "soak",
        about: "a bounded soak of the full stack, written to docs/soak.md",
        flags: &[flag("--minutes", Some("N"), "how long, in whole minutes (default 10)")],
        exclusive: &[],
    },
];

/// What to do, as the command line asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Task {
    /// Print this text (`--help`) and succeed.
    Help(String),
    Test,
    Tidy,
    Demo {
        postgres: bool,
        native: bool,
    },
    Dist,
    Bench {
        quick: bool,
        sections: Sections,
    },
    Soak {
        minutes: u64,
    },
}

/// A command line that is not one of the declared ones, with the usage to show.
#[derive(Debug)]
pub struct Error {
    message: String,
    usage: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}\n\n{}", self.message, self.usage)
    }
}

/// The flags given to one command, checked against its declaration.
struct Given<'a> {
    cmd: &'a Cmd,
    flags: Vec<(&'static str, Option<String>)>,
}

impl Given<'_> {
    fn has(&self, name: &str) -> bool {
        debug_assert!(self.cmd.flags.iter().any(|f| f.name == name));
        self.flags.iter().any(|(n, _)| *n == name)
    }

    fn value(&self, name: &str) -> Option<&str> {
        debug_assert!(self.cmd.flags.iter().any(|f| f.name == name));
        self.flags
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Parses the arguments after `cargo xtask`.
pub fn parse(args: &[String]) -> Result<Task, Error> {
    let Some(first) = args.first() else {
        return Err(Error {
            message: "no command given".into(),
            usage: usage(),
        });
    };
    match first.as_str() {
        "-h" | "--help" | "help" => return help(&args[1..]),
        _ => {}
    }
    let Some(cmd) = COMMANDS.iter().find(|c| c.name == first.as_str()) else {
        let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        return Err(Error {
            message: format!(
                "unknown command `{first}`; the commands: {}",
                names.join(", ")
            ),
            usage: usage(),
        });
    };
    if args[1..].iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Task::Help(command_help(cmd)));
    }
    let given = given_flags(cmd, &args[1..]).map_err(|message| Error {
        message,
        usage: command_help(cmd),
    })?;
    task(&given).map_err(|message| Error {
        message,
        usage: command_help(cmd),
    })
}

/// `--help`, alone or with one command.
fn help(rest: &[String]) -> Result<Task, Error> {
    match rest {
        [] => Ok(Task::Help(usage())),
        [name] => match COMMANDS.iter().find(|c| c.name == name.as_str()) {
            Some(cmd) => Ok(Task::Help(command_help(cmd))),
            None => Err(Error {
                message: format!("unknown command `{name}`"),
                usage: usage(),
            }),
        },
        _ => Err(Error {
            message: "`--help` takes at most one command".into(),
            usage: usage(),
        }),
    }
}

/// The flags of `args`, each declared by `cmd`, given once, with a value where it takes one.
fn given_flags<'a>(cmd: &'a Cmd, args: &[String]) -> Result<Given<'a>, String> {
    let mut given = Given {
        cmd,
        flags: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        if !name.starts_with('-') {
            return Err(format!(
                "unexpected argument `{arg}` for `cargo xtask {}`",
                cmd.name
            ));
        }
        let Some(flag) = cmd.flags.iter().find(|f| f.name == name) else {
            return Err(format!(
                "unknown flag `{name}` for `cargo xtask {}`; its flags: {}",
                cmd.name,
                known_flags(cmd)
            ));
        };
        if given.flags.iter().any(|(n, _)| *n == flag.name) {
            return Err(format!("`{}` is given twice", flag.name));
        }
        let value = match (flag.value, inline) {
            (None, None) => None,
            (None, Some(_)) => return Err(format!("`{}` takes no value", flag.name)),
            (Some(_), Some(v)) => Some(v),
            (Some(placeholder), None) => match args.next() {
                Some(v) if !v.starts_with("--") => Some(v.clone()),
                _ => return Err(format!("`{}` needs a value ({placeholder})", flag.name)),
            },
        };
        given.flags.push((flag.name, value));
    }
    for group in cmd.exclusive {
        let set: Vec<String> = group
            .iter()
            .filter(|f| given.has(f))
            .map(|f| format!("`{f}`"))
            .collect();
        if set.len() > 1 {
            return Err(format!(
                "{} exclude each other: give one of them",
                set.join(" and ")
            ));
        }
    }
    Ok(given)
}

/// The task of a command and its checked flags.
fn task(given: &Given) -> Result<Task, String> {
    Ok(match given.cmd.name {
        "test" => Task::Test,
        "tidy" => Task::Tidy,
        "demo" => Task::Demo {
            postgres: given.has("--postgres"),
            native: given.has("--native"),
        },
        "dist" => Task::Dist,
        "bench" => Task::Bench {
            quick: given.has("--quick"),
            sections: if given.has("--traffic") {
                Sections::Traffic
            } else if given.has("--edge") {
                Sections::Edge
            } else if given.has("--stores") {
                Sections::Stores
            } else if given.has("--directory") {
                Sections::Directory
            } else if given.has("--failover") {
                Sections::Failover
            } else {
                Sections::All
            },
        },
        "soak" => Task::Soak {
            minutes: match given.value("--minutes") {
                None => 10,
                Some(m) => m.parse().ok().filter(|&m: &u64| m > 0).ok_or_else(|| {
                    format!("`--minutes {m}`: N is a whole number of minutes, 1 or more")
                })?,
            },
        },
        other => unreachable!("command `{other}` is declared but not dispatched"),
    })
}

/// The flags of `cmd`, as an error lists them.
fn known_flags(cmd: &Cmd) -> String {
    cmd.flags
        .iter()
        .map(|f| match f.value {
            Some(v) => format!("{} {v}", f.name),
            None => f.name.to_owned(),
        })
        .chain(std::iter::once("--help".to_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One command's synopsis: `bench [--quick] [--traffic | --edge | --stores | --directory]`.
fn synopsis(cmd: &Cmd) -> String {
    let mut out = cmd.name.to_owned();
    let mut shown: Vec<&str> = Vec::new();
    for f in cmd.flags {
        if shown.contains(&f.name) {
            continue;
        }
        let group = cmd.exclusive.iter().find(|g| g.contains(&f.name));
        let members: Vec<&str> = group.map_or_else(|| vec![f.name], |g| g.to_vec());
        let parts: Vec<String> = members
            .iter()
            .map(|name| {
                let flag = cmd.flags.iter().find(|g| g.name == *name);
                match flag.and_then(|g| g.value) {
                    Some(v) => format!("{name} {v}"),
                    None => (*name).to_owned(),
                }
            })
            .collect();
        out += &format!(" [{}]", parts.join(" | "));
        shown.extend(members);
    }
    out
}

/// `cargo xtask --help`.
pub fn usage() -> String {
    let mut out = String::from("usage: cargo xtask <command> [flags]\n\ncommands:\n");
    for cmd in COMMANDS {
        out += &format!("  {}\n      {}\n", synopsis(cmd), cmd.about);
    }
    out + "\n`cargo xtask <command> --help` shows a command's flags.\n"
}

/// `cargo xtask <command> --help`.
pub fn command_help(cmd: &Cmd) -> String {
    let mut out = format!(
        "usage: cargo xtask {}\n\n{}\n\nflags:\n",
        synopsis(cmd),
        cmd.about
    );
    let width = cmd
        .flags
        .iter()
        .map(|f| flag_text(f).len())
        .max()
        .unwrap_or(0);
    let width = width.max("-h, --help".len());
    for f in cmd.flags {
        out += &format!("  {:width$}  {}\n", flag_text(f), f.help);
    }
    out + &format!("  {:width$}  this help\n", "-h, --help")
}

fn flag_text(f: &Flag) -> String {
    match f.value {
        Some(v) => format!("{} {v}", f.name),
        None => f.name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Task, String> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        parse(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn every_existing_command_line_parses_as_before() {
        assert_eq!(parse_str("test"), Ok(Task::Test));
        assert_eq!(parse_str("tidy"), Ok(Task::Tidy));
        assert_eq!(parse_str("dist"), Ok(Task::Dist));
        let demo = |postgres, native| Ok(Task::Demo { postgres, native });
        assert_eq!(parse_str("demo"), demo(false, false));
        assert_eq!(parse_str("demo --postgres"), demo(true, false));
        assert_eq!(parse_str("demo --native --postgres"), demo(true, true));
        let bench = |quick, sections| Ok(Task::Bench { quick, sections });
        assert_eq!(parse_str("bench"), bench(false, Sections::All));
        assert_eq!(parse_str("bench --quick"), bench(true, Sections::All));
        assert_eq!(
            parse_str("bench --traffic"),
            bench(false, Sections::Traffic)
        );
        assert_eq!(
            parse_str("bench --edge --quick"),
            bench(true, Sections::Edge)
        );
        assert_eq!(
            parse_str("bench --stores --quick"),
            bench(true, Sections::Stores)
        );
        assert_eq!(
            parse_str("bench --failover"),
            bench(false, Sections::Failover)
        );
        assert_eq!(parse_str("soak"), Ok(Task::Soak { minutes: 10 }));
        assert_eq!(parse_str("soak --minutes 3"), Ok(Task::Soak { minutes: 3 }));
        assert_eq!(
            parse_str("soak --minutes=25"),
            Ok(Task::Soak { minutes: 25 })
        );
    }

    #[test]
    fn an_unknown_flag_is_an_error_listing_the_known_ones() {
        let e = parse_str("test --bogus").unwrap_err();
        assert!(e.contains("unknown flag `--bogus`"), "{e}");
        assert!(e.contains("its flags: --help"), "{e}");
        let e = parse_str("bench --quik").unwrap_err();
        assert!(
            e.contains(
                "its flags: --quick, --traffic, --edge, --stores, --directory, --failover, --help"
            ),
            "{e}"
        );
        assert!(e.contains(
            "usage: cargo xtask bench [--quick] [--traffic | --edge | --stores | --directory | --failover]"
        ));
        let e = parse_str("soak --minute 5").unwrap_err();
        assert!(e.contains("its flags: --minutes N, --help"), "{e}");
    }

    #[test]
    fn other_malformed_lines_are_errors() {
        for line in [
            "",
            "bogus",
            "test extra",
            "demo --postgres --postgres",
            "demo --postgres=yes",
            "bench --traffic --stores",
            "soak --minutes",
            "soak --minutes --quick",
            "soak --minutes ten",
            "soak --minutes 0",
            "help bogus",
        ] {
            assert!(parse_str(line).is_err(), "{line:?} parsed");
        }
        let e = parse_str("bogus").unwrap_err();
        assert!(
            e.contains("the commands: test, tidy, demo, dist, bench, soak"),
            "{e}"
        );
    }

    #[test]
    fn help_shows_every_command_or_one() {
        for line in ["--help", "-h", "help"] {
            let Ok(Task::Help(text)) = parse_str(line) else {
                panic!("{line}: no help");
            };
            for cmd in COMMANDS {
                assert!(text.contains(&synopsis(cmd)), "{text}");
            }
            assert!(text.contains("soak [--minutes N]"), "{text}");
        }
        for line in ["bench --help", "bench --quick -h", "help bench"] {
            let Ok(Task::Help(text)) = parse_str(line) else {
                panic!("{line}: no help");
            };
            assert!(text.starts_with(
                "usage: cargo xtask bench [--quick] [--traffic | --edge | --stores | --directory | --failover]"
            ));
            assert!(text.contains("--stores"), "{text}");
        }
    }

    #[test]
    fn every_declared_command_has_a_task_and_well_formed_flags() {
        for cmd in COMMANDS {
            assert!(
                task(&given_flags(cmd, &[]).unwrap()).is_ok(),
                "{}",
                cmd.name
            );
            for group in cmd.exclusive {
                for name in *group {
                    assert!(cmd.flags.iter().any(|f| f.name == *name), "{name}");
                }
            }
            assert!(cmd.flags.iter().all(|f| f.name.starts_with("--")));
        }
    }
}
