//! `issuer client import FILE`: a vendor's software statement or revocation list, checked
//! against the `[[vendor]]` tables of the configuration file, then sent as an admin command
//! (`docs/clients.md`). A refused document is audited and changes nothing else.

use crate::admin::run_admin;
use crate::data_dir::DataDir;
use anyhow::{bail, Context as _};
use issuer::admin::{describe_refusal, Command, VendorImport};
use issuer::config::ConfigFile;
use issuer::vendor::{revocations, statement, Refusal, Trust};
use std::io::Read as _;
use std::path::Path;

/// Imports FILE: a statement (a pending client, or a newer statement of one) or a revocation
/// list (its clients deactivated).
pub fn import(path: &Path, dir: &DataDir, config: Option<&ConfigFile>) -> anyhow::Result<()> {
    let trust = trust(config)?;
    let text = read(path)?;
    let now = issuer::app::now();
    if revocations::looks_like_revocations(&text) {
        return match revocations::verify(&text, &trust, now) {
            Ok(v) => run_admin(
                dir,
                Command::ClientVendorRevoke {
                    vendor: v.vendor,
                    ids: v.list.revoked_client_ids,
                },
            ),
            Err(r) => refuse(dir, "revocation list", &r).map(|never| match never {}),
        };
    }
    match statement::verify(&text, &trust, now) {
        Ok(v) => run_admin(dir, Command::ClientImport(VendorImport::of(v, &text))),
        Err(r) => refuse(dir, "statement", &r).map(|never| match never {}),
    }
}

/// The trusted vendors of the configuration file.
pub(crate) fn trust(config: Option<&ConfigFile>) -> anyhow::Result<Trust> {
    let Some(config) = config else {
        bail!("no vendor is trusted: name the configuration file holding [[vendor]] tables with --config");
    };
    let trust = config.vendors()?;
    if trust.is_empty() {
        bail!(
            "no vendor is trusted: {} has no [[vendor]] table (name, keys)",
            config.path().display()
        );
    }
    Ok(trust)
}

/// The document in `path`: the JWS as text, or a JSON object holding it as
/// `software_statement` (an RFC 7591 registration request).
pub(crate) fn read(path: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .take(issuer::vendor::jws::MAX_LEN as u64 + 1024)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (UTF-8 text)", path.display()))?;
    let text = text.trim();
    if text.starts_with('{') {
        let json: serde_json::Value = serde_json::from_str(text)
            .with_context(|| format!("{} is JSON, but malformed", path.display()))?;
        if json.get("client_secret").is_some() {
            eprintln!(
                "warning: {} holds the client's secret, which the installation never needs",
                path.display()
            );
        }
        return json
            .get("software_statement")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("{} holds no `software_statement`", path.display()));
    }
    Ok(text.to_owned())
}

/// Audits the refusal `r` of a document of kind `what`, and fails with it.
pub(crate) fn refuse(
    dir: &DataDir,
    what: &str,
    r: &Refusal,
) -> anyhow::Result<std::convert::Infallible> {
    let (error, description) = describe_refusal(r);
    let cmd = Command::VendorRefused {
        target: what.to_owned(),
        error: error.to_owned(),
        description: description.clone(),
    };
    crate::admin::run_on(dir, &cmd)?;
    bail!("{what} refused ({error}): {description}; nothing was imported")
}

/// The table of `client list --pending`: each client with its vendor, name, the grants and
/// impersonation its statement asks for, and when the statement expires.
pub fn pending_table(clients: &[issuer::admin::ClientView]) -> String {
    let mut table = String::from(
        "ID                   VENDOR       NAME                 GRANTS                                  IMPERSONATION  EXPIRES\n",
    );
    for (c, v) in clients.iter().filter_map(|c| Some((c, c.vendor.as_ref()?))) {
        let grants: Vec<&str> = v.grants.iter().map(|g| g.as_str()).collect();
        table += &format!(
            "{:<20} {:<12} {:<20} {:<39} {:<14} {}\n",
            c.id,
            issuer::display::escape_text(&v.vendor),
            issuer::display::escape_text(&v.client_name),
            grants.join(","),
            v.impersonation.as_str(),
            super::super::audit::rfc3339(v.expires_at),
        );
    }
    table
}
