//! The configuration file of `issuer serve` (`--config FILE`, env `ISSUER_CONFIG`): TOML holding
//! any `serve` option under its flag's long name with `_` for `-` (`listen`, `store`,
//! `access_ttl`, `trusted_proxy`, …), and the `[directory]` table ([`DirectoryConfig`]), and the `[[vendor]]` tables
//! ([`ConfigFile::vendors`]). Every
//! admin command takes the same file, and of it the options it has (where the store is, and
//! `access_ttl` for `keys filter-config`).
//!
//! The file's options become the defaults of the command line, so a flag or an environment
//! variable overrides the file, and the file the built-in default. The keys a file may hold are
//! not listed a second time: they are the long names of the `serve` command's arguments, each
//! value checked by that argument's own parser. An unknown key is an error that names it.

pub mod admin_http;
pub mod directory;
pub mod vendor;

pub use directory::{BindPassword, DirectoryConfig, DirectoryKind};

use crate::secret_file::Rule;
use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The table of the directory, the one key that is not a `serve` option.
pub const DIRECTORY: &str = "directory";
/// The tables of trusted vendors (`[[vendor]]`), not `serve` options either.
pub const VENDOR: &str = "vendor";
/// The admin listener's table (`[admin_http]`), not a `serve` option either.
pub const ADMIN_HTTP: &str = "admin_http";
/// The argument naming the file; no key of the file.
pub const CONFIG_ARG: &str = "config";

/// A configuration file that cannot be used; the message names the file, and never quotes its
/// text (a database URL in it may hold a password).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file fails the check of the files the issuer trusts (owner, mode, link, folder), or
    /// cannot be read.
    #[error(transparent)]
    File(#[from] crate::secret_file::FileError),
    /// The file is not UTF-8.
    #[error("{path}: not UTF-8 text")]
    NotText { path: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// Group or others may read the file, and it holds the database's password.
    #[error(
        "{path} holds a database password in its `store` URL (better: keep it in \
         --store-password-file)"
    )]
    Readable {
        path: String,
        #[source]
        source: crate::secret_file::FileError,
    },
    /// The command line, with the file's options, does not parse, or asks for `--help` or
    /// `--version`: clap's error, kept whole ([`clap::Error::kind`]). `issuer` prints it and
    /// exits with its code ([`clap::Error::exit`]); a reload logs its first line, which is this
    /// error's text.
    #[error("{}", first_line(.0))]
    CommandLine(clap::Error),
}

/// The first line of clap's error, without the usage and tips that follow it.
fn first_line(e: &clap::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_owned()
}

/// A configuration file, parsed but not yet applied.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
    /// The options, each under its flag's long name with `_` for `-`.
    options: toml::Table,
    /// The `[directory]` table, if any.
    directory: Option<toml::Value>,
    /// The `[[vendor]]` tables, if any.
    vendors: Option<toml::Value>,
    /// The `[admin_http]` table, if any.
    admin_http: Option<toml::Value>,
}

