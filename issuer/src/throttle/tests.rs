//! The back-off's rules, on the in-memory book.

use super::*;

async fn go<'t>(
    t: &'t Throttle,
    user: &str,
    addr: Option<IpAddr>,
    now: u64,
) -> Result<Attempt<'t>, u64> {
    let account = match user.strip_prefix("dir:") {
        Some(name) => Account::directory(name),
        None => Account::Local(user.to_owned()),
    };
    match t.attempt(&account, addr, now).await.unwrap() {
        Turn::Go(a) => Ok(a),
        Turn::Wait(w) => Err(w),
    }
}

async fn fail(t: &Throttle, user: &str, addr: Option<IpAddr>, now: u64) -> Result<(), u64> {
    go(t, user, addr, now).await?.failed(now).await.unwrap();
    Ok(())
}

#[tokio::test]
async fn a_lease_goes_to_one_taker_until_it_runs_out_and_charges_nobody() {
    let t = Throttle::in_memory(ThrottlePolicy::default());
    assert!(t.try_lease("recheck", 100, 59).await.unwrap());
    assert!(!t.try_lease("recheck", 100, 59).await.unwrap(), "held");
    assert!(
        !t.try_lease("recheck", 158, 59).await.unwrap(),
        "still held"
    );
    assert!(
        t.try_lease("other", 158, 59).await.unwrap(),
        "leases are by name"
    );
    assert!(t.try_lease("recheck", 159, 59).await.unwrap(), "ran out");
    assert!(
        go(&t, "recheck", None, 159).await.is_ok(),
        "a user of that name is not held back"
    );
}

/// Binds of one directory entry: charged before each is sent ([`Throttle::take_directory_bind`],
/// as the grant asks it), so `true` when the bind goes.
async fn bind(t: &Throttle, entry: &str, now: u64) -> bool {
    t.take_directory_bind(entry, now).await.unwrap()
}

/// Refused binds reach the directory at most [`DIRECTORY_FREE_FAILURES`] times in a row,
/// then one per [`DIRECTORY_WAIT`], from any number of addresses and under any spelling of
/// the name that finds the entry (case, UPN): with AD's counter reset after 10 minutes, its
/// count never passes 4 through the issuer.
#[tokio::test]
async fn refused_binds_stay_below_the_directory_lock_out() {
    let t = Throttle::in_memory(ThrottlePolicy::default());
    let names = ["alice", "Alice", "ALICE", "alice@media.test", "aLiCe"];
    let mut reached = Vec::new();
    let mut now = 1_000;
    for i in 0..400u32 {
        let addr = Some(IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8]));
        let name = format!("dir:{}", names[i as usize % names.len()]);
        let Ok(a) = go(&t, &name, addr, now).await else {
            now += 15;
            continue;
        };
        if bind(&t, "id:alice", now).await {
            reached.push(now);
        }
        a.failed(now).await.unwrap();
        now += 15;
    }
    assert_eq!(&reached[..4], &[1_000, 1_015, 1_030, 1_045], "{reached:?}");
    for (i, at) in reached.iter().enumerate() {
        let in_window = reached[i..].iter().take_while(|t| **t < at + 600).count();
        assert!(
            in_window <= 4,
            "{in_window} refused binds within 10 minutes from {at}"
        );
    }
    assert!(
        reached.len() >= 6,
        "one every 15 minutes goes on: {reached:?}"
    );
    // An unknown name meets the same count (no entry, the name's own), under any spelling: 429
    // alike.
    for k in 0..DIRECTORY_FREE_FAILURES {
        let a = go(&t, "dir:nobody", None, now + u64::from(k))
            .await
            .unwrap();
        a.failed(now).await.unwrap();
    }
    for spelling in [
        "dir:NOBODY",
        "dir: nobody",
        "dir:ｎｏｂｏｄｙ",
        "dir:nobody\u{a0}",
    ] {
        assert!(
            go(&t, spelling, None, now + 5).await.is_err(),
            "{spelling:?} held like a real name"
        );
    }
    // Ordinary wrong passwords (a local user) are not held to it.
    for _ in 0..5 {
        fail(&t, "bob", None, now).await.unwrap();
    }
    // The real user's success starts the entry's count over.
    let later = now + DIRECTORY_WAIT + 1;
    let a = go(&t, "dir:alice", None, later).await.unwrap();
    assert!(bind(&t, "id:alice", later).await);
    a.succeeded_in_directory(later, "id:alice").await.unwrap();
    for _ in 0..DIRECTORY_FREE_FAILURES {
        assert!(bind(&t, "id:alice", later).await, "counted afresh");
    }
}

