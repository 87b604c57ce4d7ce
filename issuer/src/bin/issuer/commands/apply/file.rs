//! The file of `issuer apply`: clients and local users declared in TOML, read and checked whole
//! before anything changes. Every error names the file's line.

use anyhow::bail;
use issuer::admin::input::{
    check_claims, check_client_id, check_password_hash, check_roles, check_user_name,
};
use issuer::store::exchange::DEFAULT_EXCHANGE_MAX_DEPTH;
use issuer::store::{DpopPolicy, ExchangePolicy, GrantKind};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;
use zeroize::Zeroizing;

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    client: Vec<Spanned<ClientEntry>>,
    #[serde(default)]
    user: Vec<Spanned<UserEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientEntry {
    id: Spanned<String>,
    /// Required but of an edge client (whose grants are none unless named).
    grants: Option<Spanned<Vec<String>>>,
    /// An edge client (`client add --edge`); absent: not one, or as it is for a client that
    /// exists.
    edge: Option<bool>,
    #[serde(default)]
    impersonate: bool,
    #[serde(default)]
    impersonate_claim_types: Vec<String>,
    #[serde(default = "yes")]
    active: bool,
    /// `"required"` or `"allowed"` (the default).
    dpop: Option<Spanned<String>>,
    secret_file: Option<Spanned<PathBuf>>,
    /// A vendor's software statement (the JWS) for this client, imported as `client import`
    /// imports it.
    software_statement: Option<Spanned<String>>,
    /// The file holding it (as `client import` reads one), relative to this file's folder.
    software_statement_file: Option<Spanned<PathBuf>>,
    /// Token exchange: the clients whose tokens it may exchange; absent or empty: none.
    #[serde(default)]
    exchange_from: Vec<String>,
    exchange_max_depth: Option<u8>,
    #[serde(default)]
    exchange_audience: Vec<String>,
    /// Only for subjects holding one of these roles.
    #[serde(default)]
    exchange_subject_roles: Vec<String>,
    /// Only for subjects carrying one of these claims (`type=value`).
    #[serde(default)]
    exchange_subject_claims: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: Spanned<String>,
    roles: Option<Spanned<Vec<String>>>,
    claims: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(default = "yes")]
    enabled: bool,
    password_hash: Option<Spanned<String>>,
}

fn yes() -> bool {
    true
}

/// A client as the file declares it, checked.
pub struct DeclaredClient {
    pub id: String,
    /// Sorted, without repeats.
    pub grants: Vec<GrantKind>,
    pub impersonate: bool,
    /// Sorted, without repeats.
    pub claim_types: Vec<String>,
    pub active: bool,
    /// `edge` as declared: absent means a new client is no edge client, and an existing one is
    /// left as it is.
    pub edge: Option<bool>,
    /// Whether its tokens must be bound with DPoP.
    pub dpop: DpopPolicy,
    /// Read from `secret_file`; used only if the client is new.
    pub secret: Option<Zeroizing<String>>,
    /// A vendor's client: its software statement (the JWS, not yet verified).
    pub statement: Option<String>,
    /// What it may do with the token exchange grant.
    pub exchange: Option<ExchangePolicy>,
}

/// A local user as the file declares it, checked.
pub struct DeclaredUser {
    pub name: String,
    /// Sorted, without repeats.
    pub roles: Vec<String>,
    /// Sorted by type.
    pub claims: Vec<(String, String)>,
    pub enabled: bool,
    /// Used only if the user is new.
    pub password_hash: Option<String>,
}

/// What the file declares.
pub struct Declared {
    pub clients: Vec<DeclaredClient>,
    pub users: Vec<DeclaredUser>,
}

/// Where a span starts: `FILE:LINE`.
struct Lines<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Lines<'_> {
    fn at(&self, span: Range<usize>) -> String {
        let start = span.start.min(self.text.len());
        let line = self.text[..start].matches('\n').count() + 1;
        format!("{}:{line}", self.path.display())
    }

    fn fail<T>(&self, span: Range<usize>, msg: impl std::fmt::Display) -> anyhow::Result<T> {
        bail!("{}: {msg}", self.at(span))
    }
}

