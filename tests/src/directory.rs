//! What the two throwaway directory servers share: the fixture both are seeded with
//! ([`crate::slapd::Slapd`], OpenLDAP, and [`crate::samba::SambaDc`], a Samba Active Directory
//! domain controller), the throwaway CA their TLS certificates chain to, and [`LdapClient`], the
//! ldap-utils clients (`ldapsearch`, `ldapwhoami`, `ldapmodify`, ...) run as a test would.
//!
//! The fixture: the service account [`SERVICE_ACCOUNT`], the users [`USERS`] (mail
//! `NAME@media.test`), and the groups [`GROUPS`], nested: `editors` (alice) is a member of
//! `media-staff`, itself a member of `all-staff`; `viewers` holds bob; `loop-a` (carol) and
//! `loop-b` are members of each other. Every password is random, drawn per [`Fixture`], and meets
//! Active Directory's complexity rules. A second server started from the same `Fixture` holds the
//! same entries, passwords and CA, as a replica would.
//!
//! The tools are taken at their Debian paths (`cargo xtask test` installs the packages).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The users of the fixture, on both servers.
pub const USERS: [&str; 3] = ["alice", "bob", "carol"];
/// A user name held by two entries (`ou=people` and `ou=others`), on OpenLDAP only: Active
/// Directory keeps `sAMAccountName` unique.
pub const DUPLICATE_USER: &str = "dup";
/// The account the product binds as to search the directory.
pub const SERVICE_ACCOUNT: &str = "svc-issuer";
/// The users' mail domain (and Active Directory's UPN suffix).
pub const MAIL_DOMAIN: &str = "media.test";
/// Each group and its members (user or group names); each member exists before its group.
pub const GROUPS: [(&str, &[&str]); 6] = [
    ("editors", &["alice"]),
    ("media-staff", &["editors"]),
    ("all-staff", &["media-staff"]),
    ("viewers", &["bob"]),
    ("loop-a", &["carol"]),
    ("loop-b", &["loop-a"]),
];
/// Memberships added once every group exists: `loop-b` in `loop-a` closes the cycle.
pub const LATE_MEMBERS: [(&str, &str); 1] = [("loop-a", "loop-b")];
/// How long a server may take to answer after its start.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where Debian's ldap-utils put the clients.
const LDAP_UTILS: &str = "/usr/bin";

/// Whether `name` is one of the fixture's groups (else a user).
pub fn is_group(name: &str) -> bool {
    GROUPS.iter().any(|(g, _)| *g == name)
}

/// The fixture's passwords and test CA, shared by the servers seeded from it.
pub struct Fixture {
    service_password: String,
    passwords: BTreeMap<&'static str, String>,
    ca_key: rcgen::KeyPair,
    ca: rcgen::Certificate,
}

impl Fixture {
    /// Fresh random passwords and a fresh CA.
    pub fn new() -> Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let mut passwords = BTreeMap::new();
        for user in USERS.into_iter().chain([DUPLICATE_USER]) {
            passwords.insert(user, random_password()?);
        }
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "mms throwaway directory test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = rcgen::KeyPair::generate()?;
        let ca = params.self_signed(&ca_key)?;
        Ok(Self {
            service_password: random_password()?,
            passwords,
            ca_key,
            ca,
        })
    }

    /// The password of `user` (one of [`USERS`] or [`DUPLICATE_USER`]). Panics on another name.
    pub fn password(&self, user: &str) -> &str {
        self.passwords
            .get(user)
            .unwrap_or_else(|| panic!("the directory fixture has no user {user:?}"))
    }

    /// The password of [`SERVICE_ACCOUNT`].
    pub fn service_password(&self) -> &str {
        &self.service_password
    }

    /// The test CA's certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Writes `dir/ca.pem` (the test CA), and `dir/cert.pem` with `dir/key.pem` (0600): a server
    /// certificate of the CA for 127.0.0.1, `localhost` and `host_names`.
    pub(crate) fn write_tls(&self, dir: &Path, host_names: &[&str]) -> Result<TlsFiles> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose};
        let names: Vec<String> = ["127.0.0.1", "localhost"]
            .iter()
            .chain(host_names)
            .map(|s| s.to_string())
            .collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca, &self.ca_key)?;
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.ca, self.ca.pem())?;
        std::fs::write(&files.cert, cert.pem())?;
        crate::write_private(&files.key, key.serialize_pem().as_bytes())?;
        Ok(files)
    }
}

/// A server's TLS files, written by [`Fixture::write_tls`].
pub(crate) struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A random password that Active Directory's complexity rules accept (upper and lower case, a
/// digit, a symbol) and that contains no user name.
fn random_password() -> Result<String> {
    Ok(format!("Mms-{}-9", &crate::random_hex()?[..24]))
}

