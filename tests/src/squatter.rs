//! Another local account trying to take the issuer's place: the `squat` helper
//! (`tests/src/bin/squat.rs`) run as uid 65534 (`nobody`), through `setpriv --reuid 65534
//! --regid 65534 --clear-groups`, which takes root. The helper is copied into a folder of its
//! own that uid 65534 may enter (the build's target dir may not be).

use crate::Proc;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The squatter's user and group id.
pub const SQUATTER_ID: u32 = 65534;

/// The helper, ready to run as [`SQUATTER_ID`].
pub struct Squatter {
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

/// What a squatter's attempts on a socket path got.
#[derive(Debug)]
pub struct Attempts {
    /// Whether any attempt got in.
    pub took: bool,
    /// One line per attempt, as the helper printed it.
    pub said: String,
}

impl Squatter {
    /// The helper `bin` (a test's `env!("CARGO_BIN_EXE_squat")`), or why it cannot run as
    /// another user here.
    pub fn new(bin: &Path) -> Result<Self> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("acting as uid {SQUATTER_ID} takes root (setpriv; CI runs `cargo xtask test` as root)");
        }
        let dir = tempfile::Builder::new().prefix("squatter").tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let copy = dir.path().join("squat");
        std::fs::copy(bin, &copy).with_context(|| format!("copying {}", bin.display()))?;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            bin: copy,
            _dir: dir,
        })
    }

    /// `squat ARGS` as uid and gid [`SQUATTER_ID`], with no supplementary group.
    fn command(&self, args: &[&str]) -> Command {
        let id = SQUATTER_ID.to_string();
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
            .arg(&self.bin)
            .args(args);
        c
    }

    /// Tries to take the socket at `path`: connect to it, bind one there, create a file there,
    /// rename its folder away.
    pub fn take_socket(&self, path: &Path) -> Result<Attempts> {
        let out = self
            .command(&["unix", &path.display().to_string()])
            .output()
            .context("running the squatter (setpriv)")?;
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        match out.status.code() {
            Some(0) => Ok(Attempts { took: true, said }),
            Some(3) => Ok(Attempts { took: false, said }),
            _ => bail!(
                "the squatter failed ({}): {said}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Listens on 127.0.0.1:`port` for `seconds`, once it could bind it (waiting up to 5 s):
    /// the process (stopped by its pid on drop), and the lines it prints about what it receives.
    pub fn listen_on(&self, port: u16, seconds: u64) -> Result<(Proc, mpsc::Receiver<String>)> {
        let child = self
            .command(&["tcp", &port.to_string(), &seconds.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .context("running the squatter (setpriv)")?;
        let mut proc = Proc::new(child, "squatter");
        let stdout = proc.stdout().context("the squatter's stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        match next_line(&lines, Instant::now() + Duration::from_secs(5)) {
            Some(l) if l == "listening" => Ok((proc, lines)),
            other => bail!("the squatter could not listen on {port}: {other:?}"),
        }
    }
}

/// The next line of `lines` before `deadline`, if any.
pub fn next_line(lines: &mpsc::Receiver<String>, deadline: Instant) -> Option<String> {
    lines
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()
}
