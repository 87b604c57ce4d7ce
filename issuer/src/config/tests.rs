use super::*;
use clap::{ArgMatches, Parser};
use std::os::unix::fs::PermissionsExt;

/// A stand-in for `issuer serve`: an option with an environment variable and a default, a list
/// option with its own long name, a switch, an optional value and a ranged number.
#[derive(Parser, Debug)]
#[command(name = "t")]
enum Cli {
    Serve(Opts),
}

#[derive(clap::Args, Debug)]
struct Opts {
    #[arg(
        long,
        env = "ISSUER_CONFIG_TEST_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    listen: std::net::SocketAddr,
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    access_ttl: u64,
    #[arg(long = "trusted-proxy", value_delimiter = ',', default_values = ["127.0.0.1"], value_parser = parse_net)]
    trusted_proxies: Vec<ipnet::IpNet>,
    #[arg(long)]
    trust_x_forwarded_for: bool,
    #[arg(long)]
    store: Option<String>,
    #[arg(long, env = "ISSUER_CONFIG_TEST_FILE")]
    config: Option<PathBuf>,
}

fn file(text: &str) -> ConfigFile {
    ConfigFile::parse(Path::new("/etc/issuer.toml"), text).unwrap()
}

/// Parses `args` after `t serve` with `text` as the configuration file.
fn parse(text: &str, args: &[&str]) -> Result<Opts, String> {
    let cmd = Cli::command();
    let serve = cmd.find_subcommand("serve").unwrap().clone();
    let applied = file(text).apply(serve).map_err(|e| e.to_string())?;
    let argv = ["t", "serve"].iter().chain(args);
    let matches: ArgMatches = cmd
        .mut_subcommand("serve", |_| applied)
        .try_get_matches_from(argv)
        .map_err(|e| e.to_string())?;
    let Cli::Serve(opts) = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    Ok(opts)
}

