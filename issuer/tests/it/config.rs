//! The configuration file (`--config FILE`, env `ISSUER_CONFIG`): options from the file, a flag
//! over the file, an unknown key or a bad `[directory]` refused at startup.

use super::*;

/// Writes `text` as the configuration file `issuer.toml` next to the fixture's data dir.
fn write_config(f: &Fixture, text: &str) -> PathBuf {
    let path = f.dir.with_file_name("issuer.toml");
    std::fs::write(&path, text).unwrap();
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
    let f = fixture();
    let config = write_config(&f, text);
    let out = serve_command(&["--config", config.to_str().unwrap()], &[])
        .args([
            "--data-dir",
            f.dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{text}: started");
    let stderr = String::from_utf8(out.stderr).unwrap();
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
    assert!(e.contains("readable by group or others"), "{e}");
}
