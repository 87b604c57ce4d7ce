//! Which directory server to ask: the configured order, skipping a server that failed until its
//! cool-down ends (failover), then letting one request at a time probe it, and going back to it
//! once it answers again (failback). Pure bookkeeping over [`Instant`]s, so it is tested without
//! a network.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first cool-down of a server that failed; it doubles while the server keeps failing.
pub const COOL_DOWN: Duration = Duration::from_secs(5);
/// The longest cool-down.
pub const MAX_COOL_DOWN: Duration = Duration::from_secs(60);

/// What a server's last outcome changed, for the log and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing new.
    Same,
    /// The server was answering and now failed: it cools down.
    FellOver,
    /// The server had failed and answered again.
    CameBack,
}

/// One server's health: cooling down after failures, or probed again.
#[derive(Debug, Clone, Copy, Default)]
struct ServerHealth {
    /// Skipped until then.
    cooling_until: Option<Instant>,
    /// Failures in a row (those of requests under way when it failed count once).
    failures: u32,
    /// A request is probing the server after its cool-down, until then at most.
    probing_until: Option<Instant>,
}

/// The health of each server, by its index in `urls`.
#[derive(Debug)]
pub struct Health {
    states: Mutex<Vec<ServerHealth>>,
    /// How long a probe may take (the per-server timeout).
    probe_for: Duration,
}

impl Health {
    /// `servers` servers, all presumed up; a probe takes at most `probe_for`.
    pub fn new(servers: usize, probe_for: Duration) -> Self {
        Self {
            states: Mutex::new(vec![ServerHealth::default(); servers]),
            probe_for,
        }
    }

    fn states(&self) -> std::sync::MutexGuard<'_, Vec<ServerHealth>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The servers to try at `now`, in order: every server up, in configured order, and a
    /// server whose cool-down ended to the one request that probes it (the others skip it until
    /// the probe answers or its time is up); when none is left, the one whose cool-down ends
    /// first, so that a request always makes one real attempt and the first one after an outage
    /// finds the directory back.
    pub fn order(&self, now: Instant) -> Vec<usize> {
        let mut states = self.states();
        let mut ready = Vec::new();
        for (i, s) in states.iter_mut().enumerate() {
            if s.failures == 0 {
                ready.push(i);
                continue;
            }
            let cooled = s.cooling_until.is_none_or(|t| t <= now);
            if cooled && s.probing_until.is_none_or(|t| t <= now) {
                s.probing_until = Some(now + self.probe_for);
                ready.push(i);
            }
        }
        if !ready.is_empty() {
            return ready;
        }
        (0..states.len())
            .min_by_key(|&i| states[i].cooling_until)
            .into_iter()
            .collect()
    }

    /// Server `i` failed at `now`: it cools down, for longer each failure in a row. A failure
    /// while it already cools down (a request under way when it first failed) changes nothing.
    pub fn failed(&self, i: usize, now: Instant) -> Change {
        let mut states = self.states();
        let Some(s) = states.get_mut(i) else {
            return Change::Same;
        };
        if s.cooling_until.is_some_and(|t| t > now) {
            return Change::Same;
        }
        let was_up = s.failures == 0;
        let doublings = s.failures.min(4);
        s.failures = s.failures.saturating_add(1);
        s.probing_until = None;
        let cool = (COOL_DOWN * 2u32.pow(doublings)).min(MAX_COOL_DOWN);
        s.cooling_until = Some(now + cool);
        if was_up {
            Change::FellOver
        } else {
            Change::Same
        }
    }

    /// Server `i` answered.
    pub fn answered(&self, i: usize) -> Change {
        let mut states = self.states();
        let Some(s) = states.get_mut(i) else {
            return Change::Same;
        };
        let was_down = s.failures > 0;
        *s = ServerHealth::default();
        if was_down {
            Change::CameBack
        } else {
            Change::Same
        }
    }

    /// Whether server `i` is answering (not cooling down and no failure since it last answered).
    pub fn is_up(&self, i: usize) -> bool {
        self.states().get(i).is_some_and(|s| s.failures == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: Duration = Duration::from_secs(2);

    #[test]
    fn a_failed_server_is_skipped_until_its_cool_down_ends_then_probed_by_one_request() {
        let h = Health::new(3, PROBE);
        let t0 = Instant::now();
        assert_eq!(h.order(t0), vec![0, 1, 2]);
        assert_eq!(h.failed(0, t0), Change::FellOver);
        assert_eq!(h.order(t0), vec![1, 2]);
        assert_eq!(
            h.order(t0 + COOL_DOWN - Duration::from_millis(1)),
            vec![1, 2]
        );
        let back = t0 + COOL_DOWN;
        assert_eq!(h.order(back), vec![0, 1, 2], "failback: probed first");
        assert_eq!(h.order(back), vec![1, 2], "one probe at a time");
        assert_eq!(
            h.order(back + PROBE),
            vec![0, 1, 2],
            "a probe that never ended"
        );
        assert_eq!(h.answered(0), Change::CameBack);
        assert_eq!(h.order(back), vec![0, 1, 2]);
        assert_eq!(h.answered(0), Change::Same);
        assert!(h.is_up(0));
    }

    #[test]
    fn failures_of_requests_under_way_count_once_and_probes_double_the_cool_down() {
        let h = Health::new(2, PROBE);
        let t0 = Instant::now();
        assert_eq!(h.failed(1, t0), Change::FellOver);
        for _ in 0..31 {
            assert_eq!(h.failed(1, t0 + Duration::from_millis(10)), Change::Same);
        }
        assert_eq!(
            h.order(t0 + COOL_DOWN),
            vec![0, 1],
            "still the first cool-down"
        );
        assert_eq!(
            h.failed(1, t0 + COOL_DOWN),
            Change::Same,
            "the probe failed"
        );
        assert_eq!(h.order(t0 + COOL_DOWN * 2), vec![0], "twice as long");
        assert_eq!(h.order(t0 + COOL_DOWN * 3), vec![0, 1]);
        let mut t = t0 + COOL_DOWN * 3;
        for _ in 0..10 {
            h.failed(1, t);
            t += MAX_COOL_DOWN;
        }
        let last = t - MAX_COOL_DOWN;
        assert_eq!(
            h.order(last + MAX_COOL_DOWN - Duration::from_millis(1)),
            vec![0]
        );
        assert_eq!(h.order(last + MAX_COOL_DOWN), vec![0, 1]);
    }

    #[test]
    fn with_every_server_cooling_the_one_back_soonest_is_still_tried() {
        let h = Health::new(2, PROBE);
        let t0 = Instant::now();
        h.failed(0, t0);
        h.failed(1, t0 + Duration::from_secs(1));
        assert_eq!(h.order(t0 + Duration::from_secs(2)), vec![0]);
        assert_eq!(
            h.order(t0 + Duration::from_secs(2)),
            vec![0],
            "not held by a probe"
        );
        assert!(!h.is_up(0) && !h.is_up(1));
    }

    #[test]
    fn an_unknown_index_changes_nothing() {
        let h = Health::new(1, PROBE);
        assert_eq!(h.failed(5, Instant::now()), Change::Same);
        assert_eq!(h.answered(5), Change::Same);
        assert!(!h.is_up(5));
    }
}
