//! The commands and their flags, declared with clap's derive: parsing, `--help` (and
//! `cargo xtask help <command>`), and clap's usual error (exit status 2) for anything not declared,
//! such as an unknown command or flag, a missing value, a stray argument, a flag given twice, or
//! two flags that exclude each other, so a mistyped flag never runs something else.

use crate::bench::Sections;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The command line after `cargo xtask`.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, test, demo and benchmark orchestration of the project",
    after_help = "`cargo xtask <command> --help` shows a command's flags.",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub task: Task,
}

/// What to do, as the command line asked. Commands are listed by `--help` in this order.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Task {
    /// Every check and test (what .ci/run runs)
    ///
    /// Every check and test (what .ci/run runs), installing what it needs, ending with a bounded
    /// run of every fuzz target (FUZZ_SECONDS seconds each, default 10).
    Test,
    /// The repository's rules, checked (test runs it too)
    ///
    /// The repository's rules: the issuer's layers (every module in one, none using a higher
    /// one), the binary apart from the library, no import cycle in the filter, no anyhow in the
    /// libraries, files up to 600 lines, functions up to 80, doc links that resolve (exceptions
    /// in xtask/tidy-allow.txt).
    Tidy,
    /// The full stack on this machine and a curl walk-through; Ctrl-C stops it
    ///
    /// The full stack on this machine (issuer, Envoy with the filter and TLS, a media upstream)
    /// with a demo client and user, and a curl walk-through; Ctrl-C stops it.
    Demo {
        /// Two issuers on a throwaway PostgreSQL
        #[arg(long)]
        postgres: bool,
        /// The native filter (an Envoy dynamic module) instead of the Wasm one
        #[arg(long)]
        native: bool,
    },
    /// Release artifacts in dist/
    ///
    /// Release artifacts in dist/, versioned and checksummed (SHA256SUMS, and its signature
    /// SHA256SUMS.sig with --sign-key): the static issuer
    /// (musl) and its tarball, its OCI image (from scratch) and Debian package, the filter's OCI
    /// image for Istio, the Envoy modules and configurations, the npm packages of the
    /// browser/Node module.
    Dist {
        /// Then check them with the real tools, as `cargo xtask test` does (podman, dpkg,
        /// systemd-analyze, sha256sum, openssl; installs what is missing; as root)
        #[arg(long)]
        check: bool,
        /// With --check: also build the issuer again from nothing in another target dir and
        /// compare the binaries (minutes)
        #[arg(long, requires = "check")]
        rebuild: bool,
        /// Sign SHA256SUMS with this Ed25519 private key (PKCS#8 PEM, mode 0600, outside the
        /// repository), writing dist/SHA256SUMS.sig; without it the sums are unsigned
        #[arg(long, value_name = "FILE")]
        sign_key: Option<PathBuf>,
    },
    /// The benchmarks, side by side, written to BENCHMARKS.md
    Bench {
        /// A short run: one round of 2 s, a small store
        #[arg(long)]
        quick: bool,
        #[command(flatten)]
        only: Only,
    },
    /// Every cargo-fuzz target for a while (nightly; `test` runs each for `FUZZ_SECONDS`, 10)
    Fuzz {
        /// Seconds each target runs
        #[arg(
            long,
            value_name = "S",
            default_value_t = 300,
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        seconds: u64,
    },
    /// A bounded soak of the full stack, written to docs/soak.md
    Soak {
        /// How long, in whole minutes
        #[arg(
            long,
            value_name = "N",
            default_value_t = 10,
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        minutes: u64,
    },
    /// The web console's copy of the browser module, rebuilt (issuer/console/pkg/)
    ///
    /// Builds the browser build of the JS module and copies mms_token.js and mms_token_bg.wasm
    /// into issuer/console/pkg/, which the issuer binary embeds; `test` fails while that copy
    /// differs from a fresh build.
    ConsolePkg,
}

