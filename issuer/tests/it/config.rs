//! The configuration file (`--config FILE`, env `ISSUER_CONFIG`): options from the file, a flag
//! over the file, an unknown key or a bad `[directory]` refused at startup.

use super::*;

/// Writes `text` as the configuration file `issuer.toml` next to the fixture's data dir, mode
/// 0644 whatever the umask (readable by all: it holds no password).
fn write_config(f: &Fixture, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = f.dir.with_file_name("issuer.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

/// `issuer serve` with only `args` and `env` (no `--data-dir`, no `--listen`).
fn serve_command(args: &[&str], env: &[(&str, &Path)]) -> Command {
    let mut command = Command::new(BIN);
    command.arg("serve").args(args).env("RUST_LOG", "debug");
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

async fn expires_in(url: &str, f: &Fixture) -> u64 {
    let a = post(
        &format!("{url}/apiv2/oauth/token"),
        f.app(),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    a.json["expires_in"].as_u64().unwrap()
}

#[tokio::test]
async fn serve_takes_its_options_from_the_file_and_a_flag_overrides_it() {
    let f = fixture();
    let config = write_config(
        &f,
        &format!(
            "listen = \"127.0.0.1:0\"\naccess_ttl = 77\ndata_dir = {:?}\n\
             trusted_proxy = [\"10.0.0.0/8\"]\ntrust_x_forwarded_for = true\n",
            f.dir.display().to_string()
        ),
    );
    let log = f.dir.with_extension("log");
    let config_arg = config.to_str().unwrap();
    let (proc, url) = e2e::issuer::launch(serve_command(&["--config", config_arg], &[]), &log)
        .expect("issuer starts");
    assert!(!url.ends_with(":8080"), "{url}");
    assert_eq!(expires_in(&url, &f).await, 77);
    drop(proc);
    // Named by the environment this time; the flag wins over the file.
    let command = serve_command(&["--access-ttl", "99"], &[("ISSUER_CONFIG", &config)]);
    let (_proc, url) = e2e::issuer::launch(command, &log).expect("issuer starts");
    assert_eq!(expires_in(&url, &f).await, 99);
}

/// Runs `issuer serve --config FILE` with `text` as FILE, which must fail; returns its stderr.
fn refused(text: &str) -> String {
    refused_mode(text, 0o644)
}

/// [`refused`], the file of mode `mode`.
fn refused_mode(text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let config = write_config(&f, text);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut command = serve_command(&["--config", config.to_str().unwrap()], &[]);
    command.args([
        "--data-dir",
        f.dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let stderr = refused_to_start(command);
    assert!(stderr.contains(config.to_str().unwrap()), "{stderr}");
    stderr
}

#[test]
fn an_unknown_key_stops_serve_and_is_named() {
    let e = refused("access_ttl = 60\nacess_ttl = 60\n");
    assert!(e.contains("unknown key `acess_ttl`"), "{e}");
    let e = refused("[directory]\nurls = [\"ldaps://dc1\"]\nkind = \"ldap\"\nbase = \"x\"\n");
    assert!(e.contains("unknown field `base`"), "{e}");
}

#[test]
fn a_bad_directory_stops_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let password = tmp.path().join("pw");
    std::fs::write(&password, "secret\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = refused(&format!(
        "[directory]\nurls = [\"ldaps://dc1\"]\nkind = \"active-directory\"\n\
         bind_dn = \"CN=svc\"\nbind_password_file = {:?}\nbase_dn = \"DC=example\"\n",
        password.display().to_string()
    ));
    assert!(
        e.contains("mode 0640 lets other users read it; run chmod 600"),
        "{e}"
    );
}

/// A TOML syntax error is reported by its line, column and reason, never with the text of the
/// line, which may hold the database's password.
#[test]
fn a_syntax_error_names_its_line_and_column_but_never_the_text() {
    let e = refused_mode(
        "access_ttl = 60\nstore = \"postgres://issuer:hunter2-in-url@db:5432/issuer\" x\n",
        0o600,
    );
    assert!(!e.contains("hunter2"), "{e}");
    assert!(e.contains("line 2, column "), "{e}");
}

/// A configuration file group or others may write is refused (they could point the issuer at
/// their own database or directory); one they may read is refused if its database URL holds a
/// password. Each error says `run chmod 600`.
#[test]
fn a_config_file_others_may_write_or_read_with_a_password_is_refused() {
    let e = refused_mode("access_ttl = 60\n", 0o664);
    assert!(
        e.contains("mode 0664 lets other users change it; run chmod 600"),
        "{e}"
    );
    for url in [
        "postgres://issuer:hunter2-in-url@db:5432/issuer",
        "postgresql://issuer@db/issuer?password=hunter2-in-url",
    ] {
        let e = refused_mode(&format!("store = \"{url}\"\n"), 0o640);
        assert!(
            e.contains("holds a database password")
                && e.contains("mode 0640 lets other users read it; run chmod 600"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }
}

/// A trusted proxy range wider than a /8 of IPv4 or a /7 of IPv6 (`0.0.0.0/0`, `::/0`, all
/// IPv4-mapped addresses) would believe anyone's X-Forwarded-For, letting a guesser choose the
/// address the sign-in back-off counts: refused, in the file as on the command line.
#[test]
fn a_trusted_proxy_range_that_covers_the_internet_is_refused() {
    for range in [
        "0.0.0.0/0",
        "128.0.0.0/1",
        "::/0",
        "2000::/3",
        "::ffff:0.0.0.0/96",
    ] {
        let e = refused(&format!(
            "trust_x_forwarded_for = true\ntrusted_proxy = [\"10.0.0.0/8\", \"{range}\"]\n"
        ));
        assert!(e.contains(range) && e.contains("wider than"), "{e}");
    }
}
