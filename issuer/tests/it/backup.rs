//! `issuer backup` and `issuer restore`: an online backup taken through the admin socket while
//! clients rotate their refresh tokens holds every rotation acknowledged before it began; a
//! stopped data dir backs up as well; an existing backup file, a non-empty target, a damaged
//! backup and one others may read are refused with clear errors and nothing written.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const FAMILIES: usize = 8;

/// Every refresh token a client held, in order, with when the issuer's answer carrying it was
/// received (the acknowledgement of the rotation that issued it).
type Chain = Vec<(String, Instant)>;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Rotates `chain`'s family over HTTP until `stop`, recording each token received and counting
/// it in `rotated`.
async fn rotate_until(
    url: String,
    secret: String,
    mut chain: Chain,
    (stop, rotated): (Arc<AtomicBool>, Arc<AtomicUsize>),
) -> Chain {
    while !stop.load(Ordering::Relaxed) {
        let token = chain.last().unwrap().0.clone();
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", token.as_str()),
        ];
        let a = post(&url, Some(("app", &secret)), &form).await;
        assert_eq!(
            a.status, 200,
            "a rotation under load was refused: {}",
            a.json
        );
        let next = a.json["refresh_token"].as_str().unwrap().to_owned();
        chain.push((next, Instant::now()));
        rotated.fetch_add(1, Ordering::Relaxed);
    }
    chain
}

/// Whether the issuer at `s` holds `token` as its family's current token.
async fn active(s: &Server, f: &Fixture, token: &str) -> bool {
    let url = format!("{}/apiv2/oauth/introspect", s.url);
    let a = post(&url, f.app(), &[("token", token)]).await;
    assert_eq!(a.status, 200, "{}", a.json);
    a.json["active"] == true
}

/// Runs `issuer ARGS --data-dir DIR` off the runtime's threads.
async fn issuer(dir: &Path, args: &[&str]) -> std::process::Output {
    let (dir, args): (PathBuf, Vec<String>) =
        (dir.to_owned(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        admin_output(&dir, &args, None)
    })
    .await
    .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The property of an online backup, for each family: let `j` be the last token acknowledged
/// before the backup began. The restored store holds exactly one token of `j` and its
/// successors as current, `k >= j`: the token acknowledged before the backup is current, or the
/// rotation that replaced it is in the backup too (every token from `j` to `k` was issued by a
/// rotation the restore holds). The tokens issued after `k` were issued after the backup's
/// snapshot and are unknown to the restore, refused without revoking the family, whose current
/// token `k` then rotates, and twice to the same successor (no fork).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_backup_under_refresh_load_holds_every_acknowledged_rotation() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let (chains, backup, began, ended) = step_back_up_under_refresh_load(&s, &f).await;
    let restored = f.dir.with_file_name("restored");
    let out = issuer(&restored, &["restore", "--from", backup.to_str().unwrap()]).await;
    assert!(out.status.success(), "issuer restore: {}", text(&out));
    assert_eq!(mode(&restored), 0o700);
    for file in ["issuer.redb", "hash.key"] {
        assert_eq!(mode(&restored.join(file)), 0o600, "{file}");
    }
    drop(s);
    let s = Server::start(&restored, &[]);
    let (mut moved_on, mut lost) = (0, 0);
    for (i, chain) in chains.iter().enumerate() {
        let j = chain.iter().rposition(|(_, at)| *at < began).unwrap();
        let (k, newest_lost) = step_restore_holds_rotation_of(&s, &f, i, chain, j).await;
        moved_on += usize::from(k > j);
        lost += usize::from(newest_lost);
    }
    eprintln!(
        "backup took {:?}; {FAMILIES} families: {moved_on} rotated in the backup after it \
         began, {lost} rotated after its snapshot (their newest tokens are unknown to the \
         restore)",
        ended - began
    );
}

