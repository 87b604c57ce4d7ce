//! `issuer`: the token server (`issuer serve`) and its administration (`issuer client|user|keys`,
//! `issuer apply`, `issuer directory`, `issuer dpop`, `issuer vendor`, `issuer audit`, `issuer backup|restore`, `issuer init`).
//! This file parses the command line, with the configuration file of the global `--config` as
//! the defaults of any subcommand's options ([`issuer::config::parse_args`]), and hands it to
//! the subcommand; each subcommand is a module of `commands/` that owns its arguments and runs.

mod admin;
mod commands;
mod data_dir;
mod out;

use clap::Parser;
use commands::{serve, Command};
use issuer::config::{ConfigError, ConfigFile, FileUse};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The subcommands that take no configuration file: `--config` (or `ISSUER_CONFIG`) is not read
/// for them.
const WITHOUT_FILE: &[&str] = &["dpop", "vendor"];

/// How `issuer` uses its configuration file: the keys are `serve`'s options.
const FILE_USE: FileUse<'static> = FileUse {
    keys_of: "serve",
    not_for: WITHOUT_FILE,
};

#[derive(Parser)]
#[command(
    name = "issuer",
    version,
    about = "OAuth 2.0 token issuer of the media management service"
)]
struct Cli {
    #[command(flatten)]
    config: ConfigArg,
    #[command(subcommand)]
    command: Command,
}

/// The configuration file, a global flag of every subcommand: `serve`'s options and the
/// `[directory]` table. `serve` runs with it, an admin command finds the store there, `directory`
/// diagnoses its `[directory]`.
#[derive(clap::Args, Clone)]
pub struct ConfigArg {
    /// A TOML file with options of `serve` under their flag names, `_` for `-` (a flag or an
    /// environment variable overrides the file), and the `[directory]` table (see
    /// docs/issuer.md). An admin command finds the store there (`data_dir`, `store`, `kek_file`,
    /// …).
    #[arg(long, env = "ISSUER_CONFIG", global = true)]
    config: Option<PathBuf>,
}

impl ConfigArg {
    /// The file named, if any.
    pub fn path(&self) -> Option<&Path> {
        self.config.as_deref()
    }
}

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let parsed = match issuer::config::parse_args::<Cli>(&args, &FILE_USE) {
        Ok(parsed) => parsed,
        // `--help`, `--version` and a command line clap refuses: printed and exited as clap
        // does (0, or 2).
        Err(ConfigError::CommandLine(e)) => e.exit(),
        Err(e) => return failed(&e.into()),
    };
    match run(parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<clap::Error>() {
            Some(usage) => usage.exit(),
            None => failed(&e),
        },
    }
}

/// Prints why `issuer` failed, with its causes.
fn failed(e: &anyhow::Error) -> ExitCode {
    eprintln!(
        "issuer: {}",
        issuer::display::escape_lines(&format!("{e:#}"))
    );
    ExitCode::FAILURE
}

/// `issuer serve`'s command line parsed again, with its configuration file as it is now (a
/// reload).
fn reparse_serve() -> anyhow::Result<serve::Serve> {
    let args: Vec<_> = std::env::args_os().collect();
    let (cli, file) = issuer::config::reparse_args::<Cli>(&args, &FILE_USE)?;
    match cli.command {
        Command::Serve(s) => serve::with_file(*s, file),
        _ => anyhow::bail!("the command line is no longer `issuer serve`"),
    }
}

/// Runs the command line, with the configuration file if it names one.
fn run((cli, file): (Cli, Option<ConfigFile>)) -> anyhow::Result<()> {
    cli.command.run(&cli.config, file, reparse_serve)
}
