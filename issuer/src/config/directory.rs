//! The `[directory]` table of the configuration file: the LDAP or Active Directory servers that
//! directory sign-in uses ([`crate::directory`]). `issuer serve` validates it at startup, reading
//! the bind password.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The user filter of `kind = "active-directory"` by default.
pub const AD_USER_FILTER: &str =
    "(&(objectClass=user)(|(sAMAccountName={username})(userPrincipalName={username})))";
/// The user filter of `kind = "ldap"` by default.
pub const LDAP_USER_FILTER: &str = "(&(objectClass=inetOrgPerson)(uid={username}))";
/// Where a user filter puts the name signing in.
pub const USERNAME: &str = "{username}";
/// Milliseconds per server and operation by default.
pub const TIMEOUT_MS: u64 = 2000;
/// Seconds between rechecks of a signed-in user by default.
pub const RECHECK_SECONDS: u64 = 60;
/// Default of `probe_seconds`.
pub const PROBE_SECONDS: u64 = 5;

/// What the directory is; it sets the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirectoryKind {
    /// Microsoft Active Directory: nested groups by `LDAP_MATCHING_RULE_IN_CHAIN`, disabled
    /// accounts by `userAccountControl`.
    ActiveDirectory,
    /// A plain LDAP server (OpenLDAP and the like): group membership through `memberOf`.
    Ldap,
}

impl DirectoryKind {
    /// The user filter unless the table sets one.
    pub fn default_user_filter(self) -> &'static str {
        match self {
            Self::ActiveDirectory => AD_USER_FILTER,
            Self::Ldap => LDAP_USER_FILTER,
        }
    }

    /// The attribute whose value is a user's one name in the issuer (its records, tokens,
    /// revocations), whatever spelling signed in, unless the table sets `name_attribute`.
    pub fn default_name_attribute(self) -> &'static str {
        match self {
            Self::ActiveDirectory => "sAMAccountName",
            Self::Ldap => "uid",
        }
    }

    /// The attribute that identifies an entry for good (a rename keeps it, a new entry under an
    /// old name has another), unless the table sets `id_attribute`.
    pub fn default_id_attribute(self) -> &'static str {
        match self {
            Self::ActiveDirectory => "objectGUID",
            Self::Ldap => "entryUUID",
        }
    }
}

/// The bind password, read from `bind_password_file`; never shown (`Debug` is redacted).
#[derive(Clone)]
pub struct BindPassword(Zeroizing<String>);

impl BindPassword {
    /// The password itself, for the bind.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BindPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindPassword(..)")
    }
}

/// The `[directory]` table, validated.
#[derive(Debug, Clone)]
pub struct DirectoryConfig {
    /// `ldaps://` or `ldap://` URLs, tried in order (failover and failback).
    pub urls: Vec<String>,
    pub kind: DirectoryKind,
    pub bind_dn: String,
    pub bind_password: BindPassword,
    pub base_dn: String,
    /// Contains `{username}`.
    pub user_filter: String,
    /// The entry's attribute that is the user's name in the issuer.
    pub name_attribute: String,
    /// The entry's attribute that identifies it for good.
    pub id_attribute: String,
    /// CA certificates (PEM) the servers' certificates must chain to [default: the system's].
    pub ca_file: Option<PathBuf>,
    /// STARTTLS on `ldap://` URLs.
    pub starttls: bool,
    /// Per server, for one whole sign-in or lookup, milliseconds (more than 0): the server's own
    /// time, not the issuer's work between its operations.
    pub timeout_ms: u64,
    pub recheck_seconds: u64,
    /// Seconds between probes of every server (more than 0).
    pub probe_seconds: u64,
    /// Group DN → role.
    pub roles: BTreeMap<String, String>,
    /// Claim type → attribute.
    pub claims: BTreeMap<String, String>,
}

/// The table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    urls: Vec<String>,
    kind: DirectoryKind,
    bind_dn: String,
    bind_password_file: PathBuf,
    base_dn: String,
    user_filter: Option<String>,
    name_attribute: Option<String>,
    id_attribute: Option<String>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    starttls: bool,
    #[serde(default = "timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "recheck_seconds")]
    recheck_seconds: u64,
    #[serde(default = "probe_seconds")]
    probe_seconds: u64,
    #[serde(default)]
    roles: BTreeMap<String, String>,
    #[serde(default)]
    claims: BTreeMap<String, String>,
}

fn timeout_ms() -> u64 {
    TIMEOUT_MS
}

fn recheck_seconds() -> u64 {
    RECHECK_SECONDS
}

fn probe_seconds() -> u64 {
    PROBE_SECONDS
}

