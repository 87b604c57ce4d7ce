//! `issuer vendor keygen|issue|revoke`: the vendor's side of client credential sets
//! (`docs/clients.md`). The vendor makes a signing key once, issues one credential set per
//! application (its client id, a generated secret and the software statement an installation
//! imports), and revokes sets by signing a list of client ids. No data dir, store or
//! configuration is opened or created: these run on the vendor's own machine.

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use issuer::vendor::keys::public_key_set;
use issuer::vendor::{Impersonation, RevocationList, Statement, VendorGrant};
use shared::dpop::sign::ProofKey;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The private key's file in `keygen`'s folder.
pub const PRIVATE_FILE: &str = "vendor-key.jwk";
/// The public JWK set's file in `keygen`'s folder: what installations trust.
pub const PUBLIC_FILE: &str = "vendor-keys.json";

#[derive(Subcommand)]
pub enum VendorCmd {
    /// Make a vendor signing key: DIR/vendor-key.jwk (private, 0600) and DIR/vendor-keys.json
    /// (the public JWK set installations name in a `[[vendor]]` table).
    Keygen {
        /// The folder to write to (made 0700 if absent); files in it are never overwritten.
        #[arg(long)]
        out: PathBuf,
        /// The signature algorithm.
        #[arg(long, value_enum, default_value_t = Alg::EdDsa)]
        alg: Alg,
    },
    /// Issue a credential set: print one JSON object with client_id, client_secret and the
    /// software_statement (the application's maker gets it all; installations the statement).
    Issue(IssueArgs),
    /// Print a signed revocation list of these client ids, for installations to import.
    Revoke {
        /// The private key (vendor-key.jwk).
        #[arg(long)]
        key: PathBuf,
        /// The client ids revoked.
        #[arg(required = true)]
        client_ids: Vec<String>,
    },
}

#[derive(Args)]
pub struct IssueArgs {
    /// The private key (vendor-key.jwk).
    #[arg(long)]
    key: PathBuf,
    /// The application's name.
    #[arg(long)]
    name: String,
    /// The software's id, the same in every set of it [default: the name, lowercase, with `-`].
    #[arg(long)]
    software_id: Option<String>,
    /// The client id [default: the software id and 16 random hex digits].
    #[arg(long)]
    client_id: Option<String>,
    /// Comma-separated grants it may be given: password, refresh_token, client_credentials.
    #[arg(long, value_delimiter = ',', required = true)]
    grants: Vec<String>,
    /// The impersonation it may be given with client_credentials.
    #[arg(long, value_parser = parse_impersonation, default_value = "none")]
    impersonation: Impersonation,
    /// When the statement expires: a date (2027-06-30, midnight UTC), RFC 3339, or days from
    /// now (365d).
    #[arg(long)]
    expires: String,
}

/// `--alg`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Alg {
    /// Ed25519.
    #[value(name = "EdDSA")]
    EdDsa,
    /// ECDSA P-256.
    #[value(name = "ES256")]
    Es256,
}

pub fn run(cmd: VendorCmd) -> anyhow::Result<()> {
    match cmd {
        VendorCmd::Keygen { out, alg } => keygen(&out, alg),
        VendorCmd::Issue(args) => issue(&args),
        VendorCmd::Revoke { key, client_ids } => {
            for id in &client_ids {
                if !shared::rules::client_id_ok(id) {
                    bail!("{id:?} is not a client id");
                }
            }
            let list = RevocationList {
                revoked_client_ids: client_ids,
                iat: issuer::app::now(),
            };
            println!("{}", list.sign(&read_key(&key)?));
            Ok(())
        }
    }
}

fn keygen(out: &Path, alg: Alg) -> anyhow::Result<()> {
    if !out.is_dir() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(out)
            .with_context(|| format!("creating {}", out.display()))?;
    }
    let key = match alg {
        Alg::EdDsa => ProofKey::ed25519(*issuer::secrets::random32()),
        // A random scalar is below the group order but for a chance of about 2^-32.
        Alg::Es256 => (0..8)
            .find_map(|_| ProofKey::es256(*issuer::secrets::random32()))
            .context("no valid P-256 key from the random source")?,
    };
    let (private, public) = (out.join(PRIVATE_FILE), out.join(PUBLIC_FILE));
    for path in [&private, &public] {
        if path.exists() {
            bail!("{} exists: a key is never written over", path.display());
        }
    }
    write_new(&private, key.private_jwk().as_bytes(), 0o600)?;
    write_new(&public, public_key_set(&key).as_bytes(), 0o644)?;
    println!("private key: {} (keep it secret)", private.display());
    println!(
        "public keys: {} (give it to installations)",
        public.display()
    );
    println!("kid: {}", issuer::vendor::keys::kid_of(&key));
    Ok(())
}

