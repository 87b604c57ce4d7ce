//! Directory sign-ins (their targets): password grants of users from a throwaway OpenLDAP (LDAPS,
//! pooled connections, roles through two levels of nested groups) beside users of the local store
//! (Argon2id), 32 clients each (one user per connection, each its own address through
//! `X-Forwarded-For`, as behind Envoy), interleaved round after round: flat out (the throughput
//! at saturation, where latency is all queueing: 32 clients over the rate), and the directory
//! paced to 1,000 sign-ins/s in all (the latency at the rate the target names); the issuer's
//! memory after.

use super::issuer::lua_sign_in;
use super::{rss_kib, wrk, Results, Sample, Settings};
use anyhow::Result;
use base64::Engine as _;
use e2e::issuer::{issuer_admin_on, start_issuer_pinned, StoreArgs};
use e2e::slapd::Slapd;
use e2e::DirectoryTable;
use std::fmt::Write as _;
use std::path::Path;

/// Concurrent clients of each load.
pub(super) const CLIENTS: usize = 32;
/// The loads, in the order they run.
pub(super) const LOADS: [&str; 3] = [
    "directory (OpenLDAP, LDAPS), flat out",
    "directory, paced to 1,000/s in all",
    "local store (Argon2id), flat out",
];
/// Per load: the user name prefix, and each client's pause between sign-ins (ms).
const SCRIPTS: [(&str, u64); 3] = [("dir", 0), ("dir", PACED_DELAY_MS), ("local", 0)];
/// 32 clients each pausing this long between sign-ins come to a little over 1,000 sign-ins/s
/// (each sign-in takes a few ms besides).
const PACED_DELAY_MS: u64 = 27;
const PASSWORD: &str = "bench-password";
/// The targets: at least this many directory sign-ins a second, 32 clients flat out…
const TARGET_PER_SECOND: f64 = 1_000.0;
/// …and a p99 of at most this at that rate.
const TARGET_P99_MS: f64 = 25.0;

/// Adds `dir0`..`dir31` to `ldap`, members of `editors` (so of `media-staff` and `all-staff`).
fn directory_users(ldap: &Slapd) -> Result<()> {
    let mut ldif = String::new();
    for i in 0..CLIENTS {
        write!(
            ldif,
            "dn: uid=dir{i},ou=people,{base}\nchangetype: add\nobjectClass: inetOrgPerson\n\
             uid: dir{i}\ncn: dir{i}\nsn: {i}\nmail: dir{i}@media.test\nuserPassword: {PASSWORD}\n\n",
            base = ldap.base_dn()
        )?;
    }
    ldap.modify(&ldif)?;
    let members: String = (0..CLIENTS)
        .map(|i| format!("member: {}\n", ldap.user_dn(&format!("dir{i}"))))
        .collect();
    ldap.modify(&format!(
        "dn: {}\nchangetype: modify\nadd: member\n{members}",
        ldap.group_dn("editors")
    ))
}

