use super::*;
use crate::config::Config;
use serde_json::json;

const SECRET: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE";

/// What a host was asked to do, in order.
#[derive(Debug, PartialEq, Eq)]
enum Did {
    Count(SyncCounter),
    Age(u64),
    Warn(String),
    Dispatch(String, Vec<(String, String)>, u64),
    Handled,
}

/// A host that records what edge sync asks of it; `refuse` makes dispatches fail.
struct Fake {
    now: u64,
    poller: Poller,
    state: Option<EdgeState>,
    did: Vec<Did>,
    refuse: bool,
}

impl Fake {
    fn new(cfg: &Config) -> Self {
        Self {
            now: 1_000,
            poller: Poller::default(),
            state: Some(EdgeState::new(cfg, 1_000)),
            did: Vec::new(),
            refuse: false,
        }
    }

    fn dispatches(&self) -> Vec<&Vec<(String, String)>> {
        self.did
            .iter()
            .filter_map(|d| match d {
                Did::Dispatch(_, headers, _) => Some(headers),
                _ => None,
            })
            .collect()
    }
}

impl EdgeHost for Fake {
    fn now(&self) -> u64 {
        self.now
    }

    fn with_edge<R>(&mut self, f: impl FnOnce(&mut Poller, &mut EdgeState) -> R) -> Option<R> {
        Some(f(&mut self.poller, self.state.as_mut()?))
    }

    fn count(&mut self, counter: SyncCounter) {
        self.did.push(Did::Count(counter));
    }

    fn set_age(&mut self, seconds: u64) {
        self.did.push(Did::Age(seconds));
    }

    fn warn(&mut self, message: &str) {
        self.did.push(Did::Warn(message.to_owned()));
    }

    fn dispatch(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u32, String> {
        let headers = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        self.did
            .push(Did::Dispatch(cluster.to_owned(), headers, timeout_ms));
        if self.refuse {
            Err("no such cluster".to_owned())
        } else {
            Ok(7)
        }
    }

    fn answer_handled(&mut self) {
        self.did.push(Did::Handled);
    }
}

fn cfg() -> Config {
    Config::parse(
        br#"{"edge_sync":{"cluster":"issuer","authority":"issuer.local","client_id":"edge","client_secret":"s","node":"edge-1"},"dpop":{"public_origin":"https://api.example.com"}}"#,
    )
    .unwrap()
}

fn snapshot() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cursor": 1, "keys_version": "v1", "full": true,
        "revoked": [{"kind": "user", "name": "u1", "seq": 1, "at": 1, "until": 9_999}],
        "keys": [{"kid": 1, "secret": SECRET}], "max_token_lifetime_seconds": 3600,
    }))
    .unwrap()
}

#[test]
fn a_tick_sets_the_age_and_sends_the_poll_with_every_header() {
    let cfg = cfg();
    let sync = cfg.edge_sync.as_ref();
    let mut host = Fake::new(&cfg);
    let id = EdgeIdentity::new(None, 0x12_3456_789a, 3);
    tick(&mut host, sync, Some(&id), 0);
    let [Did::Age(_), Did::Dispatch(cluster, headers, timeout)] = host.did.as_slice() else {
        panic!("{:?}", host.did);
    };
    assert_eq!((cluster.as_str(), *timeout), ("issuer", 2_000));
    let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            ":method",
            ":path",
            ":authority",
            "authorization",
            "accept",
            NODE_HEADER,
            VM_HEADER
        ]
    );
    assert_eq!(headers[2].1, "issuer.local");
    assert_eq!(
        headers[5].1, "edge-1",
        "the configured node, Envoy naming none"
    );
    assert_eq!(headers[6].1, id.vm);
    // One poll under way: the next tick sends none.
    host.did.clear();
    tick(&mut host, sync, Some(&id), 0);
    assert!(host.dispatches().is_empty(), "{:?}", host.did);
}

#[test]
fn without_an_identity_the_poll_names_no_node_or_vm() {
    let cfg = cfg();
    let mut host = Fake::new(&cfg);
    tick(&mut host, cfg.edge_sync.as_ref(), None, 0);
    let headers = host.dispatches();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].len(), 5);
}

#[test]
fn an_answer_is_applied_counted_and_handed_back() {
    let cfg = cfg();
    let sync = cfg.edge_sync.as_ref().unwrap();
    let mut host = Fake::new(&cfg);
    tick(&mut host, Some(sync), None, 0);
    host.did.clear();
    let body = snapshot();
    answered(
        &mut host,
        sync,
        None,
        7,
        body.len(),
        || 200,
        || body.clone(),
    );
    assert_eq!(
        host.did,
        [
            Did::Handled,
            Did::Count(SyncCounter::FirstOk),
            Did::Count(SyncCounter::Ok),
            Did::Age(0)
        ]
    );
    assert!(host.state.as_ref().unwrap().caught_up());
}

#[test]
fn an_answer_to_another_call_or_too_large_is_not_read() {
    let cfg = cfg();
    let sync = cfg.edge_sync.as_ref().unwrap();
    let mut host = Fake::new(&cfg);
    tick(&mut host, Some(sync), None, 0);
    host.did.clear();
    let unread = || -> Vec<u8> { panic!("read an answer it must not") };
    answered(&mut host, sync, None, 8, 10, || 200, unread);
    assert!(host.did.is_empty(), "{:?}", host.did);
    answered(
        &mut host,
        sync,
        None,
        7,
        MAX_ANSWER_BYTES + 1,
        || 200,
        unread,
    );
    assert_eq!(
        host.did[..2],
        [Did::Handled, Did::Count(SyncCounter::Failed)]
    );
    assert!(matches!(&host.did[2], Did::Warn(w) if w.contains("edge sync failed")));
}

#[test]
fn a_poll_that_cannot_be_sent_fails_with_the_hosts_reason() {
    let cfg = cfg();
    let mut host = Fake::new(&cfg);
    host.refuse = true;
    tick(&mut host, cfg.edge_sync.as_ref(), None, 0);
    assert_eq!(host.did.len(), 4, "{:?}", host.did);
    assert_eq!(host.did[2], Did::Count(SyncCounter::Failed));
    assert!(matches!(&host.did[3], Did::Warn(w) if w.contains("no such cluster")));
    // The next poll waits a poll interval.
    host.did.clear();
    tick(&mut host, cfg.edge_sync.as_ref(), None, 0);
    assert!(host.dispatches().is_empty(), "{:?}", host.did);
}

#[test]
fn without_a_state_nothing_happens() {
    let cfg = cfg();
    let mut host = Fake::new(&cfg);
    host.state = None;
    tick(&mut host, cfg.edge_sync.as_ref(), None, 5);
    assert!(host.did.is_empty(), "{:?}", host.did);
}
