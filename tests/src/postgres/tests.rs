//! The throwaway PostgreSQL harness (`crate::postgres`) itself: a cluster starts with the settings
//! the product relies on, serves `psql` from its own bin dir, can be paused and resumed in place,
//! and leaves neither a process, a listening port nor a directory behind; a synchronous standby
//! has every acknowledged commit, and takes over once the primary is killed and it is promoted.

use crate::postgres::standby::STANDBY_NAME;
use crate::postgres::{PgCluster, Replication};
use crate::{alive, port_open};
use std::process::Command;

/// `BIN/psql URL -Atc SQL`, as any client would run it: Ok(output) or Err(stderr).
fn psql(pg: &PgCluster, sql: &str) -> Result<String, String> {
    psql_with(pg, sql, "")
}

/// `psql -Atc SQL` on `pg` with `PGOPTIONS` set to `options`: its output, or its error.
fn psql_with(pg: &PgCluster, sql: &str, options: &str) -> Result<String, String> {
    let out = Command::new(pg.bin_dir().join("psql"))
        .arg(pg.url())
        .args(["-Atc", sql])
        .env("PGOPTIONS", options)
        .output()
        .expect("psql runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[test]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
fn a_throwaway_cluster_starts_serves_and_is_removed() {
    let mut pg = PgCluster::for_test();
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

/// [`psql`] on a hot standby, which refuses SERIALIZABLE (the clusters' default): REPEATABLE READ.
fn on_standby(pg: &PgCluster, sql: &str) -> Result<String, String> {
    psql_with(
        pg,
        sql,
        "-c default_transaction_isolation=repeatable\\ read",
    )
}

#[test]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
fn a_synchronous_standby_streams_and_takes_over_from_a_killed_primary() {
    let mut primary = PgCluster::for_test();
    let standby = primary.start_standby(Replication::Synchronous).unwrap();
    assert_ne!(standby.port(), primary.port());
    let names = primary.psql("show synchronous_standby_names").unwrap();
    assert_eq!(names, format!("\"{STANDBY_NAME}\""));
    // A commit acknowledged by the primary is on the standby already.
    primary
        .psql("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
        .unwrap();
    assert_eq!(on_standby(&standby, "SELECT v FROM t").as_deref(), Ok("42"));
    let write = on_standby(&standby, "INSERT INTO t VALUES (1)");
    assert!(
        write
            .as_ref()
            .is_err_and(|e| e.contains("read-only transaction")),
        "{write:?}"
    );

    let (primary_port, primary_dir) = (primary.port(), primary.data_dir().to_owned());
    let killed = primary.kill().unwrap();
    assert!(
        killed.len() > 3,
        "the postmaster and its children: {killed:?}"
    );
    assert!(killed.iter().all(|p| !alive(*p)), "{killed:?}");
    assert!(!port_open(primary_port), "the killed primary still listens");
    // Only the multi-host URL's second host is left, and it refuses writes until promoted.
    let url = primary.failover_url(&standby);
    assert!(
        url.ends_with("/postgres?target_session_attrs=read-write"),
        "{url}"
    );
    let read_write = |url: &str| {
        Command::new(standby.bin_dir().join("psql"))
            .arg(url)
            .args(["-w", "-Atc", "SELECT count(*) FROM t"])
            .output()
            .expect("psql runs")
    };
    assert!(
        !read_write(&url).status.success(),
        "a read-write session on a standby"
    );
    standby.promote().unwrap();
    let out = read_write(&url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    standby.psql("INSERT INTO t VALUES (1)").unwrap();
    assert_eq!(standby.psql("SELECT count(*) FROM t").unwrap(), "2");
    // Read-only in place, as a primary demoted under its clients.
    standby.set_read_only().unwrap();
    let write = standby.psql("INSERT INTO t VALUES (2)");
    assert!(
        write
            .as_ref()
            .is_err_and(|e| e.to_string().contains("read-only transaction")),
        "{write:?}"
    );

    let (standby_dir, standby_pid) = (standby.data_dir().to_owned(), standby.pid().unwrap());
    drop(primary);
    drop(standby);
    assert!(
        !primary_dir.exists() && !standby_dir.exists(),
        "a data dir is left"
    );
    assert!(!alive(standby_pid), "the standby still runs after drop");
}
