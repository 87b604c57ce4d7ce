//! The admin API's lists at size (`cargo xtask bench --admin`): a store of [`USERS`] users,
//! [`CLIENTS`] clients and [`FAMILIES`] live refresh token families (ten a user), on redb and on
//! PostgreSQL, and every list route timed through the real release issuer's `[admin_http]`
//! listener, as the console calls it: signed in with the console's password grant, each request
//! with its DPoP-bound token and a fresh proof, one at a time on one kept-alive connection.
//!
//! The stores are filled the way an operator would move such a store in: a small data dir with
//! the benchmark's administrator is backed up (`issuer backup`), the fixture `fill_admin` (an
//! example of the issuer) adds the users, clients and families to that backup, and
//! `issuer restore` loads it into a new data dir and into a throwaway PostgreSQL database.

use super::raw_http::Conn;
use crate::install;
use crate::util::{root, thousands};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use e2e::issuer::{issuer_admin_on, start_issuer_on, StoreArgs};
use e2e::postgres::PgCluster;
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The store's size: users, clients, live families (and as many audit events, over 30 days).
const USERS: u64 = 100_000;
const CLIENTS: u64 = 10_000;
const FAMILIES: u64 = 1_000_000;
/// The same with `--quick`.
const QUICK: (u64, u64, u64) = (10_000, 1_000, 100_000);

/// The target: every list route answers within this at the 95th percentile (ms).
pub(super) const LIST_P95_MS: f64 = 200.0;

/// Requests timed per route and store, after [`WARM`] untimed ones.
const REQUESTS: usize = 100;
const REQUESTS_QUICK: usize = 20;
const WARM: usize = 3;
/// A route's requests stop after this long: a slow route is measured by fewer.
const ROUTE_BUDGET: Duration = Duration::from_secs(30);

/// The benchmark's administrator: every admin role.
const ADMIN: &str = "bench-admin";
const PASSWORD: &str = "bench-admin-pw-1";
const ROLES: [&str; 5] = [
    "admin:clients",
    "admin:users",
    "admin:sessions",
    "admin:keys",
    "admin:audit",
];

/// One measured route: what it is, its path and query, and how many items it must answer with
/// (`None`: any number).
struct Route {
    name: &'static str,
    path: String,
    items: Option<usize>,
}

fn cursor(key: &str) -> String {
    B64.encode(key)
}

fn route(name: &'static str, path: String, items: Option<usize>) -> Route {
    Route { name, path, items }
}

/// The routes, for a store of `users` users and `clients` clients.
fn routes(users: u64, clients: u64, per_user: usize) -> Vec<Route> {
    let r = route;
    let mid_user = cursor(&format!("user-{:06}", users / 2));
    let mid_client = cursor(&format!("client-{:05}", clients / 2));
    // Ten users and ten clients at the end of their lists: a search reads every record.
    let last_users = format!("user-{:05}", (users - 1) / 10);
    let last_clients = format!("client-{:04}", (clients - 1) / 10);
    let mut all = vec![
        r("users: first page", "users?limit=50".into(), Some(50)),
        r(
            "users: a middle page",
            format!("users?limit=50&after={mid_user}"),
            Some(50),
        ),
        r(
            "users: a search (reads every user)",
            format!("users?q={last_users}"),
            Some(10),
        ),
        r("clients: first page", "clients?limit=50".into(), Some(50)),
        r(
            "clients: a middle page",
            format!("clients?limit=50&after={mid_client}"),
            Some(50),
        ),
        r(
            "clients: a search (reads every client)",
            format!("clients?q={last_clients}"),
            Some(10),
        ),
        r(
            "clients: `state=inactive`",
            "clients?state=inactive".into(),
            Some(50),
        ),
        r(
            "clients: `state=pending` (none: reads every client)",
            "clients?state=pending".into(),
            Some(0),
        ),
    ];
    all.extend(session_and_audit_routes(users, per_user));
    all.push(r("keys", "keys".into(), None));
    all
}