impl ConfigFile {
    /// Reads and parses `path`, which must pass the check of the files the issuer trusts
    /// ([`crate::secret_file`], [`Rule::Config`]: its owner, folder and link target, and no
    /// writing by group or others), and not be readable by group or others either if its
    /// `store` URL holds a password.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let checked = crate::secret_file::open("configuration file", path, Rule::Config)?;
        let private = checked.require_private();
        let bytes = checked.read(crate::secret_file::READ_LIMIT)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| ConfigError::NotText {
            path: path.display().to_string(),
        })?;
        let file = Self::parse(path, text)?;
        match private {
            Err(source) if file.store_password() => Err(ConfigError::Readable {
                path: path.display().to_string(),
                source,
            }),
            _ => Ok(file),
        }
    }

    /// Parses `text`, the contents of `path` (which error messages name). A syntax error is
    /// told by its line, column and reason, never by the text there.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let mut options: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.display().to_string(),
            message: syntax_error(text, &e),
        })?;
        let directory = options.remove(DIRECTORY);
        let vendors = options.remove(VENDOR);
        let admin_http = options.remove(ADMIN_HTTP);
        Ok(Self {
            path: path.to_owned(),
            options,
            directory,
            vendors,
            admin_http,
        })
    }

    /// Whether the `store` option is a PostgreSQL URL with a password (`USER:PASSWORD@` or a
    /// `password` parameter).
    fn store_password(&self) -> bool {
        self.options
            .get("store")
            .and_then(toml::Value::as_str)
            .is_some_and(url_has_password)
    }

    /// The file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, message: impl std::fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.display().to_string(),
            message: message.to_string(),
        }
    }

    /// `cmd` (the `serve` command) with the file's options as the defaults of its arguments.
    /// A key that names no option, or a value its option would refuse, is an error. As clap does
    /// not count a default as given, no option of `cmd` then requires another (`--tls-cert` on
    /// the command line may pair with `tls_key` in the file): the command checks its pairs itself.
    pub fn apply(&self, cmd: Command) -> Result<Command, ConfigError> {
        let serve = cmd.clone();
        self.apply_to(cmd, &serve)
    }

    /// `cmd` (any subcommand, and its own subcommands) with the file's options as the defaults
    /// of the arguments it has, as [`ConfigFile::apply`] does for `serve`: a key must name an
    /// option of `serve` (else it is an error), and one `cmd` lacks is left for `serve`.
    pub fn apply_to(&self, mut cmd: Command, serve: &Command) -> Result<Command, ConfigError> {
        if cmd.get_name() == serve.get_name() {
            cmd = cmd.mut_args(|a| a.requires(clap::builder::Resettable::<clap::Id>::Reset));
        }
        for (key, value) in &self.options {
            let known = option_arg(serve, key).ok_or_else(|| {
                self.error(format!(
                    "unknown key `{key}` (the keys are the options of `issuer serve --help`, \
                     `_` for `-`, the [{DIRECTORY}] and [{ADMIN_HTTP}] tables and [[{VENDOR}]] tables)"
                ))
            })?;
            let values = self.values(key, value, known)?;
            check_values(known, &values).map_err(|e| self.error(format!("`{key}`: {e}")))?;
            if let Some(id) = option_arg(&cmd, key).map(|a| a.get_id().clone()) {
                cmd = cmd.mut_arg(id, |a| a.default_values(values));
            }
        }
        let subs: Vec<String> = cmd
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        for name in subs {
            let sub = cmd.find_subcommand(&name).cloned().expect("subcommand");
            let applied = self.apply_to(sub, serve)?;
            cmd = cmd.mut_subcommand(name, |_| applied);
        }
        Ok(cmd)
    }

    /// The value of `key` as the command line's strings for `arg`.
    fn values(
        &self,
        key: &str,
        value: &toml::Value,
        arg: &Arg,
    ) -> Result<Vec<String>, ConfigError> {
        let action = arg.get_action();
        match value {
            toml::Value::Boolean(b) if matches!(action, ArgAction::SetTrue) => {
                Ok(vec![b.to_string()])
            }
            _ if matches!(action, ArgAction::SetTrue) => {
                Err(self.error(format!("`{key}` is a switch: true or false")))
            }
            toml::Value::Array(items) if matches!(action, ArgAction::Append) => items
                .iter()
                .map(scalar)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.error(format!("`{key}`: a list of strings or numbers"))),
            other => scalar(other)
                .map(|s| vec![s])
                .ok_or_else(|| self.error(format!("`{key}` takes one string or number"))),
        }
    }

    /// The validated `[directory]` table, if the file has one (this reads its password file).
    pub fn directory(&self) -> Result<Option<DirectoryConfig>, ConfigError> {
        self.directory
            .clone()
            .map(DirectoryConfig::from_toml)
            .transpose()
            .map_err(|e| self.error(format!("[{DIRECTORY}]: {e}")))
    }
}

