//! Names the build for `issuer_build_info`: the git revision (`ISSUER_REVISION`, from the
//! environment if set, else `git rev-parse`, else `unknown`) and the compiler (`ISSUER_RUSTC`).
//! Nothing here can fail the build: without git or a compiler that says its version, the label
//! is `unknown`.

use std::path::Path;
use std::process::Command;

fn output(cmd: &str, args: &[&str], dir: &Path) -> Option<String> {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    println!("cargo:rerun-if-env-changed=ISSUER_REVISION");
    let revision = std::env::var("ISSUER_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| output("git", &["rev-parse", "--short=12", "HEAD"], dir));
    // Built again when the checkout moves: its HEAD and the reflog a commit appends to.
    if let Some(git_dir) = output("git", &["rev-parse", "--absolute-git-dir"], dir) {
        for file in ["HEAD", "logs/HEAD"] {
            let path = Path::new(&git_dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(&rustc, &["--version"], dir)
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned));
    println!(
        "cargo:rustc-env=ISSUER_REVISION={}",
        revision.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=ISSUER_RUSTC={}",
        version.as_deref().unwrap_or("unknown")
    );
}