/// The routes of the sessions and the audit trail: each user has `per_user` sessions.
fn session_and_audit_routes(users: u64, per_user: usize) -> Vec<Route> {
    let r = route;
    // A session cursor is the family's id in hex, then its user.
    let mid_session = cursor(&format!(
        "8{}{}",
        "0".repeat(31),
        format_args!("user-{:06}", users / 2)
    ));
    let one = format!("user-{:06}", users / 3);
    // An audit cursor is an event's time and number: from 15 days back.
    let now = e2e::unix_now();
    let mid_audit = cursor(&format!("{}:0", now - 15 * 86_400));
    vec![
        r("sessions: first page", "sessions?limit=50".into(), Some(50)),
        r(
            "sessions: a middle page",
            format!("sessions?limit=50&after={mid_session}"),
            Some(50),
        ),
        r(
            "sessions: one user's (`user=`)",
            format!("sessions?user={one}"),
            Some(per_user),
        ),
        r(
            "sessions: a user's name whole as `q=`",
            format!("sessions?q={one}"),
            Some(per_user),
        ),
        r(
            "sessions: the users whose name starts with `q=`",
            format!("sessions?q={}", &one[..one.len() - 2]),
            Some(50),
        ),
        r(
            "sessions: `q=` that starts no name",
            "sessions?q=nobody".into(),
            Some(0),
        ),
        r("audit: first page", "audit?limit=50".into(), Some(50)),
        r(
            "audit: a middle page",
            format!("audit?limit=50&after={mid_audit}"),
            Some(50),
        ),
        r(
            "audit: the last hour (`since=`)",
            format!("audit?limit=50&since={}", now - 3_600),
            Some(50),
        ),
        r(
            "audit: a search (reads 20,000 events a request)",
            format!("audit?q={one}"),
            None,
        ),
    ]
}

/// A route's timings (ms) on each store.
struct Timed {
    name: &'static str,
    path: String,
    redb: Vec<f64>,
    postgres: Vec<f64>,
}

/// The run's figures.
struct AdminRun {
    timed: Vec<Timed>,
    size: (u64, u64, u64),
    fill_seconds: f64,
    restore_seconds: (f64, f64),
}

/// The section: the runs, written to their own part of BENCHMARKS.md.
pub(super) fn run(r: &mut super::Run) -> Result<()> {
    let dir = super::fresh_dir("bench-admin")?;
    let result = bench_admin(&dir, r.quick)?;
    // Some 2 GB of backups and stores: not worth keeping.
    std::fs::remove_dir_all(&dir)?;
    let requests = if r.quick { REQUESTS_QUICK } else { REQUESTS };
    let how = super::measured(
        r.quick,
        " --admin",
        &format!(
            "{requests} requests per route and store after {WARM} untimed, one at a time on one \
             connection, each with a fresh DPoP proof, at most {} s per route",
            ROUTE_BUDGET.as_secs()
        ),
    );
    let body = format!(
        "### Admin API: the lists at size\n\n{how}{}",
        report(&result)?
    );
    super::publish("bench-admin", &body, r.started)
}