impl DirectoryConfig {
    /// Validates the `[directory]` table and reads its password file.
    pub fn from_toml(value: toml::Value) -> Result<Self, String> {
        let t: Table = value
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_owned())?;
        if t.urls.is_empty() {
            return Err("`urls` is empty: name at least one server".into());
        }
        for url in &t.urls {
            check_url(url, t.starttls)?;
        }
        let user_filter = t
            .user_filter
            .unwrap_or_else(|| t.kind.default_user_filter().to_owned());
        if !user_filter.contains(USERNAME) {
            return Err(format!("`user_filter` must contain {USERNAME}"));
        }
        let name_attribute = t
            .name_attribute
            .unwrap_or_else(|| t.kind.default_name_attribute().to_owned());
        let id_attribute = t
            .id_attribute
            .unwrap_or_else(|| t.kind.default_id_attribute().to_owned());
        for (key, attr) in [
            ("name_attribute", &name_attribute),
            ("id_attribute", &id_attribute),
        ] {
            if !attribute_name_ok(attr) {
                return Err(format!("`{key}` {attr:?} is not an attribute name"));
            }
        }
        if t.timeout_ms == 0 {
            return Err("`timeout_ms` must be more than 0".into());
        }
        if t.probe_seconds == 0 {
            return Err("`probe_seconds` must be more than 0".into());
        }
        for (name, value) in [("bind_dn", &t.bind_dn), ("base_dn", &t.base_dn)] {
            if value.trim().is_empty() {
                return Err(format!("`{name}` is empty"));
            }
        }
        check_map("roles", &t.roles)?;
        check_map("claims", &t.claims)?;
        if let Some(role) = t.roles.values().find(|r| !shared::rules::role_ok(r)) {
            return Err(format!(
                "[directory.roles]: {role:?} cannot be a role (no `,` or control characters)"
            ));
        }
        if let Some(claim) = t.claims.keys().find(|c| !shared::rules::claim_type_ok(c)) {
            return Err(format!("[directory.claims]: {claim:?} cannot be a claim type (no `,`, `=` or control characters)"));
        }
        if let Some(ca) = &t.ca_file {
            std::fs::File::open(ca).map_err(|e| format!("`ca_file` {}: {e}", ca.display()))?;
        }
        Ok(Self {
            bind_password: read_password(&t.bind_password_file)?,
            urls: t.urls,
            kind: t.kind,
            bind_dn: t.bind_dn,
            base_dn: t.base_dn,
            user_filter,
            name_attribute,
            id_attribute,
            ca_file: t.ca_file,
            starttls: t.starttls,
            timeout_ms: t.timeout_ms,
            recheck_seconds: t.recheck_seconds,
            probe_seconds: t.probe_seconds,
            roles: t.roles,
            claims: t.claims,
        })
    }
}

/// An LDAP attribute description as RFC 4512 writes one: a letter, then letters, digits and `-`.
fn attribute_name_ok(attr: &str) -> bool {
    attr.starts_with(|c: char| c.is_ascii_alphabetic())
        && attr.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// No empty key or value in the table `name`.
fn check_map(name: &str, map: &BTreeMap<String, String>) -> Result<(), String> {
    match map
        .iter()
        .find(|(k, v)| k.trim().is_empty() || v.trim().is_empty())
    {
        Some((k, _)) => Err(format!("[directory.{name}]: empty name or value at {k:?}")),
        None => Ok(()),
    }
}

/// An `ldaps://` or `ldap://` URL taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LdapUrl<'a> {
    /// `ldaps://`.
    pub ldaps: bool,
    /// `HOST[:PORT]`, a trailing `/` dropped.
    pub authority: &'a str,
    /// The host (an IPv6 address without its brackets).
    pub host: &'a str,
}

impl<'a> LdapUrl<'a> {
    /// The parts of `url`, if it is `ldaps://` or `ldap://`.
    pub fn parse(url: &'a str) -> Option<Self> {
        let (ldaps, rest) = match url.strip_prefix("ldaps://") {
            Some(rest) => (true, rest),
            None => (false, url.strip_prefix("ldap://")?),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        Some(Self {
            ldaps,
            authority,
            host,
        })
    }

    /// `HOST:PORT`, with the scheme's port (636, 389) when the URL names none.
    pub fn host_port(&self) -> String {
        let after_host = match self.authority.rfind(']') {
            Some(end) => &self.authority[end..],
            None => self.authority,
        };
        if after_host.contains(':') {
            self.authority.to_owned()
        } else {
            let port = if self.ldaps { 636 } else { 389 };
            format!("{}:{port}", self.authority)
        }
    }
}

/// An `ldaps://HOST[:PORT]` URL, or `ldap://` with STARTTLS or to a loopback host.
fn check_url(url: &str, starttls: bool) -> Result<(), String> {
    let Some(parts) = LdapUrl::parse(url) else {
        return Err(format!("{url:?} is not an ldaps:// or ldap:// URL"));
    };
    if parts.host.is_empty() || parts.authority.contains(['/', '?', '@', ' ']) {
        return Err(format!(
            "{url:?}: give only scheme, host and port (the base DN goes in `base_dn`)"
        ));
    }
    if !parts.ldaps && !starttls && !is_loopback(parts.host) {
        return Err(format!(
            "{url:?}: plain ldap:// only to a loopback host; use ldaps:// or `starttls = true`"
        ));
    }
    Ok(())
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// The password in `path` (a trailing line break dropped), from a file that passes the check of
/// secret files ([`crate::secret_file`]: 0600 or stricter, the issuer's user's or root's, in a
/// folder only they may write).
fn read_password(path: &Path) -> Result<BindPassword, String> {
    let bytes = crate::secret_file::read("`bind_password_file`", path).map_err(|e| e.describe())?;
    let name = path.display();
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("`bind_password_file` {name} is not UTF-8 text"))?;
    let password = Zeroizing::new(text.trim_end_matches(['\r', '\n']).to_owned());
    if password.is_empty() {
        return Err(format!("`bind_password_file` {name} is empty"));
    }
    Ok(BindPassword(password))
}
