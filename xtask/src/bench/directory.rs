//! Directory sign-ins (issue 22): password grants of users from a throwaway OpenLDAP (LDAPS,
//! pooled connections, roles through two levels of nested groups) beside users of the local store
//! (Argon2id), 32 clients each (one user per connection, each its own address through
//! `X-Forwarded-For`, as behind Envoy), interleaved round after round; the issuer's memory after.

use super::{rss_kib, wrk, Results, Sample, Settings};
use anyhow::Result;
use base64::Engine as _;
use e2e::issuer::{issuer_admin_on, start_issuer_pinned, StoreArgs};
use e2e::slapd::Slapd;
use std::fmt::Write as _;
use std::path::Path;

/// Concurrent clients of each load.
pub(super) const CLIENTS: usize = 32;
/// The loads, in the order they run.
pub(super) const LOADS: [&str; 2] = ["directory (OpenLDAP, LDAPS)", "local store (Argon2id)"];
/// The user name prefixes of the loads.
const PREFIXES: [&str; 2] = ["dir", "local"];
const PASSWORD: &str = "bench-password";

/// Adds `dir0`..`dir31` to `ldap`, members of `editors` (so of `media-staff` and `all-staff`).
fn directory_users(ldap: &Slapd) -> Result<()> {
    let mut ldif = String::new();
    for i in 0..CLIENTS {
        let _ = write!(
            ldif,
            "dn: uid=dir{i},ou=people,{base}\nchangetype: add\nobjectClass: inetOrgPerson\n\
             uid: dir{i}\ncn: dir{i}\nsn: {i}\nmail: dir{i}@media.test\nuserPassword: {PASSWORD}\n\n",
            base = ldap.base_dn()
        );
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

/// The configuration file naming `ldap`.
fn config(dir: &Path, ldap: &Slapd) -> Result<std::path::PathBuf> {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let text = format!(
        "[directory]\nurls = [{}]\nkind = \"ldap\"\nbind_dn = {}\nbind_password_file = {}\n\
         base_dn = {}\nca_file = {}\n[directory.roles]\n{} = \"editor\"\n{} = \"staff\"\n\
         [directory.claims]\nemail = \"mail\"\n",
        q(&ldap.ldaps_url()),
        q(&ldap.bind_dn()),
        q(&ldap.bind_password_file().display().to_string()),
        q(ldap.base_dn()),
        q(&ldap.ca_file().display().to_string()),
        q(&ldap.group_dn("editors")),
        q(&ldap.group_dn("all-staff")),
    );
    let path = dir.join("issuer.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// wrk's script: thread N (one connection) signs in `PREFIX`N from address 10.9.0.N.
fn lua(path: &Path, basic: &str, prefix: &str) -> Result<()> {
    std::fs::write(
        path,
        format!(
            r#"local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function request()
  return wrk.format("POST", "/apiv2/oauth/token", {{["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Basic {basic}", ["X-Forwarded-For"] = "10.9.0." .. id}}, "grant_type=password&username={prefix}" .. id .. "&password={PASSWORD}")
end
"#
        ),
    )?;
    Ok(())
}

/// Runs the loads; the results per load (in [`LOADS`] order) and the command.
pub(super) fn bench_directory(dir: &Path, s: &Settings) -> Result<(Results, String)> {
    let ldap = Slapd::start()?;
    directory_users(&ldap)?;
    let config = config(dir, &ldap)?;
    let tools = super::release_issuer();
    let store = StoreArgs::redb(&dir.join("issuer-data"));
    let grants = ["--grants", "password"];
    let secret = e2e::issuer::add_client(&tools, &store, "bench", &grants)?;
    for i in 0..CLIENTS {
        let add = ["user", "add", &format!("local{i}"), "--role", "editor"];
        issuer_admin_on(&tools, &store, &add, Some(PASSWORD))?;
    }
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("bench:{secret}"));
    let scripts: Vec<std::path::PathBuf> = PREFIXES
        .iter()
        .map(|p| {
            let path = dir.join(format!("{p}.lua"));
            lua(&path, &basic, p).map(|()| path)
        })
        .collect::<Result<_>>()?;
    let cfg = config.display().to_string();
    let extra = [
        "--config",
        &cfg,
        "--trust-x-forwarded-for",
        "--trusted-proxy",
        "127.0.0.1/32",
    ];
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
        "taskset -c 0 issuer serve --config issuer.toml (release, redb); slapd unpinned; taskset -c 1 wrk --latency -t{CLIENTS} -c{CLIENTS} -d{}s -s dir.lua | local.lua (one user and one X-Forwarded-For address per connection)",
        s.seconds
    );
    Ok((Results::new(&per_load, rss), command))
}

/// The section of BENCHMARKS.md.
pub(super) fn report(r: &Results, command: &str) -> String {
    let mut out = String::from(
        "| load | sign-ins/s | p50 ms | p99 ms | requests | vs local |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (i, (name, x)) in LOADS.iter().zip(&r.samples).enumerate() {
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {:.3} | {:.3} | {} | {:.2} |",
            x.rps,
            x.p50_ms,
            x.p99_ms,
            x.requests,
            r.paired(i, 1)
        );
    }
    let d = &r.samples[0];
    let _ = writeln!(
        out,
        "\nTargets (issue 22): at least 1,000 directory sign-ins/s: {:.0}, {}; p99 at most 25 ms: {:.3} ms, {}. Issuer memory after the run: {} MiB resident, {} MiB at most.\n\nCommand: `{command}`\n",
        d.rps,
        super::mark(d.rps >= 1000.0),
        d.p99_ms,
        super::mark(d.p99_ms <= 25.0),
        r.rss_kib.0 / 1024,
        r.rss_kib.1 / 1024,
    );
    out
}