impl ConfigFile {
    /// The trusted vendors of the `[[vendor]]` tables, their key sets read (none without any).
    pub fn vendors(&self) -> Result<crate::vendor::Trust, ConfigError> {
        let folder = self.path.parent().unwrap_or(Path::new("."));
        self.vendors
            .clone()
            .map(|v| vendor::trust_of(v, folder))
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.error(format!("[[{VENDOR}]]: {e}")))
    }

    /// The validated `[admin_http]` table, if the file has one.
    pub fn admin_http(&self) -> Result<Option<admin_http::AdminHttpConfig>, ConfigError> {
        let folder = self.path.parent().unwrap_or(Path::new("."));
        self.admin_http
            .clone()
            .map(|v| admin_http::admin_http_of(v, folder))
            .transpose()
            .map_err(|e| self.error(format!("[{ADMIN_HTTP}]: {e}")))
    }
}

/// The option of `cmd` whose long name is `key` with `-` for `_`.
fn option_arg<'c>(cmd: &'c Command, key: &str) -> Option<&'c Arg> {
    let long = key.replace('_', "-");
    (!key.contains('-') && !["help", "version", CONFIG_ARG].contains(&long.as_str()))
        .then(|| {
            cmd.get_arguments()
                .find(|a| a.get_long() == Some(long.as_str()))
        })
        .flatten()
}

/// A TOML scalar as a command-line string.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Whether `arg`'s parser accepts `values`, as it would on the command line; else clap's reason.
fn check_values(arg: &Arg, values: &[String]) -> Result<(), String> {
    let Some(long) = arg
        .get_long()
        .filter(|_| !matches!(arg.get_action(), ArgAction::SetTrue))
    else {
        return Ok(());
    };
    let mut probe = Arg::new("value")
        .long(long.to_owned())
        .value_parser(arg.get_value_parser().clone())
        .action(ArgAction::Append);
    if let Some(d) = arg.get_value_delimiter() {
        probe = probe.value_delimiter(d);
    }
    let argv = values.iter().map(|v| format!("--{long}={v}"));
    Command::new("config")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from(argv)
        .map(drop)
        .map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_owned()
        })
}

/// Which subcommands of a command line take the configuration file, and whose options its keys
/// are.
#[derive(Debug, Clone, Copy)]
pub struct FileUse<'a> {
    /// The subcommand every key of the file is an option of (`serve`).
    pub keys_of: &'a str,
    /// The subcommands that take no file: the `config` argument is not read for them.
    pub not_for: &'a [&'a str],
}

/// Parses the command line `args` of `C`, whose `config` argument (a global one, or one of the
/// subcommand given) names a configuration file: a first, lenient pass finds the file; the real
/// one parses with the file's options as the defaults of the subcommand given (and its
/// subcommands), each key checked against the options of [`FileUse::keys_of`], the subcommand
/// every key is an option of (an admin command takes the keys it has, `data_dir`, `store`, …,
/// and leaves the rest). Returns the parsed command line and the file. Never exits: a
/// command-line error, `--help` and `--version` are [`ConfigError::CommandLine`], for the
/// binary to print and exit with.
pub fn parse_args<C: CommandFactory + FromArgMatches>(
    args: &[OsString],
    using: &FileUse<'_>,
) -> Result<(C, Option<ConfigFile>), ConfigError> {
    let (cmd, file) = with_file(args, C::command(), using)?;
    let matches = cmd
        .try_get_matches_from(args)
        .map_err(ConfigError::CommandLine)?;
    let parsed = C::from_arg_matches(&matches).map_err(ConfigError::CommandLine)?;
    Ok((parsed, file))
}

/// [`parse_args`] again, as a reload does: the same command line with the file as it is now.
pub fn reparse_args<C: CommandFactory + FromArgMatches>(
    args: &[OsString],
    using: &FileUse<'_>,
) -> Result<(C, Option<ConfigFile>), ConfigError> {
    parse_args(args, using)
}