/// Step: `FAMILIES` clients rotate their families while `issuer backup` runs through the
/// running server; the load ran before, across and after the backup. The chains, the backup,
/// when it began and when it ended.
async fn step_back_up_under_refresh_load(
    s: &Server,
    f: &Fixture,
) -> (Vec<Chain>, PathBuf, Instant, Instant) {
    let mut chains = Vec::new();
    for _ in 0..FAMILIES {
        let a = password_grant(s, f).await;
        assert_eq!(a.status, 200, "{}", a.json);
        let token = a.json["refresh_token"].as_str().unwrap().to_owned();
        chains.push(vec![(token, Instant::now())]);
    }
    let (stop, rotated) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let tasks: Vec<_> = chains
        .into_iter()
        .map(|chain| {
            let load = (stop.clone(), rotated.clone());
            tokio::spawn(rotate_until(s.token_url(), f.secret.clone(), chain, load))
        })
        .collect();
    let rotations_grow = async |by: usize| {
        let from = rotated.load(Ordering::Relaxed);
        let grown = e2e::wait::until(e2e::wait::LONG, async || {
            rotated.load(Ordering::Relaxed) >= from + by
        });
        assert!(grown.await, "the load stalled");
    };
    rotations_grow(FAMILIES).await;
    let backup = f.dir.with_file_name("online.backup");
    let began = Instant::now();
    let out = issuer(&f.dir, &["backup", "--to", backup.to_str().unwrap()]).await;
    let ended = Instant::now();
    rotations_grow(FAMILIES).await;
    stop.store(true, Ordering::Relaxed);
    let mut chains = Vec::new();
    for t in tasks {
        chains.push(t.await.unwrap());
    }
    assert!(out.status.success(), "issuer backup: {}", text(&out));
    assert!(
        text(&out).contains("through the running server"),
        "{}",
        text(&out)
    );
    assert_eq!(mode(&backup), 0o600, "the backup holds secrets");
    let acked = |during: &dyn Fn(Instant) -> bool| {
        chains
            .iter()
            .flatten()
            .filter(|(_, at)| during(*at))
            .count()
    };
    // One token of each family is the password grant's.
    assert!(
        acked(&|at| at < began) > FAMILIES,
        "no rotation before the backup"
    );
    assert!(acked(&|at| at > ended) > 0, "no rotation after the backup");
    (chains, backup, began, ended)
}

/// Step, for family `i` whose token `j` was the last acknowledged before the backup began: the
/// restore holds exactly one of `j` and its successors as current, `k`, which rotates, twice
/// to the same successor; a newer token than `k` is refused. `k`, and whether a newer token
/// was lost.
async fn step_restore_holds_rotation_of(
    s: &Server,
    f: &Fixture,
    i: usize,
    chain: &Chain,
    j: usize,
) -> (usize, bool) {
    let mut current = Vec::new();
    for (k, (token, _)) in chain.iter().enumerate().skip(j) {
        if active(s, f, token).await {
            current.push(k);
        }
    }
    assert_eq!(
        current.len(),
        1,
        "family {i}: tokens {current:?} of {j}..{} are current in the restore (acknowledged \
         before the backup: {j})",
        chain.len() - 1
    );
    let k = current[0];
    let newest = chain.last().filter(|_| k + 1 < chain.len());
    if let Some((newest, _)) = newest {
        let a = refresh(s, f, newest).await;
        assert_error(&a, 400, "invalid_grant");
    }
    let a = refresh(s, f, &chain[k].0).await;
    assert_eq!(
        a.status, 200,
        "family {i}: its current token {k}: {}",
        a.json
    );
    let b = refresh(s, f, &chain[k].0).await;
    assert_eq!(b.status, 200, "family {i}: the retry: {}", b.json);
    assert_eq!(
        a.json["refresh_token"], b.json["refresh_token"],
        "family {i}: forked"
    );
    (k, newest.is_some())
}

/// Flips a bit of byte `at` in a copy of `backup`.
fn corrupted(backup: &Path, to: &Path, at: usize) {
    let mut bytes = std::fs::read(backup).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(to, bytes).unwrap();
}

#[tokio::test]
async fn a_stopped_data_dir_backs_up_and_a_bad_restore_writes_nothing() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let first = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = refresh(&s, &f, &first).await;
    let current = a.json["refresh_token"].as_str().unwrap().to_owned();
    drop(s);

    let tmp = f.dir.parent().unwrap();
    let backup = tmp.join("stopped.backup");
    let out = issuer(&f.dir, &["backup", "--to", backup.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("of the stopped data dir"),
        "{}",
        text(&out)
    );
    assert_eq!(mode(&backup), 0o600);
    let written = std::fs::read(&backup).unwrap();

    step_a_backup_never_overwrites_nor_reads_what_is_not_a_data_dir(tmp, &f, &backup, &written)
        .await;
    // A non-empty target is refused and left as it was.
    let occupied = tmp.join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("keep"), "x").unwrap();
    let out = issuer(&occupied, &["restore", "--from", backup.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("is not empty"), "{}", text(&out));
    let left: Vec<_> = std::fs::read_dir(&occupied)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["keep"]);

    let target = tmp.join("target");
    step_a_damaged_or_readable_backup_restores_nothing(tmp, &backup, &written, &target).await;
    // The intact backup, into an empty dir that exists: the store as it was when stopped.
    std::fs::create_dir(&target).unwrap();
    let out = issuer(&target, &["restore", "--from", backup.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out));
    let s = Server::start(&target, &[]);
    assert!(!active(&s, &f, &first).await);
    let a = refresh(&s, &f, &current).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert!(admin(&target, &["client", "list"], None).contains("app"));
}

