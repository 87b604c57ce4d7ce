//! Where an admin command finds the store: `--config FILE` (env `ISSUER_CONFIG`) as `serve`
//! reads it, a flag over the file, and no silent default: without a store named, or with a data
//! dir that holds none, the command fails naming it and creates nothing.

use super::*;

/// An admin command run in `cwd` with only `args` and `env`: no `--data-dir`, and none of the
/// issuer's variables from the test's own environment.
fn bare(cwd: &Path, args: &[&str], env: &[(&str, &Path)]) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.current_dir(cwd).args(args);
    for var in ["ISSUER_DATA_DIR", "ISSUER_STORE", "ISSUER_CONFIG"] {
        command.env_remove(var);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    run_admin(command, None)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Writes the configuration file `issuer.toml` in `dir`: the data dir `data`, an access token
/// lifetime of 900 s, and options only `serve` has.
fn write_config(dir: &Path, data: &Path) -> PathBuf {
    let path = dir.join("issuer.toml");
    std::fs::write(
        &path,
        format!(
            "data_dir = {:?}\naccess_ttl = 900\nlisten = \"127.0.0.1:0\"\n\
             trust_x_forwarded_for = true\nlogin_backoff_max = 60\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    path
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn admin_commands_find_the_store_in_the_configuration_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let data = tmp.path().join("data");
    let config = write_config(tmp.path(), &data);
    let file = config.to_str().unwrap();
    assert!(stdout(&bare(&cwd, &["init", "--config", file], &[])).contains("created"));
    let out = bare(&cwd, &["client", "add", "app", "--config", file], &[]);
    let secret = stdout(&out)
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned();
    stdout(&bare(
        &cwd,
        &["client", "activate", "app", "--config", file],
        &[],
    ));
    let listed = stdout(&bare(&cwd, &["client", "list", "--config", file], &[]));
    assert!(listed.contains("app "), "{listed}");
    // Named by the environment.
    let listed = stdout(&bare(
        &cwd,
        &["client", "list"],
        &[("ISSUER_CONFIG", &config)],
    ));
    assert!(listed.contains("app "), "{listed}");
    // The filter's configuration: the data dir's key ring and the file's lifetime.
    let printed = stdout(&bare(
        &cwd,
        &[&FILTER_CONFIG[..], &["--config", file]].concat(),
        &[],
    ));
    let cfg: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(cfg["max_token_lifetime_seconds"], 900, "{cfg}");
    assert_eq!(cfg["dpop"]["public_origin"], FILTER_CONFIG[3], "{cfg}");
    let by_dir: Value = serde_json::from_str(&admin(&data, &FILTER_CONFIG, None))
        .expect("filter-config on the data dir");
    assert_eq!(cfg["keys"], by_dir["keys"]);
    // The issuer serving the same file signs with the key printed.
    let mut serve = Command::new(BIN);
    serve
        .args(["serve", "--config", file])
        .env("RUST_LOG", "debug");
    let (_proc, url) =
        e2e::issuer::launch(serve, &tmp.path().join("serve.log")).expect("issuer starts");
    let a = post(
        &format!("{url}/apiv2/oauth/token"),
        Some(("app", &secret)),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_eq!(a.json["expires_in"], 900);
    let token = a.json["access_token"].as_str().unwrap();
    token::verify(&ring(&data), token, now(), 0).expect("the printed key verifies the token");
    // A flag overrides the file.
    let other = tmp.path().join("other");
    let out = bare(
        &cwd,
        &[
            "client",
            "list",
            "--config",
            file,
            "--data-dir",
            other.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(other.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
    assert!(!other.exists());
    assert_eq!(entries(&cwd), Vec::<String>::new());
}

#[test]
fn without_a_store_named_an_admin_command_fails_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let declared = tmp.path().join("clients.toml");
    std::fs::write(&declared, "[[client]]\nid = \"app\"\ngrants = []\n").unwrap();
    let commands: [&[&str]; 6] = [
        &["client", "list"],
        &["client", "add", "app"],
        &FILTER_CONFIG,
        &["user", "list"],
        &["apply", declared.to_str().unwrap(), "--dry-run"],
        &["backup", "--to", "backup"],
    ];
    for args in commands {
        let out = bare(tmp.path(), args, &[]);
        assert!(!out.status.success(), "{args:?}");
        let why = stderr(&out);
        assert!(why.contains("no store given"), "{args:?}: {why}");
        assert!(
            why.contains("--data-dir") && why.contains("--config"),
            "{why}"
        );
        assert_eq!(entries(tmp.path()), ["clients.toml"], "{args:?}");
    }
}

#[test]
fn a_missing_data_dir_fails_naming_it_and_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let absent = tmp.path().join("absent");
    let config = write_config(tmp.path(), &absent);
    let file = config.to_str().unwrap();
    let named = absent.to_str().unwrap();
    let filter_config = [&FILTER_CONFIG[..], &["--config", file]].concat();
    for args in [
        &["client", "list", "--config", file][..],
        &["client", "add", "app", "--config", file],
        &filter_config,
        &["edges", "--config", file],
        &["audit", "--config", file],
        &["client", "list", "--data-dir", named],
    ] {
        let out = bare(tmp.path(), args, &[]);
        assert!(!out.status.success(), "{args:?}");
        let why = stderr(&out);
        assert!(why.contains(named), "{args:?}: {why}");
        assert!(why.contains("issuer init"), "{args:?}: {why}");
        assert!(!absent.exists(), "{args:?} created {named}");
    }
    assert_eq!(entries(tmp.path()), ["issuer.toml"]);
}

#[test]
fn a_key_no_option_has_is_refused_by_admin_commands_too() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("issuer.toml");
    std::fs::write(&config, "data_dir = \"data\"\ncolour = \"red\"\n").unwrap();
    let out = bare(
        tmp.path(),
        &["client", "list", "--config", config.to_str().unwrap()],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown key `colour`"),
        "{}",
        stderr(&out)
    );
}
