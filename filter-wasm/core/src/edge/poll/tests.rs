use super::*;
use crate::config::Config;
use crate::edge::parse_answer;
use serde_json::{json, Value};

const SECRET: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE";

fn cfg() -> Config {
    Config::parse(
        br#"{"edge_sync":{"cluster":"issuer","client_id":"edge","client_secret":"s","poll_interval_seconds":2},"dpop":{"public_origin":"https://api.example.com"}}"#,
    )
    .unwrap()
}

fn body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

/// A snapshot page of revocation `seq` (cursor `seq`), with the keys.
fn snapshot_page(seq: u64, more: bool) -> Vec<u8> {
    body(json!({
        "cursor": seq, "keys_version": "v1", "full": true, "more": more,
        "revoked": [{"kind": "user", "name": format!("u{seq}"), "seq": seq, "at": 1, "until": 9_999}],
        "keys": [{"kid": 1, "secret": SECRET}], "max_token_lifetime_seconds": 3600,
    }))
}

fn idle(cursor: u64) -> Vec<u8> {
    body(json!({"cursor": cursor, "keys_version": "v1", "revoked": []}))
}

/// A poller, the configuration and the state it polls for, started at 1,000.
struct Vm {
    poller: Poller,
    cfg: Config,
    state: EdgeState,
    next_call: u32,
    /// The time of the last tick or answer: when a poll is dispatched.
    now: u64,
}

impl Vm {
    fn new() -> Self {
        let cfg = cfg();
        let state = EdgeState::new(&cfg, 1_000);
        Self {
            poller: Poller::default(),
            cfg,
            state,
            next_call: 1,
            now: 1_000,
        }
    }

    fn sync(&self) -> &EdgeSync {
        self.cfg.edge_sync.as_ref().unwrap()
    }

    fn tick(&mut self, now: u64, refused: u64) -> Todo {
        self.now = now;
        let sync = self.cfg.edge_sync.as_ref();
        self.poller.tick(now, refused, sync, Some(&self.state))
    }

    /// Dispatches the poll a todo asks for, as the adapter does; returns its call id.
    fn dispatch(&mut self, todo: &Todo) -> u32 {
        assert!(todo.poll.is_some(), "no poll to dispatch: {todo:?}");
        let call = self.next_call;
        self.next_call += 1;
        self.poller.dispatched(call, self.now);
        call
    }

    /// The answer to call `call` arrives at `now`.
    fn answer(&mut self, call: u32, now: u64, status: u32, answer: &[u8]) -> Todo {
        assert!(self.poller.answer_to(call), "call {call} is not under way");
        self.now = now;
        let checked = parse_answer(status, answer, &self.state);
        let sync = self.cfg.edge_sync.clone().unwrap();
        self.poller.answered(now, &sync, &mut self.state, checked)
    }
}

#[test]
fn polls_a_snapshot_at_once_then_every_interval_one_at_a_time() {
    let mut vm = Vm::new();
    let first = vm.tick(1_000, 0);
    assert_eq!(first.poll.as_deref(), Some("/apiv2/oauth/edge"));
    assert_eq!((first.count, first.warn.as_deref()), (None, None));
    let call = vm.dispatch(&first);
    // Under way: no other poll until it ends.
    assert_eq!(vm.tick(1_001, 0), Todo::default());
    assert_eq!(vm.tick(1_005, 0), Todo::default());
    // The answer to another call is not ours.
    assert!(!vm.poller.answer_to(call + 7));
    let done = vm.answer(call, 1_005, 200, &snapshot_page(3, false));
    assert_eq!(
        done,
        Todo {
            count: Some(PollEnd::Ok { first_whole: true }),
            warn: None,
            poll: None,
            wait: 0,
        }
    );
    // The next a poll interval (2 s) after the last ended, asking for what changed.
    assert_eq!(vm.tick(1_006, 0), Todo::default());
    let next = vm.tick(1_007, 0);
    assert_eq!(
        next.poll.as_deref(),
        Some("/apiv2/oauth/edge?since=3&keys=v1")
    );
    let call = vm.dispatch(&next);
    let done = vm.answer(call, 1_007, 200, &idle(3));
    assert_eq!(done.count, Some(PollEnd::Ok { first_whole: false }));
    assert_eq!(done.poll, None);
    // A new configuration polls at the next tick, whenever the last poll was.
    vm.poller.configured();
    assert!(vm.tick(1_008, 0).poll.is_some());
}