/// Reads and checks the file at `path`: its syntax and keys, then every entry (names, grants,
/// roles, claims and password hashes by the admin commands' rules, no id or name twice, every
/// `secret_file` readable).
pub fn read(path: &Path) -> anyhow::Result<Declared> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let lines = Lines { path, text: &text };
    let doc: FileDoc = match toml::from_str(&text) {
        Ok(doc) => doc,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            return lines.fail(span, e.message());
        }
    };
    let mut ids = HashSet::new();
    let clients = doc
        .client
        .into_iter()
        .map(|c| client(&lines, c, &mut ids))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut names = HashSet::new();
    let users = doc
        .user
        .into_iter()
        .map(|u| user(&lines, u, &mut names))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Declared { clients, users })
}

/// The `exchange_*` keys of a client entry.
struct ExchangeKeys {
    from: Vec<String>,
    max_depth: Option<u8>,
    audience: Vec<String>,
    subject_roles: Vec<String>,
    subject_claims: Vec<String>,
}

/// The token exchange policy an entry declares: none without `exchange_from`.
fn exchange(
    lines: &Lines<'_>,
    span: Range<usize>,
    keys: ExchangeKeys,
) -> anyhow::Result<Option<ExchangePolicy>> {
    if keys.from.is_empty() {
        if keys.max_depth.is_some()
            || !keys.audience.is_empty()
            || !keys.subject_roles.is_empty()
            || !keys.subject_claims.is_empty()
        {
            return lines.fail(
                span,
                "exchange_max_depth, exchange_audience, exchange_subject_roles and \
                 exchange_subject_claims need exchange_from",
            );
        }
        return Ok(None);
    }
    let depth = keys.max_depth.unwrap_or(DEFAULT_EXCHANGE_MAX_DEPTH);
    match ExchangePolicy::new(keys.from, depth, keys.audience)
        .and_then(|p| p.for_subjects(keys.subject_roles, keys.subject_claims))
    {
        Ok(p) => Ok(Some(p)),
        Err(e) => lines.fail(span, e.to_string()),
    }
}

fn client(
    lines: &Lines<'_>,
    entry: Spanned<ClientEntry>,
    ids: &mut HashSet<String>,
) -> anyhow::Result<DeclaredClient> {
    let span = entry.span();
    let c = entry.into_inner();
    let id_span = c.id.span();
    let id = c.id.into_inner();
    if let Err(e) = check_client_id(&id) {
        return lines.fail(id_span, e);
    }
    if !ids.insert(id.clone()) {
        return lines.fail(id_span, format!("client {id:?} is declared twice"));
    }
    let grants = match c.grants {
        Some(declared) => grants(lines, declared)?,
        None if c.edge == Some(true) => Vec::new(),
        None => return lines.fail(span, "missing field `grants` (`grants = []` for none)"),
    };
    if !c.impersonate && !c.impersonate_claim_types.is_empty() {
        let msg = "impersonate_claim_types needs impersonate = true";
        return lines.fail(span, msg);
    }
    let dpop = match c.dpop {
        None => DpopPolicy::Allowed,
        Some(word) => match DpopPolicy::parse(word.get_ref()) {
            Some(policy) => policy,
            None => {
                let msg = format!(
                    "dpop = {:?}: use \"required\" or \"allowed\"",
                    word.get_ref()
                );
                return lines.fail(word.span(), msg);
            }
        },
    };
    let statement = statement(
        lines,
        span.clone(),
        c.software_statement,
        c.software_statement_file,
    )?;
    if statement.is_some() && (c.secret_file.is_some() || c.edge == Some(true)) {
        let msg = "a vendor's client (software_statement) has the secret its vendor issued and is \
                   no edge client: no secret_file, no edge = true";
        return lines.fail(span, msg);
    }
    let keys = ExchangeKeys {
        from: c.exchange_from,
        max_depth: c.exchange_max_depth,
        audience: c.exchange_audience,
        subject_roles: c.exchange_subject_roles,
        subject_claims: c.exchange_subject_claims,
    };
    let exchange = exchange(lines, span.clone(), keys)?;
    let secret = match c.secret_file {
        None => None,
        Some(file) => Some(read_secret_file(lines, file)?),
    };
    Ok(DeclaredClient {
        statement,
        exchange,
        dpop,
        id,
        grants,
        impersonate: c.impersonate,
        claim_types: sorted(c.impersonate_claim_types),
        active: c.active,
        edge: c.edge,
        secret,
    })
}

