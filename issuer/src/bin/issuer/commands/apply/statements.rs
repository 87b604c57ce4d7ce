//! The vendors' clients an `issuer apply` file declares with their software statements
//! (`docs/clients.md`): each statement verified as `issuer client import` verifies it (a refusal
//! audited, and nothing changed), then imported and, if the entry is active, activated with
//! the entry's grants and impersonation, which may narrow the statement's, never widen them.

use super::{grant_names, Change, Step};
use crate::commands::client::{refuse_statement, vendor_trust};
use crate::data_dir::DataDir;
use anyhow::bail;
use issuer::admin::{ClientView, Command, VendorImport};
use issuer::config::ConfigFile;
use issuer::store::vendor::VendorClient;
use issuer::vendor::{statement, Impersonation};
use std::collections::HashMap;

use super::file::{Declared, DeclaredClient};

/// The verified statements of `declared`'s clients, by client id. Fails, before anything
/// changes, on a statement the trusted vendors (`config`'s `[[vendor]]` tables) refuse (audited
/// as `client import` audits it), of another client id, of a local client's id, or allowing
/// less than its entry declares.
pub(super) fn verify(
    declared: &Declared,
    clients: &[ClientView],
    config: Option<&ConfigFile>,
    dir: &DataDir,
) -> anyhow::Result<HashMap<String, VendorImport>> {
    let mut out = HashMap::new();
    let with: Vec<(&DeclaredClient, &str)> = declared
        .clients
        .iter()
        .filter_map(|c| Some((c, c.statement.as_deref()?)))
        .collect();
    if with.is_empty() {
        return Ok(out);
    }
    let trust = vendor_trust(config)?;
    let now = issuer::app::now();
    for (c, text) in with {
        let v = match statement::verify(text, &trust, now) {
            Ok(v) => v,
            Err(r) => match refuse_statement(dir, &format!("statement of {}", c.id), &r)? {},
        };
        let id = &c.id;
        if &v.statement.client_id != id {
            bail!(
                "client {id}: its software_statement is of client {:?}; nothing was changed",
                v.statement.client_id
            );
        }
        if clients.iter().any(|l| &l.id == id && l.vendor.is_none()) {
            bail!("client {id} is a local client: a vendor's statement cannot take its id; nothing was changed");
        }
        let allowed = VendorClient::grant_kinds(&v.statement.grant_types);
        let wider = c.grants.iter().any(|g| !allowed.contains(g))
            || (c.impersonate && v.statement.impersonation == Impersonation::None);
        if wider {
            bail!(
                "client {id}: the file declares more than its statement allows ({} {}); \
                 activation narrows, never widens; nothing was changed",
                grant_names(&allowed),
                v.statement.impersonation.as_str()
            );
        }
        out.insert(id.clone(), VendorImport::of(v, text));
    }
    Ok(out)
}

/// The import of `i`, unless `old` (the client as the store has it) holds it or a newer one.
pub(super) fn import_step(i: VendorImport, old: Option<&ClientView>) -> Option<Step> {
    let held = old
        .and_then(|o| o.vendor.as_ref())
        .map_or(0, |v| v.issued_at);
    if old.is_some() && i.statement.iat <= held {
        return None;
    }
    let s = &i.statement;
    let grants: Vec<&str> = s.grant_types.iter().map(|g| g.as_str()).collect();
    let text = format!(
        "{} client {}: statement of {} ({:?}), grants=[{}] impersonation={} expires={}{}",
        if old.is_some() { "~" } else { "+" },
        s.client_id,
        i.vendor,
        s.client_name,
        grants.join(","),
        s.impersonation.as_str(),
        crate::commands::audit::rfc3339(s.exp),
        if old.is_some() {
            " (newer)"
        } else {
            ", pending"
        },
    );
    Some(Step {
        text,
        change: Change::Run(Command::ClientImport(i)),
    })
}

/// The activation of the vendor's client `c` with what its entry declares.
pub(super) fn activate_step(c: &DeclaredClient) -> Step {
    Step {
        text: format!(
            "~ client {}: activated, grants={} impersonate={}",
            c.id,
            grant_names(&c.grants),
            c.impersonate
        ),
        change: Change::Run(Command::ClientActivate {
            id: c.id.clone(),
            grants: Some(c.grants.clone()),
            no_impersonation: !c.impersonate,
        }),
    }
}