#[test]
fn more_asks_again_at_once_and_only_the_last_page_counts_as_the_first_whole_answer() {
    let mut vm = Vm::new();
    let first = vm.tick(1_000, 0);
    let call = vm.dispatch(&first);
    let page = vm.answer(call, 1_000, 200, &snapshot_page(1, true));
    assert_eq!(page.count, Some(PollEnd::Ok { first_whole: false }));
    assert_eq!(
        page.poll.as_deref(),
        Some("/apiv2/oauth/edge?since=1&keys=v1")
    );
    let call = vm.dispatch(&page);
    let last = body(json!({"cursor": 2, "keys_version": "v1", "revoked": [
        {"kind": "user", "name": "u2", "seq": 2, "at": 1, "until": 9_999}]}));
    let done = vm.answer(call, 1_000, 200, &last);
    assert_eq!(done.count, Some(PollEnd::Ok { first_whole: true }));
    assert_eq!(done.poll, None);
    // "more" without progress waits for the next poll.
    let next = vm.tick(1_002, 0);
    let call = vm.dispatch(&next);
    let empty = body(json!({"cursor": 2, "keys_version": "v1", "more": true, "revoked": []}));
    let done = vm.answer(call, 1_002, 200, &empty);
    assert_eq!(done.count, Some(PollEnd::Ok { first_whole: false }));
    assert_eq!(done.poll, None);
}

#[test]
fn failures_warn_at_once_then_once_a_minute_and_say_what_is_verified_meanwhile() {
    let mut vm = Vm::new();
    let first = vm.tick(1_000, 0);
    let call = vm.dispatch(&first);
    // Before any good answer.
    let failed = vm.answer(call, 1_003, 503, b"");
    assert_eq!(failed.count, Some(PollEnd::Failed));
    assert_eq!(
        failed.warn.as_deref(),
        Some(
            "mms_auth: edge sync failed: the feed answered 503; no good answer since the start \
             3 s ago"
        )
    );
    assert_eq!(failed.poll, None);
    // Retried a poll interval later; warned again only a minute after the last warning.
    assert_eq!(vm.tick(1_004, 0).poll, None);
    let mut now = 1_005;
    let mut warnings = vec![];
    while now < 1_070 {
        let todo = vm.tick(now, 0);
        let call = vm.dispatch(&todo);
        let failed = vm.answer(call, now, 200, b"garbage");
        assert_eq!(failed.count, Some(PollEnd::Failed));
        warnings.extend(failed.warn.map(|w| (now, w)));
        now += 2;
    }
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, 1_063);
    assert!(warnings[0].1.contains("not a feed answer"), "{warnings:?}");
    // A call that cannot be dispatched is a failure too, and the end of the failures is told.
    let todo = vm.tick(now, 0);
    assert!(todo.poll.is_some());
    let sync = vm.sync().clone();
    let failed = vm
        .poller
        .failed(now, &sync, &vm.state, "cannot call cluster \"issuer\"");
    assert_eq!((failed.count, failed.warn), (Some(PollEnd::Failed), None));
    assert_eq!(vm.tick(now + 1, 0).poll, None, "next a poll interval later");
    let todo = vm.tick(now + 2, 0);
    let call = vm.dispatch(&todo);
    let ok = vm.answer(call, now + 2, 200, &snapshot_page(1, false));
    assert_eq!(ok.count, Some(PollEnd::Ok { first_whole: true }));
    assert_eq!(
        ok.warn.as_deref(),
        Some("mms_auth: edge sync resumed after 70 s")
    );
    // After a good answer, a failure says how old the state verified with is.
    let todo = vm.tick(now + 4, 0);
    let call = vm.dispatch(&todo);
    assert_eq!(vm.answer(call, now + 4, 200, &idle(1)).warn, None);
    let todo = vm.tick(now + 6, 0);
    let call = vm.dispatch(&todo);
    let failed = vm.answer(call, now + 16, 0, b"");
    assert_eq!(
        failed.warn.as_deref(),
        Some(
            "mms_auth: edge sync failed: the feed answered 0; verifying with the state of 12 s \
             ago"
        )
    );
}