/// Step: an existing file is never overwritten; a data dir that is not one leaves no file.
async fn step_a_backup_never_overwrites_nor_reads_what_is_not_a_data_dir(
    tmp: &Path,
    f: &Fixture,
    backup: &Path,
    written: &[u8],
) {
    let out = issuer(&f.dir, &["backup", "--to", backup.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("never over one"), "{}", text(&out));
    assert_eq!(std::fs::read(backup).unwrap(), written);
    // A data dir that is not one leaves no file behind.
    let nowhere = tmp.join("nowhere.backup");
    let out = issuer(
        &tmp.join("absent"),
        &["backup", "--to", nowhere.to_str().unwrap()],
    )
    .await;
    assert!(!out.status.success());
    assert!(text(&out).contains("holds no data dir"), "{}", text(&out));
    assert!(!nowhere.exists() && !tmp.join("absent").exists());
}

/// Step: a damaged backup (one byte changed, cut short, or not a backup at all), or one others
/// may read (and so may have changed), writes nothing into `target`.
async fn step_a_damaged_or_readable_backup_restores_nothing(
    tmp: &Path,
    backup: &Path,
    written: &[u8],
    target: &Path,
) {
    let bad = tmp.join("bad.backup");
    for (damage, expected) in [
        ("corrupted", "the backup is damaged"),
        ("digest", "checksum does not match"),
        ("truncated", "truncated"),
        ("foreign", "not an issuer backup"),
        (
            "readable",
            "mode 0644 lets other users read it; run chmod 600",
        ),
    ] {
        match damage {
            "corrupted" => corrupted(backup, &bad, written.len() / 2),
            "digest" => corrupted(backup, &bad, written.len() - 1),
            "truncated" => std::fs::write(&bad, &written[..written.len() - 40]).unwrap(),
            "foreign" => std::fs::write(&bad, b"SQLite format 3\0").unwrap(),
            _ => std::fs::write(&bad, written).unwrap(),
        }
        let mode = if damage == "readable" { 0o644 } else { 0o600 };
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = issuer(target, &["restore", "--from", bad.to_str().unwrap()]).await;
        assert!(!out.status.success(), "{damage}");
        assert!(text(&out).contains(expected), "{damage}: {}", text(&out));
        assert!(!target.exists(), "{damage}: the restore wrote something");
    }
}

/// `issuer serve` on `dir`, which must refuse to start; its stderr.
fn serve_refused(dir: &Path) -> String {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir);
    refused_to_start(command)
}

/// A directory another user owns, or that group or others may write, could have its `hash.key`
/// replaced: `restore` refuses it as a target even empty, and `serve` refuses it as its data dir;
/// both say what to run, and nothing is written.
#[tokio::test]
#[ignore = "needs root: `cargo xtask test` runs it as root"]
async fn a_data_dir_another_user_owns_or_may_write_is_refused() {
    let f = fixture();
    let tmp = f.dir.parent().unwrap();
    let backup = tmp.join("b.backup");
    let out = issuer(&f.dir, &["backup", "--to", backup.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out));
    let from = ["restore", "--from", backup.to_str().unwrap()];
    let empty = |dir: &Path| std::fs::read_dir(dir).unwrap().next().is_none();

    let writable = tmp.join("writable");
    std::fs::create_dir(&writable).unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = issuer(&writable, &from).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("chmod 700"), "{}", text(&out));
    assert!(empty(&writable) && mode(&writable) == 0o777);

    std::fs::set_permissions(&f.dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let e = serve_refused(&f.dir);
    assert!(
        e.contains("writable by group or others") && e.contains("chmod 700"),
        "{e}"
    );
    std::fs::set_permissions(&f.dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    let theirs = tmp.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    give_away(&theirs);
    give_away(&f.dir);
    let out = issuer(&theirs, &from).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("owned by uid 65534") && text(&out).contains("chown"),
        "{}",
        text(&out)
    );
    assert!(empty(&theirs));
    let e = serve_refused(&f.dir);
    assert!(
        e.contains("owned by uid 65534") && e.contains("chown"),
        "{e}"
    );
}