/// The one section of `bench` to run alone, if any (the flags exclude each other).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Args)]
#[group(multiple = false)]
pub struct Only {
    /// The Envoy traffic runs alone
    #[arg(long)]
    traffic: bool,
    /// The edge sync runs alone
    #[arg(long)]
    edge: bool,
    /// The store runs alone
    #[arg(long)]
    stores: bool,
    /// The directory sign-in runs alone
    #[arg(long)]
    directory: bool,
    /// The PostgreSQL failover runs alone
    #[arg(long)]
    failover: bool,
    /// The DPoP runs alone (bound tokens, a fresh proof a request, against jwt_authn ES256)
    #[arg(long)]
    dpop: bool,
    /// The token endpoint's DPoP runs alone (client_credentials with a proof beside without)
    #[arg(long)]
    token_dpop: bool,
    /// The waiting edge sync runs alone (revocation latency, the fleet one issuer serves)
    #[arg(long)]
    feed: bool,
    /// The token exchange runs alone (the grant beside client_credentials, actor chains
    /// through both filters)
    #[arg(long)]
    exchange: bool,
    /// The admin API's lists at size alone (100,000 users, 10,000 clients, 1,000,000 families,
    /// on redb and on PostgreSQL)
    #[arg(long)]
    admin: bool,
}

