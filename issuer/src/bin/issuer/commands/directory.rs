//! `issuer directory check|test` (part of the `issuer` binary): diagnosis of the `[directory]`
//! of a configuration file, server by server, without the store.

use anyhow::{bail, Context as _};
use clap::Subcommand;
use issuer::config::ConfigFile;
use issuer::directory::diagnose::StepReport;
use issuer::directory::Directory;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum DirectoryCmd {
    /// Connect to every server of `[directory]` and report, per server: reachable, TLS and
    /// certificate, the service account's bind, the search base found. Exits 1 if any failed.
    Check {
        /// The configuration file holding `[directory]`.
        #[arg(long, env = "ISSUER_CONFIG")]
        config: PathBuf,
    },
    /// Sign NAME in as `issuer serve` would (the password on stdin) and print JSON
    /// `{"dn", "roles", "claims", "server"}`, or the step that failed. Exits 1 on a failure.
    Test {
        /// The user name, as given to the password grant.
        name: String,
        /// The configuration file holding `[directory]`.
        #[arg(long, env = "ISSUER_CONFIG")]
        config: PathBuf,
    },
}

fn directory(config: &Path) -> anyhow::Result<Directory> {
    let d = ConfigFile::read(config)?
        .directory()?
        .with_context(|| format!("{} has no [directory] table", config.display()))?;
    Directory::new(d).map_err(anyhow::Error::msg)
}

fn step(s: &StepReport) -> String {
    match s {
        StepReport::Ok => "ok".into(),
        StepReport::Plain => "plain ldap:// (loopback, no TLS)".into(),
        StepReport::Failed(why) => format!("FAILED: {why}"),
        StepReport::Skipped => "skipped".into(),
    }
}

pub fn run(cmd: DirectoryCmd) -> anyhow::Result<()> {
    match cmd {
        DirectoryCmd::Check { config } => {
            let d = directory(&config)?;
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
        DirectoryCmd::Test { name, config } => {
            let d = directory(&config)?;
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
