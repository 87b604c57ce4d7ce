//! Crash safety and concurrency: SIGKILL and SIGTERM under load, races without forks, guessing attacks.

use super::*;

/// A small deterministic generator for test timing; the seed is printed so a run can be replayed.
struct Lcg(u64);

impl Lcg {
    fn from_time() -> Self {
        let seed = shared::time::since_epoch(std::time::SystemTime::now())
            .map_or(0, |d| d.as_nanos() as u64);
        eprintln!("random seed {seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Rotates `token`'s family until `stop` or until a request is cut off by a kill: the last
/// token received, and how many rotations.
async fn rotate_until_stopped(
    url: String,
    secret: String,
    mut token: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cycle: usize,
) -> (String, u64) {
    let client = reqwest::Client::new();
    let mut rotations = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let sent = client
            .post(&url)
            .basic_auth("app", Some(&secret))
            .form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", token.as_str()),
            ])
            .send()
            .await;
        // A request cut off by the kill has no answer: the client keeps its token.
        let Ok(resp) = sent else { break };
        let status = resp.status();
        let Ok(body) = resp.json::<Value>().await else {
            break;
        };
        assert_eq!(status, 200, "cycle {cycle}: a rotation was refused: {body}");
        token = body["refresh_token"].as_str().unwrap().to_owned();
        rotations += 1;
    }
    (token, rotations)
}

/// Step, after a kill and a restart: every token a client received still works, and twice
/// gives the same successor: a rotation that committed before the kill is found again, never
/// forked. `last` becomes the successors.
async fn step_every_received_token_still_rotates_once(
    s: &Server,
    f: &Fixture,
    last: &mut [String],
    cycle: usize,
) {
    for (i, token) in last.iter_mut().enumerate() {
        let a = refresh(s, f, token).await;
        assert_eq!(
            a.status, 200,
            "cycle {cycle}, family {i}: the last received token was lost: {}",
            a.json
        );
        let b = refresh(s, f, token).await;
        assert_eq!(
            b.json["refresh_token"], a.json["refresh_token"],
            "cycle {cycle}, family {i}: forked"
        );
        *token = a.json["refresh_token"].as_str().unwrap().to_owned();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_refresh_load_loses_no_rotation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const FAMILIES: usize = 8;
    const CYCLES: usize = 20;
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    let mut rng = Lcg::from_time();
    let mut last: Vec<String> = Vec::new();
    for _ in 0..FAMILIES {
        last.push(
            password_grant(&s, &f).await.json["refresh_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let first_of_family0 = last[0].clone();
    let mut total_rotations = 0u64;
    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = last
            .iter()
            .cloned()
            .map(|token| {
                let (url, secret, stop) = (s.token_url(), f.secret.clone(), stop.clone());
                tokio::spawn(rotate_until_stopped(url, secret, token, stop, cycle))
            })
            .collect();
        // A random point of the load to kill at: the thing under test, not a wait.
        tokio::time::sleep(Duration::from_millis(30 + rng.below(300))).await;
        s.kill9();
        stop.store(true, Ordering::Relaxed);
        last.clear();
        for t in tasks {
            let (token, n) = t.await.unwrap();
            total_rotations += n;
            last.push(token);
        }
        // The database opens cleanly after every kill.
        s.restart();
        step_every_received_token_still_rotates_once(&s, &f, &mut last, cycle).await;
    }
    assert!(total_rotations > 0, "the load made no rotation");
    eprintln!("{CYCLES} SIGKILL cycles, {total_rotations} rotations under load");
    // Tokens legitimately rotated away are refused, and their reuse revokes only their family.
    assert_error(
        &refresh(&s, &f, &first_of_family0).await,
        400,
        "invalid_grant",
    );
    assert_error(&refresh(&s, &f, &last[0]).await, 400, "invalid_grant");
    assert_eq!(refresh(&s, &f, &last[1]).await.status, 200);
}

/// A refresh's status and the refresh token it gave, if any.
type Outcome = (u16, Option<String>);

/// One family's round: `PER_FAMILY` refreshes of `token` at once at `urls.0`, with its
/// revocation at `urls.1` racing them if `revoke`. Their outcomes, and the revocation's status.
async fn race_family(
    http: reqwest::Client,
    urls: (String, String),
    secret: String,
    token: String,
    revoke: bool,
) -> (Vec<Outcome>, Option<StatusCode>) {
    const PER_FAMILY: usize = 4;
    let requests: Vec<_> = (0..PER_FAMILY)
        .map(|_| {
            http.post(&urls.0)
                .basic_auth("app", Some(&secret))
                .form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token.as_str()),
                ])
                .send()
        })
        .collect();
    let revocation = async {
        if !revoke {
            return None;
        }
        let r = http
            .post(&urls.1)
            .basic_auth("app", Some(&secret))
            .form(&[("token", token.as_str())])
            .send();
        Some(r.await.unwrap().status())
    };
    let (answers, revoke_status) =
        tokio::join!(futures_util::future::join_all(requests), revocation);
    let mut outcomes = Vec::new();
    for a in answers {
        let a = answer(a.unwrap()).await;
        assert!(!a.status.is_server_error(), "5xx: {}", a.json);
        outcomes.push((
            a.status.as_u16(),
            a.json["refresh_token"].as_str().map(str::to_owned),
        ));
    }
    (outcomes, revoke_status)
}

