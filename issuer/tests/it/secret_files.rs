//! The files the issuer reads a secret or its configuration from (here `--config` and
//! `--tls-key`) must be owned by its user or root, private, and in a folder no one else may
//! write, also when named through a symbolic link: refused at start, naming the file and the
//! command to run, and refused at a reload (SIGHUP), which keeps what is in force.

use super::reload::{certificate, config, grant, hup_and_wait, serve};
use super::*;
use std::os::unix::fs::PermissionsExt;

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Writes a configuration file at `path` serving `f`'s data dir, mode `mode`.
fn write_config(f: &Fixture, path: &Path, mode: u32) {
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        f.dir.display().to_string()
    );
    std::fs::write(path, text).unwrap();
    set_mode(path, mode);
}

/// `issuer serve --config CONFIG`, which must refuse to start: its stderr.
fn serve_config_refused(config: &Path) -> String {
    let mut command = Command::new(BIN);
    command.args(["serve", "--config"]).arg(config);
    refused_to_start(command)
}

/// A configuration file readable by all (it holds no password), but another user's: that user
/// could point the issuer at a store or directory of their own.
#[test]
#[ignore = "needs root: `cargo xtask test` runs it as root"]
fn a_config_file_another_user_owns_is_refused() {
    let f = fixture();
    let theirs = f.dir.with_file_name("theirs.toml");
    write_config(&f, &theirs, 0o644);
    give_away(&theirs);
    let e = serve_config_refused(&theirs);
    let name = format!(
        "configuration file {}: owned by uid 65534",
        theirs.display()
    );
    assert!(e.contains(&name) && e.contains("run chown"), "{e}");
}

/// A symbolic link of the issuer's own, in its own folder, to another user's file is judged by
/// the file it points to.
#[test]
#[ignore = "needs root: `cargo xtask test` runs it as root"]
fn a_link_to_a_config_file_another_user_owns_is_refused() {
    let f = fixture();
    let theirs = f.dir.with_file_name("theirs.toml");
    write_config(&f, &theirs, 0o644);
    give_away(&theirs);
    let link = f.dir.with_file_name("issuer.toml");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    let e = serve_config_refused(&link);
    let name = format!(
        "configuration file {} (a link to {}): owned by uid 65534",
        link.display(),
        theirs.display()
    );
    assert!(e.contains(&name) && e.contains("run chown"), "{e}");
}

/// A private file in a folder anyone may write: anyone could put a file of their own in its
/// place.
#[test]
fn a_private_config_file_in_a_folder_others_may_write_is_refused() {
    let f = fixture();
    let open = f.dir.with_file_name("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    let config = open.join("issuer.toml");
    write_config(&f, &config, 0o600);
    let e = serve_config_refused(&config);
    let name = format!(
        "configuration file {}: its folder {} (mode 0777) lets other users replace it; \
         run chmod go-w {}",
        config.display(),
        open.display(),
        open.display()
    );
    assert!(e.contains(&name), "{e}");
}

#[test]
fn a_tls_key_others_may_read_stops_serve() {
    let f = fixture();
    let (cert, key) = (f.dir.with_extension("crt"), f.dir.with_extension("key"));
    certificate(&cert, &key);
    set_mode(&key, 0o666);
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&f.dir)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key);
    let e = refused_to_start(command);
    let k = key.display();
    let said = format!("TLS key {k}: mode 0666 lets other users read it; run chmod 600 {k}");
    assert!(e.contains(&said), "{e}");
}

/// A new certificate whose key file others may read, then SIGHUP: the refusal is logged, the
/// issuer keeps serving the certificate and key it had, and keeps running.
#[tokio::test]
async fn a_tls_key_others_may_read_is_refused_at_reload_and_the_old_pair_stays() {
    let f = fixture();
    let (cert, key) = (f.dir.with_extension("crt"), f.dir.with_extension("key"));
    let first = certificate(&cert, &key);
    let file = f.dir.with_file_name("issuer.toml");
    let log = f.dir.with_extension("log");
    std::fs::write(&file, config(&f, &cert, &key, "access_ttl = 77\n")).unwrap();
    let (proc, port) = serve(&file, &log);
    assert_eq!(grant(&f, &port, &first).await, Ok(77));

    let second = certificate(&cert, &key);
    set_mode(&key, 0o666);
    let text = hup_and_wait(&proc, &log, "TLS certificate refused", 1);
    let said = format!(
        "TLS key {}: mode 0666 lets other users read it",
        key.display()
    );
    assert!(text.contains(&said), "{text}");
    assert_eq!(
        grant(&f, &port, &first).await,
        Ok(77),
        "the certificate in use stays"
    );
    let new = grant(&f, &port, &second).await;
    assert!(new.is_err(), "the refused certificate was served: {new:?}");
    assert!(
        e2e::alive(proc.pid()),
        "the refused reload stopped the issuer"
    );
}
