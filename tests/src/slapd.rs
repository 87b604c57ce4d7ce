//! A throwaway OpenLDAP server for tests: `slapd` in the foreground (`-d none`, so the pid is
//! ours) on two free loopback ports, `ldap://` (StartTLS offered) and `ldaps://`, from a temp dir
//! (0700) under /tmp holding its `slapd.conf`, its `back_mdb` database, its TLS files (a
//! certificate of the fixture's test CA for 127.0.0.1) and its password files (0600).
//!
//! Under `dc=media,dc=test` it holds the [`crate::directory`] fixture: `ou=people` (the users as
//! `uid=NAME`, inetOrgPerson, plain `userPassword`), `ou=groups` (groupOfNames, `cn=NAME`),
//! `ou=services` (`cn=svc-issuer`) and `ou=others` (the second `uid=dup`). The `memberof` overlay
//! keeps `memberOf` on every member of a group, groups included: alice has `editors`, `editors`
//! has `media-staff`, and so on, one level per entry. It is seeded through LDAP, since overlays
//! only act online.
//!
//! The `ppolicy` overlay locks an entry out as a real directory does: after
//! [`LOCKOUT_FAILURES`] refused binds within five minutes, every bind of it is refused for five
//! minutes, the right password too ([`Slapd::locked_out`] tells). Its policy is
//! `cn=default,ou=policies`.
//!
//! Access: anyone may bind (anonymous `auth` on `userPassword`); the service account reads every
//! entry but no password; a user reads their own entry; anonymous gets nothing else. The root DN
//! `cn=admin,dc=media,dc=test` is the harness's own ([`Slapd::modify`], [`Slapd::delete`]).
//!
//! [`Slapd::kill`] crashes the server (SIGKILL) and [`Slapd::restart`] brings it back on the same
//! ports and data. Dropping it stops the server by its pid and removes the dir.

use crate::directory::{self, Fixture, LdapClient, DUPLICATE_USER, GROUPS, LATE_MEMBERS, USERS};
use crate::Proc;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// The server, at its Debian path.
pub const SLAPD: &str = "/usr/sbin/slapd";
/// The suffix of the database.
pub const BASE_DN: &str = "dc=media,dc=test";
/// The harness's root DN (its password is in the dir, 0600).
const ROOT_DN: &str = "cn=admin,dc=media,dc=test";
/// Refused binds of one entry after which the password policy locks it out.
pub const LOCKOUT_FAILURES: u32 = 5;
/// Tries at starting the server, each on other free ports, when a port got taken meanwhile.
const START_ATTEMPTS: usize = 5;

/// A running (or killed) throwaway OpenLDAP server; stopped and removed on drop.
pub struct Slapd {
    fixture: Arc<Fixture>,
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    ldap_port: u16,
    ldaps_port: u16,
    proc: Option<Proc>,
}

