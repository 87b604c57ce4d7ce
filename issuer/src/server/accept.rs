//! What the accept loop does when `accept` fails.
//!
//! An error of one connection (the peer reset or aborted it before it was accepted) is skipped.
//! Anything else is an error of the listener itself, above all running out of file descriptors
//! (EMFILE, ENFILE) or kernel memory: accepting pauses, the pause doubling from
//! [`FIRST_PAUSE`] to at most [`MAX_PAUSE`] while the errors go on, so the loop does not spin
//! while idle connections are being closed and free descriptors; the waiting connections stay in
//! the listen backlog meanwhile. At most one warning is logged per [`WARN_EVERY`], with the
//! number of failures left out since the previous one.

use std::io;
use std::time::{Duration, Instant};

/// At most one warning per this.
pub const WARN_EVERY: Duration = Duration::from_secs(5);
/// The first pause after a failure.
pub const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The accept loop's failures, for pacing and logging.
#[derive(Debug, Default)]
pub struct AcceptErrors {
    last_warning: Option<Instant>,
    /// Failures not logged since the last warning.
    suppressed: u64,
    /// The current pause; zero after a successful accept.
    pause: Duration,
}

impl AcceptErrors {
    /// Records a failed accept at `now`; returns how long to pause before accepting again.
    pub fn failed(&mut self, e: &io::Error, now: Instant) -> Duration {
        if of_one_connection(e) {
            tracing::debug!(
                error = e.to_string(),
                "a connection failed before it was accepted"
            );
            return Duration::ZERO;
        }
        self.pause = (self.pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
        match self.warning_due(now) {
            Some(suppressed) => tracing::warn!(
                error = e.to_string(),
                suppressed,
                pause_ms = self.pause.as_millis() as u64,
                "accept failed; pausing accepts"
            ),
            None => self.suppressed += 1,
        }
        self.pause
    }

    /// Records a successful accept at `now`.
    pub fn succeeded(&mut self, now: Instant) {
        self.pause = Duration::ZERO;
        if self.suppressed > 0 {
            if let Some(suppressed) = self.warning_due(now) {
                tracing::warn!(suppressed, "accepting again after failures");
            }
        }
    }

    /// `Some(failures suppressed since the last warning)` if a warning may be logged at `now`
    /// (then counted as logged).
    fn warning_due(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last_warning
            .is_none_or(|last| now.saturating_duration_since(last) >= WARN_EVERY);
        if !due {
            return None;
        }
        self.last_warning = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// True for an error of the connection being accepted rather than of the listener.
fn of_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EMFILE on Linux and the BSDs.
    fn too_many_open_files() -> io::Error {
        io::Error::from_raw_os_error(24)
    }

    #[test]
    fn pauses_double_up_to_a_second_and_reset_on_success() {
        let mut errors = AcceptErrors::default();
        let now = Instant::now();
        let pauses: Vec<_> = (0..10)
            .map(|_| errors.failed(&too_many_open_files(), now))
            .collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[1], FIRST_PAUSE * 2);
        assert_eq!(pauses[9], MAX_PAUSE);
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
        errors.succeeded(now);
        assert_eq!(errors.failed(&too_many_open_files(), now), FIRST_PAUSE);
    }

    #[test]
    fn errors_of_one_connection_do_not_pause() {
        let mut errors = AcceptErrors::default();
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(errors.failed(&aborted, Instant::now()), Duration::ZERO);
        assert_eq!(errors.suppressed, 0);
    }

    #[test]
    fn one_warning_per_window_counting_the_rest() {
        let mut errors = AcceptErrors::default();
        let t0 = Instant::now();
        assert_eq!(
            errors.warning_due(t0),
            Some(0),
            "the first is logged at once"
        );
        for i in 1..=100u64 {
            let now = t0 + Duration::from_millis(i * 10);
            assert_eq!(errors.warning_due(now), None);
            errors.suppressed += 1;
        }
        assert_eq!(errors.warning_due(t0 + WARN_EVERY), Some(100));
        assert_eq!(errors.warning_due(t0 + WARN_EVERY), None);
    }
}