/// Fails with what to install unless each `(path, package)` is there.
pub(crate) fn require(files: &[(&str, &str)]) -> Result<()> {
    for (path, package) in files {
        if !Path::new(path).exists() {
            bail!("{path} is missing (apt-get install {package}; `cargo xtask test` installs it)");
        }
    }
    Ok(())
}

/// The ldap-utils clients against one server, as a test runs them: TLS verified against one CA
/// file only, a simple bind or none, and passwords in a 0600 temp file (never on the command line,
/// which `ps` shows to every user).
#[derive(Debug, Clone)]
pub struct LdapClient {
    url: String,
    ca_file: PathBuf,
    bind: Option<(String, String)>,
    starttls: bool,
}

impl LdapClient {
    /// Anonymous, to `url` (`ldap://` or `ldaps://`), trusting only the CA in `ca_file`.
    pub fn new(url: &str, ca_file: &Path) -> Self {
        Self {
            url: url.into(),
            ca_file: ca_file.into(),
            bind: None,
            starttls: false,
        }
    }

    /// Binds (simple) as `dn` with `password`.
    pub fn bind(mut self, dn: &str, password: &str) -> Self {
        self.bind = Some((dn.into(), password.into()));
        self
    }

    /// Requires StartTLS (`-ZZ`) first, on an `ldap://` URL.
    pub fn starttls(mut self) -> Self {
        self.starttls = true;
        self
    }

    /// `ldapsearch -LLL` of `filter` under `base` (subtree), returning `attrs`; LDIF, unwrapped.
    pub fn search(&self, base: &str, filter: &str, attrs: &[&str]) -> Result<String> {
        let mut args = vec!["-LLL", "-o", "ldif-wrap=no", "-b", base, filter];
        args.extend(attrs);
        self.run("ldapsearch", &args, None)
    }

    /// Binds and reads the root DSE: Ok when the bind succeeds. (Samba has no `ldapwhoami`
    /// extended operation, so this is the portable bind check.)
    pub fn check_bind(&self) -> Result<()> {
        self.run("ldapsearch", &["-LLL", "-s", "base", "-b", "", "1.1"], None)
            .map(drop)
    }

    /// Runs the ldap-utils `tool` with the URL, the bind and `args`, `input` on its stdin;
    /// returns stdout, or an error holding the exit status and stderr (e.g. `Invalid credentials
    /// (49)`).
    pub fn run(&self, tool: &str, args: &[&str], input: Option<&str>) -> Result<String> {
        let mut cmd = Command::new(Path::new(LDAP_UTILS).join(tool));
        cmd.args(["-x", "-H", &self.url, "-o", "nettimeout=10"])
            .env("LDAPTLS_CACERT", &self.ca_file)
            .env("LDAPTLS_REQCERT", "demand");
        if self.starttls {
            cmd.arg("-ZZ");
        }
        let password_file = match &self.bind {
            Some((dn, password)) => {
                let f = tempfile::Builder::new()
                    .prefix("mms-ldappw-")
                    .tempfile()
                    .context("creating a password file")?;
                std::fs::write(f.path(), password)?;
                cmd.args(["-D", dn, "-y"]).arg(f.path());
                Some(f)
            }
            None => None,
        };
        cmd.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("starting {tool}"))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        drop(password_file);
        if !out.status.success() {
            bail!(
                "{tool} {} {args:?} failed ({}): {}",
                self.url,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The values of `attr` (case-insensitive) in `ldif`, base64 ones (`attr:: `) decoded.
pub fn values(ldif: &str, attr: &str) -> Vec<String> {
    use base64::Engine;
    ldif.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            if !name.eq_ignore_ascii_case(attr) {
                return None;
            }
            match rest.strip_prefix(':') {
                Some(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok()
                    .map(|v| String::from_utf8_lossy(&v).into_owned()),
                None => Some(rest.trim_start().to_owned()),
            }
        })
        .collect()
}

/// Polls `ready` until it succeeds, failing with its last error after `timeout` or as soon as
/// `gone` says the server exited (with why).
pub(crate) fn wait_ready(
    timeout: Duration,
    mut gone: impl FnMut() -> Option<String>,
    mut ready: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut last = None;
    let found = crate::wait::until_ok_blocking(timeout, || match ready() {
        Ok(()) => Ok(Some(())),
        Err(e) => {
            last = Some(e);
            gone().map_or(Ok(None), |why| bail!("{why}"))
        }
    })?;
    match (found, last) {
        (Some(()), _) => Ok(()),
        (None, Some(last)) => Err(last.context(format!("not ready after {timeout:?}"))),
        (None, None) => bail!("not ready after {timeout:?}"),
    }
}

#[cfg(test)]
mod tests;