impl Slapd {
    /// A server for a test. Missing tools fail the test, saying which
    /// ([`crate::needed_for_test`]); so does a server that fails to start.
    pub fn for_test() -> Self {
        crate::needed_for_test(tools());
        Self::start().unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Starts a server seeded with a fresh fixture (new passwords, new CA).
    pub fn start() -> Result<Self> {
        Self::start_with(Arc::new(Fixture::new()?))
    }

    /// Starts another server with the same entries, passwords and CA, as a replica would.
    pub fn start_another(&self) -> Result<Self> {
        Self::start_with(self.fixture.clone())
    }

    /// Starts a server seeded with `fixture`, on free ports.
    pub fn start_with(fixture: Arc<Fixture>) -> Result<Self> {
        tools()?;
        let tmp = tempfile::Builder::new()
            .prefix("mms-slapd-")
            .tempdir_in("/tmp")
            .context("creating a temp dir under /tmp")?;
        let dir = tmp.path().to_owned();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        std::fs::create_dir(dir.join("db"))?;
        // From here on, dropping `s` stops whatever started and removes the dir.
        let mut s = Self {
            fixture,
            dir,
            tmp: Some(tmp),
            ldap_port: 0,
            ldaps_port: 0,
            proc: None,
        };
        let tls = s.fixture.write_tls(&s.dir, &[])?;
        let root_password = crate::random_hex()?;
        crate::write_private(&s.root_password_file(), root_password.as_bytes())?;
        let service = s.fixture.service_password().as_bytes();
        crate::write_private(&s.bind_password_file(), service)?;
        crate::write_private(
            &s.dir.join("slapd.conf"),
            s.config(&tls, &root_password).as_bytes(),
        )?;
        let mut attempt = 1;
        loop {
            (s.ldap_port, s.ldaps_port) = (crate::free_port(), crate::free_port());
            match s.launch() {
                Ok(()) => break,
                Err(e)
                    if attempt < START_ATTEMPTS && s.log().contains("Address already in use") =>
                {
                    eprintln!("slapd: a port was taken; trying others ({e:#})");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        s.seed()?;
        Ok(s)
    }

    /// The fixture it was seeded with.
    pub fn fixture(&self) -> &Arc<Fixture> {
        &self.fixture
    }

    /// `ldap://127.0.0.1:PORT` (plain, StartTLS offered).
    pub fn ldap_url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.ldap_port)
    }

    /// `ldaps://127.0.0.1:PORT`.
    pub fn ldaps_url(&self) -> String {
        format!("ldaps://127.0.0.1:{}", self.ldaps_port)
    }

    /// The `ldap://` port.
    pub fn ldap_port(&self) -> u16 {
        self.ldap_port
    }

    /// The `ldaps://` port.
    pub fn ldaps_port(&self) -> u16 {
        self.ldaps_port
    }

    /// `dc=media,dc=test`.
    pub fn base_dn(&self) -> &'static str {
        BASE_DN
    }

    /// The service account's DN: `cn=svc-issuer,ou=services,dc=media,dc=test`.
    pub fn bind_dn(&self) -> String {
        format!("cn={},ou=services,{BASE_DN}", directory::SERVICE_ACCOUNT)
    }

    /// The file (0600, no line break) holding the service account's password.
    pub fn bind_password_file(&self) -> PathBuf {
        self.dir.join("bind-password")
    }

    /// The test CA's certificate (PEM), which the server's certificate chains to.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The password of `user` (see [`Fixture::password`]).
    pub fn password(&self, user: &str) -> &str {
        self.fixture.password(user)
    }

    /// The DN of a user: `uid=NAME,ou=people,dc=media,dc=test`.
    pub fn user_dn(&self, user: &str) -> String {
        format!("uid={user},ou=people,{BASE_DN}")
    }

    /// The DN of a group: `cn=NAME,ou=groups,dc=media,dc=test`.
    pub fn group_dn(&self, group: &str) -> String {
        format!("cn={group},ou=groups,{BASE_DN}")
    }

    /// A client of the `ldaps://` URL bound as the service account.
    pub fn service_client(&self) -> LdapClient {
        LdapClient::new(&self.ldaps_url(), &self.ca_file())
            .bind(&self.bind_dn(), self.fixture.service_password())
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// The server's log (errors only) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("slapd.log")).unwrap_or_default()
    }

    /// Kills the server with SIGKILL, as a crash would; its ports stay unused for
    /// [`Self::restart`].
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Starts the server again (killing it first if it runs), on the same ports and data.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.launch()
    }

    /// Applies `ldif` (`ldapmodify` as the root DN: `changetype` add, modify, delete...).
    pub fn modify(&self, ldif: &str) -> Result<()> {
        self.admin().run("ldapmodify", &[], Some(ldif)).map(drop)
    }

    /// Deletes the entry `dn` (as the root DN).
    pub fn delete(&self, dn: &str) -> Result<()> {
        self.admin().run("ldapdelete", &[dn], None).map(drop)
    }