/// The refreshes of one family in one round gave at most one successor, and all passed unless
/// it was `revoked`: its current token after the round (none once revoked).
fn no_fork(round: usize, family: usize, outcomes: &[Outcome], revoked: bool) -> Option<String> {
    let successors: std::collections::HashSet<_> =
        outcomes.iter().filter_map(|(_, t)| t.clone()).collect();
    assert!(
        successors.len() <= 1,
        "round {round}, family {family} forked: {successors:?}"
    );
    if revoked {
        return None;
    }
    assert!(
        outcomes.iter().all(|(s, _)| *s == 200),
        "round {round}, family {family}: {outcomes:?}"
    );
    successors.into_iter().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_revocations_and_admin_changes_race_without_forks() {
    const FAMILIES: usize = 16;
    const ROUNDS: usize = 12;
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let mut current: Vec<Option<String>> = Vec::new();
    for _ in 0..FAMILIES {
        current.push(Some(
            password_grant(&s, &f).await.json["refresh_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
    }
    // Admin changes through the running server's socket, all through the load.
    let dir = f.dir.clone();
    let admin_task = std::thread::spawn(move || {
        for i in 0..10 {
            admin(&dir, &["user", "add", &format!("racer{i}")], Some("pw"));
            add_client(&dir, &format!("racer{i}"), &[]);
            admin(&dir, &["client", "list"], None);
        }
        admin(&dir, &["keys", "rotate", "--delay", "0"], None);
    });
    let http = reqwest::Client::new();
    let mut revoked = [false; FAMILIES];
    for round in 0..ROUNDS {
        let mut round_tasks = Vec::new();
        for (family, token) in current.iter().enumerate() {
            let Some(token) = token.clone() else { continue };
            // Every third family has its family revoked during round `family / 3`, racing its
            // refreshes.
            let revoke = family % 3 == 0 && round == family / 3;
            let urls = (s.token_url(), format!("{}/apiv2/oauth/revoke", s.url));
            let race = race_family(http.clone(), urls, f.secret.clone(), token, revoke);
            round_tasks.push(tokio::spawn(async move { (family, race.await) }));
        }
        for t in round_tasks {
            let (family, (outcomes, revoke_status)) = t.await.unwrap();
            if let Some(status) = revoke_status {
                assert_eq!(status, 200);
                revoked[family] = true;
            }
            current[family] = no_fork(round, family, &outcomes, revoked[family]);
        }
    }
    admin_task.join().unwrap();
    // Revoked families stay revoked; every other family is alive and well.
    for (family, token) in current.iter().enumerate() {
        match token {
            Some(t) => assert_eq!(
                refresh(&s, &f, t).await.status,
                200,
                "family {family} was lost"
            ),
            None => assert!(revoked[family]),
        }
    }
    assert_eq!(revoked.iter().filter(|r| **r).count(), FAMILIES.div_ceil(3));
    // The admin changes took effect during the load.
    assert!(admin(&f.dir, &["client", "list"], None).contains("racer9"));
    assert!(admin(&f.dir, &["keys", "list"], None).contains("verifying"));
}

/// Five sign-ins of alice and five client credentials grants of `app`: their statuses.
async fn others_sign_in(s: &Server, f: &Fixture) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let a = post(
            &s.token_url(),
            f.app(),
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
        )
        .await;
        statuses.push(a.status.as_u16());
        statuses.push(
            post(
                &s.token_url(),
                f.app(),
                &[("grant_type", "client_credentials")],
            )
            .await
            .status
            .as_u16(),
        );
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_guessing_attack_is_throttled_while_others_are_served() {
    let f = fixture();
    add_user(&f.dir, "victim", "victim-pw", &[]);
    for i in 0..30 {
        add_user(&f.dir, &format!("user{i}"), "secret-pw", &[]);
    }
    let s = Server::start(
        &f.dir,
        &["--trust-x-forwarded-for", "--login-backoff-base", "5"],
    );
    let http = reqwest::Client::new();
    let guess = |user: String, from: &'static str| {
        http.post(s.token_url())
            .basic_auth("app", Some(&f.secret))
            .header("x-forwarded-for", from)
            .form(&[
                ("grant_type", "password"),
                ("username", user.as_str()),
                ("password", "guess"),
            ])
            .send()
    };
    // 150 concurrent guesses at one user, and 60 at 30 users (credential stuffing), from one address.
    let mut attack: Vec<_> = (0..150)
        .map(|_| guess("victim".into(), "203.0.113.9"))
        .collect();
    attack.extend((0..60).map(|i| guess(format!("user{}", i % 30), "203.0.113.9")));
    let legit = others_sign_in(&s, &f);
    let (answers, legit) = tokio::join!(futures_util::future::join_all(attack), legit);
    let mut checked = 0;
    let mut throttled = 0;
    for a in answers {
        let a = answer(a.unwrap()).await;
        match a.status.as_u16() {
            400 => checked += 1,
            429 => {
                throttled += 1;
                assert!(a.headers.contains_key("retry-after"));
            }
            other => panic!("unexpected {other}: {}", a.json),
        }
    }
    eprintln!("attack: {checked} passwords checked, {throttled} refused with 429");
    // Only the free failures (5 per user, 20 per address) and a few racing them were checked.
    assert!(
        checked <= 40,
        "{checked} guesses reached the password check"
    );
    assert!(
        throttled >= 170,
        "only {throttled} of 210 guesses were throttled"
    );
    assert!(
        legit.iter().all(|s| *s == 200),
        "other users and clients were not served: {legit:?}"
    );
    // The victim's own correct password waits out the back-off, from the attacker's address too.
    let from_attacker = http
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .header("x-forwarded-for", "203.0.113.9")
        .form(&[
            ("grant_type", "password"),
            ("username", "user0"),
            ("password", "secret-pw"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(from_attacker.status(), 429);
}
