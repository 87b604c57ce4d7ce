//! Orchestration of the project, run as `cargo xtask <command>`:
//!
//! - `test`: every check and test (what `.ci/run` runs), installing what it needs, ending with a
//!   bounded run of every fuzz target (`FUZZ_SECONDS`, default 30 each).
//! - `demo`: the full stack on this machine (issuer, Envoy with the filter and TLS, a media
//!   upstream) with a demo client and user, and a curl walk-through; Ctrl-C stops it.
//! - `soak [--minutes N]`: a bounded soak of the full stack, written to docs/soak.md.
//! - `bench`: the benchmarks, side by side, written to BENCHMARKS.md (`--quick` for a short run,
//!   `--stores` for the store runs alone).
//! - `dist`: release artifacts in `dist/`: the issuer, the Envoy module and configurations, and the
//!   npm packages of the browser/Node module.
//!
//! One module per command; `install`, `wasm` and `fuzz` are what they share, `util` the rest.

use anyhow::Result;

mod bench;
mod demo;
mod dist;
mod fuzz;
mod install;
mod soak;
mod test;
mod util;
mod wasm;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::env::set_current_dir(util::root())?;
    match args.first().map(String::as_str) {
        Some("test") => test::test(),
        Some("demo") => demo::demo(args.iter().any(|a| a == "--postgres")),
        Some("dist") => dist::dist(),
        Some("bench") => {
            let has = |flag: &str| args.iter().any(|a| a == flag);
            let sections = if has("--traffic") {
                bench::Sections::Traffic
            } else if has("--edge") {
                bench::Sections::Edge
            } else if has("--stores") {
                bench::Sections::Stores
            } else {
                bench::Sections::All
            };
            bench::bench(has("--quick"), sections)
        }
        Some("soak") => soak::soak(
            args.iter()
                .position(|a| a == "--minutes")
                .and_then(|i| args.get(i + 1))
                .map_or("10", String::as_str),
        ),
        _ => {
            eprintln!(
                "usage: cargo xtask <test | demo [--postgres] | dist | bench [--quick] [--traffic | --edge | --stores] | soak [--minutes N]>"
            );
            std::process::exit(2);
        }
    }
}
