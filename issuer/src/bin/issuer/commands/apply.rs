//! `issuer apply FILE [--dry-run] [--prune]`: makes the store's clients and local users match a
//! file (docs/operate.md, "Clients and users in a file"). The file is read and checked whole
//! first ([`file`]); the plan is computed against the store's current state
//! (read with the listings of `client list` and `user list`); each planned change is then one admin
//! command ([`Command`]), run and audited like the same change made by hand, through the running
//! server's socket or on the store itself ([`Session`]).

mod file;
mod statements;

use crate::admin::{unexpected, Session};
use crate::data_dir::{hash_key, DataDir};
use crate::out;
use clap::Args;
use file::{read, sorted, Declared, DeclaredClient, DeclaredUser};
use issuer::admin::{ClientView, Command, NewClient, NewUser, Reply, UserView, VendorImport};
use issuer::config::ConfigFile;
use issuer::secrets::{new_client_secret, HashKey};
use issuer::store::{DpopPolicy, GrantKind};
use std::collections::HashMap;
use std::path::PathBuf;
use zeroize::Zeroizing;

/// Changes applied between two progress lines on stderr (and the least number that shows any).
const PROGRESS_EVERY: usize = 1000;

#[derive(Args)]
pub struct ApplyArgs {
    /// The TOML file of `[[client]]` and `[[user]]` entries.
    file: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also remove the clients and local users the file does not name.
    #[arg(long)]
    prune: bool,
    #[command(flatten)]
    dir: DataDir,
}

/// One planned change: its line in the plan, and what does it.
struct Step {
    text: String,
    change: Change,
}

enum Change {
    /// A new client: its secret is from its `secret_file`, or generated and printed once.
    AddClient(DeclaredClient),
    /// Any other change.
    Run(Command),
}

/// `issuer apply`; `config` holds the `[[vendor]]` tables a client's statement is checked
/// against.
pub fn run(args: ApplyArgs, config: Option<&ConfigFile>) -> anyhow::Result<()> {
    let dir = &args.dir;
    let declared = read(&args.file)?;
    let session = Session::open(&dir.location()?, &dir.pg_files())?;
    let clients = match session.run(&Command::ClientList)? {
        Reply::Clients(clients) => clients,
        other => return Err(unexpected(&other)),
    };
    let users = match session.run(&Command::UserList)? {
        Reply::Users(users) => users,
        other => return Err(unexpected(&other)),
    };
    refuse_edge_changes(&declared, &clients)?;
    let imports = statements::verify(&declared, &clients, config, dir)?;
    let steps = plan(declared, clients, users, args.prune, imports);
    let file = args.file.display();
    if steps.is_empty() {
        out::line(&format!("no change: the store matches {file}"))?;
        return Ok(());
    }
    for step in &steps {
        out::line(&step.text)?;
    }
    if args.dry_run {
        out::line(&format!(
            "dry run: {} changes planned, nothing changed",
            steps.len()
        ))?;
        return Ok(());
    }
    let key = match &session {
        _ if !steps
            .iter()
            .any(|s| matches!(s.change, Change::AddClient(_))) =>
        {
            None
        }
        Session::Store(store, _) => Some(store.hash_key().clone()),
        Session::Socket(_) => Some(hash_key(dir)?),
    };
    let total = steps.len();
    for (done, step) in steps.into_iter().enumerate() {
        execute(&session, step, key.as_ref())
            .map_err(|e| anyhow::anyhow!("after {done} of {total} changes: {e:#}"))?;
        if total >= PROGRESS_EVERY && (done + 1) % PROGRESS_EVERY == 0 {
            eprintln!("applied {} of {total} changes", done + 1);
        }
    }
    out::line(&format!("applied {total} changes from {file}"))?;
    Ok(())
}

