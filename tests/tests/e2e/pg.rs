//! The throwaway PostgreSQL harness (`e2e::postgres`) itself: a cluster starts with the settings
//! the product relies on, serves `psql` from its own bin dir, can be paused and resumed in place,
//! and leaves neither a process, a listening port nor a directory behind.

use crate::{alive, port_open};
use e2e::postgres::PgCluster;
use std::process::Command;

/// `BIN/psql URL -Atc SQL`, as any client would run it: Ok(output) or Err(stderr).
fn psql(pg: &PgCluster, sql: &str) -> Result<String, String> {
    let out = Command::new(pg.bin_dir().join("psql"))
        .arg(pg.url())
        .args(["-Atc", sql])
        .output()
        .expect("psql runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[test]
fn a_throwaway_cluster_starts_serves_and_is_removed() {
    let Some(mut pg) = PgCluster::for_test() else {
        return;
    };
    let dir = pg.data_dir().to_owned();
    let port = pg.port();
    // The URL carries the role's random password; without it the cluster lets nobody in.
    let url = pg.url();
    let password = url
        .strip_prefix("postgres://app:")
        .and_then(|rest| rest.strip_suffix(&format!("@127.0.0.1:{port}/postgres")))
        .unwrap_or_else(|| panic!("{url}"));
    assert!(password.len() >= 32, "{url}");
    let anonymous = Command::new(pg.bin_dir().join("psql"))
        .arg(format!("postgres://app@127.0.0.1:{port}/postgres"))
        .args(["-w", "-Atc", "select 1"])
        .env_remove("PGPASSWORD")
        .output()
        .expect("psql runs");
    assert!(!anonymous.status.success(), "in without a password");
    let log = |pg: &PgCluster| format!("--- {}:\n{}", pg.log_path().display(), pg.log());

    let isolation = psql(&pg, "show transaction_isolation");
    assert_eq!(isolation.as_deref(), Ok("serializable"), "{}", log(&pg));
    assert_eq!(pg.psql("show fsync").unwrap(), "on");
    assert_eq!(pg.psql("select current_user").unwrap(), "app");
    let pid = pg.pid().expect("postmaster.pid");
    assert!(alive(pid));

    pg.pause().unwrap();
    assert!(psql(&pg, "select 1").is_err(), "psql works while paused");
    assert!(!port_open(port), "port {port} still open while paused");
    assert!(dir.exists(), "pause removed the data dir");

    pg.resume().unwrap();
    assert_eq!(pg.port(), port);
    assert_eq!(
        psql(&pg, "show transaction_isolation").as_deref(),
        Ok("serializable"),
        "{}",
        log(&pg)
    );
    let pid = pg.pid().expect("postmaster.pid after resume");

    drop(pg);
    assert!(!dir.exists(), "{} is still there", dir.display());
    assert!(!port_open(port), "port {port} still open after drop");
    assert!(!alive(pid), "postmaster {pid} still runs after drop");
}
