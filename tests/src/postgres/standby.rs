//! A streaming standby of a throwaway cluster, and the failover of the pair: the standby is a
//! `pg_basebackup -R` of the primary (same role and password), on a free loopback port of its
//! own, streaming as [`STANDBY_NAME`]; synchronous when the primary's `synchronous_standby_names`
//! names it, so a commit is acknowledged only once the standby has it on disk.
//! [`PgCluster::kill`] SIGKILLs every process of a cluster (a crashed host), and
//! [`PgCluster::promote`] makes the standby the primary.

use super::{PgCluster, USER};
use anyhow::{bail, Context, Result};
use std::time::Duration;

/// The standby's `cluster_name`, the name its WAL receiver gives the primary (its
/// `application_name`), which `synchronous_standby_names` on the primary names.
pub const STANDBY_NAME: &str = "mms_standby";
/// How long the harness waits for a standby to stream, or a killed cluster's processes to end.
const WAIT: Duration = Duration::from_secs(30);

/// How a standby replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit is acknowledged once the standby has flushed it (`synchronous_commit = on`
    /// with the standby in `synchronous_standby_names`).
    Synchronous,
    /// A commit is acknowledged once the primary has it; the standby follows when it can.
    Asynchronous,
}

impl PgCluster {
    /// A streaming standby of this cluster: a base backup with its replication configuration
    /// (`-R`), started on a free port. With [`Replication::Synchronous`] the primary then waits
    /// for it on every commit; returns once the primary reports it streaming in that mode.
    pub fn start_standby(&self, mode: Replication) -> Result<PgCluster> {
        let mut standby = PgCluster::empty(&self.bin, self.password.clone())?;
        let mut backup = self.command("pg_basebackup");
        backup
            .arg("-D")
            .arg(&standby.dir)
            .args(["-R", "-X", "stream", "-c", "fast", "-w", "-h", "127.0.0.1"])
            .args(["-p", &self.port.to_string(), "-U", USER])
            .env("PGPASSWORD", &self.password);
        self.run(backup, "pg_basebackup")?;
        // The primary's log came along with its files; the standby writes its own.
        let _ = std::fs::remove_file(standby.log_path());
        let conf = standby.dir.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).context("reading postgresql.conf")?;
        text.push_str(&format!("\ncluster_name = '{STANDBY_NAME}'\n"));
        std::fs::write(&conf, text).context("writing postgresql.conf")?;
        standby.start_on_a_free_port()?;
        let names = match mode {
            Replication::Synchronous => format!("'\"{STANDBY_NAME}\"'"),
            Replication::Asynchronous => "''".into(),
        };
        self.psql(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = {names}"
        ))?;
        self.psql("SELECT pg_reload_conf()")?;
        let state = match mode {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let query = format!(
            "SELECT state || ' ' || sync_state FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}'"
        );
        let wanted = format!("streaming {state}");
        let streaming = crate::wait::until_ok_blocking(WAIT, || {
            Ok(Some(self.psql(&query)?).filter(|now| *now == wanted))
        })?;
        if streaming.is_none() {
            bail!(
                "the standby is not streaming {state} ({:?})\n--- standby log:\n{}",
                self.psql(&query)?,
                standby.log()
            );
        }
        Ok(standby)
    }

    /// The multi-host URL of this primary and its `standby`, that only connects to whichever of
    /// them accepts writes: `postgres://app:PW@127.0.0.1:P1,127.0.0.1:P2/postgres?
    /// target_session_attrs=read-write`. It holds the password, as [`PgCluster::url`].
    pub fn failover_url(&self, standby: &PgCluster) -> String {
        self.failover_url_as(USER, &self.password, standby)
    }

    /// [`Self::failover_url`] as the role `user` with `password`.
    pub fn failover_url_as(&self, user: &str, password: &str, standby: &PgCluster) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.port, standby.port
        )
    }

    /// SIGKILLs every process of the server, as a crashed host would lose them: the postmaster
    /// (from its pid file) and its children (its process group, which `pg_ctl` made it lead, and
    /// every process whose parent it is), then waits until none runs. Removes the pid file and
    /// the server's System V shared memory segment, which a SIGKILLed postmaster leaves behind,
    /// so that nothing of it outlives the cluster. Returns the pids killed.
    pub fn kill(&mut self) -> Result<Vec<u32>> {
        let pid_file = self.dir.join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).context("no server runs")?;
        let mut lines = text.lines();
        let postmaster: u32 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("postmaster.pid names no pid")?;
        // Line 7 is "KEY ID" of the shared memory segment.
        let shm_id = lines.nth(5).and_then(|l| l.split_whitespace().nth(1));
        let mut pids = vec![postmaster];
        pids.extend(processes(|stat| {
            stat.ppid == postmaster || stat.pgrp == postmaster
        }));
        pids.sort_unstable();
        pids.dedup();
        if process_stat(postmaster).is_some_and(|s| s.pgrp == postmaster) {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory involved.
            unsafe { libc::kill(-(postmaster as i32), libc::SIGKILL) };
        }
        for pid in &pids {
            // SAFETY: as above, one process.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let left = || pids.iter().copied().find(|p| process_stat(*p).is_some());
        if !crate::wait::until_blocking(WAIT, || left().is_none()) {
            bail!("process {:?} of the killed server still runs", left());
        }
        std::fs::remove_file(&pid_file).context("removing postmaster.pid")?;
        if let Some(id) = shm_id.filter(|id| id.parse::<u64>().is_ok()) {
            let _ = std::process::Command::new("ipcrm")
                .args(["-m", id])
                .stderr(std::process::Stdio::null())
                .status();
        }
        Ok(pids)
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&self) -> Result<()> {
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(&self.dir)
            .args(["-w", "-t", "60", "promote"]);
        self.run(c, "pg_ctl promote")
    }

    /// Makes every transaction on this server read-only from now on, open sessions included
    /// (`default_transaction_read_only`, reloaded): what clients see of a primary demoted in
    /// place, or of a managed server that turned read-only (a full disk), while their
    /// connections stay open. Writes then fail with SQLSTATE `25006`.
    pub fn set_read_only(&self) -> Result<()> {
        self.psql("ALTER SYSTEM SET default_transaction_read_only = on")?;
        self.psql("SELECT pg_reload_conf()")?;
        Ok(())
    }

    /// Stops this primary's WAL senders (SIGSTOP), so its standbys fall behind from now on, as
    /// a slow network or disk would hold them back; [`PgCluster::kill`] ends them.
    pub fn hold_wal_senders(&self) -> Result<()> {
        let out = self.psql("SELECT pid FROM pg_stat_replication")?;
        for line in out.lines() {
            let pid: i32 = line.trim().parse().context("a WAL sender's pid")?;
            // SAFETY: kill(2) on one process of this cluster; no memory involved.
            if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
                bail!("SIGSTOP {pid}: {}", std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// What the harness reads of a process in `/proc/PID/stat`.
struct Stat {
    ppid: u32,
    pgrp: u32,
}

/// A live process's parent and process group (`None`: gone, or a zombie).
fn process_stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID PGRP ...": COMM may hold anything but ends at the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    Some(Stat {
        ppid: fields.next()?.parse().ok()?,
        pgrp: fields.next()?.parse().ok()?,
    })
}

/// The live processes whose stat matches.
fn processes(matches: impl Fn(&Stat) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_stat(*pid).is_some_and(|s| matches(&s)))
        .collect()
}