impl Only {
    /// The sections the flags ask for: one of them, or all.
    pub fn sections(self) -> Sections {
        match self {
            Only { traffic: true, .. } => Sections::Traffic,
            Only { edge: true, .. } => Sections::Edge,
            Only { stores: true, .. } => Sections::Stores,
            Only {
                directory: true, ..
            } => Sections::Directory,
            Only { failover: true, .. } => Sections::Failover,
            Only { dpop: true, .. } => Sections::Dpop,
            Only {
                token_dpop: true, ..
            } => Sections::TokenDpop,
            Only { feed: true, .. } => Sections::Feed,
            Only { exchange: true, .. } => Sections::Exchange,
            Only { admin: true, .. } => Sections::Admin,
            _ => Sections::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    fn parse(line: &str) -> Result<Task, clap::Error> {
        let args = std::iter::once("xtask").chain(line.split_whitespace());
        Cli::try_parse_from(args).map(|cli| cli.task)
    }

    /// The command and sections of a `bench` line.
    fn bench(line: &str) -> (bool, Sections) {
        match parse(line) {
            Ok(Task::Bench { quick, only }) => (quick, only.sections()),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn the_declaration_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_documented_command_line_parses_as_before() {
        assert_eq!(parse("test").unwrap(), Task::Test);
        assert_eq!(parse("tidy").unwrap(), Task::Tidy);
        let dist = |check, rebuild| Task::Dist {
            check,
            rebuild,
            sign_key: None,
        };
        assert_eq!(parse("dist").unwrap(), dist(false, false));
        assert_eq!(parse("dist --check").unwrap(), dist(true, false));
        assert_eq!(parse("dist --check --rebuild").unwrap(), dist(true, true));
        let signed = |check| Task::Dist {
            check,
            rebuild: false,
            sign_key: Some(PathBuf::from("/keys/release.key")),
        };
        assert_eq!(
            parse("dist --sign-key /keys/release.key").unwrap(),
            signed(false)
        );
        assert_eq!(
            parse("dist --check --sign-key=/keys/release.key").unwrap(),
            signed(true)
        );
        let demo = |postgres, native| Task::Demo { postgres, native };
        assert_eq!(parse("demo").unwrap(), demo(false, false));
        assert_eq!(parse("demo --postgres").unwrap(), demo(true, false));
        assert_eq!(parse("demo --native").unwrap(), demo(false, true));
        assert_eq!(parse("demo --native --postgres").unwrap(), demo(true, true));
        assert_eq!(bench("bench"), (false, Sections::All));
        assert_eq!(bench("bench --quick"), (true, Sections::All));
        assert_eq!(bench("bench --traffic"), (false, Sections::Traffic));
        assert_eq!(bench("bench --edge --quick"), (true, Sections::Edge));
        assert_eq!(bench("bench --stores --quick"), (true, Sections::Stores));
        assert_eq!(bench("bench --directory"), (false, Sections::Directory));
        assert_eq!(bench("bench --failover"), (false, Sections::Failover));
        assert_eq!(bench("bench --exchange"), (false, Sections::Exchange));
        assert_eq!(bench("bench --admin"), (false, Sections::Admin));
        assert!(parse("bench --admin --stores").is_err());
        assert_eq!(parse("soak").unwrap(), Task::Soak { minutes: 10 });
        assert_eq!(parse("fuzz").unwrap(), Task::Fuzz { seconds: 300 });
        assert_eq!(parse("console-pkg").unwrap(), Task::ConsolePkg);
        assert_eq!(
            parse("fuzz --seconds 20").unwrap(),
            Task::Fuzz { seconds: 20 }
        );
        assert_eq!(
            parse("soak --minutes 3").unwrap(),
            Task::Soak { minutes: 3 }
        );
        assert_eq!(
            parse("soak --minutes=25").unwrap(),
            Task::Soak { minutes: 25 }
        );
    }

    #[test]
    fn malformed_lines_are_clap_errors_of_status_2() {
        for (line, kind) in [
            ("", ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
            ("bogus", ErrorKind::InvalidSubcommand),
            ("test extra", ErrorKind::UnknownArgument),
            ("test --bogus", ErrorKind::UnknownArgument),
            ("bench --quik", ErrorKind::UnknownArgument),
            ("demo --postgres --postgres", ErrorKind::ArgumentConflict),
            ("demo --postgres=yes", ErrorKind::TooManyValues),
            ("bench --traffic --stores", ErrorKind::ArgumentConflict),
            ("soak --minutes", ErrorKind::InvalidValue),
            ("soak --minutes --quick", ErrorKind::UnknownArgument),
            ("soak --minutes ten", ErrorKind::ValueValidation),
            ("soak --minutes 0", ErrorKind::ValueValidation),
            ("dist --rebuild", ErrorKind::MissingRequiredArgument),
            ("dist --sign-key", ErrorKind::InvalidValue),
            ("soak --minute 5", ErrorKind::UnknownArgument),
            ("help bogus", ErrorKind::InvalidSubcommand),
        ] {
            let e = parse(line).expect_err(line);
            assert_eq!(e.kind(), kind, "{line:?}: {e}");
            assert_eq!(e.exit_code(), 2, "{line:?}");
        }
        let e = parse("bench --quik").unwrap_err().to_string();
        assert!(
            e.contains("tip: a similar argument exists: '--quick'"),
            "{e}"
        );
        assert!(e.contains("Usage: cargo xtask bench"), "{e}");
    }

    /// The help text clap renders for a command line, which asks for it.
    fn help(line: &str) -> String {
        let e = parse(line).expect_err(line);
        assert_eq!(e.kind(), ErrorKind::DisplayHelp, "{line:?}: {e}");
        assert_eq!(e.exit_code(), 0, "{line:?}");
        e.render().to_string()
    }

    #[test]
    fn help_shows_every_command_or_one() {
        for line in ["--help", "-h", "help"] {
            let text = help(line);
            assert!(text.contains("Usage: cargo xtask <COMMAND>"), "{text}");
            for name in ["test", "tidy", "demo", "dist", "bench", "soak"] {
                assert!(text.contains(&format!("\n  {name} ")), "{name}: {text}");
            }
        }
        for line in ["bench --help", "bench --quick -h", "help bench"] {
            let text = help(line);
            assert!(
                text.contains("Usage: cargo xtask bench [OPTIONS]"),
                "{text}"
            );
            for flag in ["--quick", "--traffic", "--stores", "--failover"] {
                assert!(text.contains(flag), "{flag}: {text}");
            }
        }
        assert!(help("soak --help").contains("--minutes <N>"));
        assert!(help("soak --help").contains("[default: 10]"));
    }
}
