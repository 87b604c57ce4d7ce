//! A throwaway Samba Active Directory domain controller for tests: the domain `MEDIA.TEST`
//! (NetBIOS `MEDIA`, base `DC=media,DC=test`, host `dc1.media.test`) provisioned with
//! `samba-tool domain provision --dns-backend NONE` into a temp dir (0700) under /tmp, seeded with
//! the [`crate::directory`] fixture by `samba-tool` while the server is still down, and served by
//! `samba -i -M single` with only its LDAP service, on 127.0.0.1 alone. The `single` process
//! model keeps it to one process (the default, prefork, runs ten: a master, four workers and
//! their waiters).
//!
//! Every server is provisioned afresh, with no cache to go stale: on an idle 2-core machine
//! provisioning takes 3.7 s, seeding 4.5 s (17 `samba-tool` runs) and serving 0.5 s more; with
//! two provisioning at once, 10 s and 9 s. `samba-tool` takes passwords only as arguments, so the
//! fixture's throwaway passwords show in `ps` while it runs.
//!
//! The fixture in AD terms: users and groups are `CN=NAME,CN=Users,DC=media,DC=test`, users with
//! `sAMAccountName` NAME, `userPrincipalName` and `mail` `NAME@media.test` (samba-tool sets the
//! UPN itself); the service account is `CN=svc-issuer,CN=Users,DC=media,DC=test`; the groups nest
//! by membership (alice is in `all-staff` through `media-staff` and `editors`, which
//! `LDAP_MATCHING_RULE_IN_CHAIN` finds). There is no second `dup`: AD keeps `sAMAccountName`
//! unique. A subtree search from the base DN also returns continuation references
//! (`ldaps://media.test/CN=Configuration,...`), which a client must skip, and Samba has no
//! `ldapwhoami` (the WhoAmI extended operation).
//!
//! TLS: a certificate of the fixture's test CA for 127.0.0.1, `localhost` and `dc1.media.test`,
//! on `ldaps://127.0.0.1:636` and by StartTLS on `ldap://127.0.0.1:389`. Samba's default
//! `ldap server require strong auth = yes` is kept: a simple bind over plain `ldap://` is refused
//! ("Strong(er) authentication required (8)"), as a well set up Active Directory does.
//!
//! The LDAP ports are Samba's fixed 389 and 636 (and 3268/3269, the global catalog), so servers
//! take turns: [`SambaDc::start`] takes an exclusive `flock` on [`LOCK_FILE`] once provisioned,
//! held until the server is dropped, which orders the tests of one process and of concurrent ones.
//! Samba runs as root (the ports are privileged). Dropping it kills its process group (the server
//! runs in one of its own, children included), removes the dir and releases the lock.

use crate::directory::{self, Fixture, LdapClient, GROUPS, LATE_MEMBERS, USERS};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server, at its Debian path.
pub const SAMBA: &str = "/usr/sbin/samba";
/// Its administration tool, at its Debian path.
pub const SAMBA_TOOL: &str = "/usr/bin/samba-tool";
/// The lock that servers, of every process, take turns by.
pub const LOCK_FILE: &str = "/tmp/mms-samba-ad.lock";
/// The domain's base DN.
pub const BASE_DN: &str = "DC=media,DC=test";
/// The DC's host name (in its certificate, and its `dnsHostName`).
pub const HOST_NAME: &str = "dc1.media.test";

/// A running throwaway domain controller; killed and removed on drop, releasing [`LOCK_FILE`].
pub struct SambaDc {
    fixture: Arc<Fixture>,
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    /// The server, leader of its own process group.
    server: Option<Child>,
    /// Holds the `flock` on [`LOCK_FILE`] while open.
    lock: Option<std::fs::File>,
}

impl SambaDc {
    /// A server for a test. Missing tools fail the test, saying which
    /// ([`crate::needed_for_test`]); so does a server that fails to start.
    pub fn for_test() -> Self {
        crate::needed_for_test(prerequisites());
        Self::start().unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Provisions, seeds and starts a server with a fresh fixture (new passwords, new CA).
    pub fn start() -> Result<Self> {
        Self::start_with(Arc::new(Fixture::new()?))
    }

    /// Provisions, seeds and starts a server with `fixture`'s passwords and CA; waits for the
    /// lock before starting it.
    pub fn start_with(fixture: Arc<Fixture>) -> Result<Self> {
        prerequisites()?;
        let tmp = tempfile::Builder::new()
            .prefix("mms-samba-")
            .tempdir_in("/tmp")
            .context("creating a temp dir under /tmp")?;
        let dir = tmp.path().to_owned();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        // From here on, dropping `dc` stops whatever started and removes the dir.
        let mut dc = Self {
            fixture,
            dir,
            tmp: Some(tmp),
            server: None,
            lock: None,
        };
        let t0 = Instant::now();
        dc.provision()?;
        let t1 = Instant::now();
        dc.seed()?;
        let t2 = Instant::now();
        dc.lock = Some(lock()?);
        let t3 = Instant::now();
        dc.launch()?;
        eprintln!(
            "samba: provisioned in {:.1?}, seeded in {:.1?}, waited {:.1?} for the lock, serving in {:.1?}",
            t1 - t0,
            t2 - t1,
            t3 - t2,
            t3.elapsed()
        );
        Ok(dc)
    }

    /// The fixture it was seeded with.
    pub fn fixture(&self) -> &Arc<Fixture> {
        &self.fixture
    }

    /// `ldap://127.0.0.1:389` (StartTLS offered; simple binds need it).
    pub fn ldap_url(&self) -> String {
        "ldap://127.0.0.1:389".into()
    }

    /// `ldaps://127.0.0.1:636`.
    pub fn ldaps_url(&self) -> String {
        "ldaps://127.0.0.1:636".into()
    }

    /// `DC=media,DC=test`.
    pub fn base_dn(&self) -> &'static str {
        BASE_DN
    }