#[test]
fn requests_refused_before_the_first_answer_are_told_at_once_then_once_a_minute() {
    let mut vm = Vm::new();
    let first = vm.tick(1_000, 0);
    assert_eq!(first.warn, None, "nothing refused, nothing to say");
    // No poll is dispatched (none answers): only the refusals speak.
    let warned = vm.tick(1_001, 2).warn;
    assert_eq!(
        warned.as_deref(),
        Some(
            "mms_auth: no good answer from edge sync yet, 1 s after the start: 2 requests with \
             a token refused with 503 (no revocation is known until the issuer answers)"
        )
    );
    // The refusals of the next minute are summed into the next warning.
    for now in 1_002..1_061 {
        assert_eq!(vm.tick(now, 1).warn, None, "{now}");
    }
    let warned = vm.tick(1_061, 1).warn.unwrap();
    assert!(
        warned.contains("61 s after the start: 60 requests"),
        "{warned}"
    );
    // None refused since: nothing to say, however long after.
    assert_eq!(vm.tick(2_000, 0).warn, None);
    // Without edge sync or a state there is no poll, but refusals counted are still told.
    let mut alone = Poller::default();
    let todo = alone.tick(1_000, 1, None, None);
    assert_eq!(todo.poll, None);
    assert!(todo
        .warn
        .unwrap()
        .contains(", 0 s after the start: 1 requests"));
}

#[test]
fn a_poll_envoy_never_ends_is_given_up_past_its_timeout() {
    let mut vm = Vm::new();
    let first = vm.tick(1_000, 0);
    let call = vm.dispatch(&first);
    let done = vm.answer(call, 1_000, 200, &snapshot_page(3, false));
    assert_eq!(done.count, Some(PollEnd::Ok { first_whole: true }));
    let next = vm.tick(1_002, 0);
    let lost = vm.dispatch(&next);
    // Its timeout (2 s) and LOST_AFTER (5 s) pass without an answer or an end from Envoy.
    for now in 1_003..1_009 {
        assert_eq!(vm.tick(now, 0), Todo::default(), "{now}");
    }
    let given_up = vm.tick(1_009, 0);
    assert_eq!(given_up.count, Some(PollEnd::Failed));
    assert_eq!(given_up.poll, None);
    let warned = given_up.warn.unwrap();
    assert!(
        warned.contains("the poll sent 7 s ago was neither answered nor ended by Envoy"),
        "{warned}"
    );
    // A poll interval later the next one goes; a late answer to the lost one is not taken.
    assert_eq!(vm.tick(1_010, 0), Todo::default());
    let again = vm.tick(1_011, 0);
    assert!(again.poll.is_some(), "{again:?}");
    assert!(!vm.poller.answer_to(lost));
    let call = vm.dispatch(&again);
    let done = vm.answer(call, 1_011, 200, &idle(3));
    assert_eq!(done.count, Some(PollEnd::Ok { first_whole: false }));
    assert!(done.warn.unwrap().contains("resumed after 2 s"));
}

fn offering(cursor: u64, busy: bool) -> Vec<u8> {
    body(
        json!({"cursor": cursor, "keys_version": "v1", "revoked": [], "wait_max_seconds": 30, "busy": busy}),
    )
}

/// A VM past its first snapshot, its last answer `answer`; the todo that answer gave.
fn synced_then(vm: &mut Vm, answer: &[u8]) -> Todo {
    let first = vm.tick(1_000, 0);
    let call = vm.dispatch(&first);
    vm.answer(call, 1_000, 200, &snapshot_page(3, false));
    let next = vm.tick(1_002, 0);
    let call = vm.dispatch(&next);
    vm.answer(call, 1_002, 200, answer)
}

