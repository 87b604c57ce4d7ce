//! `issuer dpop key|proof|thumbprint`: a DPoP key and proofs for scripts and curl (the
//! README's walk-through, `docs/dpop.md`), as a client makes them. No store, no configuration:
//! the private key is a JWK file of mode 0600 the command creates and never overwrites.

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum DpopCmd {
    /// Make a private key, write it as a JWK to a new file (0600) and print its thumbprint.
    Key {
        /// The new file.
        #[arg(long)]
        out: PathBuf,
        /// The signature algorithm.
        #[arg(long, value_enum, default_value_t = Alg::Es256)]
        alg: Alg,
    },
    /// Print a fresh proof for one request (a random jti, the time now).
    Proof {
        /// The private key file (`issuer dpop key`).
        #[arg(long)]
        key: PathBuf,
        /// The request's method.
        #[arg(long)]
        method: String,
        /// The request's URL (query and fragment are left out of the proof).
        #[arg(long)]
        url: String,
        /// The access token sent with the proof (its hash becomes `ath`); none at the token
        /// endpoint.
        #[arg(long)]
        token: Option<String>,
        /// The server's nonce (`DPoP-Nonce`), when it asked for one.
        #[arg(long)]
        nonce: Option<String>,
    },
    /// Print the key's RFC 7638 thumbprint (what a bound token's `cnf.jkt` holds).
    Thumbprint {
        /// The private key file.
        #[arg(long)]
        key: PathBuf,
    },
}

/// `--alg`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Alg {
    /// ECDSA P-256.
    #[value(name = "ES256")]
    Es256,
    /// Ed25519.
    #[value(name = "EdDSA")]
    EdDsa,
}

pub fn run(cmd: DpopCmd) -> anyhow::Result<()> {
    match cmd {
        DpopCmd::Key { out, alg } => {
            let key = new_key(alg)?;
            write_new(&out, key.private_jwk().as_bytes())?;
            println!("{}", key.jkt_b64());
        }
        DpopCmd::Proof {
            key,
            method,
            url,
            token,
            nonce,
        } => {
            let key = read_key(&key)?;
            let htu = url.split(['?', '#']).next().unwrap_or_default();
            let jti = hex::encode(issuer::secrets::random16());
            let proof = key.proof(&ProofClaims {
                htm: &method,
                htu,
                jti: &jti,
                iat: issuer::app::now(),
                access_token: token.as_deref(),
                nonce: nonce.as_deref(),
            });
            println!("{proof}");
        }
        DpopCmd::Thumbprint { key } => println!("{}", read_key(&key)?.jkt_b64()),
    }
    Ok(())
}

fn new_key(alg: Alg) -> anyhow::Result<ProofKey> {
    match alg {
        Alg::EdDsa => Ok(ProofKey::ed25519(*issuer::secrets::random32())),
        // A random scalar is below the group order but for a chance of about 2^-32.
        Alg::Es256 => (0..8)
            .find_map(|_| ProofKey::es256(*issuer::secrets::random32()))
            .context("no valid P-256 key from the random source"),
    }
}

/// The private key in `path`, a file that passes the check of secret files
/// (`issuer::secret_file`: 0600 or stricter, as `issuer dpop key` writes it).
fn read_key(path: &Path) -> anyhow::Result<ProofKey> {
    let bytes = issuer::secret_file::read("DPoP key", path)?;
    let text = std::str::from_utf8(&bytes).ok().unwrap_or_default();
    ProofKey::from_private_jwk(text).map_err(|_| {
        anyhow::anyhow!(
            "{} is not a private EC P-256 or OKP Ed25519 JWK (make one with `issuer dpop key`)",
            path.display()
        )
    })
}

fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            bail!(
                "{} exists: a key is written to a new file, never over one",
                path.display()
            )
        }
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    };
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}