fn bench_admin(dir: &Path, quick: bool) -> Result<AdminRun> {
    let tools = super::release_issuer();
    let size = if quick {
        QUICK
    } else {
        (USERS, CLIENTS, FAMILIES)
    };
    let (users, clients, families) = size;
    // The administrator in a small data dir, backed up, and the backup filled.
    let seed = StoreArgs::redb(&dir.join("seed"));
    e2e::issuer::init(&tools, &seed)?;
    let mut add = vec!["user", "add", ADMIN];
    for role in ROLES {
        add.extend(["--role", role]);
    }
    issuer_admin_on(&tools, &seed, &add, Some(PASSWORD))?;
    let (small, full) = (dir.join("seed.backup"), dir.join("full.backup"));
    issuer_admin_on(&tools, &seed, &["backup", "--to", &path(&small)], None)?;
    let started = Instant::now();
    crate::util::run(
        Command::new(root().join("target/release/examples/fill_admin"))
            .args([path(&small), path(&full)])
            .args([users, clients, families].map(|n| n.to_string())),
    )?;
    let fill_seconds = started.elapsed().as_secs_f64();
    let restore = ["restore", "--from", &path(&full)];
    let started = Instant::now();
    let redb = StoreArgs::redb(&dir.join("redb"));
    issuer_admin_on(&tools, &redb, &restore, None)?;
    let redb_seconds = started.elapsed().as_secs_f64();
    let pg = PgCluster::start_with(&install::ensure_postgres()?)?;
    let kek = dir.join("kek");
    e2e::write_private(
        &kek,
        format!(
            "{:032x}{:032x}\n",
            super::store::rand_u128()?,
            super::store::rand_u128()?
        )
        .as_bytes(),
    )?;
    let postgres = StoreArgs::postgres(&pg.url(), &kek);
    let started = Instant::now();
    issuer_admin_on(&tools, &postgres, &restore, None)?;
    let pg_seconds = started.elapsed().as_secs_f64();
    let per_user = usize::try_from(families / users.max(1))?;
    let mut timed: Vec<Timed> = routes(users, clients, per_user)
        .into_iter()
        .map(|r| Timed {
            name: r.name,
            path: r.path,
            redb: vec![],
            postgres: vec![],
        })
        .collect();
    let requests = if quick { REQUESTS_QUICK } else { REQUESTS };
    let all = routes(users, clients, per_user);
    for (label, store) in [("redb", &redb), ("postgres", &postgres)] {
        let times = measure_store(dir, &tools, store, label, &all, requests)?;
        for (t, ms) in timed.iter_mut().zip(times) {
            match label {
                "redb" => t.redb = ms,
                _ => t.postgres = ms,
            }
        }
    }
    Ok(AdminRun {
        timed,
        size,
        fill_seconds,
        restore_seconds: (redb_seconds, pg_seconds),
    })
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Starts the issuer on `store` with its admin listener, signs in, and times every route.
fn measure_store(
    dir: &Path,
    tools: &e2e::Tools,
    store: &StoreArgs,
    label: &str,
    routes: &[Route],
    requests: usize,
) -> Result<Vec<Vec<f64>>> {
    let port = e2e::free_port();
    let config = dir.join(format!("{label}.toml"));
    std::fs::write(
        &config,
        format!("[admin_http]\nlisten = \"127.0.0.1:{port}\"\ntoken_max_age = 900\n"),
    )?;
    let log = dir.join(format!("issuer-{label}.log"));
    let extra = ["--config", &path(&config)];
    let (_proc, _) = start_issuer_on(tools, store, e2e::free_port(), &extra, &log)?;
    // The listener's origin as the requests name it: their `Host` is `127.0.0.1`
    // (`raw_http`), which the origin check and the proofs' `htu` are taken from.
    let origin = "http://127.0.0.1".to_owned();
    // An embedded store refuses proofs that may predate its memory of used ones.
    std::thread::sleep(Duration::from_secs(shared::dpop::MAX_AHEAD_SECONDS + 1));
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(&super::store::rand_u128()?.to_le_bytes());
    let key = ProofKey::ed25519(seed);
    let mut conn = Conn::open(port)?;
    let token = sign_in(&mut conn, &key, &origin)?;
    let mut out = Vec::new();
    for route in routes {
        let times = time_route(&mut conn, &key, &origin, &token, route, requests)
            .with_context(|| format!("{label}: {}", route.name))?;
        let (p50, p95) = (percentile(&times, 50.0), percentile(&times, 95.0));
        eprintln!(
            "admin lists {label} {}: {} requests, p50 {p50:.1} ms, p95 {p95:.1} ms",
            route.name,
            times.len()
        );
        out.push(times);
    }
    Ok(out)
}

/// The console's sign-in at the admin listener: a DPoP-bound token of [`ADMIN`].
fn sign_in(conn: &mut Conn, key: &ProofKey, origin: &str) -> Result<String> {
    let path = "/apiv2/oauth/token";
    let proof = proof(key, "POST", &format!("{origin}{path}"), None);
    let body =
        format!("grant_type=password&client_id=admin-console&username={ADMIN}&password={PASSWORD}");
    let a = conn.send("POST", path, &[("origin", origin), ("dpop", &proof)], &body)?;
    let json: serde_json::Value = serde_json::from_slice(&a.body)?;
    if a.status != 200 {
        bail!("the admin's sign-in was refused ({}): {json}", a.status);
    }
    json["access_token"]
        .as_str()
        .map(str::to_owned)
        .context("no access_token")
}

fn proof(key: &ProofKey, htm: &str, htu: &str, token: Option<&str>) -> String {
    let jti = format!("{:032x}", super::store::rand_u128().unwrap_or_default());
    key.proof(&ProofClaims {
        htm,
        htu,
        jti: &jti,
        iat: e2e::unix_now(),
        access_token: token,
        nonce: None,
    })
}

/// `route` timed: [`WARM`] untimed requests, then up to `requests` (or [`ROUTE_BUDGET`]), each
/// answered 200 with the items it must hold. Milliseconds, in the order taken.
fn time_route(
    conn: &mut Conn,
    key: &ProofKey,
    origin: &str,
    token: &str,
    route: &Route,
    requests: usize,
) -> Result<Vec<f64>> {
    let path = format!("/apiv2/admin/{}", route.path);
    let htu = format!("{origin}{}", path.split('?').next().unwrap_or_default());
    let auth = format!("DPoP {token}");
    let began = Instant::now();
    let mut times = Vec::with_capacity(requests);
    for i in 0..WARM + requests {
        if i > WARM && began.elapsed() > ROUTE_BUDGET {
            break;
        }
        let proof = proof(key, "GET", &htu, Some(token));
        let started = Instant::now();
        let a = conn.send(
            "GET",
            &path,
            &[("authorization", &auth), ("dpop", &proof)],
            "",
        )?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let json: serde_json::Value = serde_json::from_slice(&a.body)?;
        if a.status != 200 {
            bail!("{path}: {} {json}", a.status);
        }
        let got = json["items"].as_array().map(Vec::len);
        if got.is_none() || route.items.is_some_and(|n| got != Some(n)) {
            bail!("{path}: {got:?} items, not {:?}", route.items);
        }
        if i >= WARM {
            times.push(ms);
        }
    }
    Ok(times)
}

/// The `p`th percentile of `times` (nearest rank, [`super::feed::quantile`]); 0 of none.
fn percentile(times: &[f64], p: f64) -> f64 {
    let mut v = times.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    super::feed::quantile(&v, p / 100.0)
}

/// The section's tables.
fn report(r: &AdminRun) -> Result<String> {
    let (users, clients, families) = r.size;
    let mut out = format!(
        "Stores of {} users, {} clients and {} live refresh token families ({} a user), the \
         same on both: the fixture wrote the backup in {:.0} s, `issuer restore` loaded it into a \
         data dir in {:.0} s and into PostgreSQL in {:.0} s. Command: `issuer serve` (release) \
         with `[admin_http]`, each store in turn; the paths below are under `/apiv2/admin/`.\n\n",
        thousands(users),
        thousands(clients),
        thousands(families),
        families / users.max(1),
        r.fill_seconds,
        r.restore_seconds.0,
        r.restore_seconds.1
    );
    out.push_str(
        "| route | request | redb p50 ms | p95 | p99 | PostgreSQL p50 ms | p95 | p99 |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let (mut worst_redb, mut worst_pg) = (0f64, 0f64);
    for t in &r.timed {
        let (a, b) = (&t.redb, &t.postgres);
        worst_redb = worst_redb.max(percentile(a, 95.0));
        worst_pg = worst_pg.max(percentile(b, 95.0));
        writeln!(
            out,
            "| {} | `{}` | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            t.name,
            t.path,
            percentile(a, 50.0),
            percentile(a, 95.0),
            percentile(a, 99.0),
            percentile(b, 50.0),
            percentile(b, 95.0),
            percentile(b, 99.0)
        )?;
    }
    writeln!(
        out,
        "\n| target | wanted | redb, slowest route | PostgreSQL, slowest route | |\n|---|---|---|---|---|\n\
         | every list route's p95 | ≤ {LIST_P95_MS:.0} ms | {worst_redb:.1} ms | {worst_pg:.1} ms | {} |",
        super::mark(worst_redb <= LIST_P95_MS && worst_pg <= LIST_P95_MS)
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 95.0), 3.0);
        assert_eq!(percentile(&[], 95.0), 0.0);
    }

    #[test]
    fn every_list_route_is_measured() {
        let measured = routes(USERS, CLIENTS, 10);
        for list in ["users", "clients", "sessions", "audit", "keys"] {
            assert!(measured.iter().any(|r| r.path.starts_with(list)), "{list}");
        }
        assert!(measured.iter().any(|r| r.path.contains("user=user-033333")));
    }
}