/// Runs the loads; the results per load (in [`LOADS`] order) and the command.
pub(super) fn bench_directory(dir: &Path, s: &Settings) -> Result<(Results, String)> {
    let ldap = Slapd::start()?;
    directory_users(&ldap)?;
    let config = DirectoryTable::slapd(&[&ldap])
        .role(ldap.group_dn("editors"), "editor")
        .role(ldap.group_dn("all-staff"), "staff")
        .claim("email", "mail")
        .write(dir)?;
    let tools = super::release_issuer();
    let store = StoreArgs::redb(&dir.join("issuer-data"));
    let grants = ["--grants", "password"];
    let secret = e2e::issuer::add_client(&tools, &store, "bench", &grants)?;
    for i in 0..CLIENTS {
        let add = ["user", "add", &format!("local{i}"), "--role", "editor"];
        issuer_admin_on(&tools, &store, &add, Some(PASSWORD))?;
    }
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("bench:{secret}"));
    let scripts: Vec<std::path::PathBuf> = SCRIPTS
        .iter()
        .map(|(prefix, delay)| {
            let path = dir.join(format!("{prefix}-{delay}.lua"));
            lua_sign_in(&path, &basic, prefix, PASSWORD, true, *delay).map(|()| path)
        })
        .collect::<Result<_>>()?;
    let cfg = config.display().to_string();
    // The harness runs the issuer with `--trust-x-forwarded-for` (loopback is a trusted proxy).
    let extra = ["--config", &cfg];
    let log = dir.join("issuer-directory.log");
    let (proc, url) =
        start_issuer_pinned(&tools, &store, e2e::free_port(), &extra, Some("0"), &log)?;
    let mut per_load: Vec<Vec<Sample>> = vec![Vec::new(); LOADS.len()];
    for round in 0..s.rounds {
        for (i, script) in scripts.iter().enumerate() {
            let args = [
                format!("-t{CLIENTS}"),
                format!("-c{CLIENTS}"),
                format!("-d{}s", s.seconds),
                "-s".into(),
                script.display().to_string(),
            ];
            let sample = wrk(&args, &format!("{url}/apiv2/oauth/token"))?;
            eprintln!(
                "directory round {} {}: {:.0} sign-ins/s, p50 {:.3} ms, p99 {:.3} ms, not 2xx: {}",
                round + 1,
                LOADS[i],
                sample.rps,
                sample.p50_ms,
                sample.p99_ms,
                sample.bad
            );
            per_load[i].push(sample);
        }
    }
    let rss = rss_kib(proc.pid());
    drop(proc);
    let command = format!(
        "taskset -c 0 issuer serve --config issuer.toml (release, redb); slapd unpinned; taskset -c 1 wrk --latency -t{CLIENTS} -c{CLIENTS} -d{}s -s dir-0.lua | dir-{PACED_DELAY_MS}.lua (a {PACED_DELAY_MS} ms pause between a client's sign-ins) | local-0.lua (one user and one X-Forwarded-For address per connection)",
        s.seconds
    );
    Ok((Results::new(&per_load, rss), command))
}

/// The section of BENCHMARKS.md.
pub(super) fn report(r: &Results, command: &str) -> Result<String> {
    let mut out = String::from(
        "| load | sign-ins/s | p50 ms | p99 ms | requests | throughput vs local |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (i, (name, x)) in LOADS.iter().zip(&r.samples).enumerate() {
        // The paced load's throughput is set by its pauses: no ratio.
        let ratio = if i == 1 {
            "—".to_owned()
        } else {
            format!("{:.2}", r.paired(i, 2))
        };
        writeln!(
            out,
            "| {name} | {:.0} | {:.3} | {:.3} | {} | {ratio} |",
            x.rps, x.p50_ms, x.p99_ms, x.requests
        )?;
    }
    let (flat, paced) = (&r.samples[0], &r.samples[1]);
    let rate = crate::util::thousands(TARGET_PER_SECOND as u64);
    writeln!(
        out,
        "\nTargets, {CLIENTS} clients: at least {rate} directory sign-ins/s: {:.0} flat out, {}; p99 at most {TARGET_P99_MS} ms at {rate} sign-ins/s: {:.3} ms at {:.0}/s, {} (flat out, where {CLIENTS} clients queue for the one core, p99 is {:.3} ms). Issuer memory after the run: {} MiB resident, {} MiB at most.\n\nCommand: `{command}`\n",
        flat.rps,
        super::mark(flat.rps >= TARGET_PER_SECOND),
        paced.p99_ms,
        paced.rps,
        super::mark(paced.p99_ms <= TARGET_P99_MS && paced.rps >= TARGET_PER_SECOND),
        flat.p99_ms,
        r.rss_kib.0 / 1024,
        r.rss_kib.1 / 1024,
    )?;
    Ok(out)
}