/// Runs one step; a new client's generated secret is printed (once: only its hash is kept).
fn execute(session: &Session, step: Step, key: Option<&HashKey>) -> anyhow::Result<()> {
    let c = match step.change {
        Change::Run(cmd) => return session.run(&cmd).map(drop),
        Change::AddClient(c) => c,
    };
    let key = key.ok_or_else(|| anyhow::anyhow!("no hash key for the new client's secret"))?;
    let (secret, generated): (Zeroizing<String>, bool) = match c.secret {
        Some(s) => (s, false),
        None => (new_client_secret(), true),
    };
    let cmd = Command::ClientAdd(NewClient {
        secret_hash: hex::encode(key.client_secret_hash(&c.id, &secret)),
        id: c.id.clone(),
        grants: c.grants,
        impersonate: c.impersonate,
        claim_types: c.claim_types,
        edge: c.edge.unwrap_or(false),
        dpop: c.dpop,
        active: c.active,
        exchange: c.exchange,
    });
    session.run(&cmd)?;
    if generated {
        out::line(&format!("secret of {}: {}", c.id, secret.as_str()))?;
        eprintln!("(shown once: store it now; only a keyed hash is kept)");
    }
    Ok(())
}

/// Fails, before anything changes, if the file declares an existing client's `edge` other than
/// it is: no admin command changes it, so the plan could not be carried out.
fn refuse_edge_changes(declared: &Declared, clients: &[ClientView]) -> anyhow::Result<()> {
    let edge: HashMap<&str, bool> = clients.iter().map(|c| (c.id.as_str(), c.edge)).collect();
    let wrong: Vec<String> = declared
        .clients
        .iter()
        .filter_map(|c| {
            let (&old, new) = (edge.get(c.id.as_str())?, c.edge?);
            (old != new).then(|| format!("{} (edge {old} -> {new})", c.id))
        })
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "whether a client is an edge client is fixed when it is added, and the file changes it \
         for {}: remove the client (`issuer client remove ID`) and apply again to add it anew \
         (with a new secret), or change `edge` in the file; nothing was changed",
        wrong.join(", ")
    )
}

/// The changes that make the store (`clients`, `users`) match `declared`: additions, then
/// changes, then (with `prune`) removals. Directory users are left alone.
fn plan(
    declared: Declared,
    clients: Vec<ClientView>,
    users: Vec<UserView>,
    prune: bool,
    mut imports: HashMap<String, VendorImport>,
) -> Vec<Step> {
    let mut clients: HashMap<String, ClientView> =
        clients.into_iter().map(|c| (c.id.clone(), c)).collect();
    let mut users: HashMap<String, UserView> =
        users.into_iter().map(|u| (u.name.clone(), u)).collect();
    let (mut adds, mut changes) = (Vec::new(), Vec::new());
    for c in declared.clients {
        match (clients.remove(&c.id), imports.remove(&c.id)) {
            (None, None) => adds.push(add_client(c)),
            (None, Some(i)) => {
                adds.extend(statements::import_step(i, None));
                if c.active {
                    adds.push(statements::activate_step(&c));
                }
            }
            (Some(old), i) => {
                changes.extend(i.and_then(|i| statements::import_step(i, Some(&old))));
                changes.extend(client_changes(&c, &old));
            }
        }
    }
    for u in declared.users {
        match users.remove(&u.name) {
            None => adds.push(add_user(u)),
            Some(old) if old.directory => {
                eprintln!(
                    "user {}: a directory user, left alone",
                    issuer::display::escape_text(&u.name)
                );
            }
            Some(old) => changes.extend(user_changes(u, &old)),
        }
    }
    users.retain(|_, u| !u.directory);
    // A vendor's client comes in by its statement, never by this file's other fields: an entry
    // without a statement narrows one, and --prune leaves the others alone.
    clients.retain(|_, c| c.vendor.is_none());
    let mut removals = Vec::new();
    if prune {
        let mut ids: Vec<String> = clients.into_keys().collect();
        ids.sort();
        let mut names: Vec<String> = users.into_keys().collect();
        names.sort();
        removals.extend(ids.into_iter().map(|id| Step {
            text: format!("- client {id}"),
            change: Change::Run(Command::ClientRemove { id }),
        }));
        removals.extend(names.into_iter().map(|name| Step {
            text: format!("- user {name}"),
            change: Change::Run(Command::UserRemove { name }),
        }));
    } else if !clients.is_empty() || !users.is_empty() {
        eprintln!(
            "kept {} clients and {} users the file does not name (--prune removes them)",
            clients.len(),
            users.len()
        );
    }
    adds.into_iter().chain(changes).chain(removals).collect()
}

