//! `issuer directory check|test` (part of the `issuer` binary): diagnosis of the `[directory]`
//! of the configuration file of `--config`, server by server, without the store.

use crate::ConfigArg;
use anyhow::{bail, Context as _};
use clap::Subcommand;
use issuer::config::ConfigFile;
use issuer::directory::diagnose::StepReport;
use issuer::directory::Directory;
use std::path::Path;

#[derive(Subcommand)]
pub enum DirectoryCmd {
    /// Connect to every server of `[directory]` and report, per server: reachable, TLS and
    /// certificate, the service account's bind, the search base found. Exits 1 if any failed.
    Check,
    /// Sign NAME in as `issuer serve` would (the password on stdin) and print JSON
    /// `{"dn", "roles", "claims", "server"}`, or the step that failed. Exits 1 on a failure.
    Test {
        /// The user name, as given to the password grant.
        name: String,
    },
}

/// The configuration file of the global `--config`, which `directory` requires: without one, the
/// command line is refused as clap refuses a missing argument (its usage, exit code 2).
fn required<'a>(config: &'a ConfigArg, cmd: &DirectoryCmd) -> anyhow::Result<&'a Path> {
    config.path().ok_or_else(|| {
        let mut cli = <crate::Cli as clap::CommandFactory>::command();
        cli.build();
        let name = match cmd {
            DirectoryCmd::Check => "check",
            DirectoryCmd::Test { .. } => "test",
        };
        let usage = cli
            .find_subcommand_mut("directory")
            .and_then(|d| d.find_subcommand_mut(name))
            .expect("issuer directory's subcommand");
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "the following required arguments were not provided:\n  --config <CONFIG>",
        )
        .format(usage)
        .into()
    })
}

/// The directory of the `[directory]` table of `config`.
fn directory(config: &Path) -> anyhow::Result<Directory> {
    let d = ConfigFile::read(config)?
        .directory()?
        .with_context(|| format!("{} has no [directory] table", config.display()))?;
    Ok(Directory::new(d)?)
}

fn step(s: &StepReport) -> String {
    match s {
        StepReport::Ok => "ok".into(),
        StepReport::Plain => "plain ldap:// (loopback, no TLS)".into(),
        StepReport::Failed(why) => format!("FAILED: {why}"),
        StepReport::Skipped => "skipped".into(),
    }
}

/// Runs `issuer directory CMD` on the `[directory]` of the file of `--config`.
pub fn run(cmd: DirectoryCmd, config: &ConfigArg) -> anyhow::Result<()> {
    let config = required(config, &cmd)?;
    match cmd {
        DirectoryCmd::Check => {
            let d = directory(config)?;
            let reports = crate::admin::block_on(d.check())?;
            for r in &reports {
                crate::out::text(&format!(
                    "{}\n  reachable:      {}\n  tls:            {}\n  service bind:   {}\n  \
                     search base:    {}\n",
                    r.url,
                    step(&r.reachable),
                    step(&r.tls),
                    step(&r.service_bind),
                    step(&r.search_base)
                ))?;
            }
            let failed = reports.iter().filter(|r| !r.ok()).count();
            if failed > 0 {
                bail!(
                    "{failed} of {} directory servers failed a check",
                    reports.len()
                );
            }
            Ok(())
        }
        DirectoryCmd::Test { name } => {
            let d = directory(config)?;
            let password = crate::admin::read_secret("password")?;
            match crate::admin::block_on(d.test(&name, &password))? {
                Ok(user) => {
                    let out = serde_json::json!({
                        "name": user.name,
                        "id": user.key,
                        "dn": user.dn,
                        "roles": user.roles,
                        "claims": user.claims.iter().map(|(t, v)| serde_json::json!({"type": t, "value": v})).collect::<Vec<_>>(),
                        "server": user.server,
                    });
                    crate::out::json_line(&out.to_string())?;
                    Ok(())
                }
                Err(failure) => {
                    crate::out::json_line(&serde_json::to_string(&failure)?)?;
                    bail!("sign-in of {name:?} failed: {}", failure.error)
                }
            }
        }
    }
}