#[test]
fn options_come_from_the_file_under_their_flag_names() {
    let o = parse(
        "listen = \"127.0.0.1:9\"\naccess_ttl = 60\ntrusted_proxy = [\"10.0.0.0/8\", \"::1\"]\n\
         trust_x_forwarded_for = true\nstore = \"redb:/x\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(o.listen.to_string(), "127.0.0.1:9");
    assert_eq!(o.access_ttl, 60);
    let proxies: Vec<String> = o.trusted_proxies.iter().map(|n| n.to_string()).collect();
    assert_eq!(proxies, ["10.0.0.0/8", "::1/128"]);
    assert!(o.trust_x_forwarded_for);
    assert_eq!(o.store.as_deref(), Some("redb:/x"));
}

#[test]
fn without_the_key_the_default_stays() {
    let o = parse("", &[]).unwrap();
    assert_eq!(o.access_ttl, 3600);
    assert_eq!(o.listen.to_string(), "127.0.0.1:8080");
    assert!(!o.trust_x_forwarded_for);
    assert_eq!(o.store, None);
}

#[test]
fn a_flag_overrides_the_file() {
    let o = parse(
        "access_ttl = 60\ntrusted_proxy = \"10.0.0.1\"",
        &[
            "--access-ttl",
            "120",
            "--trusted-proxy",
            "10.0.0.2,10.0.0.3",
        ],
    )
    .unwrap();
    assert_eq!(o.access_ttl, 120);
    assert_eq!(o.trusted_proxies.len(), 2);
}

#[test]
fn an_environment_variable_overrides_the_file_and_a_flag_the_variable() {
    // The only test that sets this variable.
    std::env::set_var("ISSUER_CONFIG_TEST_LISTEN", "127.0.0.1:7");
    let from_env = parse("listen = \"127.0.0.1:9\"", &[]).unwrap();
    let from_flag = parse("listen = \"127.0.0.1:9\"", &["--listen", "127.0.0.1:6"]).unwrap();
    std::env::remove_var("ISSUER_CONFIG_TEST_LISTEN");
    assert_eq!(from_env.listen.to_string(), "127.0.0.1:7");
    assert_eq!(from_flag.listen.to_string(), "127.0.0.1:6");
}

#[test]
fn an_unknown_key_is_named_with_the_file() {
    for (text, key) in [
        ("lissen = \"x\"", "lissen"),
        ("[listen_table]\na = 1", "listen_table"),
        ("access-ttl = 5", "access-ttl"),
        ("config = \"/x\"", "config"),
        ("help = true", "help"),
    ] {
        let e = parse(text, &[]).unwrap_err();
        assert!(e.contains(&format!("unknown key `{key}`")), "{e}");
        assert!(e.starts_with("/etc/issuer.toml: "), "{e}");
    }
}

#[test]
fn a_bad_value_is_refused_as_its_flag_would_refuse_it() {
    for (text, want) in [
        ("access_ttl = 0", "`access_ttl`: invalid value '0'"),
        (
            "access_ttl = \"soon\"",
            "`access_ttl`: invalid value 'soon'",
        ),
        ("trusted_proxy = [\"nowhere\"]", "not an IP address"),
        ("trust_x_forwarded_for = \"yes\"", "is a switch"),
        ("access_ttl = [1, 2]", "takes one string or number"),
        ("access_ttl = 1.5", "takes one string or number"),
        ("listen = ", "/etc/issuer.toml: "),
    ] {
        let e = ConfigFile::parse(Path::new("/etc/issuer.toml"), text)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                f.apply(Cli::command().find_subcommand("serve").unwrap().clone())
                    .map_err(|e| e.to_string())
            })
            .unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn the_directory_table_is_not_an_option() {
    let f = file("access_ttl = 5\n[directory]\nurls = []\n");
    assert!(parse("access_ttl = 5\n[directory]\nurls = []\n", &[]).is_ok());
    assert!(f
        .directory()
        .unwrap_err()
        .to_string()
        .contains("[directory]"));
    assert!(file("access_ttl = 5").directory().unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// [directory]

struct Dir {
    _tmp: tempfile::TempDir,
    password: PathBuf,
}

fn password_file(mode: u32) -> Dir {
    let tmp = tempfile::tempdir().unwrap();
    let password = tmp.path().join("pw");
    std::fs::write(&password, "s3cret\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(mode)).unwrap();
    Dir {
        _tmp: tmp,
        password,
    }
}

fn directory(d: &Dir, extra: &str) -> Result<DirectoryConfig, String> {
    let text = format!(
        "[directory]\nbind_dn = \"CN=svc\"\nbind_password_file = {:?}\nbase_dn = \"DC=example\"\n{extra}",
        d.password.display().to_string()
    );
    file(&text)
        .directory()
        .map(Option::unwrap)
        .map_err(|e| e.to_string())
}

const AD: &str = "kind = \"active-directory\"\nurls = [\"ldaps://dc1.example.org\", \"ldaps://dc2.example.org:636\"]\n";

#[test]
fn the_kind_sets_the_defaults() {
    let d = password_file(0o600);
    let ad = directory(&d, AD).unwrap();
    assert_eq!(ad.kind, DirectoryKind::ActiveDirectory);
    assert_eq!(ad.user_filter, directory::AD_USER_FILTER);
    assert_eq!((ad.timeout_ms, ad.recheck_seconds), (2000, 60));
    assert_eq!(ad.urls.len(), 2);
    assert_eq!(ad.bind_password.expose(), "s3cret");
    assert_eq!(
        (ad.name_attribute.as_str(), ad.id_attribute.as_str()),
        ("sAMAccountName", "objectGUID")
    );
    let ldap = directory(&d, "kind = \"ldap\"\nurls = [\"ldaps://ldap\"]\n").unwrap();
    assert_eq!(ldap.user_filter, directory::LDAP_USER_FILTER);
    assert_eq!(
        (ldap.name_attribute.as_str(), ldap.id_attribute.as_str()),
        ("uid", "entryUUID")
    );
    let named = "kind = \"ldap\"\nurls = [\"ldaps://ldap\"]\nname_attribute = \"mail\"\n";
    assert_eq!(directory(&d, named).unwrap().name_attribute, "mail");
    let bad = "kind = \"ldap\"\nurls = [\"ldaps://ldap\"]\nid_attribute = \"a)(b\"\n";
    assert!(directory(&d, bad)
        .unwrap_err()
        .contains("not an attribute name"));
}

#[test]
fn the_whole_example_is_read() {
    let d = password_file(0o400);
    let c = directory(
        &d,
        &format!(
            "{AD}user_filter = \"(uid={{username}})\"\nstarttls = false\ntimeout_ms = 500\n\
             recheck_seconds = 30\n[directory.roles]\n\"CN=editors,DC=example\" = \"editor\"\n\
             [directory.claims]\nupn = \"userPrincipalName\"\nemail = \"mail\"\n"
        ),
    )
    .unwrap();
    assert_eq!(c.user_filter, "(uid={username})");
    assert_eq!((c.timeout_ms, c.recheck_seconds), (500, 30));
    assert_eq!(c.roles["CN=editors,DC=example"], "editor");
    assert_eq!(c.claims["email"], "mail");
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("BindPassword(..)"),
        "{shown}"
    );
}

#[test]
fn an_unknown_directory_key_is_named() {
    let d = password_file(0o600);
    let e = directory(&d, &format!("{AD}bind_pasword = \"x\"\n")).unwrap_err();
    assert!(e.contains("unknown field `bind_pasword`"), "{e}");
    assert!(e.starts_with("/etc/issuer.toml: [directory]"), "{e}");
    let e = directory(&d, "kind = \"openldap\"\nurls = [\"ldaps://x\"]\n").unwrap_err();
    assert!(e.contains("openldap"), "{e}");
}

#[test]
fn urls_must_be_ldaps_or_ldap_to_loopback_or_with_starttls() {
    let d = password_file(0o600);
    let with =
        |urls: &str, more: &str| directory(&d, &format!("kind = \"ldap\"\nurls = {urls}\n{more}"));
    for ok in [
        "[\"ldap://127.0.0.1:389\"]",
        "[\"ldap://localhost\"]",
        "[\"ldap://[::1]:389/\"]",
    ] {
        with(ok, "").unwrap();
    }
    with("[\"ldap://dc1.example.org\"]", "starttls = true").unwrap();
    for (urls, want) in [
        ("[]", "`urls` is empty"),
        ("[\"https://dc1\"]", "not an ldaps:// or ldap:// URL"),
        (
            "[\"ldap://dc1.example.org\"]",
            "plain ldap:// only to a loopback host",
        ),
        ("[\"ldaps://\"]", "only scheme, host and port"),
        ("[\"ldaps://dc1/DC=example\"]", "only scheme, host and port"),
    ] {
        let e = with(urls, "").unwrap_err();
        assert!(e.contains(want), "{urls}: {e}");
    }
}

#[test]
fn other_values_are_checked() {
    let d = password_file(0o600);
    for (more, want) in [
        ("user_filter = \"(uid=x)\"", "must contain {username}"),
        ("timeout_ms = 0", "`timeout_ms` must be more than 0"),
        (
            "ca_file = \"/nonexistent/ca.pem\"",
            "`ca_file` /nonexistent/ca.pem",
        ),
        ("[directory.roles]\n\"CN=x\" = \"\"", "[directory.roles]"),
    ] {
        let e = directory(&d, &format!("{AD}{more}\n")).unwrap_err();
        assert!(e.contains(want), "{more}: {e}");
    }
}

#[test]
fn a_password_file_readable_by_others_or_missing_is_refused() {
    for mode in [0o644, 0o640, 0o604] {
        let d = password_file(mode);
        let e = directory(&d, AD).unwrap_err();
        assert!(
            e.contains("lets other users read it; run chmod 600"),
            "{mode:o}: {e}"
        );
    }
    let d = password_file(0o600);
    std::fs::remove_file(&d.password).unwrap();
    assert!(directory(&d, AD)
        .unwrap_err()
        .contains("`bind_password_file`"));
    std::fs::write(&d.password, "\n").unwrap();
    std::fs::set_permissions(&d.password, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(directory(&d, AD).unwrap_err().contains("is empty"));
}

/// RFC 4515: a name is a value in the filter, never filter syntax: `*`, `(`, `)`, `\` and NUL
/// are escaped, everything else (UPNs, non-ASCII) goes as it is.
#[test]
fn names_are_escaped_into_the_user_filter() {
    let d = password_file(0o600);
    let ad = directory(&d, AD).unwrap();
    let f = |name: &str| crate::directory::user_filter(&ad, name);
    assert_eq!(
        f("alice@media.test"),
        "(&(objectClass=user)(|(sAMAccountName=alice@media.test)(userPrincipalName=alice@media.test)))"
    );
    assert_eq!(
        f("*"),
        "(&(objectClass=user)(|(sAMAccountName=\\2a)(userPrincipalName=\\2a)))"
    );
    let injected = f("a)(|(cn=*");
    assert!(
        injected.contains("sAMAccountName=a\\29\\28|\\28cn=\\2a)"),
        "{injected}"
    );
    assert_eq!(injected.matches('(').count(), f("x").matches('(').count());
    assert!(f("a\\b\0").contains("sAMAccountName=a\\5cb\\00)"));
    assert!(f("jürgen").contains("sAMAccountName=jürgen)"));
}

#[test]
fn a_password_in_a_database_url_is_found() {
    use super::url_has_password;
    for with in [
        "postgres://issuer:pw@db:5432/issuer",
        "postgresql://issuer:pw@db/issuer",
        "postgres://issuer@db/issuer?sslmode=require&password=pw",
        "postgres://a:b@c@db/x",
    ] {
        assert!(url_has_password(with), "{with}");
    }
    for without in [
        "postgres://issuer@db:5432/issuer",
        "postgres://db:5432/issuer",
        "postgres://issuer@[::1]:5432/issuer?sslmode=require",
        "redb:/var/lib/issuer",
    ] {
        assert!(!url_has_password(without), "{without}");
    }
}

#[test]
fn a_syntax_error_gives_its_place_not_its_text() {
    let e = ConfigFile::parse(
        Path::new("issuer.toml"),
        "access_ttl = 60\n\nstore = \"postgres://u:hunter2@db/x\" x\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("issuer.toml: TOML syntax, line 3, column 37: "),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
}

#[test]
fn a_trusted_proxy_is_no_wider_than_a_v4_slash_8_or_a_v6_slash_7() {
    for ok in [
        "10.0.0.0/8",
        "192.168.1.7",
        "fc00::/7",
        "::1",
        "::ffff:10.0.0.0/104",
    ] {
        assert!(parse_proxy(ok).is_ok(), "{ok}");
    }
    for wide in [
        "0.0.0.0/0",
        "10.0.0.0/7",
        "::/0",
        "2000::/3",
        "::ffff:0.0.0.0/96",
        "::/8",
    ] {
        let e = parse_proxy(wide).unwrap_err();
        assert!(e.contains("wider than"), "{e}");
    }
}

/// A stand-in for an admin command: `store`, a switch no `serve` option has, and a subcommand
/// taking `access_ttl`.
#[derive(clap::Args, Debug)]
struct Admin {
    #[arg(long, global = true)]
    store: Option<String>,
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    cmd: AdminCmd,
}

#[derive(clap::Subcommand, Debug)]
enum AdminCmd {
    Show {
        #[arg(long)]
        access_ttl: Option<u64>,
    },
}

#[derive(Parser, Debug)]
#[command(name = "t")]
enum Both {
    Serve(Opts),
    Admin(Admin),
}

#[test]
fn an_admin_command_takes_the_keys_it_has_and_leaves_serves() {
    let admin = |text: &str| {
        let cmd = Both::command();
        let serve = cmd.find_subcommand("serve").unwrap().clone();
        let sub = cmd.find_subcommand("admin").unwrap().clone();
        let applied = file(text)
            .apply_to(sub, &serve)
            .map_err(|e| e.to_string())?;
        let matches = cmd
            .mut_subcommand("admin", |_| applied)
            .try_get_matches_from(["t", "admin", "show"])
            .map_err(|e| e.to_string())?;
        match Both::from_arg_matches(&matches).map_err(|e| e.to_string())? {
            Both::Admin(a) => Ok(a),
            Both::Serve(_) => Err("serve".to_owned()),
        }
    };
    let a = admin("store = \"redb:/d\"\naccess_ttl = 900\nlisten = \"127.0.0.1:1\"\n").unwrap();
    assert_eq!(a.store.as_deref(), Some("redb:/d"));
    assert!(!a.json);
    assert!(matches!(
        a.cmd,
        AdminCmd::Show {
            access_ttl: Some(900)
        }
    ));
    // Checked by serve's parser even where the command has no such option.
    let e = admin("listen = \"nowhere\"").unwrap_err();
    assert!(e.contains("`listen`"), "{e}");
    // A key no option of serve has is an error, even one the admin command has.
    let e = admin("json = true").unwrap_err();
    assert!(e.contains("unknown key `json`"), "{e}");
}