    /// Stops the server (SIGTERM, then SIGKILL) and removes the dir. Calling it again does
    /// nothing.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop();
        }
        if let Some(tmp) = self.tmp.take() {
            if let Err(e) = tmp.close() {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
    }

    fn root_password_file(&self) -> PathBuf {
        self.dir.join("root-password")
    }

    /// A client of the `ldap://` URL bound as the root DN.
    fn admin(&self) -> LdapClient {
        let password = std::fs::read_to_string(self.root_password_file()).unwrap_or_default();
        LdapClient::new(&self.ldap_url(), &self.ca_file()).bind(ROOT_DN, &password)
    }

    /// Starts `slapd` on the ports and waits until it answers over `ldaps://`.
    fn launch(&mut self) -> Result<()> {
        let log = crate::private_log(&self.dir.join("slapd.log"))?;
        let urls = format!("{}/ {}/", self.ldap_url(), self.ldaps_url());
        let child = Command::new(SLAPD)
            .arg("-f")
            .arg(self.dir.join("slapd.conf"))
            .args(["-h", &urls, "-d", "none"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting slapd")?;
        self.proc = Some(Proc::new(child, "slapd"));
        let anonymous = LdapClient::new(&self.ldaps_url(), &self.ca_file());
        let ready = directory::wait_ready(
            directory::READY_TIMEOUT,
            || {
                let status = self.proc.as_mut()?.exited()?;
                Some(format!("slapd exited ({status})"))
            },
            || anonymous.run("ldapwhoami", &[], None).map(drop),
        );
        if ready.is_err() {
            self.kill();
        }
        ready.with_context(|| format!("slapd did not serve; its log:\n{}", self.log()))
    }

    /// `slapd.conf`: schemas, TLS, the database with its overlay, and the ACLs.
    fn config(&self, tls: &directory::TlsFiles, root_password: &str) -> String {
        let dir = self.dir.display();
        let service = self.bind_dn();
        let mut c = String::new();
        for schema in ["core", "cosine", "inetorgperson", "nis"] {
            let _ = writeln!(c, "include /etc/ldap/schema/{schema}.schema");
        }
        let _ = write!(
            c,
            "pidfile {dir}/slapd.pid\n\
             modulepath /usr/lib/ldap\n\
             moduleload back_mdb\n\
             moduleload memberof\n\
             moduleload ppolicy\n\
             TLSCACertificateFile {}\n\
             TLSCertificateFile {}\n\
             TLSCertificateKeyFile {}\n\
             database mdb\n\
             suffix \"{BASE_DN}\"\n\
             rootdn \"{ROOT_DN}\"\n\
             rootpw \"{root_password}\"\n\
             directory {dir}/db\n\
             maxsize 104857600\n\
             overlay memberof\n\
             memberof-group-oc groupOfNames\n\
             memberof-member-ad member\n\
             memberof-memberof-ad memberOf\n\
             memberof-refint TRUE\n\
             overlay ppolicy\n\
             ppolicy_default \"cn=default,ou=policies,{BASE_DN}\"\n\
             access to attrs=userPassword\n  by anonymous auth\n  by * none\n\
             access to *\n  by dn.exact=\"{service}\" read\n  by self read\n  by * none\n",
            tls.ca.display(),
            tls.cert.display(),
            tls.key.display(),
        );
        c
    }

    /// Adds the fixture's entries, in an order the `memberof` overlay follows.
    fn seed(&self) -> Result<()> {
        let mut ldif = format!(
            "dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\ndc: media\n\
             o: media\n\n"
        );
        for ou in ["people", "groups", "services", "others", "policies"] {
            let _ = write!(
                ldif,
                "dn: ou={ou},{BASE_DN}\nobjectClass: organizationalUnit\nou: {ou}\n\n"
            );
        }
        let _ = write!(
            ldif,
            "dn: cn=default,ou=policies,{BASE_DN}\nobjectClass: device\nobjectClass: pwdPolicy\n\
             cn: default\npwdAttribute: userPassword\npwdLockout: TRUE\n\
             pwdMaxFailure: {LOCKOUT_FAILURES}\npwdLockoutDuration: 300\n\
             pwdFailureCountInterval: 300\n\n"
        );
        let _ = write!(
            ldif,
            "dn: {}\nobjectClass: applicationProcess\nobjectClass: simpleSecurityObject\n\
             cn: {}\nuserPassword: {}\n\n",
            self.bind_dn(),
            directory::SERVICE_ACCOUNT,
            self.fixture.service_password()
        );
        let dup_dn = format!("uid={DUPLICATE_USER},ou=others,{BASE_DN}");
        let users = USERS.iter().chain([&DUPLICATE_USER]);
        let dns = users
            .map(|u| (*u, self.user_dn(u)))
            .chain([(DUPLICATE_USER, dup_dn)]);
        // Each user entry's `entryUUID` is the same on every server of a fixture, as replicas
        // of one directory hold it (set under the Relax Rules control below).
        for (i, (user, dn)) in dns.enumerate() {
            let _ = write!(
                ldif,
                "dn: {dn}\nobjectClass: inetOrgPerson\nuid: {user}\ncn: {user}\nsn: {user}\n\
                 mail: {user}@{}\nuserPassword: {}\nentryUUID: 6d6d7300-0000-4000-8000-{i:012x}\n\n",
                directory::MAIL_DOMAIN,
                self.fixture.password(user)
            );
        }
        for (group, members) in GROUPS {
            let _ = writeln!(
                ldif,
                "dn: {}\nobjectClass: groupOfNames\ncn: {group}",
                self.group_dn(group)
            );
            for m in members {
                let _ = writeln!(ldif, "member: {}", self.member_dn(m));
            }
            ldif.push('\n');
        }
        self.admin()
            .run("ldapmodify", &["-a", "-e", "relax"], Some(&ldif))
            .context("seeding slapd")?;
        for (group, member) in LATE_MEMBERS {
            self.modify(&format!(
                "dn: {}\nchangetype: modify\nadd: member\nmember: {}\n",
                self.group_dn(group),
                self.member_dn(member)
            ))?;
        }
        Ok(())
    }

    /// Whether the password policy holds `user` locked out: its `pwdAccountLockedTime`, as the
    /// harness's root DN reads it.
    pub fn locked_out(&self, user: &str) -> Result<bool> {
        let out = self.admin().search(
            &self.user_dn(user),
            "(objectClass=*)",
            &["pwdAccountLockedTime"],
        )?;
        Ok(out.contains("pwdAccountLockedTime:"))
    }

    /// Refused binds of `user` the password policy has counted (`pwdFailureTime` values).
    pub fn failures(&self, user: &str) -> Result<usize> {
        let out =
            self.admin()
                .search(&self.user_dn(user), "(objectClass=*)", &["pwdFailureTime"])?;
        Ok(out.matches("pwdFailureTime:").count())
    }

    /// The DN of a member name: a group's, else a user's.
    fn member_dn(&self, name: &str) -> String {
        if directory::is_group(name) {
            self.group_dn(name)
        } else {
            self.user_dn(name)
        }
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The tools a server needs, or what to install.
fn tools() -> Result<()> {
    directory::require(&[
        (SLAPD, "slapd"),
        ("/usr/lib/ldap/memberof.so", "slapd"),
        ("/usr/bin/ldapsearch", "ldap-utils"),
    ])
}