    /// The service account's DN: `CN=svc-issuer,CN=Users,DC=media,DC=test`.
    pub fn bind_dn(&self) -> String {
        self.user_dn(directory::SERVICE_ACCOUNT)
    }

    /// The file (0600, no line break) holding the service account's password.
    pub fn bind_password_file(&self) -> PathBuf {
        self.dir.join("bind-password")
    }

    /// The test CA's certificate (PEM), which the server's certificate chains to.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("tls/ca.pem")
    }

    /// The password of `user` (see [`Fixture::password`]).
    pub fn password(&self, user: &str) -> &str {
        self.fixture.password(user)
    }

    /// The DN of a user (or the service account): `CN=NAME,CN=Users,DC=media,DC=test`.
    pub fn user_dn(&self, user: &str) -> String {
        format!("CN={user},CN=Users,{BASE_DN}")
    }

    /// The DN of a group: `CN=NAME,CN=Users,DC=media,DC=test`.
    pub fn group_dn(&self, group: &str) -> String {
        format!("CN={group},CN=Users,{BASE_DN}")
    }

    /// A user's `userPrincipalName`: `NAME@media.test`.
    pub fn upn(&self, user: &str) -> String {
        format!("{user}@{}", directory::MAIL_DOMAIN)
    }

    /// A client of the `ldaps://` URL bound as the service account.
    pub fn service_client(&self) -> LdapClient {
        LdapClient::new(&self.ldaps_url(), &self.ca_file())
            .bind(&self.bind_dn(), self.fixture.service_password())
    }

    /// The server's pid (its process group's too), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("samba.log")).unwrap_or_default()
    }

    /// Disables an account (`userAccountControl` gains ACCOUNTDISABLE, 2).
    pub fn disable_user(&self, user: &str) -> Result<()> {
        self.samba_tool(&["user", "disable", user]).map(drop)
    }

    /// Enables an account again.
    pub fn enable_user(&self, user: &str) -> Result<()> {
        self.samba_tool(&["user", "enable", user]).map(drop)
    }

    /// Adds `member` (a user or group name) to `group`.
    pub fn add_group_member(&self, group: &str, member: &str) -> Result<()> {
        self.samba_tool(&["group", "addmembers", group, member])
            .map(drop)
    }

    /// Removes `member` (a user or group name) from `group`.
    pub fn remove_group_member(&self, group: &str, member: &str) -> Result<()> {
        self.samba_tool(&["group", "removemembers", group, member])
            .map(drop)
    }

    /// Runs `samba-tool ARGS` on the domain's database (it works with the server up or down);
    /// returns stdout.
    pub fn samba_tool(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(SAMBA_TOOL)
            .args(args)
            .arg("-s")
            .arg(self.dir.join("etc/smb.conf"))
            .stdin(Stdio::null())
            .output()
            .context("running samba-tool")?;
        if !out.status.success() {
            bail!(
                "samba-tool {} failed ({}): {}{}",
                args.first().copied().unwrap_or_default(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Kills the server's process group, removes the dir and releases the lock. Calling it again
    /// does nothing.
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            kill_group(&mut server);
        }
        if let Some(tmp) = self.tmp.take() {
            if let Err(e) = tmp.close() {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
        self.lock = None;
    }

    /// `samba-tool domain provision` into the dir, and the bind password file.
    fn provision(&self) -> Result<()> {
        let admin = format!("Adm-{}-9", &crate::random_hex()?[..24]);
        let log = crate::private_log(&self.dir.join("provision.log"))?;
        let status = Command::new(SAMBA_TOOL)
            .args(["domain", "provision", "--targetdir"])
            .arg(&self.dir)
            .args(["--realm", "MEDIA.TEST", "--domain", "MEDIA"])
            .args(["--server-role", "dc", "--dns-backend", "NONE"])
            .args(["--host-name", "dc1", "--option=netbios name=DC1"])
            .arg(format!("--adminpass={admin}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .context("running samba-tool domain provision")?;
        if !status.success() {
            bail!(
                "samba-tool domain provision failed ({status}):\n{}",
                std::fs::read_to_string(self.dir.join("provision.log")).unwrap_or_default()
            );
        }
        let service = self.fixture.service_password().as_bytes();
        crate::write_private(&self.bind_password_file(), service)
    }

    /// Creates the fixture's accounts and groups (the server is down: `samba-tool` writes the
    /// database directly).
    fn seed(&self) -> Result<()> {
        let service = directory::SERVICE_ACCOUNT;
        let password = self.fixture.service_password();
        self.samba_tool(&["user", "create", service, password, "--use-username-as-cn"])?;
        for user in USERS {
            let mail = format!("--mail-address={}", self.upn(user));
            let given = format!("--given-name={}", capitalized(user));
            let password = self.fixture.password(user);
            let args = [
                "user",
                "create",
                user,
                password,
                "--use-username-as-cn",
                &mail,
                &given,
            ];
            self.samba_tool(&args)?;
        }
        for (group, members) in GROUPS {
            self.samba_tool(&["group", "add", group])?;
            self.add_group_member(group, &members.join(","))?;
        }
        for (group, member) in LATE_MEMBERS {
            self.add_group_member(group, member)?;
        }
        Ok(())
    }

    /// Writes the TLS files, starts `samba` in a process group of its own and waits until the
    /// service account can bind over `ldaps://`.
    fn launch(&mut self) -> Result<()> {
        let tls_dir = self.dir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        let tls = self.fixture.write_tls(&tls_dir, &[HOST_NAME])?;
        for port in [389, 636] {
            std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!("127.0.0.1:{port} is taken (see `ss -ltnp`; a system slapd or samba?)")
            })?;
        }
        let log = crate::private_log(&self.dir.join("samba.log"))?;
        let option = |name: &str, value: &Path| format!("--option={name}={}", value.display());
        let server = Command::new(SAMBA)
            .arg("-s")
            .arg(self.dir.join("etc/smb.conf"))
            .args(["-i", "-M", "single"])
            .args([
                "--option=interfaces=127.0.0.1",
                "--option=bind interfaces only=yes",
            ])
            .args(["--option=server services=ldap", "--option=tls enabled=yes"])
            .arg(option("pid directory", &self.dir))
            .arg(option("tls certfile", &tls.cert))
            .arg(option("tls keyfile", &tls.key))
            .arg(option("tls cafile", &tls.ca))
            .process_group(0)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting samba")?;
        self.server = Some(server);
        let client = self.service_client();
        let ready = directory::wait_ready(
            directory::READY_TIMEOUT,
            || {
                let status = self.server.as_mut()?.try_wait().ok()??;
                Some(format!("samba exited ({status})"))
            },
            || client.check_bind(),
        );
        ready.with_context(|| format!("samba did not serve; its log:\n{}", self.log()))
    }
}

impl Drop for SambaDc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a server needs (the tools, and root), or what is missing.
fn prerequisites() -> Result<()> {
    directory::require(&[
        (SAMBA, "samba"),
        (SAMBA_TOOL, "samba-common-bin"),
        ("/usr/share/samba/setup/ad-schema", "samba-ad-provision"),
        ("/usr/bin/ldapsearch", "ldap-utils"),
    ])?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("a Samba AD DC runs as root (it listens on ports 389 and 636)");
    }
    Ok(())
}

/// `alice` → `Alice`.
fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// Opens [`LOCK_FILE`] and takes an exclusive `flock` on it, waiting for the holder if any.
/// Each open is its own lock, so this orders the threads of one process as well as processes.
fn lock() -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .with_context(|| format!("opening {LOCK_FILE}"))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!("samba: waiting for {LOCK_FILE} (another test's domain controller runs)");
        // SAFETY: as above.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context(format!("flock {LOCK_FILE}"));
        }
    }
    Ok(file)
}

/// Kills the process group led by `leader` with SIGKILL, reaps the leader, and waits (10 s at
/// most) until no live process is left in the group.
fn kill_group(leader: &mut Child) {
    let pgid = leader.id() as libc::pid_t;
    // SAFETY: kill has no memory preconditions; a negative pid names the group.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = leader.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            eprintln!("samba: processes {left:?} of group {pgid} outlived SIGKILL");
            return;
        }
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live (not zombie) processes in the process group `pgid`, from /proc.
fn group_members(pgid: libc::pid_t) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `PID (COMM) STATE PPID PGRP ...`; COMM may hold anything, so read after its end.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let pgrp: libc::pid_t = fields.nth(1)?.parse().ok()?;
            (pgrp == pgid && state != "Z").then_some(pid)
        })
        .collect()
}