#[test]
fn an_issuer_that_offers_waits_is_asked_to_hold_each_poll_and_polled_again_at_once() {
    let mut vm = Vm::new();
    // The first snapshot asks for no wait: it is news.
    let todo = synced_then(&mut vm, &offering(3, false));
    assert_eq!(
        todo.poll.as_deref(),
        Some("/apiv2/oauth/edge?since=3&keys=v1&wait=20"),
        "the smaller of the offer (30) and wait_seconds (20), at once"
    );
    assert_eq!(todo.wait, 20);
    let call = vm.dispatch(&todo);
    // Held past timeout_ms: not lost before timeout, wait and LOST_AFTER have passed.
    assert_eq!(vm.tick(1_002 + 2 + 20 + LOST_AFTER - 1, 0), Todo::default());
    let again = vm.answer(call, 1_020, 200, &offering(3, false));
    assert_eq!(again.wait, 20);
    // Busy: the next waits for the poll interval, still asking to wait.
    let call = vm.dispatch(&again);
    let busy = vm.answer(call, 1_021, 200, &offering(3, true));
    assert_eq!((busy.poll, busy.wait), (None, 0));
    assert_eq!(vm.tick(1_022, 0), Todo::default());
    let later = vm.tick(1_023, 0);
    assert_eq!(later.wait, 20);
    // A failure forgets the offer: polled as before until an answer offers it again.
    let call = vm.dispatch(&later);
    let failed = vm.answer(call, 1_023, 400, b"{}");
    assert_eq!(failed.count, Some(PollEnd::Failed));
    let plain = vm.tick(1_025, 0);
    assert_eq!(
        plain.poll.as_deref(),
        Some("/apiv2/oauth/edge?since=3&keys=v1")
    );
    assert_eq!(plain.wait, 0);
}

#[test]
fn a_wait_given_up_as_lost_counts_its_wait_and_an_issuer_without_the_offer_is_polled() {
    let mut vm = Vm::new();
    let todo = synced_then(&mut vm, &offering(3, false));
    vm.dispatch(&todo);
    let lost = vm.tick(1_002 + 2 + 20 + LOST_AFTER, 0);
    assert_eq!(lost.count, Some(PollEnd::Failed));
    let mut old = Vm::new();
    let todo = synced_then(&mut old, &idle(3));
    assert_eq!(
        (todo.poll, todo.wait),
        (None, 0),
        "no offer: the poll interval"
    );
}

#[test]
fn polls_sent_at_once_are_bounded_per_second_and_wait_seconds_0_never_waits() {
    let mut vm = Vm::new();
    let mut todo = synced_then(&mut vm, &offering(3, false));
    let mut at_once = 1;
    while todo.poll.is_some() {
        let call = vm.dispatch(&todo);
        todo = vm.answer(call, 1_002, 200, &offering(3, false));
        at_once += 1;
    }
    assert_eq!(at_once, MAX_AT_ONCE + 1, "the one beyond the bound waits");
    // Answers that bring revocations are progress: polled at once however many.
    let mut busy_stream = Vm::new();
    let mut todo = synced_then(&mut busy_stream, &offering(3, false));
    for seq in 4..4 + 3 * u64::from(MAX_AT_ONCE) {
        let call = busy_stream.dispatch(&todo);
        let news = body(json!({
            "cursor": seq, "keys_version": "v1", "wait_max_seconds": 30,
            "revoked": [{"kind": "user", "name": format!("u{seq}"), "seq": seq, "at": 1, "until": 9_999}],
        }));
        todo = busy_stream.answer(call, 1_002, 200, &news);
        assert_eq!(todo.wait, 20, "revocation {seq} is followed at once");
    }
    let cfg = Config::parse(
        br#"{"edge_sync":{"cluster":"issuer","client_id":"edge","client_secret":"s","wait_seconds":0},"dpop":{"public_origin":"https://api.example.com"}}"#,
    )
    .unwrap();
    let mut never = Vm::new();
    never.state = EdgeState::new(&cfg, 1_000);
    never.cfg = cfg;
    let todo = synced_then(&mut never, &offering(3, false));
    assert_eq!((todo.poll, todo.wait), (None, 0));
}
