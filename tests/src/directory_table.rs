//! The `[directory]` table of the issuer's configuration file for a throwaway directory server
//! ([`Slapd`], [`SambaDc`]), written as a configuration file: what the e2e tests and the
//! directory benchmark give `issuer serve --config`.

use crate::{SambaDc, Slapd};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A `[directory]` table; `None` leaves a key to the issuer's default.
#[derive(Debug, Clone)]
pub struct DirectoryTable {
    pub urls: Vec<String>,
    /// `ldap` or `active-directory`.
    pub kind: &'static str,
    pub bind_dn: String,
    pub bind_password_file: PathBuf,
    pub base_dn: &'static str,
    pub ca_file: PathBuf,
    pub starttls: bool,
    pub timeout_ms: Option<u64>,
    pub recheck_seconds: Option<u64>,
    /// `probe_seconds`, if not the default.
    pub probe_seconds: Option<u64>,
    /// `user_filter`, if not the kind's default.
    pub user_filter: Option<String>,
    /// (group DN, role)
    pub roles: Vec<(String, String)>,
    /// (claim type, attribute)
    pub claims: Vec<(String, String)>,
}

impl DirectoryTable {
    /// OpenLDAP `servers` holding the same entries, `ldaps://` to each, no roles or claims yet.
    pub fn slapd(servers: &[&Slapd]) -> Self {
        let first = servers[0];
        let urls = servers.iter().map(|s| s.ldaps_url()).collect();
        Self::new(
            urls,
            "ldap",
            first.bind_dn(),
            first.bind_password_file(),
            first.base_dn(),
            first.ca_file(),
        )
    }

    /// The Samba AD domain controller over `ldaps://`, no roles or claims yet.
    pub fn samba(dc: &SambaDc) -> Self {
        let urls = vec![dc.ldaps_url()];
        Self::new(
            urls,
            "active-directory",
            dc.bind_dn(),
            dc.bind_password_file(),
            dc.base_dn(),
            dc.ca_file(),
        )
    }

    fn new(
        urls: Vec<String>,
        kind: &'static str,
        bind_dn: String,
        bind_password_file: PathBuf,
        base_dn: &'static str,
        ca_file: PathBuf,
    ) -> Self {
        Self {
            urls,
            kind,
            bind_dn,
            bind_password_file,
            base_dn,
            ca_file,
            starttls: false,
            timeout_ms: None,
            recheck_seconds: None,
            probe_seconds: None,
            user_filter: None,
            roles: Vec::new(),
            claims: Vec::new(),
        }
    }

    /// Maps the group `group_dn` to `role`.
    pub fn role(mut self, group_dn: String, role: &str) -> Self {
        self.roles.push((group_dn, role.to_owned()));
        self
    }

    /// Puts the first value of `attribute` into the claim `claim`.
    pub fn claim(mut self, claim: &str, attribute: &str) -> Self {
        self.claims.push((claim.to_owned(), attribute.to_owned()));
        self
    }

    /// The table as TOML.
    pub fn to_toml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let urls: Vec<String> = self.urls.iter().map(|u| q(u)).collect();
        let mut text = format!(
            "[directory]\nurls = [{}]\nkind = {}\nbind_dn = {}\nbind_password_file = {}\n\
             base_dn = {}\nca_file = {}\n",
            urls.join(", "),
            q(self.kind),
            q(&self.bind_dn),
            q(&self.bind_password_file.display().to_string()),
            q(self.base_dn),
            q(&self.ca_file.display().to_string()),
        );
        if self.starttls {
            text.push_str("starttls = true\n");
        }
        if let Some(ms) = self.timeout_ms {
            let _ = writeln!(text, "timeout_ms = {ms}");
        }
        if let Some(f) = &self.user_filter {
            let _ = writeln!(text, "user_filter = {}", q(f));
        }
        if let Some(s) = self.recheck_seconds {
            let _ = writeln!(text, "recheck_seconds = {s}");
        }
        if let Some(s) = self.probe_seconds {
            let _ = writeln!(text, "probe_seconds = {s}");
        }
        text.push_str("[directory.roles]\n");
        for (group, role) in &self.roles {
            let _ = writeln!(text, "{} = {}", q(group), q(role));
        }
        text.push_str("[directory.claims]\n");
        for (claim, attr) in &self.claims {
            let _ = writeln!(text, "{} = {}", q(claim), q(attr));
        }
        text
    }

    /// Writes the table as `DIR/issuer.toml`, mode 0600 whatever the umask (the issuer refuses
    /// a configuration file group or others may write); its path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("issuer.toml");
        std::fs::write(&path, self.to_toml())?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(path)
    }
}