fn grant_names(grants: &[GrantKind]) -> String {
    let names: Vec<&str> = grants
        .iter()
        .map(|g| match g {
            GrantKind::Password => "password",
            GrantKind::ClientCredentials => "client_credentials",
        })
        .collect();
    format!("[{}]", names.join(","))
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

fn claim_list(claims: &[(String, String)]) -> String {
    let items: Vec<String> = claims.iter().map(|(t, v)| format!("{t}={v}")).collect();
    list(&items)
}

/// A token exchange policy as a plan shows it.
fn exchange_text(p: Option<&issuer::store::ExchangePolicy>) -> String {
    p.map_or_else(
        || "none".to_owned(),
        |p| {
            let mut text = format!(
                "from={} max_depth={} audience={}",
                list(&p.from),
                p.max_depth,
                list(&p.audiences)
            );
            if !p.subject_roles.is_empty() || !p.subject_claims.is_empty() {
                text += &format!(
                    " subject_roles={} subject_claims={}",
                    list(&p.subject_roles),
                    list(&p.subject_claims)
                );
            }
            text
        },
    )
}

fn add_client(c: DeclaredClient) -> Step {
    let text = format!(
        "+ client {}: grants={} impersonate={} impersonate_claim_types={} active={}{}{}",
        c.id,
        grant_names(&c.grants),
        c.impersonate,
        list(&c.claim_types),
        c.active,
        if c.edge == Some(true) {
            " edge=true"
        } else {
            ""
        },
        if c.dpop == DpopPolicy::Required {
            " dpop=required"
        } else {
            ""
        }
    );
    let text = match &c.exchange {
        Some(p) => format!("{text} exchange {}", exchange_text(Some(p))),
        None => text,
    };
    Step {
        text,
        change: Change::AddClient(c),
    }
}

fn client_changes(c: &DeclaredClient, old: &ClientView) -> Vec<Step> {
    if old.vendor.is_some() && !old.active && c.active {
        // Activation sets what it may do, within its statement.
        return vec![statements::activate_step(c)];
    }
    let mut old_grants = old.grants.clone();
    old_grants.sort_by_key(|g| *g as u8);
    old_grants.dedup();
    let old_types = sorted(old.impersonate_claim_types.clone());
    let mut diffs = Vec::new();
    if old_grants != c.grants {
        let (from, to) = (grant_names(&old_grants), grant_names(&c.grants));
        diffs.push(format!("grants {from} -> {to}"));
    }
    if old.impersonate != c.impersonate {
        diffs.push(format!(
            "impersonate {} -> {}",
            old.impersonate, c.impersonate
        ));
    }
    if old_types != c.claim_types {
        let (from, to) = (list(&old_types), list(&c.claim_types));
        diffs.push(format!("impersonate_claim_types {from} -> {to}"));
    }
    if old.dpop != c.dpop {
        let (from, to) = (old.dpop.as_str(), c.dpop.as_str());
        diffs.push(format!("dpop {from} -> {to}"));
    }
    if old.exchange != c.exchange {
        let (from, to) = (
            exchange_text(old.exchange.as_ref()),
            exchange_text(c.exchange.as_ref()),
        );
        diffs.push(format!("exchange {from} -> {to}"));
    }
    let mut steps = Vec::new();
    if !diffs.is_empty() {
        steps.push(Step {
            text: format!("~ client {}: {}", c.id, diffs.join("; ")),
            change: Change::Run(Command::ClientUpdate {
                id: c.id.clone(),
                grants: c.grants.clone(),
                impersonate: c.impersonate,
                claim_types: c.claim_types.clone(),
                dpop: c.dpop,
                exchange: c.exchange.clone(),
            }),
        });
    }
    if old.active != c.active {
        let id = c.id.clone();
        steps.push(Step {
            text: format!("~ client {id}: active {} -> {}", old.active, c.active),
            change: Change::Run(if c.active {
                Command::ClientActivate {
                    id,
                    grants: None,
                    no_impersonation: false,
                }
            } else {
                Command::ClientDeactivate { id }
            }),
        });
    }
    steps
}

fn add_user(u: DeclaredUser) -> Step {
    let password = match &u.password_hash {
        Some(h) => issuer::passwords::PasswordScheme::of(h).map_or("?", |s| s.name()),
        None => "none (set it with `issuer user passwd`)",
    };
    let text = format!(
        "+ user {}: roles={} claims={} enabled={} password={password}",
        u.name,
        list(&u.roles),
        claim_list(&u.claims),
        u.enabled
    );
    let cmd = Command::UserAdd(NewUser {
        name: u.name.clone(),
        roles: u.roles,
        claims: u.claims,
        password_hash: u.password_hash.unwrap_or_default(),
        disabled: !u.enabled,
    });
    Step {
        text,
        change: Change::Run(cmd),
    }
}

fn user_changes(u: DeclaredUser, old: &UserView) -> Vec<Step> {
    let old_roles = sorted(old.roles.clone());
    let mut old_claims = old.claims.clone();
    old_claims.sort();
    let mut diffs = Vec::new();
    if old_roles != u.roles {
        diffs.push(format!("roles {} -> {}", list(&old_roles), list(&u.roles)));
    }
    if old_claims != u.claims {
        let (from, to) = (claim_list(&old_claims), claim_list(&u.claims));
        diffs.push(format!("claims {from} -> {to}"));
    }
    let mut steps = Vec::new();
    if !diffs.is_empty() {
        steps.push(Step {
            text: format!("~ user {}: {}", u.name, diffs.join("; ")),
            change: Change::Run(Command::UserUpdate {
                name: u.name.clone(),
                roles: u.roles,
                claims: u.claims,
            }),
        });
    }
    if old.enabled != u.enabled {
        let name = u.name;
        steps.push(Step {
            text: format!("~ user {name}: enabled {} -> {}", old.enabled, u.enabled),
            change: Change::Run(if u.enabled {
                Command::UserEnable { name }
            } else {
                Command::UserDisable { name }
            }),
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, directory: bool) -> UserView {
        UserView {
            name: name.into(),
            roles: vec!["b".into(), "a".into()],
            claims: vec![("t".into(), "v".into())],
            enabled: true,
            password_scheme: None,
            directory,
        }
    }

    fn declared(name: &str, roles: &[&str]) -> DeclaredUser {
        DeclaredUser {
            name: name.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            claims: vec![("t".into(), "v".into())],
            enabled: true,
            password_hash: None,
        }
    }

    fn texts(steps: &[Step]) -> Vec<&str> {
        steps.iter().map(|s| s.text.as_str()).collect()
    }

    #[test]
    fn directory_users_are_neither_planned_nor_pruned() {
        let users = || vec![view("dir", true), view("old", false), view("kept", false)];
        let file = || Declared {
            clients: vec![],
            users: vec![declared("dir", &["x"]), declared("kept", &["a", "b"])],
        };
        assert!(plan(file(), vec![], users(), false, HashMap::new()).is_empty());
        let pruned = plan(file(), vec![], users(), true, HashMap::new());
        assert_eq!(texts(&pruned), ["- user old"]);
        assert!(matches!(
            &pruned[0].change,
            Change::Run(Command::UserRemove { name }) if name == "old"
        ));
    }

    #[test]
    fn a_change_names_old_and_new_values_and_carries_the_files() {
        let file = Declared {
            clients: vec![],
            users: vec![declared("kept", &["a", "c"])],
        };
        let steps = plan(
            file,
            vec![],
            vec![view("kept", false)],
            false,
            HashMap::new(),
        );
        assert_eq!(texts(&steps), ["~ user kept: roles [a,b] -> [a,c]"]);
        assert!(matches!(
            &steps[0].change,
            Change::Run(Command::UserUpdate { roles, .. }) if roles == &["a", "c"]
        ));
    }
}
