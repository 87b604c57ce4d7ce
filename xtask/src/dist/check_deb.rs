//! The Debian package checked on this machine (as root): `dpkg -i` makes the user `issuer`,
//! `/var/lib/issuer` (issuer's, 0700) and the conffile `/etc/issuer/issuer.toml`
//! (root:issuer 0640); `systemd-analyze verify` accepts the unit, and `systemd-analyze security
//! --offline` rates it at most [`MAX_EXPOSURE`]. With no systemd running here, the unit's
//! `RuntimeDirectory=` is made as systemd makes it (issuer:issuer, its `RuntimeDirectoryMode=`)
//! and its `ExecStart` runs as its user (`runuser -u issuer`, the unit's `Environment=`): it
//! listens on the conffile's socket, which is issuer:issuer 0660 in that folder, `/readyz`
//! answers there (`curl --unix-socket`), a client added as that user gets a token, and the server
//! is stopped by its process group. `dpkg -i` again keeps a changed conffile and the store. Then
//! `dpkg --purge` leaves no user, group, `/var/lib/issuer` or `/etc/issuer`. The package is
//! purged, and the runtime folder removed, however the check ends.

use super::check::{client_credentials_token, output_of, printed_secret, wait_ready, Endpoint};
use super::deb::{file_name, CONFIG_PATH, UNIT_PATH};
use super::Artifacts;
use anyhow::{bail, ensure, Context, Result};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The most exposure `systemd-analyze security` may rate the unit (0.9 as written; up to 2.0 is
/// "OK").
const MAX_EXPOSURE: f64 = 2.0;

/// The installed package, purged when dropped, and the runtime folder made for it, removed.
struct Installed {
    runtime: Option<PathBuf>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "issuer"]).status();
        if let Some(dir) = &self.runtime {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Whether `getent DATABASE NAME` finds it.
fn getent(database: &str, name: &str) -> bool {
    Command::new("getent")
        .args([database, name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The package, installed, run and purged (see the module's doc).
pub fn check_deb(made: &Artifacts) -> Result<()> {
    let package = made.dir.join(file_name(&made.release));
    let installed = Command::new("dpkg-query").args(["-W", "issuer"]).output()?;
    if installed.status.success() || getent("passwd", "issuer") {
        bail!("a package or user `issuer` is already on this machine: the check would clobber it");
    }
    let mut guard = Installed { runtime: None };
    output_of(Command::new("dpkg").arg("-i").arg(&package))?;
    check_installed()?;
    verify_unit()?;
    let env = unit_environment()?;
    let secret = add_client(&env)?;
    guard.runtime = Some(make_runtime_directory()?);
    let socket = conffile_socket()?;
    let mut server = start_exec_start(&env)?;
    let at = Endpoint::Socket(&socket);
    let served = wait_ready(at, Duration::from_secs(30))
        .and_then(|()| check_socket(&socket))
        .and_then(|()| client_credentials_token(at, "deb-check", &secret));
    stop(&mut server)?;
    served?;
    check_reinstall_keeps_changes(&package, &env)?;
    drop(guard);
    check_purged()
}

/// The user, the data dir, the conffile and its owner and mode.
fn check_installed() -> Result<()> {
    ensure!(getent("passwd", "issuer"), "no user issuer");
    let uid = uid_of("issuer")?;
    let data = std::fs::metadata("/var/lib/issuer")?;
    ensure!(
        data.uid() == uid && data.mode() & 0o7777 == 0o700,
        "/var/lib/issuer: uid {} mode {:o}",
        data.uid(),
        data.mode() & 0o7777
    );
    let config = std::fs::metadata(CONFIG_PATH)?;
    let gid = group_of("issuer")?;
    ensure!(
        config.uid() == 0 && config.gid() == gid && config.mode() & 0o7777 == 0o640,
        "{CONFIG_PATH}: {}:{} mode {:o}",
        config.uid(),
        config.gid(),
        config.mode() & 0o7777
    );
    let conffiles =
        output_of(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "issuer"]))?;
    ensure!(
        String::from_utf8_lossy(&conffiles).contains(CONFIG_PATH),
        "{CONFIG_PATH} is no conffile"
    );
    eprintln!("installed: user issuer, /var/lib/issuer 0700, {CONFIG_PATH} root:issuer 0640");
    Ok(())
}

fn uid_of(user: &str) -> Result<u32> {
    Ok(
        String::from_utf8(output_of(Command::new("id").args(["-u", user]))?)?
            .trim()
            .parse()?,
    )
}

fn group_of(user: &str) -> Result<u32> {
    Ok(
        String::from_utf8(output_of(Command::new("id").args(["-g", user]))?)?
            .trim()
            .parse()?,
    )
}

/// `systemd-analyze verify` of the installed unit; `systemd-analyze security --offline` printed.
fn verify_unit() -> Result<()> {
    let out = Command::new("systemd-analyze")
        .args(["verify", UNIT_PATH])
        .output()
        .context("running systemd-analyze")?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success() && !said.contains("issuer.service"),
        "systemd-analyze verify {UNIT_PATH}: {said}"
    );
    eprintln!("systemd-analyze verify {UNIT_PATH}: ok");
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager", UNIT_PATH])
        .output()?;
    let text = String::from_utf8_lossy(&security.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .context("systemd-analyze security rated nothing")?;
    eprintln!("systemd-analyze security: {}", line.trim());
    let exposure: f64 = line
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .context("no exposure level")?;
    ensure!(
        exposure <= MAX_EXPOSURE,
        "exposure {exposure} above {MAX_EXPOSURE}"
    );
    Ok(())
}

/// The values of the unit's `KEY=` lines.
fn unit_values(key: &str) -> Result<Vec<String>> {
    let unit = std::fs::read_to_string(UNIT_PATH)?;
    let prefix = format!("{key}=");
    Ok(unit
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect())
}

/// `/run/DIR` of the unit's `RuntimeDirectory=`, made as systemd makes it at each start:
/// issuer:issuer with its `RuntimeDirectoryMode=`.
fn make_runtime_directory() -> Result<PathBuf> {
    let (dirs, modes) = (
        unit_values("RuntimeDirectory")?,
        unit_values("RuntimeDirectoryMode")?,
    );
    let ([name], [mode]) = (&dirs[..], &modes[..]) else {
        bail!(
            "the unit has not one RuntimeDirectory= and RuntimeDirectoryMode=: {dirs:?} {modes:?}"
        );
    };
    let dir = Path::new("/run").join(name);
    ensure!(!dir.exists(), "{} is already there", dir.display());
    std::fs::create_dir(&dir)?;
    let mode = u32::from_str_radix(mode, 8).context("RuntimeDirectoryMode")?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
    std::os::unix::fs::chown(&dir, Some(uid_of("issuer")?), Some(group_of("issuer")?))?;
    eprintln!(
        "made {} issuer:issuer {mode:o}, as systemd does",
        dir.display()
    );
    Ok(dir)
}

/// The socket the conffile's `listen` names (`unix:PATH`).
fn conffile_socket() -> Result<PathBuf> {
    let config = std::fs::read_to_string(CONFIG_PATH)?;
    let listen = config
        .lines()
        .find_map(|l| l.strip_prefix("listen = "))
        .context("the conffile has no listen")?;
    let path = listen.trim_matches('"').strip_prefix("unix:");
    Ok(PathBuf::from(path.with_context(|| {
        format!("the conffile listens on {listen}, not on a Unix socket")
    })?))
}

/// The socket the server listens on: issuer:issuer 0660.
fn check_socket(socket: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(socket)?;
    let (uid, gid, mode) = (meta.uid(), meta.gid(), meta.mode() & 0o7777);
    ensure!(
        meta.file_type().is_socket()
            && (uid, gid) == (uid_of("issuer")?, group_of("issuer")?)
            && mode == 0o660,
        "{}: {uid}:{gid} mode {mode:o}",
        socket.display()
    );
    eprintln!("{}: a socket, issuer:issuer 0660", socket.display());
    Ok(())
}

/// The unit's `Environment=` assignments.
fn unit_environment() -> Result<Vec<(String, String)>> {
    Ok(unit_values("Environment")?
        .iter()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// The unit's `ExecStart=`, split at spaces (it holds no quoting).
fn exec_start() -> Result<Vec<String>> {
    let unit = std::fs::read_to_string(UNIT_PATH)?;
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .context("no ExecStart")?;
    Ok(line.split_whitespace().map(str::to_owned).collect())
}

/// `runuser -u issuer -- ARGS` with the unit's environment.
fn as_issuer(args: &[String], env: &[(String, String)]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "issuer", "--"]).args(args);
    c.envs(env.iter().map(|(k, v)| (k, v)));
    c
}

/// `issuer client add` and `activate`, as the user, on the data dir; returns the secret.
fn add_client(env: &[(String, String)]) -> Result<String> {
    let admin = |args: &[&str]| {
        let argv: Vec<String> = std::iter::once("/usr/bin/issuer")
            .chain(args.iter().copied())
            .map(str::to_owned)
            .collect();
        output_of(&mut as_issuer(&argv, env))
    };
    let said = admin(&[
        "client",
        "add",
        "deb-check",
        "--grants",
        "client_credentials",
    ])?;
    admin(&["client", "activate", "deb-check"])?;
    printed_secret(&said)
}

/// The unit's `ExecStart` as its user, listening where the conffile says, in a process group of
/// its own.
fn start_exec_start(env: &[(String, String)]) -> Result<Child> {
    let argv = exec_start()?;
    ensure!(Path::new(&argv[0]).exists(), "{} is not installed", argv[0]);
    let mut cmd = as_issuer(&argv, env);
    cmd.process_group(0);
    eprintln!("\n$ {cmd:?}");
    Ok(cmd.spawn()?)
}

/// SIGTERM to the server's process group, then SIGKILL if it is not gone within 10 s.
fn stop(server: &mut Child) -> Result<()> {
    let group = format!("-{}", server.id());
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if server.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    server.wait()?;
    bail!("the server did not stop on SIGTERM within 10 s")
}

/// `dpkg -i` again over a changed conffile and a used data dir keeps both: the operator's line,
/// root:issuer 0640, and the client.
fn check_reinstall_keeps_changes(package: &Path, env: &[(String, String)]) -> Result<()> {
    let mut text = std::fs::read_to_string(CONFIG_PATH)?;
    text.push_str("# changed by the operator\n");
    std::fs::write(CONFIG_PATH, &text)?;
    output_of(Command::new("dpkg").arg("-i").arg(package))?;
    ensure!(
        std::fs::read_to_string(CONFIG_PATH)? == text,
        "reinstalling replaced the changed {CONFIG_PATH}"
    );
    check_installed()?;
    let argv = ["/usr/bin/issuer", "client", "list"].map(str::to_owned);
    let listed = output_of(&mut as_issuer(&argv, env))?;
    ensure!(
        String::from_utf8_lossy(&listed).contains("deb-check"),
        "reinstalling lost the store"
    );
    eprintln!("reinstalled: the changed conffile and the store kept");
    Ok(())
}

/// After `dpkg --purge`: no package, user, group, state, configuration or enablement left.
fn check_purged() -> Result<()> {
    let listed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "issuer"])
        .output()?;
    ensure!(
        !String::from_utf8_lossy(&listed.stdout).contains("installed"),
        "still installed"
    );
    ensure!(!getent("passwd", "issuer"), "the user issuer is left");
    ensure!(!getent("group", "issuer"), "the group issuer is left");
    for path in [
        "/var/lib/issuer",
        "/etc/issuer",
        "/etc/systemd/system/multi-user.target.wants/issuer.service",
    ] {
        ensure!(!Path::new(path).exists(), "{path} is left after purge");
    }
    eprintln!("purged: no user, group, /var/lib/issuer or /etc/issuer left");
    Ok(())
}