/// A client's statement, as written in the file or read from the file it names.
fn statement(
    lines: &Lines<'_>,
    span: Range<usize>,
    text: Option<Spanned<String>>,
    file: Option<Spanned<PathBuf>>,
) -> anyhow::Result<Option<String>> {
    match (text, file) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => {
            let msg = "software_statement or software_statement_file, not both";
            lines.fail(span, msg)
        }
        (Some(text), None) => Ok(Some(text.into_inner().trim().to_owned())),
        (None, Some(file)) => {
            let file_span = file.span();
            let path = lines
                .path
                .parent()
                .unwrap_or(Path::new("."))
                .join(file.into_inner());
            match crate::commands::client::read_statement(&path) {
                Ok(text) => Ok(Some(text)),
                Err(e) => lines.fail(file_span, format!("{e:#}")),
            }
        }
    }
}

/// The grants declared, by name: sorted, without repeats.
fn grants(lines: &Lines<'_>, declared: Spanned<Vec<String>>) -> anyhow::Result<Vec<GrantKind>> {
    let span = declared.span();
    let mut grants = Vec::new();
    for g in declared.into_inner() {
        match GrantKind::parse(&g) {
            Some(kind) => grants.push(kind),
            None => {
                let msg = format!("unknown grant {g:?}: use password or client_credentials");
                return lines.fail(span, msg);
            }
        }
    }
    grants.sort_by_key(|g| *g as u8);
    grants.dedup();
    Ok(grants)
}

/// A client's secret from its `secret_file`: the file's first line, which the secret rules
/// accept (`issuer::secrets::check_client_secret`), from a file that passes the check of every
/// secret file of the issuer (`issuer::secret_file`: 0600 or stricter, the issuer's user's or
/// root's, in a folder only they may write, through a link too). At most 64 KiB.
fn read_secret_file(
    lines: &Lines<'_>,
    file: Spanned<PathBuf>,
) -> anyhow::Result<Zeroizing<String>> {
    let span = file.span();
    // Relative to the file's directory, as the file is read from anywhere.
    let path = lines
        .path
        .parent()
        .unwrap_or(Path::new("."))
        .join(file.into_inner());
    let name = path.display();
    let read = issuer::secret_file::open("secret_file", &path, issuer::secret_file::Rule::Secret)
        .and_then(|checked| checked.read(64 * 1024));
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(e) => return lines.fail(span, e.describe()),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return lines.fail(span, format!("secret_file {name} is not UTF-8 text"));
    };
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.is_empty() {
        return lines.fail(span, format!("secret_file {name} is empty"));
    }
    if let Err(e) = issuer::secrets::check_client_secret(secret) {
        return lines.fail(span, format!("secret_file {name}: {e}"));
    }
    Ok(Zeroizing::new(secret.to_owned()))
}

fn user(
    lines: &Lines<'_>,
    entry: Spanned<UserEntry>,
    names: &mut HashSet<String>,
) -> anyhow::Result<DeclaredUser> {
    let u = entry.into_inner();
    let name_span = u.name.span();
    let name = u.name.into_inner();
    if let Err(e) = check_user_name(&name) {
        return lines.fail(name_span, e);
    }
    if !names.insert(name.clone()) {
        return lines.fail(name_span, format!("user {name:?} is declared twice"));
    }
    let roles = match u.roles {
        None => Vec::new(),
        Some(r) => {
            let span = r.span();
            let roles = sorted(r.into_inner());
            if let Err(e) = check_roles(&roles) {
                return lines.fail(span, e);
            }
            roles
        }
    };
    let claims = match u.claims {
        None => Vec::new(),
        Some(c) => {
            let span = c.span();
            let claims: Vec<(String, String)> = c.into_inner().into_iter().collect();
            if let Err(e) = check_claims(&claims) {
                return lines.fail(span, e);
            }
            claims
        }
    };
    let password_hash = match u.password_hash {
        None => None,
        Some(h) => {
            let span = h.span();
            let hash = h.into_inner();
            if hash.is_empty() {
                return lines.fail(span, "password_hash is empty");
            }
            if let Err(e) = check_password_hash(&hash) {
                return lines.fail(span, e);
            }
            Some(hash)
        }
    };
    Ok(DeclaredUser {
        name,
        roles,
        claims,
        enabled: u.enabled,
        password_hash,
    })
}

/// Sorted, without repeats: lists compared as sets.
pub fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}
