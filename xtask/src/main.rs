//! Orchestration of the project, run as `cargo xtask <command>`:
//!
//! - `test`: every check and test (what `.ci/run` runs), installing what it needs, ending with a
//!   bounded run of every fuzz target (`FUZZ_SECONDS`, default 10 each), and a table of its
//!   phases' wall times (`phases`).
//! - `tidy`: the repository's rules (layers, sizes, doc links), checked; `test` runs it too.
//! - `demo [--postgres] [--native]`: the full stack on this machine (issuer, Envoy with the filter
//!   and TLS, a media upstream) with a demo client and user, and a curl walk-through; Ctrl-C stops
//!   it.
//! - `soak [--minutes N]`: a bounded soak of the full stack, written to docs/soak.md.
//! - `fuzz [--seconds S]`: every cargo-fuzz target for S seconds each (300 by default; `test`
//!   runs each for `FUZZ_SECONDS`, 10 by default).
//! - `bench`: the benchmarks, side by side, written to BENCHMARKS.md (`--quick` for a short run,
//!   `--stores` for the store runs alone).
//! - `dist`: release artifacts in `dist/`, versioned and checksummed: the static issuer, its
//!   tarball, its OCI image, its Debian package, the filter's OCI image for Istio, the Envoy
//!   modules and configurations, and the npm packages of the browser/Node module; `--check` then
//!   checks them with the real tools, as `test` does (`--rebuild`: and builds the issuer again
//!   to compare); `--sign-key FILE` signs `SHA256SUMS` (`dist/SHA256SUMS.sig`, Ed25519).
//! - `console-pkg`: the web console's copy of the browser module (`issuer/console/pkg/`), rebuilt;
//!   `test` fails while it differs from a fresh build.
//!
//! `cargo xtask --help` lists the commands and their flags, declared with clap in `flags.rs`;
//! anything undeclared is clap's error (exit status 2). One module per command; `install`, `wasm`
//! and `fuzz` are what they share, `util` the rest.

use anyhow::Result;
use clap::Parser as _;
use flags::{Cli, Task};

mod bench;
mod beside;
mod console;
mod demo;
mod dist;
mod flags;
mod fuzz;
mod install;
mod native;
mod phases;
mod rules;
mod soak;
mod test;
mod tidy;
mod util;
mod wasm;

fn main() -> Result<()> {
    let task = Cli::parse().task;
    std::env::set_current_dir(util::root())?;
    match task {
        Task::Test => test::test(),
        Task::Tidy => tidy::tidy(),
        Task::Demo { postgres, native } => demo::demo(postgres, native),
        Task::Dist {
            check: false,
            rebuild: _,
            sign_key,
        } => dist::dist(sign_key.as_deref()),
        Task::Dist {
            check: true,
            rebuild,
            sign_key,
        } => dist::check::build_and_check_all(rebuild, sign_key.as_deref()),
        Task::Bench { quick, only } => bench::bench(quick, only.sections()),
        Task::Soak { minutes } => soak::soak(minutes),
        Task::Fuzz { seconds } => fuzz::run_all(seconds),
        Task::ConsolePkg => console::refresh(),
    }
}