/// Sign-ins of one entry under many spellings at once: each bind is counted before it is sent,
/// so no more than the bound go, however many are in flight and none settled yet.
#[tokio::test]
async fn concurrent_binds_of_one_entry_are_counted_before_they_go() {
    let t = throttle();
    let mut went = 0;
    for _ in 0..20 {
        if bind(&t, "id:bob", 100).await {
            went += 1;
        }
    }
    assert_eq!(went, DIRECTORY_FREE_FAILURES);
    assert!(bind(&t, "id:other", 100).await, "entries are counted apart");
}

/// Guesses at a name for the directory never charge the local user whose name folds alike:
/// the break-glass account stays usable.
#[tokio::test]
async fn directory_guesses_never_hold_a_local_user() {
    let t = throttle();
    let ip = Some("203.0.113.5".parse().unwrap());
    for _ in 0..60 {
        if let Ok(a) = go(&t, "dir:BREAKGLASS", ip, 100).await {
            a.failed(100).await.unwrap();
        }
    }
    assert!(go(&t, "dir:breakglass", None, 100).await.is_err());
    assert!(go(&t, "breakglass", None, 100).await.is_ok());
    assert!(
        go(&t, "breakglass", Some("198.51.100.1".parse().unwrap()), 100)
            .await
            .is_ok()
    );
}

/// The addresses of one IPv6 /64 are one address to the back-off.
#[tokio::test]
async fn an_ipv6_prefix_is_one_address() {
    let t = throttle();
    let addr = |i: u16| Some(IpAddr::from([0x2001, 0xdb8, 1, 2, i, 0, 0, 1]));
    for i in 0..21 {
        assert!(fail(&t, &format!("user{i}"), addr(i), 50).await.is_ok());
    }
    assert!(go(&t, "fresh", addr(999), 50).await.is_err());
    let elsewhere = Some(IpAddr::from([0x2001, 0xdb8, 1, 3, 0, 0, 0, 1]));
    assert!(go(&t, "fresh", elsewhere, 50).await.is_ok());
}

async fn succeed(t: &Throttle, user: &str, addr: Option<IpAddr>, now: u64) {
    go(t, user, addr, now)
        .await
        .expect("not throttled")
        .succeeded(now)
        .await
        .unwrap();
}

fn throttle() -> Throttle {
    Throttle::in_memory(ThrottlePolicy::default())
}

#[tokio::test]
async fn backs_off_growing_then_forgives() {
    let t = throttle();
    let ip = Some("10.0.0.1".parse().unwrap());
    for _ in 0..6 {
        assert_eq!(fail(&t, "bob", ip, 100).await, Ok(()));
    }
    assert_eq!(
        go(&t, "bob", ip, 100).await.err(),
        Some(1),
        "the sixth failure set a 1 s wait"
    );
    assert_eq!(fail(&t, "bob", ip, 101).await, Ok(()));
    assert_eq!(
        go(&t, "bob", ip, 101).await.err(),
        Some(2),
        "each further failure doubles it"
    );
    assert!(
        go(&t, "alice", None, 101).await.is_ok(),
        "other users are not affected"
    );
    succeed(&t, "bob", ip, 103).await;
    assert!(go(&t, "bob", None, 103).await.is_ok());
}

#[tokio::test]
async fn an_address_is_charged_before_its_attempts_finish() {
    let t = throttle();
    let ip = Some("10.0.0.3".parse().unwrap());
    // Nothing finishes: the free attempts and the one that sets the wait get through.
    let mut in_flight = Vec::new();
    for i in 0..100 {
        if let Ok(a) = go(&t, &format!("user{i}"), ip, 50).await {
            in_flight.push(a);
        }
    }
    assert_eq!(in_flight.len(), 21);
    // Abandoned (the clients went away): the address gets its charges back.
    drop(in_flight);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(go(&t, "later", ip, 50).await.is_ok());
}

