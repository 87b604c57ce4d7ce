//! `issuer user ...`: the command line of the user commands, which hashes a user's password
//! here and sends the rest as an [`admin::Command`], and renders the users' listing.

use crate::admin::{read_secret, run_admin, run_on, unexpected};
use crate::data_dir::DataDir;
use crate::out;
use clap::{Args, Subcommand};
use issuer::admin::input::{check_roles, check_user_name, parse_claim};
use issuer::admin::{Command, NewUser, Reply};
use issuer::passwords::hash_password;

#[derive(Args)]
pub struct UserArgs {
    #[command(subcommand)]
    cmd: UserCmd,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Subcommand)]
pub enum UserCmd {
    /// Create a user; the password is read from stdin.
    Add {
        name: String,
        /// A role (repeatable).
        #[arg(long = "role")]
        roles: Vec<String>,
        /// A claim TYPE=VALUE (repeatable).
        #[arg(long = "claim")]
        claims: Vec<String>,
    },
    /// Disable a user (sign-in and refresh fail).
    Disable { name: String },
    /// Enable a user.
    Enable { name: String },
    /// Set a user's password, read from stdin.
    Passwd { name: String },
    /// List users.
    List {
        /// As a JSON array: name, roles, claims, enabled, password_scheme, directory.
        #[arg(long)]
        json: bool,
    },
    /// Delete a user.
    Remove { name: String },
}

/// Runs `issuer user CMD`.
pub fn run(args: UserArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let cmd = match args.cmd {
        UserCmd::Add {
            name,
            roles,
            claims,
        } => {
            // The rules `execute` applies, checked before the password is asked for.
            check_user_name(&name)?;
            check_roles(&roles)?;
            let claims = claims
                .iter()
                .map(|c| parse_claim(c))
                .collect::<Result<Vec<_>, _>>()?;
            let password = read_secret("password")?;
            Command::UserAdd(NewUser {
                name,
                roles,
                claims,
                password_hash: hash_password(&password),
                disabled: false,
            })
        }
        UserCmd::Disable { name } => Command::UserDisable { name },
        UserCmd::Enable { name } => Command::UserEnable { name },
        UserCmd::Passwd { name } => {
            let password = read_secret("password")?;
            Command::UserPasswd {
                name,
                password_hash: hash_password(&password),
            }
        }
        UserCmd::List { json } => return list(dir, json),
        UserCmd::Remove { name } => Command::UserRemove { name },
    };
    run_admin(dir, cmd)
}

/// `user list [--json]`: a table, one line per user, or a JSON array of
/// [`issuer::admin::UserView`].
fn list(dir: &DataDir, json: bool) -> anyhow::Result<()> {
    let users = match run_on(dir, &Command::UserList)? {
        Reply::Users(users) => users,
        other => return Err(unexpected(&other)),
    };
    if json {
        return out::json_document(&users);
    }
    let mut table = String::from("NAME                 ENABLED  ROLES\n");
    for u in &users {
        table += &format!(
            "{:<20} {:<8} {}\n",
            u.name,
            if u.enabled { "yes" } else { "no" },
            u.roles.join(",")
        );
    }
    out::text(&table)
}