/// `cmd` with the options of the file that `args` name (with the `config` argument, global or of
/// the subcommand given or one of its subcommands) as the defaults of that subcommand, each key
/// checked against the options of [`FileUse::keys_of`]; and the file. None for a subcommand
/// of [`FileUse::not_for`].
fn with_file(
    args: &[OsString],
    mut cmd: Command,
    using: &FileUse<'_>,
) -> Result<(Command, Option<ConfigFile>), ConfigError> {
    let first = cmd.clone().ignore_errors(true).try_get_matches_from(args);
    let given = first.ok().and_then(|m| {
        let (name, mut sub) = m.subcommand()?;
        let mut path = config_of(sub);
        while let Some((_, deeper)) = sub.subcommand() {
            sub = deeper;
            path = config_of(sub).or(path);
        }
        Some((name.to_owned(), path?))
    });
    let Some((name, path)) = given.filter(|(name, _)| !using.not_for.contains(&name.as_str()))
    else {
        return Ok((cmd, None));
    };
    let file = ConfigFile::read(&path)?;
    let serve = cmd.find_subcommand(using.keys_of).cloned().expect("serve");
    let sub = cmd.find_subcommand(&name).cloned().expect("subcommand");
    let applied = file.apply_to(sub, &serve)?;
    cmd = cmd.mut_subcommand(name, |_| applied);
    Ok((cmd, Some(file)))
}

/// The configuration file `matches` name with their `config` argument, if they have one.
fn config_of(matches: &clap::ArgMatches) -> Option<PathBuf> {
    matches
        .try_get_one::<PathBuf>(CONFIG_ARG)
        .ok()
        .flatten()
        .cloned()
}

/// A TOML syntax error as `line L, column C: REASON`, without the text at that place.
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e.message().trim_end();
    let Some(at) = e.span().map(|s| s.start.min(text.len())) else {
        return format!("TOML syntax: {reason}");
    };
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("TOML syntax, line {line}, column {column}: {reason}")
}

/// Whether `s`, a PostgreSQL URL, holds a password: in its user information (`USER:PASSWORD@`)
/// or as a `password` parameter.
pub fn url_has_password(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("postgres://")
        .or_else(|| s.strip_prefix("postgresql://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let in_userinfo = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = rest.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|p| {
            p.split('=')
                .next()
                .is_some_and(|k| k.eq_ignore_ascii_case("password"))
        })
    });
    in_userinfo || in_query
}

/// The widest range a trusted proxy may be: an IPv4 /8, an IPv6 /7 (`fc00::/7`, the unique
/// local addresses). A wider one holds much of the internet, whose `X-Forwarded-For` would then
/// be believed.
pub const WIDEST_PROXY_PREFIX: (u8, u8) = (8, 7);

/// A `--trusted-proxy` (`trusted_proxy`): [`parse_net`], and no wider than
/// [`WIDEST_PROXY_PREFIX`] (IPv4-mapped IPv6 ranges judged as the IPv4 they map).
pub fn parse_proxy(s: &str) -> Result<ipnet::IpNet, String> {
    let net = parse_net(s)?;
    let too_wide = match net {
        ipnet::IpNet::V4(n) => n.prefix_len() < WIDEST_PROXY_PREFIX.0,
        ipnet::IpNet::V6(n) => {
            // Every IPv4 address, as a dual-stack listener sees it.
            let v4 = std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0);
            if n.network().to_ipv4_mapped().is_some() {
                n.prefix_len() < 96 + WIDEST_PROXY_PREFIX.0
            } else {
                n.prefix_len() < WIDEST_PROXY_PREFIX.1 || n.contains(&v4)
            }
        }
    };
    if too_wide {
        return Err(format!(
            "{s} is wider than an IPv4 /8 or an IPv6 /7: X-Forwarded-For would be believed from \
             most of the internet, and a guesser could choose the address the sign-in back-off \
             counts; list the proxies' own addresses"
        ));
    }
    Ok(net)
}

/// `s` as an IP network: a CIDR range, or an address (a network of one).
pub fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{s:?} is not an IP address or CIDR range"))
}

#[cfg(test)]
mod tests;
