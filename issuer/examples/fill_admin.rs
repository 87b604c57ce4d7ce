//! Benchmark fixture, not part of the product: a backup of a store at the size the admin API's
//! lists are measured at (`cargo xtask bench --admin`). It reads a backup (a small store holding
//! the benchmark's administrator), adds `USERS` users `user-000000`…, `CLIENTS` clients
//! `client-00000`… and `FAMILIES` live refresh token families spread evenly over them, with as
//! many audit events (token exchanges of those users by those clients over the last 30 days),
//! and writes the whole as a new backup, which `issuer restore` loads into a data dir or a PostgreSQL
//! database as it would any other.
//!
//! `cargo run --release -p issuer --example fill_admin -- IN OUT USERS CLIENTS FAMILIES`

use issuer::store::family::Family;
use issuer::store::redb::contents::{read_backup, write_backup};
use issuer::store::{AuditAction, AuditEvent, ClientRecord, GrantKind, UserRecord};
use sha2::{Digest, Sha256};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Instant, SystemTime};
use zeroize::Zeroizing;

fn user(now: u64) -> UserRecord {
    UserRecord {
        password_hash: String::new(),
        disabled: false,
        roles: vec!["viewer".into()],
        claims: vec![("email".into(), "someone@example.com".into())],
        created_at: now,
        password_changed_at: None,
        disabled_at: None,
        directory: None,
    }
}

fn client(i: u64, now: u64) -> ClientRecord {
    ClientRecord {
        secret_hash: hex::encode([0u8; 32]),
        active: !i.is_multiple_of(10),
        grants: vec![GrantKind::Password],
        impersonate: false,
        impersonate_claim_types: vec![],
        edge: false,
        dpop: Default::default(),
        created_at: now,
        deactivated_at: None,
        vendor: None,
        exchange: None,
    }
}

/// A family id: the first 16 bytes of the SHA-256 of its number (spread as random ids are).
fn family_id(i: u64) -> [u8; 16] {
    let digest = Sha256::digest(i.to_be_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, users, clients, families] = args.as_slice() else {
        anyhow::bail!("usage: fill_admin IN OUT USERS CLIENTS FAMILIES");
    };
    let (users, clients, families): (u64, u64, u64) =
        (users.parse()?, clients.parse()?, families.parse()?);
    let started = Instant::now();
    let now = shared::time::unix_seconds(SystemTime::now());
    let mut contents = read_backup(std::path::Path::new(input))?;
    let record = Zeroizing::new(serde_json::to_string(&user(now))?);
    for i in 0..users {
        contents
            .users
            .push((format!("user-{i:06}"), record.clone()));
    }
    contents.users.sort_by(|a, b| a.0.cmp(&b.0));
    for i in 0..clients {
        let rec = Zeroizing::new(serde_json::to_string(&client(i, now))?);
        contents.clients.push((format!("client-{i:05}"), rec));
    }
    contents.clients.sort_by(|a, b| a.0.cmp(&b.0));
    for i in 0..families {
        let fam = Family {
            client: format!("client-{:05}", i % clients.max(1)),
            user: format!("user-{:06}", i % users.max(1)),
            created_at: now,
            absolute_expires_at: now + 90 * 86_400,
            expires_at: now + 14 * 86_400,
            generation: 0,
            rotated_at: None,
            revoked_at: None,
            jkt: None,
        };
        contents.families.push((family_id(i), fam));
    }
    contents.families.sort_by_key(|(id, _)| *id);
    let span = 30 * 86_400;
    for i in 0..families {
        let at = now - span + i * span / families.max(1);
        let user = format!("user-{:06}", i % users.max(1));
        let after = serde_json::json!({ "subject": user, "actors": [format!("client-{:05}", i % clients.max(1))] });
        let e = AuditEvent::new(
            at,
            &format!("client-{:05}", i % clients.max(1)),
            AuditAction::Exchange,
            &user,
            serde_json::Value::Null,
            after,
        );
        contents.audit.push((at, serde_json::to_string(&e)?));
    }
    // A backup holds secrets: `issuer restore` reads only one that is the owner's alone.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(output)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    write_backup(&contents, &mut out, now)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    println!(
        "{} written in {:.1} s",
        contents.describe(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