fn issue(args: &IssueArgs) -> anyhow::Result<()> {
    let key = read_key(&args.key)?;
    let now = issuer::app::now();
    let exp = parse_expiry(&args.expires, now)?;
    if exp <= now {
        bail!("--expires {} is not in the future", args.expires);
    }
    let grants = args
        .grants
        .iter()
        .map(|g| {
            VendorGrant::parse(g.trim()).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown grant {g:?}: use password, refresh_token or client_credentials"
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let software_id = args.software_id.clone().unwrap_or_else(|| slug(&args.name));
    let client_id = args.client_id.clone().unwrap_or_else(|| {
        let tag = hex::encode(&issuer::secrets::random16()[..8]);
        format!("{software_id}-{tag}")
    });
    let secret = issuer::secrets::new_client_secret();
    let statement = Statement {
        client_id: client_id.clone(),
        client_name: args.name.clone(),
        software_id,
        client_secret_hash: issuer::passwords::hash_password(&secret),
        grant_types: grants,
        impersonation: args.impersonation,
        iat: now,
        exp,
    };
    let jws = statement.sign(&key);
    // The same checks an installation makes, so a set that would be refused is never printed.
    let mut trust = issuer::vendor::Trust::default();
    trust.add(
        "self",
        issuer::vendor::parse_key_set(&public_key_set(&key))?,
    );
    issuer::vendor::statement::verify(&jws, &trust, now)
        .map_err(|e| anyhow::anyhow!("the statement would be refused: {e}"))?;
    let set = serde_json::json!({
        "client_id": client_id,
        "client_secret": secret.as_str(),
        "software_statement": jws,
        "client_name": statement.client_name,
        "software_id": statement.software_id,
        "grant_types": statement.grant_types,
        "impersonation": statement.impersonation,
        "iat": now,
        "exp": exp,
    });
    println!("{}", serde_json::to_string_pretty(&set)?);
    Ok(())
}

fn parse_impersonation(s: &str) -> Result<Impersonation, String> {
    Impersonation::parse(s).ok_or_else(|| format!("{s:?}: use none, claims or legacy"))
}

/// `--expires`: `365d`, a date, or RFC 3339.
fn parse_expiry(s: &str, now: u64) -> anyhow::Result<u64> {
    if let Some(days) = s.strip_suffix('d').and_then(|d| d.parse::<u64>().ok()) {
        return Ok(now + days * 86_400);
    }
    let full = if s.len() == 10 {
        format!("{s}T00:00:00Z")
    } else {
        s.to_owned()
    };
    super::audit::parse_rfc3339(&full)
        .with_context(|| format!("{s:?} is not a date (2027-06-30), RFC 3339 or days (365d)"))
}

/// The name lowercase, runs of other characters than letters and digits as one `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// The private key in `path`, checked as every secret file is (0600 or stricter).
fn read_key(path: &Path) -> anyhow::Result<ProofKey> {
    let bytes = issuer::secret_file::read("vendor key", path)?;
    let text = std::str::from_utf8(&bytes).ok().unwrap_or_default();
    ProofKey::from_private_jwk(text).map_err(|_| {
        anyhow::anyhow!(
            "{} is not a vendor's private key (make one with `issuer vendor keygen`)",
            path.display()
        )
    })
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_takes_days_dates_and_rfc3339() {
        assert_eq!(parse_expiry("2d", 100).unwrap(), 100 + 2 * 86_400);
        assert_eq!(parse_expiry("2000-02-29", 0).unwrap(), 951_782_400);
        assert_eq!(
            parse_expiry("2023-11-14T22:13:20Z", 0).unwrap(),
            1_700_000_000
        );
        assert!(parse_expiry("soon", 0).is_err());
    }

    #[test]
    fn slugs_are_lowercase_words_joined_by_dashes() {
        assert_eq!(slug("Acme Uploader 2!"), "acme-uploader-2");
        assert_eq!(slug("  Ünïcode  app "), "ünïcode-app");
    }
}