#[tokio::test]
async fn successes_cost_nothing() {
    let t = throttle();
    let ip = Some("10.0.0.4".parse().unwrap());
    for i in 0..100 {
        succeed(&t, "busy", ip, 50 + i).await;
    }
}

#[tokio::test]
async fn address_is_throttled_across_users_and_refunded_on_success() {
    let t = throttle();
    let ip = Some("10.0.0.2".parse().unwrap());
    for i in 0..21 {
        assert!(fail(&t, &format!("user{i}"), ip, 50).await.is_ok());
    }
    assert!(go(&t, "fresh", ip, 50).await.is_err());
    assert!(go(&t, "fresh", None, 50).await.is_ok());
}

#[tokio::test]
async fn a_guesser_elsewhere_does_not_lock_the_user_out() {
    let t = throttle();
    let attacker = Some("203.0.113.9".parse().unwrap());
    let user = Some("198.51.100.7".parse().unwrap());
    for _ in 0..6 {
        assert_eq!(fail(&t, "bob", attacker, 100).await, Ok(()));
    }
    assert!(go(&t, "bob", attacker, 100).await.is_err());
    succeed(&t, "bob", user, 100).await;
    assert!(
        go(&t, "bob", attacker, 100).await.is_err(),
        "bob's success does not clear the attacker's back-off"
    );
}

#[tokio::test]
async fn guesses_spread_over_addresses_are_bounded_per_user() {
    let t = throttle();
    // Each address stays within its free failures; the user's total does not.
    let addr = |i: u32| Some(IpAddr::from([10, 1, (i / 250) as u8, (i % 250) as u8]));
    for i in 0..51 {
        assert_eq!(fail(&t, "carol", addr(i), 100).await, Ok(()), "guess {i}");
    }
    assert_eq!(go(&t, "carol", addr(1000), 100).await.err(), Some(1));
    // A success of the attacker's own account does not reset carol's total.
    succeed(&t, "mallory", addr(0), 100).await;
    assert!(go(&t, "carol", addr(1001), 100).await.is_err());
    assert!(
        go(&t, "carol", addr(1001), 101).await.is_ok(),
        "only a wait"
    );
}

#[tokio::test]
async fn delay_is_capped() {
    let t = throttle();
    for i in 0..200 {
        let _ = fail(&t, "x", None, 1000 + i * 400).await;
    }
    assert_eq!(go(&t, "x", None, 1000 + 199 * 400).await.err(), Some(300));
}

#[tokio::test]
async fn a_failure_reports_the_back_off_it_engages_once() {
    let t = throttle();
    let ip: IpAddr = "10.0.0.7".parse().unwrap();
    for now in 100..105 {
        let a = go(&t, "dave", Some(ip), now).await.unwrap();
        assert!(a.failed(now).await.unwrap().is_empty(), "free failures");
    }
    let blocked = go(&t, "dave", Some(ip), 105).await.unwrap();
    let blocked = blocked.failed(105).await.unwrap();
    assert_eq!(
        blocked,
        vec![Blocked {
            subject: serde_json::json!({"user": "dave", "address": "10.0.0.7"}),
            failures: 6,
            until: 106,
        }]
    );
    assert!(
        go(&t, "dave", Some(ip), 105).await.is_err(),
        "refused, not charged"
    );
    // Once the wait is over, the next failure blocks again: each block is reported, the attempts
    // refused while it lasts are not.
    let a = go(&t, "dave", Some(ip), 106).await.unwrap();
    let again = a.failed(106).await.unwrap();
    assert_eq!(again.len(), 1, "{again:?}");
    // Guesses at many names from one address block the address once, on its 21st failure.
    let t = throttle();
    let mut engaged = Vec::new();
    for (i, now) in (200..221).enumerate() {
        let a = go(&t, &format!("user{i}"), Some(ip), now).await.unwrap();
        engaged.extend(a.failed(now).await.unwrap());
    }
    assert_eq!(engaged.len(), 1, "{engaged:?}");
    assert_eq!(
        engaged[0].subject,
        serde_json::json!({"address": "10.0.0.7"})
    );
}
